//! Object metadata rules (`apiserver.md` §3.1–§3.4).

use modelplane_apiserver::object::{
    Change, Identity, Refusal, generated_name, prepare_create, prepare_status_update,
    prepare_update, set_resource_version,
};
use modelplane_apiserver::resources::{Resource, builtins};
use serde_json::{Value, json};

fn resource(plural: &str) -> Resource {
    builtins()
        .into_iter()
        .find(|r| r.plural == plural && (r.group.is_empty() || r.group == "apps"))
        .expect("built in")
}

fn identity() -> Identity {
    Identity {
        uid: "6f1c2a8e-0000-4000-8000-000000000001".into(),
        now: "2026-11-30T09:00:00Z".into(),
        random: [0, 1, 2, 3, 4],
    }
}

fn created(plural: &str, object: Value, namespace: Option<&str>) -> Value {
    let mut object = object;
    prepare_create(&mut object, &resource(plural), namespace, &identity()).expect("created");
    object
}

#[test]
fn create_sets_server_owned_metadata_and_ignores_the_clients() {
    let object = created(
        "configmaps",
        json!({
            "metadata": {
                "name": "a", "uid": "client", "resourceVersion": "99", "generation": 7,
                "creationTimestamp": "1999-01-01T00:00:00Z", "labels": {}, "finalizers": [],
            },
            "data": { "k": "v" },
        }),
        Some("ns"),
    );
    assert_eq!(
        object,
        json!({
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "6f1c2a8e-0000-4000-8000-000000000001",
                "creationTimestamp": "2026-11-30T09:00:00Z", "generation": 1,
            },
            "data": { "k": "v" },
            "apiVersion": "v1",
            "kind": "ConfigMap",
        })
    );
}

#[test]
fn generate_name_appends_five_kubernetes_characters() {
    let object = created(
        "configmaps",
        json!({ "metadata": { "generateName": "job-" } }),
        Some("ns"),
    );
    let name = object["metadata"]["name"].as_str().expect("name");
    assert_eq!(name, generated_name("job-", [0, 1, 2, 3, 4]));
    assert_eq!(name, "job-bcdfg");
    assert!(
        name[4..]
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
    );
}

#[test]
fn bad_names_and_namespaces_are_refused() {
    let mut missing = json!({ "metadata": {} });
    assert_eq!(
        prepare_create(
            &mut missing,
            &resource("configmaps"),
            Some("ns"),
            &identity()
        ),
        Err(Refusal::Invalid {
            field: "metadata.name".into(),
            message: "name or generateName is required".into()
        })
    );
    let mut upper = json!({ "metadata": { "name": "Upper" } });
    let err = prepare_create(&mut upper, &resource("configmaps"), Some("ns"), &identity())
        .expect_err("invalid");
    assert!(
        err.to_string()
            .starts_with("metadata.name: Invalid value: \"Upper\": a lowercase RFC 1123 subdomain"),
        "{err}"
    );
    let mut dotted_ns = json!({ "metadata": { "name": "a.b" } });
    assert!(prepare_create(&mut dotted_ns, &resource("namespaces"), None, &identity()).is_err());
    let mut elsewhere = json!({ "metadata": { "name": "a", "namespace": "other" } });
    assert!(matches!(
        prepare_create(&mut elsewhere, &resource("configmaps"), Some("ns"), &identity()),
        Err(Refusal::BadRequest(m)) if m.contains("does not match the namespace")
    ));
    let cluster_scoped = created(
        "nodes",
        json!({ "metadata": { "name": "n1", "namespace": "x" } }),
        Some("x"),
    );
    assert!(cluster_scoped["metadata"].get("namespace").is_none());
}

#[test]
fn create_drops_status_when_the_resource_has_a_status_subresource() {
    let object = created(
        "deployments",
        json!({ "metadata": { "name": "d" }, "spec": { "replicas": 1 }, "status": { "replicas": 5 } }),
        Some("ns"),
    );
    assert!(object.get("status").is_none());
}

/// A kubelet registers its Node in one create that carries the node's
/// status (capacity, conditions, addresses): kube-apiserver's node strategy
/// keeps it, unlike every other kind with a status subresource.
#[test]
fn a_node_is_created_with_the_status_its_kubelet_registers() {
    let status = json!({
        "capacity": { "cpu": "8" },
        "conditions": [{ "type": "Ready", "status": "True" }],
    });
    let node = created(
        "nodes",
        json!({ "metadata": { "name": "n1" }, "status": status }),
        None,
    );
    assert_eq!(node["status"], status);
    let pod = created(
        "pods",
        json!({ "metadata": { "name": "p" }, "spec": {}, "status": { "phase": "Running" } }),
        Some("ns"),
    );
    assert!(
        pod.get("status").is_none(),
        "a pod's status is not the creator's to set"
    );
}

#[test]
fn generation_moves_with_the_spec_not_with_metadata_or_status() {
    let deployments = resource("deployments");
    let mut old = created(
        "deployments",
        json!({ "metadata": { "name": "d" }, "spec": { "replicas": 1 } }),
        Some("ns"),
    );
    old["status"] = json!({ "replicas": 1 });
    set_resource_version(&mut old, 5);

    let mut labelled = old.clone();
    labelled["metadata"]["labels"] = json!({ "team": "a" });
    assert_eq!(
        prepare_update(&old, &mut labelled, &deployments),
        Ok(Change::Changed)
    );
    assert_eq!(labelled["metadata"]["generation"], 1);

    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(3);
    scaled["status"] = json!({ "replicas": 99 });
    scaled["metadata"].as_object_mut().map(|m| m.remove("uid"));
    assert_eq!(
        prepare_update(&old, &mut scaled, &deployments),
        Ok(Change::Changed)
    );
    assert_eq!(scaled["metadata"]["generation"], 2);
    assert_eq!(
        scaled["status"],
        json!({ "replicas": 1 }),
        "the main endpoint keeps the old status"
    );
    assert_eq!(scaled["metadata"]["uid"], old["metadata"]["uid"]);
    // A uid in an update is a precondition, as Kubernetes' registry checks it.
    let mut forged = old.clone();
    forged["metadata"]["uid"] = json!("forged");
    assert!(matches!(
        prepare_update(&old, &mut forged, &deployments),
        Err(modelplane_apiserver::object::Refusal::Conflict(_))
    ));

    let (status_written, change) = prepare_status_update(
        &old,
        &json!({ "spec": { "replicas": 7 }, "status": { "replicas": 2 } }),
    );
    assert_eq!(change, Change::Changed);
    assert_eq!(
        status_written["spec"]["replicas"], 1,
        "the status endpoint takes only status"
    );
    assert_eq!(status_written["status"]["replicas"], 2);
    assert_eq!(status_written["metadata"]["generation"], 1);
}

#[test]
fn a_write_that_changes_nothing_is_a_no_op() {
    let configmaps = resource("configmaps");
    let mut old = created(
        "configmaps",
        json!({ "metadata": { "name": "a" }, "data": { "k": "v" } }),
        Some("ns"),
    );
    set_resource_version(&mut old, 3);
    let mut same = json!({ "metadata": { "name": "a", "namespace": "ns", "resourceVersion": "3" }, "data": { "k": "v" } });
    assert_eq!(
        prepare_update(&old, &mut same, &configmaps),
        Ok(Change::Unchanged)
    );
    let (_, status_change) = prepare_status_update(&old, &old);
    assert_eq!(status_change, Change::Unchanged);
    let mut renamed = json!({ "metadata": { "name": "b" }, "data": {} });
    assert!(matches!(
        prepare_update(&old, &mut renamed, &configmaps),
        Err(Refusal::BadRequest(_))
    ));
}
