//! Status, conditions, events and holds of the ModelDeployment and
//! ModelReplica compositions (`behavior.md` §4.5, §5.7; DECISIONS H2, H4).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use modelplane_api::types::{ModelReplica, Stack};
use modelplane_compose::{
    CacheLookup, Composition, DeploymentInputs, ReplicaInputs, compose_model_deployment,
    compose_model_replica,
};
use modelplane_scheduler::{Cluster, DeviceInterner, ExistingReplica};

const MD: &str = r#"apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata: { name: qwen, namespace: ml }
spec:
  replicas: 2
  template:
    metadata: { labels: { team: search } }
    spec:
      engines:
      - name: main
        members:
        - nodeSelector: { devices: [{ name: gpu, selectors: [{ cel: "device.driver == 'gpu.nvidia.com'" }] }] }
          template: { spec: { containers: [{ name: engine, image: vllm/vllm-openai:v0.23.0 }] } }
"#;

fn views(stack: Stack) -> (Vec<Cluster>, modelplane_api::types::InferenceCluster) {
    let ic = cluster(stack, &BTreeMap::new());
    let mut interner = DeviceInterner::default();
    (vec![Cluster::from_resource(&ic, &mut interner)], ic)
}

fn conditions(c: &Composition) -> Vec<String> {
    c.conditions
        .iter()
        .map(|c| {
            format!("{}={}/{} {}", c.type_, c.status, c.reason, c.message)
                .trim_end()
                .to_string()
        })
        .collect()
}

#[test]
fn a_first_pass_schedules_and_reports_scheduling() {
    let md = deployments(MD).0.remove(0);
    let (clusters, _) = views(Stack::Standard);
    let ready = BTreeSet::new();
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &ready,
        routed: &BTreeSet::new(),
    });
    assert!(!c.hold);
    assert_eq!(
        c.desired
            .iter()
            .filter(|d| d.kind() == "ModelReplica")
            .count(),
        2
    );
    assert_eq!(
        c.desired
            .iter()
            .filter(|d| d.kind() == "ModelEndpoint")
            .count(),
        0
    );
    assert_eq!(
        conditions(&c),
        [
            "ReplicasScheduled=False/Scheduling",
            "ReplicasReady=False/ModelStarting 0 of 2 ready",
            "Available=False/MinimumReplicasUnavailable No replica serves yet",
        ]
    );
    assert_eq!(
        c.events[0].message,
        "Scheduled 2 replicas across 1 clusters: standard"
    );
    assert_eq!(
        c.status,
        Some(serde_json::json!({
            "replicas": { "desired": 2, "total": 2, "ready": 0 },
            "ready": "0/2",
        }))
    );
    let labels = &c.desired[0].object["metadata"]["labels"];
    assert_eq!(labels["team"], "search");
    assert_eq!(labels["modelplane.ai/deployment"], "qwen");
    assert_eq!(labels["modelplane.ai/replica-index"], "0");
}

#[test]
fn ready_replicas_get_endpoints_and_the_deployment_reports_them() {
    let md = deployments(MD).0.remove(0);
    let (clusters, _) = views(Stack::Standard);
    let first = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    let existing: Vec<ExistingReplica> = first
        .desired
        .iter()
        .map(|d| {
            ExistingReplica::from_resource(
                &serde_json::from_value::<ModelReplica>(d.object.clone()).expect("replica"),
            )
        })
        .collect();
    let one_ready: BTreeSet<String> = [existing[0].name.clone()].into();
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &existing,
        ready: &one_ready,
        routed: &BTreeSet::new(),
    });
    assert!(c.events.is_empty(), "{:?}", c.events);
    assert_eq!(
        conditions(&c),
        [
            "ReplicasScheduled=True/ReplicasCreated Scheduled 2 of 2 replicas",
            "ReplicasReady=False/ModelStarting 1 of 2 ready",
            "Available=False/MinimumReplicasUnavailable No replica serves yet",
        ]
    );
    assert!(c.waiting.is_some(), "not Ready while a replica is not");
    let endpoints: Vec<_> = c
        .desired
        .iter()
        .filter(|d| d.kind() == "ModelEndpoint")
        .collect();
    assert_eq!(endpoints.len(), 1);
    let name = &existing[0].name;
    assert_eq!(
        endpoints[0].object["spec"]["url"],
        format!("http://standard.gateway.example/ml/{name}/v1")
    );
    assert_eq!(
        endpoints[0].object["spec"]["rewritePath"],
        format!("/ml/{name}/")
    );
}

#[test]
fn an_unreadable_or_empty_cluster_list_holds() {
    let md = deployments(MD).0.remove(0);
    let ready = BTreeSet::new();
    for clusters in [None, Some(&[][..])] {
        let c = compose_model_deployment(DeploymentInputs {
            deployment: &md,
            cache: CacheLookup::NotReferenced,
            clusters,
            replicas: &[],
            ready: &ready,
            routed: &BTreeSet::new(),
        });
        assert!(c.hold);
        assert!(c.desired.is_empty());
        assert_eq!(
            conditions(&c),
            ["ReplicasScheduled=False/NoClusters No InferenceClusters found"]
        );
    }
}

#[test]
fn a_selector_that_does_not_compile_holds() {
    // Admission refuses such a selector now; one stored before (or written
    // to a real cluster without Modelplane's admission) must still hold.
    let mut md = deployments(MD).0.remove(0);
    let text = serde_json::to_string(&md)
        .expect("json")
        .replace("device.driver == 'gpu.nvidia.com'", "device.driver");
    md = serde_json::from_str(&text).expect("typed");
    let (clusters, _) = views(Stack::Standard);
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    assert!(c.hold);
    assert_eq!(c.conditions[0].reason, "InvalidNodeSelector");
    assert!(
        c.conditions[0]
            .message
            .starts_with("Invalid nodeSelector CEL expression: "),
        "{}",
        c.conditions[0].message
    );
}

#[test]
fn a_missing_cache_holds_new_placements_but_keeps_existing_ones() {
    let md = deployments(&MD.replace(
        "      engines:",
        "      modelCacheRef: { name: weights }\n      engines:",
    ))
    .0
    .remove(0);
    let (clusters, _) = views(Stack::Standard);
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::Absent,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    assert_eq!(
        conditions(&c),
        [
            "ModelCacheResolved=False/ModelCacheNotFound ModelCache weights not found; holding replica placement",
            "ReplicasScheduled=False/WaitingForModelCache 0 of 2 replicas placed (checked 1 clusters): new replicas wait for ModelCache weights",
            "ReplicasReady=False/NoReplicasScheduled 0 of 2 ready, 2 not placed",
            "Available=False/MinimumReplicasUnavailable No replica serves yet",
        ]
    );
    assert_eq!(c.events[0].reason, "ModelCacheNotFound");
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::Unresolved,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    assert_eq!(
        conditions(&c)[0],
        "ModelCacheResolved=False/ModelCacheUnresolved Waiting for ModelCache weights"
    );
}

fn replica(stack: Stack) -> (ModelReplica, modelplane_api::types::InferenceCluster) {
    let md = deployments(MD).0.remove(0);
    let (clusters, ic) = views(stack);
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    (
        serde_json::from_value(c.desired[0].object.clone()).expect("replica"),
        ic,
    )
}

#[test]
fn replica_conditions_follow_the_observed_workloads() {
    for stack in [Stack::Standard, Stack::Dynamo] {
        let (r, ic) = replica(stack);
        let none = BTreeMap::new();
        let c = compose_model_replica(ReplicaInputs {
            replica: &r,
            cluster: Some(&ic),
            observed: &none,
        });
        assert_eq!(
            conditions(&c),
            [
                "ModelAccepted=False/Deploying",
                "ModelReady=False/WaitingForModel"
            ]
        );
        assert_eq!(
            c.events[0].message,
            "Composing vllm/vllm-openai:v0.23.0 on standard"
                .replace("standard", ic.metadata.name.as_deref().unwrap_or_default())
        );
        let workload = c
            .desired
            .iter()
            .find(|d| matches!(d.kind(), "Deployment" | "PodCliqueSet"))
            .expect("workload")
            .name()
            .to_string();
        let starting = BTreeMap::from([(workload.clone(), false)]);
        let c = compose_model_replica(ReplicaInputs {
            replica: &r,
            cluster: Some(&ic),
            observed: &starting,
        });
        assert_eq!(
            conditions(&c),
            [
                "ModelAccepted=True/Accepted",
                "ModelReady=False/ModelStarting"
            ]
        );
        assert!(c.events.is_empty());
        let serving = BTreeMap::from([(workload, true)]);
        let c = compose_model_replica(ReplicaInputs {
            replica: &r,
            cluster: Some(&ic),
            observed: &serving,
        });
        assert_eq!(
            conditions(&c),
            ["ModelAccepted=True/Accepted", "ModelReady=True/Serving"]
        );
    }
}

#[test]
fn a_replica_whose_cluster_is_unknown_holds() {
    let (r, _) = replica(Stack::Standard);
    let c = compose_model_replica(ReplicaInputs {
        replica: &r,
        cluster: None,
        observed: &BTreeMap::new(),
    });
    assert!(c.hold && c.desired.is_empty());
    assert_eq!(
        conditions(&c),
        [
            "ModelAccepted=False/WaitingForCluster",
            "ModelReady=False/WaitingForModel"
        ]
    );
}

#[test]
fn a_decode_port_that_is_not_a_number_is_a_condition_not_a_crash() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/model-deployment/prefill-decode/input.yaml"),
    )
    .expect("case")
    .replace("\"--port\", \"8200\"", "\"--port\", \"$(PORT)\"");
    let md = deployments(&text).0.remove(0);
    let (clusters, ic) = views(Stack::Standard);
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    let r: ModelReplica = serde_json::from_value(c.desired[0].object.clone()).expect("replica");
    let c = compose_model_replica(ReplicaInputs {
        replica: &r,
        cluster: Some(&ic),
        observed: &BTreeMap::new(),
    });
    assert!(c.hold && c.desired.is_empty());
    assert_eq!(c.conditions[0].reason, "InvalidEngineArgs");
    assert!(
        c.conditions[0]
            .message
            .contains("--port \"$(PORT)\" is not an integer"),
        "{}",
        c.conditions[0].message
    );
}

#[test]
fn a_replica_without_a_place_says_why_per_cluster_and_pool() {
    let md = deployments(&MD.replace(
        "device.driver == 'gpu.nvidia.com'",
        "device.driver == 'tpu.google.com'",
    ))
    .0
    .remove(0);
    let (clusters, _) = views(Stack::Standard);
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    let failed = c
        .events
        .iter()
        .find(|e| e.reason == "FailedScheduling")
        .expect("a FailedScheduling event");
    assert!(
        failed.message.starts_with("2 of 2 replicas not placed: "),
        "{}",
        failed.message
    );
    assert!(
        failed.message.contains("matches no device; closest ")
            && failed.message.contains("tpu.google.com"),
        "the closest device and the failing selector: {}",
        failed.message
    );
}

/// No device anywhere matches: `NoMatchingDevices`, not
/// `InsufficientCapacity`; a selector reading an attribute the devices do
/// not have says which they have, in words, and each reason once.
#[test]
fn a_selector_no_device_matches_is_no_matching_devices_said_once() {
    let md = deployments(&MD.replace(
        "device.driver == 'gpu.nvidia.com'",
        "device.attributes['gpu.nvidia.com'].productName == 'B300'",
    ))
    .0
    .remove(0);
    let (clusters, _) = views(Stack::Standard);
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    let scheduled = &conditions(&c)[0];
    assert!(
        scheduled.starts_with("ReplicasScheduled=False/NoMatchingDevices 0 of 2 replicas placed"),
        "{scheduled}"
    );
    let failed = c
        .events
        .iter()
        .find(|e| e.reason == "FailedScheduling")
        .expect("a FailedScheduling event");
    assert!(
        !failed.message.contains("Undeclared reference"),
        "no CEL jargon: {}",
        failed.message
    );
    assert!(
        failed.message.contains("productName") && failed.message.contains("architecture"),
        "which attribute it reads and which the devices have: {}",
        failed.message
    );
    let sentences: Vec<&str> = failed
        .message
        .split(". ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut distinct = sentences.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        sentences.len(),
        "one sentence per reason: {}",
        failed.message
    );
}

/// A one-cluster fleet whose pool has `nodes` nodes of 8 GPUs.
fn views_with_nodes(nodes: i64) -> Vec<Cluster> {
    let mut ic = cluster(Stack::Standard, &BTreeMap::new());
    if let Some(pools) = ic.status.as_mut().and_then(|s| s.gpu_pools.as_mut()) {
        pools[0].nodes = Some(nodes as i32);
    }
    let mut interner = DeviceInterner::default();
    vec![Cluster::from_resource(&ic, &mut interner)]
}

#[test]
fn a_deployment_placed_short_is_not_ready_and_says_how_short() {
    let md = deployments(
        &MD.replace("replicas: 2", "replicas: 3")
            .replace("{ name: gpu, selectors", "{ name: gpu, count: 8, selectors"),
    )
    .0
    .remove(0);
    let clusters = views_with_nodes(1);
    let compose = |replicas: &Vec<ExistingReplica>, ready: &BTreeSet<String>, routed| {
        compose_model_deployment(DeploymentInputs {
            deployment: &md,
            cache: CacheLookup::NotReferenced,
            clusters: Some(&clusters),
            replicas,
            ready,
            routed,
        })
    };
    let none = BTreeSet::new();
    let first = compose(&Vec::new(), &none, &none);
    let existing: Vec<ExistingReplica> = first
        .desired
        .iter()
        .map(|d| {
            ExistingReplica::from_resource(
                &serde_json::from_value::<ModelReplica>(d.object.clone()).expect("replica"),
            )
        })
        .collect();
    assert_eq!(existing.len(), 1, "one 8-GPU node takes one replica");
    let ready: BTreeSet<String> = [existing[0].name.clone()].into();
    // Its one replica Ready, its endpoint not there yet: not Available.
    let c = compose(&existing, &ready, &none);
    assert_eq!(
        conditions(&c),
        [
            "ReplicasScheduled=False/InsufficientCapacity 1 of 3 replicas placed (checked 1 clusters): every pool whose devices match is full",
            "ReplicasReady=False/ReplicasNotPlaced 1 of 3 ready, 2 not placed",
            "Available=False/MinimumReplicasUnavailable No replica serves yet",
        ]
    );
    assert_eq!(
        c.waiting.as_ref().map(|w| w.reason.as_str()),
        Some("InsufficientCapacity"),
        "never Ready while short"
    );
    assert_eq!(c.status.as_ref().expect("status")["ready"], "1/3");
    let event = c
        .events
        .iter()
        .find(|e| e.reason == "FailedScheduling")
        .expect("FailedScheduling");
    assert!(
        event
            .message
            .starts_with("2 of 3 replicas not placed: standard/h200"),
        "the full cluster that took one explains the rest: {}",
        event.message
    );
    // Its endpoint exists: it serves, though the deployment is short.
    let c = compose(&existing, &ready, &ready);
    assert_eq!(
        conditions(&c)[2],
        "Available=True/MinimumReplicasAvailable 1 of 3 replicas serve through the gateway"
    );
    assert!(c.waiting.is_some());
}

#[test]
fn a_deployment_waiting_for_its_clusters_says_so() {
    let md = deployments(MD).0.remove(0);
    let mut ic = cluster(Stack::Standard, &BTreeMap::new());
    if let Some(status) = ic.status.as_mut() {
        status.conditions = None;
    }
    let mut interner = DeviceInterner::default();
    let clusters = vec![Cluster::from_resource(&ic, &mut interner)];
    let c = compose_model_deployment(DeploymentInputs {
        deployment: &md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(&clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    assert_eq!(
        conditions(&c)[0],
        "ReplicasScheduled=False/WaitingForClusters 0 of 2 replicas placed (checked 1 clusters): waiting for standard to come up"
    );
}
