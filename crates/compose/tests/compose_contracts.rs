//! What the clusters' controllers need from composed objects: valid typed
//! objects, variables that resolve as the kubelet resolves them, and the v0.4
//! stack separation.

mod common;

use std::collections::BTreeMap;

use common::external::{LeaderWorkerSet, PodCliqueSet};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use modelplane_api::types::{ModelDeployment, Stack};
use modelplane_compose::Desired;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Deserializes into `T` and back: anything `T` does not know is lost, so
/// the round trip must give the same JSON.
fn fits<T: DeserializeOwned + serde::Serialize>(object: &Value) {
    let typed: T =
        serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{e}: {object}"));
    assert_eq!(&serde_json::to_value(&typed).expect("serializes"), object);
}

fn all_cases() -> Vec<(
    String,
    ModelDeployment,
    Vec<modelplane_api::types::ModelCache>,
)> {
    let mut out = Vec::new();
    let golden =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/model-deployment");
    let mut texts: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(&golden).expect("golden").flatten() {
        if let Ok(t) = std::fs::read_to_string(entry.path().join("input.yaml")) {
            texts.push((entry.path().display().to_string(), t));
        }
    }
    for path in [
        "v0.4/model-deployment-qwen3-coder-modelexpress.yaml",
        "concepts/model-deployment-multinode.yaml",
        "overview/model-deployment.yaml",
    ] {
        let mut t = std::fs::read_to_string(upstream().join(path)).expect("upstream");
        if path.contains("qwen3-coder") {
            t.push_str("\n---\n");
            t.push_str(
                &std::fs::read_to_string(upstream().join("examples/qwen3-coder/model-cache.yaml"))
                    .expect("cache"),
            );
        }
        texts.push((path.to_string(), t));
    }
    for (name, text) in texts {
        let (mds, caches) = deployments(&text);
        for md in mds {
            out.push((name.clone(), md, caches.clone()));
        }
    }
    out
}

#[test]
fn every_object_with_a_kubernetes_type_fits_it() {
    let mut seen = BTreeMap::new();
    for (name, md, caches) in all_cases() {
        for stack in [Stack::Standard, Stack::Dynamo] {
            for d in compose_on(&md, &caches, stack) {
                let kind = d.kind().to_string();
                match kind.as_str() {
                    "Deployment" => fits::<Deployment>(&d.object),
                    "ResourceClaimTemplate" => fits::<ResourceClaimTemplate>(&d.object),
                    "ServiceAccount" => fits::<ServiceAccount>(&d.object),
                    "Role" => fits::<Role>(&d.object),
                    "RoleBinding" => fits::<RoleBinding>(&d.object),
                    "ConfigMap" => fits::<ConfigMap>(&d.object),
                    "Service" => fits::<Service>(&d.object),
                    "LeaderWorkerSet" => {
                        let lws: LeaderWorkerSet = serde_json::from_value(d.object.clone())
                            .unwrap_or_else(|e| panic!("{name}: {e}"));
                        fits::<k8s_openapi::api::core::v1::PodTemplateSpec>(
                            &d.object["spec"]["leaderWorkerTemplate"]["workerTemplate"],
                        );
                        fits::<k8s_openapi::api::core::v1::PodTemplateSpec>(
                            &d.object["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                        );
                        assert_eq!(lws.kind, "LeaderWorkerSet");
                    }
                    "PodCliqueSet" => {
                        let pcs: PodCliqueSet = serde_json::from_value(d.object.clone())
                            .unwrap_or_else(|e| panic!("{name}: {e}"));
                        for (i, clique) in pcs.spec.template.cliques.iter().enumerate() {
                            fits::<k8s_openapi::api::core::v1::PodSpec>(
                                &d.object["spec"]["template"]["cliques"][i]["spec"]["podSpec"],
                            );
                            let group = pcs
                                .spec
                                .template
                                .pod_clique_scaling_groups
                                .as_ref()
                                .and_then(|g| g.first());
                            let longest = pcs.metadata.name.as_deref().unwrap_or_default().len()
                                + group.map_or(0, |g| g.name.len())
                                + clique.name.len();
                            assert!(longest <= 45, "{name}: Grove names too long ({longest})");
                            assert_eq!(clique.spec.min_available, Some(clique.spec.replicas));
                        }
                    }
                    _ => {}
                }
                *seen.entry(kind).or_insert(0) += 1;
            }
        }
    }
    for kind in [
        "Deployment",
        "LeaderWorkerSet",
        "PodCliqueSet",
        "ResourceClaimTemplate",
        "InferencePool",
        "HTTPRoute",
    ] {
        assert!(seen.contains_key(kind), "no {kind} composed: {seen:?}");
    }
}

/// Expands `$(VAR)` in `value` as the kubelet does: only variables defined
/// earlier resolve; `$$` is a literal `$`; anything else stays as written.
fn expand(value: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match env.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Where a stack's controller puts its variables in a container's env.
#[derive(Clone, Copy)]
enum Injected {
    /// Ahead of the template's (LWS's webhook).
    First,
    /// After the template's (released Grove, up to v0.1.0-alpha.12-rc1).
    Last,
}

/// The environment of a container after the stack's injected variables and
/// the kubelet's expansion: each value sees only the variables before it;
/// `fieldRef`s read the pod's labels (the downward API).
fn resolved_env(
    injected: &[(&str, String)],
    order: Injected,
    pod_labels: &BTreeMap<String, String>,
    container: &Container,
) -> BTreeMap<String, String> {
    let injected_list: Vec<(String, String)> = injected
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let injected_names: Vec<&str> = injected.iter().map(|(k, _)| *k).collect();
    let mut template = Vec::new();
    for EnvVar {
        name,
        value,
        value_from,
    } in container.env.clone().unwrap_or_default()
    {
        if injected_names.contains(&name.as_str()) {
            continue;
        }
        let value = match value_from.and_then(|f| f.field_ref) {
            Some(field) => {
                let key = field
                    .field_path
                    .strip_prefix("metadata.labels['")
                    .and_then(|k| k.strip_suffix("']"))
                    .expect("only label fieldRefs are composed");
                pod_labels.get(key).cloned().unwrap_or_default()
            }
            None => value.unwrap_or_default(),
        };
        template.push((name, value));
    }
    let list = match order {
        Injected::First => injected_list
            .into_iter()
            .chain(template)
            .collect::<Vec<_>>(),
        Injected::Last => template.into_iter().chain(injected_list).collect(),
    };
    let mut env = BTreeMap::new();
    for (name, value) in list {
        let expanded = expand(&value, &env);
        env.insert(name, expanded);
    }
    env
}

/// `command` and `args` as the kubelet runs them: expanded from the whole
/// environment, whatever the order.
fn resolved_command(container: &Container, env: &BTreeMap<String, String>) -> Vec<String> {
    container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|a| expand(a, env))
        .collect()
}

fn gang(nodes: u32) -> ModelDeployment {
    let text = format!(
        r#"apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata: {{ name: gang, namespace: ml }}
spec:
  replicas: 1
  template:
    spec:
      engines:
      - name: main
        members:
        - role: Leader
          nodeSelector: {{ devices: [{{ name: gpu, count: 8, selectors: [{{ cel: "true" }}] }}] }}
          template: {{ spec: {{ containers: [{{ name: engine, image: img, command: [sh, -c, "serve --head $(MODELPLANE_LEADER_ADDRESS) --rank $(MODELPLANE_RANK)"], env: [{{ name: ADDR, value: "$(MODELPLANE_LEADER_ADDRESS):29500" }}] }}] }} }}
        - role: Worker
          worker: {{ nodes: {nodes} }}
          nodeSelector: {{ devices: [{{ name: gpu, count: 8, selectors: [{{ cel: "true" }}] }}] }}
          template: {{ spec: {{ containers: [{{ name: engine, image: img, args: ["--join=$(MODELPLANE_LEADER_ADDRESS)", "--rank=$(MODELPLANE_RANK)"] }}] }} }}
"#
    );
    deployments(&text).0.remove(0)
}

fn workload(objects: &[Desired], kind: &str) -> Value {
    objects
        .iter()
        .find(|d| d.kind() == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
        .object
        .clone()
}

#[test]
fn leader_address_and_rank_resolve_on_the_standard_stack() {
    for nodes in [1u32, 3] {
        let objects = compose_on(&gang(nodes), &[], Stack::Standard);
        let lws: LeaderWorkerSet =
            serde_json::from_value(workload(&objects, "LeaderWorkerSet")).expect("LWS");
        let name = lws.metadata.name.clone().unwrap_or_default();
        let size = lws.spec.leader_worker_template.size.unwrap_or(1);
        assert_eq!(size, 1 + nodes as i32);
        let leader_dns = format!("{name}-0.{name}.ml");
        let mut ranks = Vec::new();
        for index in 0..size {
            let template = if index == 0 {
                lws.spec
                    .leader_worker_template
                    .leader_template
                    .clone()
                    .expect("leader template")
            } else {
                lws.spec.leader_worker_template.worker_template.clone()
            };
            let container = &template.spec.expect("pod spec").containers[0];
            let injected = [
                ("LWS_LEADER_ADDRESS", leader_dns.clone()),
                ("LWS_GROUP_SIZE", size.to_string()),
                ("LWS_WORKER_INDEX", index.to_string()),
            ];
            let env = resolved_env(&injected, Injected::First, &BTreeMap::new(), container);
            assert_eq!(env["MODELPLANE_LEADER_ADDRESS"], leader_dns, "pod {index}");
            ranks.push(env["MODELPLANE_RANK"].clone());
            let command = resolved_command(container, &env).join(" ");
            assert!(!command.contains("$("), "pod {index}: {command}");
            assert!(command.contains(&leader_dns), "pod {index}: {command}");
            if index == 0 {
                assert_eq!(env["ADDR"], format!("{leader_dns}:29500"));
            }
        }
        let want: Vec<String> = (0..size).map(|i| i.to_string()).collect();
        assert_eq!(ranks, want);
    }
}

#[test]
fn leader_address_and_rank_resolve_on_the_dynamo_stack() {
    for nodes in [1u32, 3] {
        let objects = compose_on(&gang(nodes), &[], Stack::Dynamo);
        let pcs: PodCliqueSet =
            serde_json::from_value(workload(&objects, "PodCliqueSet")).expect("PCS");
        let name = pcs.metadata.name.clone().unwrap_or_default();
        let group = pcs
            .spec
            .template
            .pod_clique_scaling_groups
            .as_ref()
            .expect("a scaling group")[0]
            .name
            .clone();
        let headless = format!("{name}-0.ml.svc.cluster.local");
        let leader_dns = format!("{name}-0-{group}-0-leader-0.{headless}");
        let total = pcs.spec.template.cliques.len();
        assert_eq!(total, 1 + nodes as usize);
        let mut ranks = Vec::new();
        for clique in &pcs.spec.template.cliques {
            assert_eq!(clique.spec.replicas, 1);
            let pclq = format!("{name}-0-{group}-0-{}", clique.name);
            let injected = [
                ("GROVE_PCS_NAME", name.clone()),
                ("GROVE_PCS_INDEX", "0".to_string()),
                ("GROVE_PCLQ_NAME", pclq.clone()),
                ("GROVE_HEADLESS_SERVICE", headless.clone()),
                ("GROVE_PCLQ_POD_INDEX", "0".to_string()),
                ("GROVE_PCSG_NAME", format!("{name}-0-{group}")),
                ("GROVE_PCSG_TEMPLATE_NUM_PODS", total.to_string()),
                ("GROVE_PCSG_INDEX", "0".to_string()),
            ];
            let spec = &clique.spec.pod_spec;
            assert_eq!(spec.scheduler_name.as_deref(), Some("kai-scheduler"));
            assert_eq!(
                clique
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kai.scheduler/queue"))
                    .map(String::as_str),
                Some("modelplane")
            );
            // The labels Grove gives every pod of set replica 0, group replica 0.
            let pod_labels = BTreeMap::from([
                (
                    "grove.io/podcliqueset-replica-index".to_string(),
                    "0".to_string(),
                ),
                (
                    "grove.io/podcliquescalinggroup-replica-index".to_string(),
                    "0".to_string(),
                ),
                ("grove.io/podclique".to_string(), pclq.clone()),
            ]);
            // Released Grove appends its variables after the template's.
            let env = resolved_env(&injected, Injected::Last, &pod_labels, &spec.containers[0]);
            assert_eq!(
                env["MODELPLANE_LEADER_ADDRESS"], leader_dns,
                "clique {}",
                clique.name
            );
            let command = resolved_command(&spec.containers[0], &env).join(" ");
            assert!(!command.contains("$("), "clique {}: {command}", clique.name);
            assert!(
                command.contains(&leader_dns),
                "clique {}: {command}",
                clique.name
            );
            if clique.name == "leader" {
                assert_eq!(env["ADDR"], format!("{leader_dns}:29500"));
            }
            assert_eq!(
                pcs.spec.template.priority_class_name.as_deref(),
                Some("inference"),
                "gangs are not preemptible on KAI"
            );
            assert_eq!(env["MX_SERVER_ADDRESS"], env["MODEL_EXPRESS_URL"]);
            ranks.push(env["MODELPLANE_RANK"].clone());
        }
        let want: Vec<String> = (0..total).map(|i| i.to_string()).collect();
        assert_eq!(ranks, want);
    }
}

#[test]
fn the_v04_manifest_runs_the_same_commands_on_both_stacks_and_nothing_of_the_other() {
    let mut text = std::fs::read_to_string(
        upstream().join("v0.4/model-deployment-qwen3-coder-modelexpress.yaml"),
    )
    .expect("v0.4");
    text.push_str("\n---\n");
    text.push_str(
        &std::fs::read_to_string(upstream().join("examples/qwen3-coder/model-cache.yaml"))
            .expect("cache"),
    );
    let (mds, caches) = deployments(&text);
    let standard = compose_on(&mds[0], &caches, Stack::Standard);
    let dynamo = compose_on(&mds[0], &caches, Stack::Dynamo);
    let commands = |objects: &[Desired]| -> Vec<Value> {
        let mut out = Vec::new();
        fn walk(v: &Value, out: &mut Vec<Value>) {
            match v {
                Value::Object(m) => {
                    if m.get("name") == Some(&Value::String("engine".into()))
                        && m.contains_key("image")
                    {
                        out.push(serde_json::json!([m.get("command"), m.get("args")]));
                    }
                    m.values().for_each(|c| walk(c, out));
                }
                Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
                _ => {}
            }
        }
        for d in objects.iter().filter(|d| d.kind() != "ModelReplica") {
            walk(&d.object, &mut out);
        }
        out.sort_by_key(|v| v.to_string());
        out.dedup();
        out
    };
    assert_eq!(commands(&standard), commands(&dynamo));
    let standard_text = to_yaml(&standard);
    for absent in [
        "kai",
        "grove",
        "GROVE",
        "MX_SERVER_ADDRESS",
        "MODEL_EXPRESS_URL",
        "PodCliqueSet",
    ] {
        assert!(
            !standard_text.contains(absent),
            "Standard rendering mentions {absent}"
        );
    }
    let dynamo_text = to_yaml(&dynamo);
    assert!(
        !dynamo_text.contains("LeaderWorkerSet") && !dynamo_text.contains("LWS_"),
        "Dynamo rendering mentions LeaderWorkerSet"
    );
    assert!(dynamo_text.contains("MX_SERVER_ADDRESS") && dynamo_text.contains("kai-scheduler"));
}

#[test]
fn two_teams_sharing_a_cluster_write_no_object_of_the_other() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/model-deployment/two-teams-one-cluster/input.yaml"),
    )
    .expect("readable");
    let (mds, caches) = deployments(&text);
    assert_eq!(mds.len(), 2);
    for stack in [Stack::Standard, Stack::Dynamo] {
        let mut seen: std::collections::BTreeMap<String, String> = Default::default();
        for md in &mds {
            let team = md.metadata.namespace.clone().unwrap_or_default();
            for d in compose_on(md, &caches, stack) {
                let modelplane_compose::Target::Cluster(cluster) = &d.target else {
                    continue;
                };
                let namespace = d.object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default();
                if d.kind() == "Namespace" {
                    assert_eq!(d.name(), team, "a team's objects go to its own namespace");
                    continue;
                }
                assert_eq!(
                    namespace,
                    team,
                    "{stack:?}: {} {} is in {namespace}",
                    d.kind(),
                    d.name()
                );
                let key = format!("{cluster}/{}/{namespace}/{}", d.kind(), d.name());
                if let Some(other) = seen.insert(key.clone(), team.clone()) {
                    panic!("{stack:?}: {key} is written by {other} and {team}");
                }
            }
        }
    }
}
