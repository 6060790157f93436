//! Existing workload clusters for the controller's process tests: logical
//! clusters of one `modelplane apiserver`, reached by the controller only
//! through their InferenceClusters' kubeconfig Secrets, and a stand-in for
//! what the simulated fleet runs in embedded mode (Crossplane's Helm
//! provider, the charts' CRDs, Envoy Gateway giving each Gateway an address).

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::Server;

/// `(group, version, kind, plural, namespaced)` of a CRD served with any
/// content.
pub type Kind = (&'static str, &'static str, &'static str, &'static str, bool);

/// Crossplane's kinds the controller composes on the control plane, and
/// Gateway API's HTTPRoute of the fleet gateway.
pub const CONTROL_PLANE_KINDS: &[Kind] = &[
    (
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
    ),
    (
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "ProviderConfig",
        "providerconfigs",
        true,
    ),
    (
        "helm.m.crossplane.io",
        "v1beta1",
        "ProviderConfig",
        "providerconfigs",
        true,
    ),
    (
        "helm.m.crossplane.io",
        "v1beta1",
        "Release",
        "releases",
        true,
    ),
    (
        "protection.crossplane.io",
        "v1beta1",
        "Usage",
        "usages",
        true,
    ),
    (
        "protection.crossplane.io",
        "v1beta1",
        "ClusterUsage",
        "clusterusages",
        false,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        true,
    ),
];

/// What the serving stacks' charts install on a workload cluster.
pub const WORKLOAD_CLUSTER_KINDS: &[Kind] = &[
    (
        "inference.networking.k8s.io",
        "v1",
        "InferencePool",
        "inferencepools",
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "Gateway",
        "gateways",
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "GatewayClass",
        "gatewayclasses",
        false,
    ),
    (
        "gateway.envoyproxy.io",
        "v1alpha1",
        "EnvoyProxy",
        "envoyproxies",
        true,
    ),
    (
        "llm-d.ai",
        "v1alpha1",
        "EndpointPickerConfig",
        "endpointpickerconfigs",
        true,
    ),
    (
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
        "leaderworkersets",
        true,
    ),
    (
        "grove.io",
        "v1alpha1",
        "PodCliqueSet",
        "podcliquesets",
        true,
    ),
    ("scheduling.run.ai", "v2", "Queue", "queues", false),
];

/// A CRD serving `kind`, any content.
fn crd(&(group, version, kind, plural, namespaced): &Kind) -> String {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": { "group": group, "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind },
            "versions": [{ "name": version, "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }] }
    })
    .to_string()
}

/// The control plane: Modelplane's CRDs, Crossplane's kinds, the system and
/// team namespaces.
pub fn control_plane(server: &Server) {
    let crds = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .arg("crds")
        .output()
        .expect("crds")
        .stdout;
    server.apply(None, &String::from_utf8(crds).expect("utf-8"));
    server.apply(
        None,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-team\n",
    );
    for kind in CONTROL_PLANE_KINDS {
        server.apply(None, &crd(kind));
    }
}

/// The workload cluster `name`, a logical cluster with its charts' CRDs,
/// and its kubeconfig in the Secret `<name>-kubeconfig` of
/// `modelplane-system` (its server's address replaced by `through`, a
/// proxy's `https://host:port`, when given).
pub fn existing_cluster(server: &Server, name: &str, through: Option<&str>) {
    server.apply(
        None,
        &format!(
            "apiVersion: tenancy.modelplane.ai/v1alpha1\nkind: LogicalCluster\nmetadata:\n  name: {name}\n"
        ),
    );
    for kind in WORKLOAD_CLUSTER_KINDS {
        server.apply(Some(name), &crd(kind));
    }
    server.apply(
        Some(name),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n",
    );
    let mut kubeconfig = server.logical_kubeconfig(name);
    if let Some(through) = through {
        kubeconfig = kubeconfig.replace(&server.url, through);
    }
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": format!("{name}-kubeconfig"), "namespace": "modelplane-system" },
        "stringData": { "kubeconfig": kubeconfig },
    });
    server.apply(None, &secret.to_string());
}

/// What `kubectl get … -o json` gives in `cluster` (the root when none),
/// parsed; none when kubectl fails.
pub fn get_json(
    server: &Server,
    cluster: Option<&str>,
    args: &[&str],
) -> Option<serde_json::Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, _) = server.kubectl_in(cluster, &all, None);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

/// The names (`kind/name`) `kubectl get … -o name` lists in `cluster`,
/// sorted; none when kubectl fails.
pub fn names(server: &Server, cluster: Option<&str>, args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.extend(["-o", "name"]);
    let (ok, out, _) = server.kubectl_in(cluster, &all, None);
    if !ok {
        return Vec::new();
    }
    let mut names: Vec<String> = out.lines().map(str::to_string).collect();
    names.sort();
    names
}

/// A Deployment's status as its controller reports it once Available.
pub const AVAILABLE: &str = r#"{"status":{"conditions":[{"type":"Available","status":"True"}]}}"#;

/// Merges `patch` (`{"status": …}`) into the status of each of `objects`
/// (`kind/name`, as [`names`] lists them) in `cluster` (the root when none)
/// and `namespace` (none for cluster-scoped kinds), as their controllers
/// would write it.
pub fn set_status(
    server: &Server,
    cluster: Option<&str>,
    namespace: Option<&str>,
    objects: &[String],
    patch: &str,
) {
    for object in objects {
        let mut args = vec![
            "patch",
            object,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        server.kubectl_in(cluster, &args, None);
    }
}

/// Stands in, until `stop`, for Crossplane's Helm provider and each
/// workload cluster's Envoy Gateway: Helm releases become Ready (their
/// namespace created on the cluster they are labelled with), GatewayClasses
/// Accepted, and the Gateway of each `(cluster, address)` gets the address.
pub fn platform(server: &Server, stop: &AtomicBool, gateways: &[(&str, &str)]) {
    let clusters: Vec<&str> = gateways.iter().map(|(cluster, _)| *cluster).collect();
    while !stop.load(Ordering::Relaxed) {
        install_releases(server, &clusters);
        for (cluster, address) in gateways {
            admit_gateways(server, cluster, address);
            stage_caches(server, cluster);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The items of `kubectl get <resource> -n modelplane-system` on the
/// control plane.
fn system_objects(server: &Server, resource: &str) -> Vec<serde_json::Value> {
    let (ok, out, _) = server.kubectl_in(
        None,
        &["get", resource, "-n", "modelplane-system", "-o", "json"],
        None,
    );
    let list: serde_json::Value = if ok {
        serde_json::from_str(&out).unwrap_or_default()
    } else {
        serde_json::Value::Null
    };
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Installs every release: Ready, its namespace created on its cluster —
/// the one whose kubeconfig Secret (`<cluster>-kubeconfig`) its Helm
/// ProviderConfig names.
fn install_releases(server: &Server, clusters: &[&str]) {
    let ready = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Available"},{"type":"Synced","status":"True","reason":"ReconcileSuccess"}]}}"#;
    let configs = system_objects(server, "providerconfigs.helm.m.crossplane.io");
    let cluster_of = |config: &str| {
        let secret = configs
            .iter()
            .find(|c| c["metadata"]["name"] == config)?["spec"]["credentials"]["secretRef"]["name"]
            .as_str()?;
        clusters
            .iter()
            .find(|cluster| secret.starts_with(&format!("{cluster}-kubeconfig")))
            .copied()
    };
    for release in system_objects(server, "releases.helm.m.crossplane.io") {
        let name = release["metadata"]["name"].as_str().unwrap_or_default();
        let config = release["spec"]["providerConfigRef"]["name"]
            .as_str()
            .unwrap_or_default();
        // Helm creates the release's namespace on its cluster.
        if let (Some(cluster), Some(namespace)) = (
            cluster_of(config),
            release["spec"]["forProvider"]["namespace"].as_str(),
        ) {
            server.kubectl_in(
                Some(cluster),
                &["apply", "--server-side", "-f", "-"],
                Some(&format!(
                    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"
                )),
            );
        }
        set_status(
            server,
            None,
            Some("modelplane-system"),
            &[format!("releases.helm.m.crossplane.io/{name}")],
            ready,
        );
    }
}

fn admit_gateways(server: &Server, cluster: &str, address: &str) {
    set_status(
        server,
        Some(cluster),
        None,
        &names(server, Some(cluster), &["get", "gatewayclasses"]),
        r#"{"status":{"conditions":[{"type":"Accepted","status":"True"}]}}"#,
    );
    let status = serde_json::json!({ "status": { "addresses": [{ "type": "IPAddress", "value": address }] } })
        .to_string();
    let gateways = names(
        server,
        Some(cluster),
        &["get", "gateways", "-n", "modelplane-system"],
    );
    set_status(
        server,
        Some(cluster),
        Some("modelplane-system"),
        &gateways,
        &status,
    );
}

/// The cluster's storage binds every model cache volume and its hydration
/// Jobs complete (the weights are staged).
fn stage_caches(server: &Server, cluster: &str) {
    let in_team = |kind| names(server, Some(cluster), &["get", kind, "-n", "ml-team"]);
    set_status(
        server,
        Some(cluster),
        Some("ml-team"),
        &in_team("pvc"),
        r#"{"status":{"phase":"Bound"}}"#,
    );
    set_status(
        server,
        Some(cluster),
        Some("ml-team"),
        &in_team("jobs"),
        r#"{"status":{"succeeded":1,"conditions":[{"type":"Complete","status":"True"}]}}"#,
    );
}
