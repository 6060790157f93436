//! The routing table's compile, golden-tested: every upstream ModelService
//! over composed endpoints matching its entries, and the cases under
//! `tests/golden/table/`.

use std::path::{Path, PathBuf};

use modelplane_gateway::config::load;
use serde_json::json;

fn snapshot(case: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/table").join(case),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("output", text);
    });
}

#[test]
fn every_case_compiles_to_its_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/table");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("cases")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    cases.sort();
    assert!(!cases.is_empty());
    for case in cases {
        let objects = load(&[case.join("input.yaml")]).expect("input");
        let table = objects.compile(None);
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        snapshot(
            &name,
            &serde_saphyr::to_string(&table.describe()).expect("YAML"),
        );
    }
}

#[test]
fn every_upstream_model_service_routes_to_endpoints_matching_its_entries() {
    let upstream = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/upstream-manifests");
    let objects = load(&[upstream]).expect("upstream manifests load");
    assert!(
        objects.services.len() >= 10,
        "{} services",
        objects.services.len()
    );
    for service in &objects.services {
        // Two composed replicas per entry, labelled as the entry selects.
        let mut with_endpoints = objects.clone();
        with_endpoints.endpoints.clear();
        with_endpoints.services = vec![service.clone()];
        for (i, entry) in service.spec.endpoints.iter().enumerate() {
            let mut labels = entry.selector.match_labels.clone().unwrap_or_default();
            labels
                .entry("modelplane.ai/deployment".into())
                .or_insert_with(|| format!("entry-{i}"));
            for r in 0..2 {
                let name = format!("ep{i}-{r}");
                with_endpoints.endpoints.push(
                    serde_json::from_value(json!({
                        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
                        "metadata": { "name": name, "namespace": service.metadata.namespace, "labels": labels },
                        "spec": { "url": format!("http://gw-{i}.example/ns/{name}/v1"), "rewritePath": format!("/ns/{name}/") },
                    }))
                    .expect("endpoint"),
                );
            }
        }
        let table = with_endpoints.compile(None);
        let id = format!(
            "{}/{}",
            service.metadata.namespace.as_deref().unwrap_or("default"),
            service.metadata.name.as_deref().unwrap_or_default()
        );
        let compiled = table.service(&id).expect("service compiled");
        // Entries are unioned and an endpoint belongs to the first that
        // selects it: every endpoint is routed exactly once.
        let routed: usize = compiled.self_hosted.iter().map(|g| g.endpoints.len()).sum();
        assert_eq!(routed, with_endpoints.endpoints.len(), "{id}");
        assert!(compiled.self_hosted.iter().all(|g| g.weight >= 1));
        assert!(table.skipped.is_empty(), "{id}: {:?}", table.skipped);
    }
}
