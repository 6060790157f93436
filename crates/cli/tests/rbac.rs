//! `modelplane rbac`: the roles it prints grant every verb the controller
//! uses on every kind it applies, under the resource name the kind is
//! served as (Kubernetes' built-ins as the API server serves them,
//! Crossplane's and the charts' kinds as the simulator installs their
//! CRDs, Modelplane's from its CRDs), and `kubectl apply` takes them.

mod common;

use common::Server;
use modelplane_compose::kinds;
use serde_json::Value;

fn rbac(args: &[&str]) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .arg("rbac")
        .args(args)
        .output()
        .expect("modelplane rbac runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).expect("a YAML document"))
        .collect()
}

/// The resource name `(apiVersion, kind)` is served as, by whoever serves
/// it.
fn served_as(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let builtin = modelplane_apiserver::resources::builtins()
        .into_iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
        .map(|r| r.plural);
    let crossplane =
        modelplane_sim::crossplane::find(api_version, kind).map(|k| k.plural.to_string());
    let chart = modelplane_sim::helm::CHARTS
        .iter()
        .flat_map(|c| c.crds)
        .find(|(g, v, k, ..)| *g == group && *v == version && *k == kind)
        .map(|(.., plural, _)| plural.to_string());
    let modelplane = modelplane_api::crds::all_crds()
        .into_iter()
        .find_map(|crd| {
            let crd = serde_json::to_value(crd).ok()?;
            (crd["spec"]["group"] == group && crd["spec"]["names"]["kind"] == kind)
                .then(|| crd["spec"]["names"]["plural"].as_str().map(str::to_string))?
        });
    // MetalLB (a Traefik InferenceGateway's address pool) is not simulated;
    // its CRDs are `ipaddresspools.metallb.io` and
    // `l2advertisements.metallb.io`.
    let metallb = (group == "metallb.io").then(|| format!("{}s", kind.to_lowercase()));
    builtin
        .or(crossplane)
        .or(chart)
        .or(modelplane)
        .or(metallb)
        .unwrap_or_else(|| panic!("nothing serves {api_version} {kind}"))
}

fn allows(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |field: &Value, wanted: &str| {
        field
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v == wanted || v == "*")
    };
    role["rules"].as_array().into_iter().flatten().any(|rule| {
        has(&rule["apiGroups"], group)
            && has(&rule["resources"], resource)
            && has(&rule["verbs"], verb)
    })
}

fn role(manifests: &[Value]) -> &Value {
    manifests
        .iter()
        .find(|m| m["kind"] == "ClusterRole")
        .expect("a ClusterRole")
}

const WRITE: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];

fn grants_everything_applied(role: &Value, applied: &[(&str, &str)]) {
    for (api_version, kind) in applied {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let resource = served_as(api_version, kind);
        for verb in WRITE {
            assert!(
                allows(role, group, &resource, verb),
                "{verb} {resource}.{group} ({kind}) not granted"
            );
        }
    }
}

#[test]
fn the_control_plane_role_grants_what_the_controller_does_there() {
    let manifests = rbac(&[]);
    let role = role(&manifests);
    grants_everything_applied(role, kinds::CONTROL_PLANE);
    // Modelplane's kinds and their status; what it only reads, read.
    for kind in [
        "ModelDeployment",
        "InferenceCluster",
        "ModelCache",
        "ModelService",
    ] {
        let resource = served_as("modelplane.ai/v1alpha1", kind);
        for verb in ["watch", "patch"] {
            assert!(allows(
                role,
                "modelplane.ai",
                &format!("{resource}/status"),
                verb
            ));
            assert!(allows(role, "modelplane.ai", &resource, verb));
        }
    }
    for (api_version, kind) in modelplane_controller::PROVIDER_CONFIGS {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let resource = served_as(api_version, kind);
        assert!(allows(role, group, &resource, "watch"), "{kind}.{group}");
    }
    assert!(allows(
        role,
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "watch"
    ));
    assert!(!allows(
        role,
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "create"
    ));
    assert!(allows(role, "", "events", "create"));
    assert!(allows(role, "coordination.k8s.io", "leases", "update"));
    // Bound to the ServiceAccount it prints.
    let binding = manifests
        .iter()
        .find(|m| m["kind"] == "ClusterRoleBinding")
        .expect("a binding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], "modelplane-system");
}

#[test]
fn the_workload_cluster_role_grants_what_compositions_apply_there_and_no_more() {
    let manifests = rbac(&["--for", "workload-cluster"]);
    let role = role(&manifests);
    grants_everything_applied(role, kinds::WORKLOAD_CLUSTER);
    // Kubernetes refuses a Role granting what its creator does not hold:
    // every rule of every Role render prints for a cluster is held.
    let rendered = include_str!("golden/render/examples/output.snap");
    let roles: Vec<Value> = rendered
        .split("\n---\n")
        .filter(|d| d.contains("kind: Role\n"))
        .map(|d| serde_saphyr::from_str(d).expect("a Role"))
        .collect();
    assert!(
        !roles.is_empty(),
        "the golden has the endpoint pickers' Roles"
    );
    for composed in &roles {
        for rule in composed["rules"].as_array().into_iter().flatten() {
            for group in rule["apiGroups"].as_array().into_iter().flatten() {
                for resource in rule["resources"].as_array().into_iter().flatten() {
                    for verb in rule["verbs"].as_array().into_iter().flatten() {
                        let (g, r, v) = (
                            group.as_str().unwrap_or_default(),
                            resource.as_str().unwrap_or_default(),
                            verb.as_str().unwrap_or_default(),
                        );
                        assert!(
                            allows(role, g, r, v),
                            "{v} {r}.{g} of a composed Role not held"
                        );
                    }
                }
            }
        }
    }
    assert!(!allows(role, "modelplane.ai", "modeldeployments", "get"));
    assert!(!allows(role, "", "pods", "delete"));
    // Nodes are read, to name the node under a replica that is not
    // ready; never written.
    assert!(allows(role, "", "nodes", "watch"));
    assert!(!allows(role, "", "nodes", "patch"));
    assert!(!allows(role, "", "nodes", "delete"));
}

#[test]
fn kubectl_applies_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    server.apply(
        None,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n",
    );
    for args in [
        &[][..],
        &["--for", "workload-cluster", "--name", "modelplane-workload"][..],
    ] {
        let manifests: Vec<String> = rbac(args).iter().map(Value::to_string).collect();
        server.apply(None, &manifests.join("\n---\n"));
    }
    let roles = server.kubectl(&[
        "get",
        "clusterroles",
        "-l",
        "app.kubernetes.io/name=modelplane",
        "-o",
        "name",
    ]);
    assert_eq!(
        roles.lines().collect::<Vec<_>>(),
        [
            "clusterrole.rbac.authorization.k8s.io/modelplane-controller",
            "clusterrole.rbac.authorization.k8s.io/modelplane-workload"
        ]
    );
}
