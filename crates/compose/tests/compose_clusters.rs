//! InferenceCluster, InferenceClass and ServingStack compositions: golden
//! files for every upstream cluster and class on both stacks, and the
//! contracts of `behavior.md` §8.1/§8.3. Regenerate with
//! `INSTA_UPDATE=always cargo test -p modelplane-compose --test compose_clusters`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use modelplane_api::labels;
use modelplane_api::types::{
    AKSCluster, CloudClusterStatus, EKSCluster, GKECluster, InferenceClass, InferenceCluster,
    NebiusCluster, ServingStack, Source, Stack, StackSecret, VultrCluster,
};
use modelplane_compose::clouds::{
    AksInputs, EksInputs, GkeInputs, NebiusInputs, VultrInputs, compose_aks_cluster,
    compose_eks_cluster, compose_gke_cluster, compose_nebius_cluster, compose_vultr_cluster,
};
use modelplane_compose::recipes;
use modelplane_compose::{
    ClusterInputs, Composition, Desired, StackInputs, Target, compose_inference_class,
    compose_inference_cluster, compose_serving_stack,
};
use serde_json::{Value, json};

/// Every upstream file (and test fixture), sorted, with its admitted objects.
fn manifests() -> &'static [(PathBuf, Vec<Value>)] {
    static ALL: std::sync::OnceLock<Vec<(PathBuf, Vec<Value>)>> = std::sync::OnceLock::new();
    ALL.get_or_init(load_manifests)
}

fn load_manifests() -> Vec<(PathBuf, Vec<Value>)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "yaml") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&upstream(), &mut files);
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
        &mut files,
    );
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("readable");
            let objects = if text.contains("kind: Inference") {
                admit(&text)
            } else {
                Vec::new()
            };
            (f, objects)
        })
        .collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(objects: &[Value], kind: &str) -> Vec<T> {
    objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .map(|o| serde_json::from_value(o.clone()).expect("typed"))
        .collect()
}

/// The classes a cluster file sees: its own directory's first, then every
/// other one (first definition of a name wins).
fn classes_for(file: &Path, all: &[(PathBuf, Vec<Value>)]) -> Vec<InferenceClass> {
    let dir = file.parent().expect("dir");
    let (near, far): (Vec<_>, Vec<_>) = all.iter().partition(|(f, _)| f.parent() == Some(dir));
    let mut out: Vec<InferenceClass> = Vec::new();
    for (_, objects) in near.into_iter().chain(far) {
        for class in of_kind::<InferenceClass>(objects, "InferenceClass") {
            if !out.iter().any(|c| c.metadata.name == class.metadata.name) {
                out.push(class);
            }
        }
    }
    out
}

fn case_name(file: &Path) -> String {
    let rel = file
        .strip_prefix(upstream())
        .or_else(|_| file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")))
        .expect("known root");
    rel.display()
        .to_string()
        .trim_end_matches(".yaml")
        .replace('/', "-")
}

fn render(c: &Composition) -> String {
    let summary = json!({
        "hold": c.hold,
        "status": c.status,
        "conditions": c.conditions,
        "events": c.events,
    });
    let mut text = serde_saphyr::to_string(&summary).expect("YAML");
    text.push_str(&to_yaml(&c.desired));
    text
}

fn snapshot(kind: &str, case: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(kind).join(case),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("output", text);
    });
}

fn secret(type_: &str, name: &str, key: &str) -> StackSecret {
    StackSecret {
        type_: type_.into(),
        name: name.into(),
        key: key.into(),
        namespace: None,
    }
}

fn ready() -> Option<Vec<modelplane_api::types::Condition>> {
    Some(vec![modelplane_api::types::Condition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Default::default()
    }])
}

/// A provisioned cloud cluster as its composition reports it once running.
/// GKE and Nebius clusters also report the identity that reaches them.
fn running_cloud(cluster: &InferenceCluster) -> CloudClusterStatus {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let mut secrets = vec![secret(
        "Kubeconfig",
        &format!("{name}-kubeconfig"),
        "kubeconfig",
    )];
    match cluster.spec.cluster.source {
        Source::Gke => secrets.push(secret(
            "GoogleApplicationCredentials",
            &format!("{name}-identity"),
            "private_key",
        )),
        Source::Nebius => secrets.push(StackSecret {
            namespace: Some("crossplane-system".into()),
            ..secret(
                "NebiusServiceAccountCredentials",
                "nebius-sa",
                "credentials",
            )
        }),
        _ => {}
    }
    CloudClusterStatus {
        secrets: Some(secrets),
        cache: Some(modelplane_api::types::CacheStorage {
            storage_class_name: Some("modelplane-rwx".into()),
        }),
        conditions: ready(),
    }
}

/// The ServingStack an InferenceCluster composed, observed Ready with an address.
fn observed_stack(c: &Composition) -> Option<ServingStack> {
    let d = c.desired.iter().find(|d| d.kind() == "ServingStack")?;
    let mut ss: ServingStack = serde_json::from_value(d.object.clone()).expect("typed");
    ss.status = Some(modelplane_api::types::ServingStackStatus {
        gateway: Some(modelplane_api::types::GatewayAddress {
            address: Some("203.0.113.10".into()),
        }),
        conditions: ready(),
    });
    Some(ss)
}

fn with_stack(mut cluster: InferenceCluster, stack: Stack) -> InferenceCluster {
    cluster.spec.stack = Some(stack);
    cluster
}

/// Composes a cluster through to a running stack: first pass, then with the
/// cloud cluster running and the ServingStack observed.
fn steady_state(
    cluster: &InferenceCluster,
    classes: &[InferenceClass],
) -> (Composition, Option<Composition>) {
    let cloud = running_cloud(cluster);
    let first = compose_inference_cluster(ClusterInputs {
        cluster,
        classes,
        hosted_replicas: 1,
        cloud_cluster: Some(&cloud),
        serving_stack: None,
    });
    let ss = observed_stack(&first);
    let steady = compose_inference_cluster(ClusterInputs {
        cluster,
        classes,
        hosted_replicas: 1,
        cloud_cluster: Some(&cloud),
        serving_stack: ss.as_ref(),
    });
    let stack = ss.map(|ss| stack_of(&ss));
    (steady, stack)
}

fn stack_of(ss: &ServingStack) -> Composition {
    let recipe_name = ss
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::RECIPE))
        .expect("recipe label");
    let recipe = recipes::all()
        .iter()
        .find(|r| &r.name == recipe_name)
        .expect("known recipe");
    compose_serving_stack(StackInputs {
        serving_stack: ss,
        recipe,
        provider_configs_observed: true,
        gateway_address: Some("203.0.113.10"),
    })
}

#[test]
fn every_upstream_cluster_on_both_stacks() {
    let all = manifests();
    let mut seen = 0;
    for (file, objects) in all {
        let classes = classes_for(file, all);
        for cluster in of_kind::<InferenceCluster>(objects, "InferenceCluster") {
            let base = format!(
                "{}-{}",
                case_name(file),
                cluster.metadata.name.as_deref().unwrap_or_default()
            );
            for stack in [Stack::Standard, Stack::Dynamo] {
                let (steady, ss) = steady_state(&with_stack(cluster.clone(), stack), &classes);
                let mut text = render(&steady);
                if let Some(cloud) = cloud_composition(&steady) {
                    text.push_str("# cloud cluster composition\n");
                    text.push_str(&render(&cloud));
                }
                if let Some(ss) = ss {
                    text.push_str("# ServingStack composition\n");
                    text.push_str(&render(&ss));
                }
                snapshot(
                    "inference-cluster",
                    &format!("{base}-{stack:?}").to_ascii_lowercase(),
                    &text,
                );
                seen += 1;
            }
        }
    }
    assert!(seen >= 40, "only {seen} cluster cases");
}

/// Kubernetes' rule for object names (RFC 1123 subdomain, at most 253).
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Every object every upstream cluster composes (its cloud cluster's
/// managed resources and its stack included) is named as an API server
/// accepts: a name with `_` is refused and the resource never exists.
#[test]
fn every_composed_name_is_a_valid_kubernetes_name() {
    let all = manifests();
    for (file, objects) in all {
        let classes = classes_for(file, all);
        for cluster in of_kind::<InferenceCluster>(objects, "InferenceCluster") {
            for stack in [Stack::Standard, Stack::Dynamo] {
                let (steady, ss) = steady_state(&with_stack(cluster.clone(), stack), &classes);
                let cloud = cloud_composition(&steady);
                for c in [Some(&steady), cloud.as_ref(), ss.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    assert_kinds_listed(&c.desired);
                    for d in &c.desired {
                        let name = d.object["metadata"]["name"].as_str().unwrap_or_default();
                        assert!(
                            is_dns_subdomain(name),
                            "{}: {} {name:?} is not a valid name",
                            case_name(file),
                            d.kind()
                        );
                    }
                }
            }
        }
    }
}

/// The composed cloud cluster XR's own composition, running, with its EFS
/// file system known.
fn cloud_composition(c: &Composition) -> Option<Composition> {
    let typed = |kind: &str| {
        c.desired
            .iter()
            .find(|d| d.kind() == kind)
            .map(|d| d.object.clone())
    };
    if let Some(xr) = typed("EKSCluster") {
        let xr: EKSCluster = serde_json::from_value(xr).expect("typed");
        return Some(compose_eks_cluster(EksInputs {
            cluster: &xr,
            control_plane_ready: true,
            file_system_id: Some("fs-0123456789abcdef0"),
        }));
    }
    if let Some(xr) = typed("GKECluster") {
        let xr: GKECluster = serde_json::from_value(xr).expect("typed");
        return Some(compose_gke_cluster(GkeInputs {
            cluster: &xr,
            project: Some("my-project"),
            control_plane_ready: true,
        }));
    }
    if let Some(xr) = typed("AKSCluster") {
        let xr: AKSCluster = serde_json::from_value(xr).expect("typed");
        return Some(compose_aks_cluster(AksInputs {
            cluster: &xr,
            control_plane_ready: true,
        }));
    }
    if let Some(xr) = typed("NebiusCluster") {
        let xr: NebiusCluster = serde_json::from_value(xr).expect("typed");
        let credentials = StackSecret {
            namespace: Some("crossplane-system".into()),
            ..secret(
                "NebiusServiceAccountCredentials",
                "nebius-sa",
                "credentials",
            )
        };
        return Some(compose_nebius_cluster(NebiusInputs {
            cluster: &xr,
            project: Some("project-e00example"),
            credentials: Some(&credentials),
            control_plane_ready: true,
        }));
    }
    if let Some(xr) = typed("VultrCluster") {
        let xr: VultrCluster = serde_json::from_value(xr).expect("typed");
        return Some(compose_vultr_cluster(VultrInputs {
            cluster: &xr,
            control_plane_ready: true,
        }));
    }
    None
}

/// `behavior.md` §9, every cloud: the managed resource kinds its function
/// may compose (plus the in-cluster StorageClass, Releases and the helm
/// provider config of §8.2).
const CLOUD_KINDS: &[(&str, &[&str])] = &[
    ("azure.m.upbound.io/v1beta1", &["ResourceGroup"]),
    (
        "network.azure.m.upbound.io/v1beta1",
        &["VirtualNetwork", "Subnet"],
    ),
    (
        "containerservice.azure.m.upbound.io/v1beta1",
        &["KubernetesCluster", "KubernetesClusterNodePool"],
    ),
    ("vpc.nebius.m.upbound.io/v1beta1", &["Network", "Subnet"]),
    (
        "mk8s.nebius.m.upbound.io/v1beta1",
        &["Cluster", "NodeGroup"],
    ),
    (
        "compute.nebius.m.upbound.io/v1beta1",
        &["Filesystem", "GpuCluster"],
    ),
    ("v1", &["Secret"]),
    (
        "vke.vultr.m.upbound.io/v1beta1",
        &["Kubernetes", "KubernetesNodePool"],
    ),
];

/// Node labels of a node pool managed resource, whatever the cloud calls them.
fn pool_labels(d: &Desired) -> Option<&Value> {
    let p = &d.object["spec"]["forProvider"];
    [
        &p["labels"],
        &p["nodeConfig"]["labels"],
        &p["nodeLabels"],
        &p["template"]["metadata"]["labels"],
    ]
    .into_iter()
    .find(|v| v.is_object())
}

#[test]
fn every_upstream_cloud_cluster_uses_its_tables_kinds_and_labels_its_pools() {
    let all = manifests();
    let mut clouds = std::collections::BTreeSet::new();
    for (file, objects) in all {
        let classes = classes_for(file, all);
        for cluster in of_kind::<InferenceCluster>(objects, "InferenceCluster") {
            let (steady, _) = steady_state(&cluster, &classes);
            let Some(cloud) = cloud_composition(&steady) else {
                continue;
            };
            clouds.insert(format!("{:?}", cluster.spec.cluster.source));
            for d in &cloud.desired {
                let api = d.object["apiVersion"].as_str().unwrap_or_default();
                let allowed = EKS_KINDS
                    .iter()
                    .chain(GKE_KINDS)
                    .chain(CLOUD_KINDS)
                    .any(|(a, kinds)| *a == api && kinds.contains(&d.kind()));
                assert!(
                    allowed,
                    "{}: {api} {} is not in behavior.md §9",
                    case_name(file),
                    d.kind()
                );
            }
            let pools: Vec<&Desired> = cloud
                .desired
                .iter()
                .filter(|d| {
                    matches!(
                        d.kind(),
                        "NodeGroup"
                            | "NodePool"
                            | "KubernetesClusterNodePool"
                            | "KubernetesNodePool"
                    )
                })
                .collect();
            let expected = cluster.spec.node_pools.as_ref().map_or(0, Vec::len);
            // AKS and Vultr carry the system pool inline in the cluster.
            let inline_system = matches!(
                d_kind_of_cluster(&cloud),
                "KubernetesCluster" | "Kubernetes"
            );
            assert_eq!(
                pools.len(),
                expected + usize::from(!inline_system),
                "{}",
                case_name(file)
            );
            for pool in pools {
                let labels = pool_labels(pool).expect("node labels");
                assert!(labels[labels::POOL].is_string(), "{}", case_name(file));
            }
            let status = cloud.status.expect("running status");
            assert_eq!(status["secrets"][0]["type"], "Kubeconfig");
        }
    }
    let expected: std::collections::BTreeSet<String> = ["Aks", "Eks", "Gke", "Nebius", "Vultr"]
        .map(String::from)
        .into();
    assert_eq!(clouds, expected);
}

fn d_kind_of_cluster(c: &Composition) -> &str {
    c.desired
        .iter()
        .map(Desired::kind)
        .find(|k| matches!(*k, "Cluster" | "KubernetesCluster" | "Kubernetes"))
        .unwrap_or_default()
}

#[test]
fn every_upstream_class_is_accepted() {
    let all = manifests();
    let mut seen = 0;
    for (file, objects) in all {
        for class in of_kind::<InferenceClass>(objects, "InferenceClass") {
            let c = compose_inference_class();
            assert!(c.desired.is_empty());
            assert_eq!(c.status, Some(json!({})));
            let text = format!(
                "{}# status.gpuPools entry a pool of this class publishes\n{}",
                render(&c),
                serde_saphyr::to_string(&pool_of(&class)).expect("YAML")
            );
            let case = format!(
                "{}-{}",
                case_name(file),
                class.metadata.name.as_deref().unwrap_or_default()
            );
            snapshot("inference-class", &case, &text);
            seen += 1;
        }
    }
    assert!(seen >= 15, "only {seen} classes");
}

/// The `status.gpuPools` entry one two-node pool of this class yields.
fn pool_of(class: &InferenceClass) -> Value {
    let mut cluster = InferenceCluster::default();
    cluster.spec.node_pools = Some(vec![modelplane_api::types::NodePool {
        name: "pool".into(),
        class_name: class.metadata.name.clone().unwrap_or_default(),
        node_count: Some(2),
        ..Default::default()
    }]);
    json!(cluster.spec.gpu_pools(std::slice::from_ref(class)))
}

fn eks_cluster(stack: Stack, classes: &[&str]) -> InferenceCluster {
    let pools: Vec<Value> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| json!({ "name": format!("pool{i}"), "className": c, "nodeCount": 1 }))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": { "name": "c1" },
        "spec": { "stack": stack, "cluster": { "source": "EKS", "eks": { "region": "us-east-1" } }, "nodePools": pools },
    }))
    .expect("typed")
}

fn fixture_classes() -> Vec<InferenceClass> {
    let all = manifests();
    classes_for(&upstream().join("concepts/x.yaml"), all)
}

fn kinds(desired: &[Desired]) -> Vec<&str> {
    desired.iter().map(Desired::kind).collect()
}

#[test]
fn missing_classes_hold_and_are_named_sorted() {
    let cluster = eks_cluster(Stack::Standard, &["zeta", "alpha", "zeta"]);
    let c = compose_inference_cluster(ClusterInputs {
        cluster: &cluster,
        classes: &fixture_classes(),
        hosted_replicas: 0,
        cloud_cluster: None,
        serving_stack: None,
    });
    assert!(c.hold);
    assert!(c.desired.is_empty());
    assert_eq!(c.conditions[0].reason, "WaitingForClasses");
    assert_eq!(
        c.conditions[0].message,
        "Waiting for InferenceClasses: alpha, zeta"
    );
}

#[test]
fn replica_guard_is_composed_first_and_only_while_replicas_remain() {
    let cluster = eks_cluster(Stack::Standard, &["missing"]);
    let classes = fixture_classes();
    let with = |n| {
        compose_inference_cluster(ClusterInputs {
            cluster: &cluster,
            classes: &classes,
            hosted_replicas: n,
            cloud_cluster: None,
            serving_stack: None,
        })
    };
    let guarded = with(2);
    assert_eq!(kinds(&guarded.desired), ["ClusterUsage"]);
    let usage = &guarded.desired[0].object;
    assert_eq!(usage["spec"]["of"]["resourceRef"]["name"], "c1");
    assert_eq!(
        usage["spec"]["reason"],
        "ModelReplicas are scheduled to this InferenceCluster"
    );
    assert_eq!(usage["spec"]["replayDeletion"], true);
    assert!(with(0).desired.is_empty());
}

#[test]
fn a_class_without_the_clouds_block_is_an_invalid_node_pool() {
    let cluster = eks_cluster(Stack::Standard, &["eks-l4-1x-g6", "gke-l4-1x-g2"]);
    let c = compose_inference_cluster(ClusterInputs {
        cluster: &cluster,
        classes: &fixture_classes(),
        hosted_replicas: 0,
        cloud_cluster: None,
        serving_stack: None,
    });
    assert!(
        !kinds(&c.desired).contains(&"EKSCluster"),
        "{:?}",
        kinds(&c.desired)
    );
    assert_eq!(c.conditions[0].reason, "InvalidNodePool");
    assert_eq!(
        c.conditions[0].message,
        "InferenceClass gke-l4-1x-g2 has no EKS provisioning block"
    );
    assert_eq!(c.conditions[1].type_, "ClusterReady");
    assert_eq!(c.conditions[1].reason, "Provisioning");
}

#[test]
fn a_provisioning_cluster_gets_no_provider_config_and_waits() {
    let cluster = eks_cluster(Stack::Standard, &["eks-l4-1x-g6"]);
    let c = compose_inference_cluster(ClusterInputs {
        cluster: &cluster,
        classes: &fixture_classes(),
        hosted_replicas: 0,
        cloud_cluster: None,
        serving_stack: None,
    });
    assert_eq!(kinds(&c.desired), ["EKSCluster"]);
    let pool = &c.desired[0].object["spec"]["nodePools"][0];
    assert_eq!(pool["role"], "GPU");
    assert_eq!(pool["instanceType"], "g6.xlarge");
    assert_eq!(pool["gpu"]["acceleratorType"], "nvidia-l4");
    let reasons: Vec<&str> = c.conditions.iter().map(|c| c.reason.as_str()).collect();
    assert_eq!(reasons, ["Provisioning", "WaitingForCluster"]);
    assert_eq!(
        c.status.as_ref().expect("status")["providerConfigRef"]["name"],
        modelplane_api::names::cluster_provider_config_name("c1")
    );
}

fn releases(c: &Composition) -> Vec<String> {
    c.desired
        .iter()
        .filter(|d| d.kind() == "Release")
        .map(|d| {
            d.object["metadata"]["labels"][labels::RELEASE]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn the_stacks_differ_by_exactly_their_own_components() {
    let classes = fixture_classes();
    let compose = |stack| {
        let (_, ss) = steady_state(&eks_cluster(stack, &["eks-l4-1x-g6"]), &classes);
        ss.expect("serving stack")
    };
    let (standard, dynamo) = (compose(Stack::Standard), compose(Stack::Dynamo));
    let (s, d) = (releases(&standard), releases(&dynamo));
    let only_standard: Vec<&String> = s.iter().filter(|r| !d.contains(r)).collect();
    let only_dynamo: Vec<&String> = d.iter().filter(|r| !s.contains(r)).collect();
    assert_eq!(only_standard, ["leader-worker-set"]);
    assert_eq!(
        only_dynamo,
        ["grove", "kai-scheduler", "modelexpress-server"]
    );
    let queue = |c: &Composition| c.desired.iter().any(|d| d.kind() == "Queue");
    assert!(queue(&dynamo) && !queue(&standard));
    // Every release is kept from outliving its provider config by a Usage.
    let usages = standard
        .desired
        .iter()
        .filter(|d| d.kind() == "Usage")
        .count();
    assert_eq!(usages, s.len());
}

#[test]
fn stack_objects_land_on_the_cluster_and_releases_on_the_control_plane() {
    let (_, ss) = steady_state(
        &eks_cluster(Stack::Dynamo, &["eks-l4-1x-g6"]),
        &fixture_classes(),
    );
    for d in &ss.expect("serving stack").desired {
        let on_cluster = matches!(
            d.kind(),
            "ResourceQuota" | "Namespace" | "EnvoyProxy" | "GatewayClass" | "Gateway" | "Queue"
        );
        let expected = if on_cluster {
            Target::Cluster("c1".into())
        } else {
            Target::ControlPlane
        };
        assert_eq!(d.target, expected, "{}", d.kind());
    }
}

#[test]
fn nothing_beyond_provider_configs_before_they_are_observed() {
    let (first, _) = steady_state(
        &eks_cluster(Stack::Standard, &["eks-l4-1x-g6"]),
        &fixture_classes(),
    );
    let ss = observed_stack(&first).expect("serving stack");
    let recipe = recipes::all().first().expect("a recipe");
    let c = compose_serving_stack(StackInputs {
        serving_stack: &ss,
        recipe,
        provider_configs_observed: false,
        gateway_address: None,
    });
    assert_eq!(kinds(&c.desired), ["ProviderConfig", "ProviderConfig"]);
}

#[test]
fn gke_clusters_set_the_driver_root_and_pass_it_to_the_dra_driver() {
    let all = manifests();
    let file = upstream().join("concepts/inference-cluster-gke.yaml");
    let (_, objects) = all.iter().find(|(f, _)| *f == file).expect("gke cluster");
    let cluster = of_kind::<InferenceCluster>(objects, "InferenceCluster").remove(0);
    let (steady, ss) = steady_state(&cluster, &classes_for(&file, all));
    let stack = steady
        .desired
        .iter()
        .find(|d| d.kind() == "ServingStack")
        .expect("ss");
    assert_eq!(
        stack.object["spec"]["nvidiaDriverRoot"],
        "/home/kubernetes/bin/nvidia"
    );
    let ss = ss.expect("stack");
    let dra = ss
        .desired
        .iter()
        .find(|d| d.object["metadata"]["labels"][labels::RELEASE] == "nvidia-dra-driver-gpu")
        .expect("dra driver release");
    assert_eq!(
        dra.object["spec"]["forProvider"]["values"]["nvidiaDriverRoot"],
        "/home/kubernetes/bin/nvidia"
    );
}

fn eks_xr(fabric: Option<&str>) -> EKSCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "EKSCluster",
        "metadata": { "name": "c1", "namespace": "modelplane-system" },
        "spec": {
            "region": "us-east-1",
            "nodePools": [{
                "name": "gpu", "role": "GPU", "instanceType": "p5en.48xlarge", "nodeCount": 2,
                "gpu": { "acceleratorType": "nvidia-h200" }, "zones": ["us-east-1b"], "fabric": fabric,
            }],
        },
    }))
    .expect("typed")
}

/// `behavior.md` §9: the managed resource kinds compose-eks-cluster may use.
const EKS_KINDS: &[(&str, &[&str])] = &[
    (
        "ec2.aws.m.upbound.io/v1beta1",
        &[
            "VPC",
            "Subnet",
            "InternetGateway",
            "NATGateway",
            "EIP",
            "RouteTable",
            "Route",
            "RouteTableAssociation",
            "SecurityGroup",
            "SecurityGroupIngressRule",
            "SecurityGroupEgressRule",
            "LaunchTemplate",
        ],
    ),
    (
        "eks.aws.m.upbound.io/v1beta1",
        &[
            "Cluster",
            "ClusterAuth",
            "NodeGroup",
            "Addon",
            "PodIdentityAssociation",
        ],
    ),
    (
        "iam.aws.m.upbound.io/v1beta1",
        &["Role", "Policy", "RolePolicyAttachment"],
    ),
    (
        "efs.aws.m.upbound.io/v1beta1",
        &["FileSystem", "MountTarget"],
    ),
    (
        "helm.m.crossplane.io/v1beta1",
        &["Release", "ProviderConfig"],
    ),
    ("storage.k8s.io/v1", &["StorageClass"]),
];

#[test]
fn eks_composes_only_the_kinds_of_its_table() {
    let c = compose_eks_cluster(EksInputs {
        cluster: &eks_xr(Some("EFA")),
        control_plane_ready: true,
        file_system_id: Some("fs-1"),
    });
    for d in &c.desired {
        let api = d.object["apiVersion"].as_str().unwrap_or_default();
        let allowed = EKS_KINDS
            .iter()
            .any(|(a, kinds)| *a == api && kinds.contains(&d.kind()));
        assert!(allowed, "{api} {} is not in behavior.md §9", d.kind());
    }
    // An EKS control plane needs subnets in two zones even when the pools name one.
    let cluster = c
        .desired
        .iter()
        .find(|d| d.kind() == "Cluster")
        .expect("cluster");
    assert_eq!(
        cluster.object["spec"]["forProvider"]["vpcConfig"]["subnetIdRefs"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[test]
fn eks_node_groups_are_labelled_and_gpu_pools_tainted() {
    let c = compose_eks_cluster(EksInputs {
        cluster: &eks_xr(None),
        control_plane_ready: false,
        file_system_id: None,
    });
    let groups: Vec<&Value> = c
        .desired
        .iter()
        .filter(|d| d.kind() == "NodeGroup")
        .map(|d| &d.object["spec"]["forProvider"])
        .collect();
    assert_eq!(groups.len(), 2, "system + gpu");
    let system = groups
        .iter()
        .find(|g| g["labels"][labels::POOL] == "system")
        .expect("system pool");
    assert_eq!(system["instanceTypes"], json!(["m6i.xlarge"]));
    assert_eq!(
        system["scalingConfig"],
        json!({ "desiredSize": 1, "minSize": 1, "maxSize": 2 })
    );
    assert!(system.get("taint").is_none());
    let gpu = groups
        .iter()
        .find(|g| g["labels"][labels::POOL] == "gpu")
        .expect("gpu pool");
    assert_eq!(gpu["labels"][labels::GPU], "nvidia-h200");
    assert_eq!(
        gpu["taint"],
        json!([{ "key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE" }])
    );
}

#[test]
fn eks_in_cluster_extras_wait_for_the_control_plane_and_the_file_system() {
    let xr = eks_xr(None);
    let compose = |ready, fs| {
        compose_eks_cluster(EksInputs {
            cluster: &xr,
            control_plane_ready: ready,
            file_system_id: fs,
        })
    };
    let provisioning = compose(false, None);
    assert!(provisioning.status.is_none());
    assert!(
        !kinds(&provisioning.desired)
            .iter()
            .any(|k| matches!(*k, "Release" | "ProviderConfig" | "StorageClass"))
    );
    let running = compose(true, None);
    let status = running.status.expect("status");
    assert_eq!(status["secrets"][0]["type"], "Kubeconfig");
    assert!(status.get("cache").is_none());
    let releases: Vec<&Desired> = running
        .desired
        .iter()
        .filter(|d| d.kind() == "Release")
        .collect();
    assert_eq!(
        releases.len(),
        1,
        "cluster-autoscaler only, no aws-dranet without EFA"
    );
    let policies = &releases[0].object["spec"]["managementPolicies"];
    assert!(
        !policies
            .as_array()
            .expect("policies")
            .contains(&json!("Delete"))
    );
    let with_fs = compose(true, Some("fs-1"));
    assert_eq!(
        with_fs.status.expect("status")["cache"]["storageClassName"],
        "modelplane-rwx-efs"
    );
    let class = with_fs
        .desired
        .iter()
        .find(|d| d.kind() == "StorageClass")
        .expect("class");
    assert_eq!(class.target, Target::Cluster("c1".into()));
    assert_eq!(class.object["parameters"]["fileSystemId"], "fs-1");
}

#[test]
fn eks_capacity_blocks_and_efa_use_a_launch_template() {
    let mut xr = eks_xr(Some("EFA"));
    xr.spec.node_pools[0].capacity_block = Some(modelplane_api::types::CapacityBlock {
        capacity_reservation_id: "cr-0abc".into(),
    });
    let c = compose_eks_cluster(EksInputs {
        cluster: &xr,
        control_plane_ready: true,
        file_system_id: None,
    });
    let lt = c
        .desired
        .iter()
        .find(|d| d.kind() == "LaunchTemplate")
        .expect("launch template");
    let lt = &lt.object["spec"]["forProvider"];
    assert_eq!(
        lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"],
        "cr-0abc"
    );
    assert_eq!(lt["networkInterfaces"][0]["interfaceType"], "efa");
    let gpu = c
        .desired
        .iter()
        .find(|d| {
            d.kind() == "NodeGroup"
                && d.object["spec"]["forProvider"]["labels"][labels::POOL] == "gpu"
        })
        .expect("gpu group");
    assert_eq!(
        gpu.object["spec"]["forProvider"]["capacityType"],
        "CAPACITY_BLOCK"
    );
    assert!(c.desired.iter().any(|d| d.kind() == "Release"
        && d.object["spec"]["forProvider"]["chart"]["name"] == "aws-dranet"));
}

/// `behavior.md` §9: the managed resource kinds compose-gke-cluster may use.
const GKE_KINDS: &[(&str, &[&str])] = &[
    (
        "compute.gcp.m.upbound.io/v1beta1",
        &["Network", "Subnetwork"],
    ),
    (
        "container.gcp.m.upbound.io/v1beta1",
        &["Cluster", "NodePool"],
    ),
    (
        "cloudplatform.gcp.m.upbound.io/v1beta1",
        &[
            "ServiceAccount",
            "ServiceAccountKey",
            "ProjectIAMMember",
            "ProjectService",
        ],
    ),
    ("storage.k8s.io/v1", &["StorageClass"]),
];

fn gke_xr() -> GKECluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "GKECluster",
        "metadata": { "name": "g1", "namespace": "modelplane-system" },
        "spec": {
            "region": "us-central1",
            "nodePools": [{
                "name": "gpu", "role": "GPU", "machineType": "g2-standard-8", "nodeCount": 1,
                "gpu": { "acceleratorType": "nvidia-l4", "acceleratorCount": 1 }, "zones": ["us-central1-a"],
            }],
        },
    }))
    .expect("typed")
}

#[test]
fn gke_composes_only_the_kinds_of_its_table_and_waits_for_the_project() {
    let xr = gke_xr();
    let waiting = compose_gke_cluster(GkeInputs {
        cluster: &xr,
        project: None,
        control_plane_ready: false,
    });
    assert!(waiting.hold && waiting.desired.is_empty());
    let c = compose_gke_cluster(GkeInputs {
        cluster: &xr,
        project: Some("p"),
        control_plane_ready: true,
    });
    for d in &c.desired {
        let api = d.object["apiVersion"].as_str().unwrap_or_default();
        let allowed = GKE_KINDS
            .iter()
            .any(|(a, kinds)| *a == api && kinds.contains(&d.kind()));
        assert!(allowed, "{api} {} is not in behavior.md §9", d.kind());
    }
    let gpu = c
        .desired
        .iter()
        .find(|d| {
            d.kind() == "NodePool"
                && d.object["spec"]["forProvider"]["nodeConfig"]["labels"][labels::POOL] == "gpu"
        })
        .expect("gpu pool");
    let config = &gpu.object["spec"]["forProvider"]["nodeConfig"];
    assert_eq!(
        config["labels"]["cloud.google.com/gke-nvidia-gpu-dra-driver"],
        "true"
    );
    assert_eq!(config["labels"][labels::GPU], "nvidia-l4");
    assert_eq!(config["guestAccelerator"][0]["type"], "nvidia-l4");
    let status = c.status.expect("status");
    let types: Vec<&str> = status["secrets"]
        .as_array()
        .expect("secrets")
        .iter()
        .filter_map(|s| s["type"].as_str())
        .collect();
    assert_eq!(types, ["Kubeconfig", "GoogleApplicationCredentials"]);
    assert_eq!(status["cache"]["storageClassName"], "modelplane-rwx");
    // Service account IDs stay within GCP's 6–30 characters.
    for d in c.desired.iter().filter(|d| d.kind() == "ServiceAccount") {
        let id = d.object["spec"]["forProvider"]["accountId"]
            .as_str()
            .expect("id");
        assert!((6..=30).contains(&id.len()), "{id}");
    }
}

/// A cluster's first replica adds a ClusterUsage protecting the cluster
/// from deletion; new, it is not observed yet. The cluster must not stop
/// being Ready for it: it serves as before (a fleet coming up saw its
/// clusters flap Ready → not Ready as replicas were placed on them, and
/// the scheduler skips clusters that are not Ready).
#[test]
fn a_cluster_stays_ready_when_its_first_replica_is_placed() {
    let all = manifests();
    let (file, objects) = all
        .iter()
        .find(|(_, objects)| objects.iter().any(|o| o["kind"] == "InferenceCluster"))
        .expect("an upstream cluster");
    let classes = classes_for(file, all);
    let cluster = of_kind::<InferenceCluster>(objects, "InferenceCluster").remove(0);
    let cloud = running_cloud(&cluster);
    let compose = |hosted_replicas, serving_stack: Option<&ServingStack>| {
        compose_inference_cluster(ClusterInputs {
            cluster: &cluster,
            classes: &classes,
            hosted_replicas,
            cloud_cluster: Some(&cloud),
            serving_stack,
        })
    };
    let stack = observed_stack(&compose(0, None));
    let serving = compose(0, stack.as_ref());
    let mut world = modelplane_compose::world::World::default();
    for desired in &serving.desired {
        let mut observed = desired.object.clone();
        observed["status"] = json!({ "conditions": [{ "type": "Ready", "status": "True" }] });
        world
            .applied
            .entry(desired.target.clone())
            .or_default()
            .insert(
                modelplane_compose::world::ObjectRef::of(&desired.object),
                std::sync::Arc::new(observed),
            );
    }
    assert!(world.all_ready(&serving), "{:?}", world.unready(&serving));
    let placed = compose(1, stack.as_ref());
    assert!(
        kinds(&placed.desired).contains(&"ClusterUsage"),
        "the replicas' ClusterUsage"
    );
    assert!(
        world.all_ready(&placed),
        "not ready for {:?}",
        world.unready(&placed)
    );
}
