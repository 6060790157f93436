//! Providers on demand (DECISIONS §A8) through a fleet's life.

use std::collections::{BTreeMap, BTreeSet};

use modelplane_api::types::InferenceCluster;
use modelplane_compose::providers::{Cloud, PACKAGES};
use modelplane_compose::{ProvidersInputs, compose_providers};
use serde_json::json;

fn cluster(name: &str, source: &str) -> InferenceCluster {
    let block = source.to_ascii_lowercase();
    let settings = match source {
        "AKS" => json!({ "location": "westeurope" }),
        "Nebius" => json!({}),
        _ => json!({ "region": "r1" }),
    };
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": { "name": name },
        "spec": { "cluster": { "source": source, block: settings } },
    }))
    .expect("cluster")
}

/// Replicas of every provider, and the set of kinds and names composed.
fn step(
    clusters: &[InferenceCluster],
    leftovers: &[Cloud],
) -> (BTreeMap<String, u64>, BTreeSet<(String, String)>) {
    let leftovers: BTreeSet<Cloud> = leftovers.iter().copied().collect();
    let c = compose_providers(ProvidersInputs {
        clusters,
        leftovers: &leftovers,
        traefik: false,
    });
    assert!(
        c.desired.iter().all(modelplane_compose::kinds::listed),
        "a provider object's kind is not in kinds.rs"
    );
    let mut replicas = BTreeMap::new();
    let mut objects = BTreeSet::new();
    for d in &c.desired {
        objects.insert((d.kind().to_string(), d.name().to_string()));
        if d.kind() == "DeploymentRuntimeConfig" {
            replicas.insert(
                d.name().to_string(),
                d.object["spec"]["deploymentTemplate"]["spec"]["replicas"]
                    .as_u64()
                    .expect("replicas"),
            );
        }
        if d.kind() == "Provider" {
            assert_eq!(d.object["spec"]["runtimeConfigRef"]["name"], d.name());
        }
    }
    (replicas, objects)
}

fn running(replicas: &BTreeMap<String, u64>) -> BTreeSet<String> {
    replicas
        .iter()
        .filter(|(_, r)| **r == 1)
        .map(|(n, _)| n.clone())
        .collect()
}

/// The provider names of these clouds.
fn of(clouds: &[Cloud]) -> BTreeSet<String> {
    PACKAGES
        .iter()
        .filter(|(c, _, _)| clouds.contains(c))
        .map(|(_, n, _)| n.to_string())
        .collect()
}

#[test]
fn providers_run_only_while_their_cloud_is_in_use_and_are_never_deleted() {
    let eks = cluster("eks-us-east", "EKS");
    let gke = cluster("gke-us-central", "GKE");
    let steps = [
        (vec![], vec![], BTreeSet::new()),
        (vec![eks.clone()], vec![], of(&[Cloud::Aws, Cloud::Helm])),
        (
            vec![eks.clone(), gke.clone()],
            vec![],
            of(&[Cloud::Aws, Cloud::Gcp, Cloud::Helm]),
        ),
        // The EKS cluster is deleted but its managed resources are still being torn down.
        (
            vec![gke.clone()],
            vec![Cloud::Aws],
            of(&[Cloud::Aws, Cloud::Gcp, Cloud::Helm]),
        ),
        (vec![gke.clone()], vec![], of(&[Cloud::Gcp, Cloud::Helm])),
    ];
    let mut every_step_objects = Vec::new();
    for (i, (clusters, leftovers, want)) in steps.iter().enumerate() {
        let (replicas, objects) = step(clusters, leftovers);
        assert_eq!(replicas.len(), PACKAGES.len());
        let want: BTreeSet<String> = want.iter().cloned().collect();
        assert_eq!(running(&replicas), want, "step {i}");
        every_step_objects.push(objects);
    }
    // The same Providers and runtime configs exist at every step: nothing is deleted.
    assert!(every_step_objects.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(every_step_objects[0].len(), 2 * PACKAGES.len());
}

#[test]
fn existing_clusters_need_only_helm_and_traefik_needs_helm() {
    let byo: InferenceCluster = serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster", "metadata": { "name": "byo" },
        "spec": { "cluster": { "source": "Existing", "existing": { "secretRef": { "name": "kc" } } } },
    }))
    .expect("cluster");
    let (replicas, _) = step(&[byo], &[]);
    assert_eq!(running(&replicas), of(&[Cloud::Helm]));
    let none = BTreeSet::new();
    let c = compose_providers(ProvidersInputs {
        clusters: &[],
        leftovers: &none,
        traefik: true,
    });
    let helm = c
        .desired
        .iter()
        .find(|d| d.kind() == "DeploymentRuntimeConfig" && d.name() == "provider-helm")
        .expect("helm");
    assert_eq!(
        helm.object["spec"]["deploymentTemplate"]["spec"]["replicas"],
        1
    );
}

#[test]
fn every_package_is_fully_qualified() {
    for (_, name, package) in PACKAGES {
        let (repo, tag) = package.rsplit_once(':').expect("a tag");
        assert!(
            repo.split('/')
                .next()
                .is_some_and(|host| host.contains('.')),
            "{package}: no registry host"
        );
        assert!(repo.ends_with(name) && !tag.is_empty(), "{package}");
    }
}
