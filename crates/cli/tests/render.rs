//! `modelplane render` end to end: the examples fleet rendered as the
//! controllers would create it (golden), the cluster filter and JSON output.
//! Regenerate with `INSTA_UPDATE=always cargo test -p modelplane --test render`.

use std::path::Path;
use std::process::{Command, Output};

fn modelplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .args(args)
        .output()
        .expect("the modelplane binary runs")
}

#[test]
fn render_prints_every_object_of_the_examples_grouped_by_target() {
    let args = ["render", "-f", "examples/"];
    let out = modelplane(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.starts_with(
            "# cluster us-east (EKS, Standard): recipe eks-any-ubuntu, 9 Helm releases\n\
             # cluster us-west (EKS, Dynamo): recipe eks-any-ubuntu, 11 Helm releases\n\
             # cache ml-team/qwen3-coder: staged on us-west\n\
             # ml-team/qwen3-8b: 2 of 2 replicas placed on us-east (Standard), us-west (Dynamo)\n\
             # ml-team/qwen3-coder: 1 of 1 replicas placed on us-west (Dynamo)\n"
        ),
        "{text}"
    );
    for section in [
        "# ---- control plane",
        "# ---- cluster us-east",
        "# ---- cluster us-west",
    ] {
        assert!(text.contains(section), "{section} missing");
    }
    // Every document parses back as YAML.
    let docs = modelplane_api_yaml_docs(&text);
    assert!(docs >= 20, "{docs} documents");
    insta::with_settings!({
        snapshot_path => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/render/examples"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => "modelplane render -f examples/",
    }, {
        insta::assert_snapshot!("output", text);
    });
}

fn modelplane_api_yaml_docs(text: &str) -> usize {
    text.split("\n---\n")
        .filter(|d| d.contains("apiVersion:"))
        .count()
}

#[test]
fn the_cluster_filter_keeps_only_that_clusters_objects() {
    let out = modelplane(&["render", "-f", "examples/", "--cluster", "us-west"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("# ---- cluster us-west"));
    assert!(!text.contains("# ---- cluster us-east") && !text.contains("# ---- control plane"));
    assert!(text.contains("kind: PodCliqueSet") && !text.contains("kind: LeaderWorkerSet"));
    // The stack's own objects land there too, and its releases are named.
    assert!(text.contains("kind: Gateway\n") && text.contains("kind: Queue\n"));
    assert!(text.contains("#   release grove v0.1.0-alpha.12-rc1 (grove-charts) in grove-system"));
    assert!(!text.contains("kind: Release"));
    let out = modelplane(&["render", "-f", "examples/", "--cluster", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no InferenceCluster nowhere"));
}

#[test]
fn json_output_groups_objects_by_target() {
    let out = modelplane(&["render", "-f", "examples/", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["summaries"].as_array().map(Vec::len), Some(5));
    let control_plane = v["controlPlane"].as_array().expect("control plane");
    let count = |kind: &str| control_plane.iter().filter(|o| o["kind"] == kind).count();
    assert_eq!(count("ModelReplica"), 3);
    assert_eq!(count("EKSCluster"), 2);
    assert_eq!(count("ServingStack"), 2);
    // The recipes' releases, then per EKS cluster the autoscaler and (EFA
    // pools on both) aws-dranet.
    assert_eq!(count("Release"), 9 + 11 + 2 + 2);
    // Each EKS cluster's managed resources.
    assert_eq!(count("Cluster"), 2);
    assert_eq!(count("ClusterAuth"), 2);
    assert_eq!(count("VPC"), 2);
    // Both clusters host replicas, so both are guarded against deletion.
    assert_eq!(count("ClusterUsage"), 2);
    // The cache is staged where the coder runs, on its managed EFS class.
    let pvc = |cluster: &str| {
        v["clusters"][cluster]
            .as_array()
            .and_then(|a| a.iter().find(|o| o["kind"] == "PersistentVolumeClaim"))
            .cloned()
    };
    let staged = pvc("us-west").expect("cache PVC on us-west");
    assert_eq!(staged["spec"]["storageClassName"], "modelplane-rwx-efs");
    assert!(
        pvc("us-east").is_none(),
        "not staged where the coder does not run"
    );
    // The small model on the Standard cluster (one node: a Deployment), the
    // large one on the Dynamo cluster (a Grove PodCliqueSet).
    assert!(
        v["clusters"]["us-east"]
            .as_array()
            .is_some_and(|a| a.iter().any(|o| o["kind"] == "Deployment"))
    );
    assert!(
        v["clusters"]["us-west"]
            .as_array()
            .is_some_and(|a| a.iter().any(|o| o["kind"] == "PodCliqueSet"))
    );
}

#[test]
fn yaml_and_json_outputs_carry_the_same_objects() {
    let yaml = modelplane(&["render", "-f", "examples/"]);
    let json = modelplane(&["render", "-f", "examples/", "-o", "json"]);
    let docs =
        modelplane_api::validation::yaml::parse_documents(&String::from_utf8_lossy(&yaml.stdout))
            .expect("valid YAML");
    let from_yaml: Vec<serde_json::Value> = docs.into_iter().map(|d| d.value).collect();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let mut from_json: Vec<serde_json::Value> =
        v["controlPlane"].as_array().cloned().unwrap_or_default();
    for objects in v["clusters"].as_object().expect("clusters").values() {
        from_json.extend(objects.as_array().cloned().unwrap_or_default());
    }
    assert_eq!(from_yaml.len(), from_json.len());
    assert_eq!(from_yaml, from_json);
}

#[test]
fn every_cloud_renders_its_managed_resources_given_the_projects() {
    let upstream = "../shared/upstream-manifests";
    let concepts = format!("{upstream}/concepts/");
    let without = modelplane(&["render", "-f", &concepts, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&without.stdout).expect("JSON");
    let notes: Vec<String> = v["summaries"]
        .as_array()
        .expect("summaries")
        .iter()
        .flat_map(|s| s["notes"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .filter(|n| n.contains("provider config"))
        .collect();
    assert_eq!(
        notes.len(),
        2,
        "GKE and Nebius wait for their projects: {notes:?}"
    );

    let gke = format!("{upstream}/getting-started/clusterproviderconfig-gke.yaml");
    let nebius = format!("{upstream}/getting-started/clusterproviderconfig-nebius.yaml");
    let with = modelplane(&["render", "-f", &concepts, &gke, &nebius, "-o", "json"]);
    assert_eq!(with.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&with.stdout).expect("JSON");
    let objects = v["controlPlane"].as_array().expect("control plane");
    let has = |api: &str, kind: &str| {
        objects
            .iter()
            .any(|o| o["apiVersion"] == api && o["kind"] == kind)
    };
    assert!(has("eks.aws.m.upbound.io/v1beta1", "NodeGroup"));
    assert!(has("container.gcp.m.upbound.io/v1beta1", "NodePool"));
    assert!(has(
        "containerservice.azure.m.upbound.io/v1beta1",
        "KubernetesClusterNodePool"
    ));
    assert!(has("mk8s.nebius.m.upbound.io/v1beta1", "NodeGroup"));
    assert!(has("vke.vultr.m.upbound.io/v1beta1", "KubernetesNodePool"));
    let gke_cluster = objects
        .iter()
        .find(|o| o["apiVersion"] == "container.gcp.m.upbound.io/v1beta1" && o["kind"] == "Cluster")
        .expect("GKE cluster");
    assert_eq!(
        gke_cluster["spec"]["forProvider"]["project"],
        "my-gcp-project"
    );
}
