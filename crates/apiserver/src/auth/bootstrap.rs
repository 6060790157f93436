//! The roles and bindings a cluster starts with, as kube-apiserver's
//! bootstrap policy makes them (`cluster-admin` for `system:masters`,
//! discovery and the public paths for everyone, self-reviews for every
//! user, the user-facing `admin`, `edit` and `view` aggregated from
//! `system:aggregate-to-*`), and Modelplane's own: `modelplane:ml-team`
//! (a team's models in its namespace) and `modelplane:platform` (the
//! fleet), both aggregated, so an operator widens them by labelling a
//! ClusterRole. Created when missing; one an operator changed is kept.

use serde_json::{Value, json};

use super::rbac::{Objects, Policy};
use crate::keyspace::Keyspace;
use crate::object::{Identity, prepare_create};
use crate::resources::{VERBS, builtins};
use crate::store::{Error, Write};

/// The label that puts a ClusterRole's rules into an aggregated one.
const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
/// Modelplane's aggregation labels.
pub const AGGREGATE_TO_ML_TEAM: &str = "modelplane.ai/aggregate-to-ml-team";
pub const AGGREGATE_TO_PLATFORM: &str = "modelplane.ai/aggregate-to-platform";

/// The ML-team role: bind it in a team's namespace.
pub const ML_TEAM: &str = "modelplane:ml-team";
/// The platform role: bind it cluster-wide.
pub const PLATFORM: &str = "modelplane:platform";

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({ "apiGroups": groups, "resources": resources, "verbs": verbs })
}

fn urls(paths: &[&str], verbs: &[&str]) -> Value {
    json!({ "nonResourceURLs": paths, "verbs": verbs })
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {
            "name": name, "labels": labels,
            "annotations": { "rbac.authorization.kubernetes.io/autoupdate": "true" },
        },
        "rules": rules,
    })
}

fn aggregated(name: &str, labels: Value, selector_label: &str) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] = json!({
        "clusterRoleSelectors": [{ "matchLabels": { selector_label: "true" } }],
    });
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({ "kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g }))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": { "kubernetes.io/bootstrapping": "rbac-defaults" },
            "annotations": { "rbac.authorization.kubernetes.io/autoupdate": "true" },
        },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
        "subjects": subjects,
    })
}

/// `system:aggregate-to-<role>`: rules Kubernetes' `<role>` aggregates.
fn part_of(role: &str, rules: Vec<Value>) -> Value {
    cluster_role(
        &format!("system:aggregate-to-{role}"),
        label(&format!("{AGGREGATE_TO}{role}")),
        rules,
    )
}

fn label(key: &str) -> Value {
    json!({ key: "true" })
}

/// What `view` holds: reading a namespace's workloads, not its Secrets.
fn view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
                "namespaces",
            ],
            &READ,
        ),
        rule(&["discovery.k8s.io"], &["endpointslices"], &READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            &READ,
        ),
        rule(
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            &READ,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            &READ,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            &READ,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            &READ,
        ),
        rule(&["events.k8s.io"], &["events"], &READ),
    ]
}

/// What `edit` adds: changing workloads, reading and writing Secrets.
fn edit_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            &READ,
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            &WRITE,
        ),
        rule(
            &[""],
            &["pods/eviction", "serviceaccounts/token"],
            &["create"],
        ),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            &WRITE,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], &WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], &WRITE),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            &WRITE,
        ),
        rule(&["policy"], &["poddisruptionbudgets"], &WRITE),
        rule(&["coordination.k8s.io"], &["leases"], &VERBS),
    ]
}

/// What `admin` adds: a namespace's roles and bindings.
fn admin_rules() -> Vec<Value> {
    vec![
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            &["create"],
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
            &VERBS,
        ),
    ]
}

/// What an ML team does in its namespace: its models, their caches and
/// services, and their Secrets (registry and Hugging Face tokens); it reads
/// the replicas and endpoints Modelplane makes of them, and their events.
fn ml_team_rules() -> Vec<Value> {
    let models = ["modeldeployments", "modelcaches", "modelservices"];
    vec![
        rule(&["modelplane.ai"], &models, &VERBS),
        rule(
            &["modelplane.ai"],
            &[
                "modeldeployments/status",
                "modeldeployments/scale",
                "modelcaches/status",
                "modelservices/status",
                "modelreplicas",
                "modelreplicas/status",
                "modelendpoints",
                "modelendpoints/status",
            ],
            &READ,
        ),
        rule(
            &["modelplane.ai"],
            &["modeldeployments/scale"],
            &["patch", "update"],
        ),
        rule(&[""], &["secrets", "configmaps"], &VERBS),
        rule(&["", "events.k8s.io"], &["events"], &READ),
    ]
}

/// What a platform team does: the fleet's clusters, classes and
/// gateways (with their connection Secrets), and reading everything
/// Modelplane makes of them.
fn platform_rules() -> Vec<Value> {
    vec![
        rule(
            &["modelplane.ai"],
            &["inferenceclusters", "inferenceclasses", "inferencegateways"],
            &VERBS,
        ),
        rule(
            &["modelplane.ai"],
            &[
                "inferenceclusters/status",
                "inferenceclasses/status",
                "inferencegateways/status",
                "modeldeployments",
                "modeldeployments/status",
                "modelcaches",
                "modelservices",
                "modelreplicas",
                "modelreplicas/status",
                "modelendpoints",
                "servingstacks",
            ],
            &READ,
        ),
        rule(&["infrastructure.modelplane.ai"], &["*"], &READ),
        rule(&[""], &["secrets"], &VERBS),
        rule(&[""], &["namespaces"], &READ),
        rule(&["", "events.k8s.io"], &["events"], &READ),
    ]
}

/// The bootstrap ClusterRoles, aggregated ones with their rules filled.
fn cluster_roles() -> Vec<Value> {
    let discovery = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut roles = vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            vec![urls(&discovery, &["get"])],
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            vec![urls(&public, &["get"])],
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        part_of("view", view_rules()),
        part_of("edit", edit_rules()),
        part_of("admin", admin_rules()),
        aggregated(
            "view",
            label(&format!("{AGGREGATE_TO}edit")),
            &format!("{AGGREGATE_TO}view"),
        ),
        aggregated(
            "edit",
            label(&format!("{AGGREGATE_TO}admin")),
            &format!("{AGGREGATE_TO}edit"),
        ),
        aggregated("admin", json!({}), &format!("{AGGREGATE_TO}admin")),
        cluster_role(
            "modelplane:aggregate-to-ml-team",
            json!({ AGGREGATE_TO_ML_TEAM: "true", format!("{AGGREGATE_TO}edit"): "true" }),
            ml_team_rules(),
        ),
        cluster_role(
            "modelplane:aggregate-to-view",
            label(&format!("{AGGREGATE_TO}view")),
            vec![rule(
                &["modelplane.ai"],
                &[
                    "modeldeployments",
                    "modelcaches",
                    "modelservices",
                    "modelreplicas",
                    "modelendpoints",
                ],
                &READ,
            )],
        ),
        cluster_role(
            "modelplane:aggregate-to-platform",
            label(AGGREGATE_TO_PLATFORM),
            platform_rules(),
        ),
        aggregated(ML_TEAM, json!({}), AGGREGATE_TO_ML_TEAM),
        aggregated(PLATFORM, json!({}), AGGREGATE_TO_PLATFORM),
    ];
    // Stored as Kubernetes' aggregation controller leaves them: filled in.
    let policy = Policy::new(&Objects {
        cluster_roles: roles.clone(),
        ..Objects::default()
    });
    for role in &mut roles {
        if role.get("aggregationRule").is_some() {
            let name = role["metadata"]["name"].as_str().unwrap_or_default();
            let rules = policy.cluster_role(name).unwrap_or_default();
            role["rules"] = rules.iter().map(|r| r.to_value()).collect();
        }
    }
    roles
}

fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &[super::MASTERS]),
        binding(
            "system:discovery",
            "system:discovery",
            &[super::AUTHENTICATED],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &[super::AUTHENTICATED],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[super::AUTHENTICATED, super::UNAUTHENTICATED],
        ),
    ]
}

/// Creates the bootstrap roles and bindings `store` lacks (blocking).
pub fn ensure(store: &Keyspace) -> Result<(), Error> {
    let table = builtins();
    let of = |plural: &str| {
        table
            .iter()
            .find(|r| r.group == "rbac.authorization.k8s.io" && r.plural == plural)
            .cloned()
            .expect("RBAC kinds are built in")
    };
    let (roles, bindings) = (of("clusterroles"), of("clusterrolebindings"));
    let mut writes = Vec::new();
    let wanted = cluster_roles()
        .into_iter()
        .map(|r| (&roles, r))
        .chain(cluster_role_bindings().into_iter().map(|b| (&bindings, b)));
    for (resource, mut object) in wanted {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = resource.key(None, &name);
        if store.get(&key)?.is_some() {
            continue;
        }
        if prepare_create(&mut object, resource, None, &Identity::fresh()).is_ok() {
            writes.push(Write::Create {
                key,
                value: object.to_string().into_bytes(),
            });
        }
    }
    for outcome in store.write_all(writes) {
        match outcome {
            Ok(_) | Err(Error::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Attributes, User};

    fn policy() -> Policy {
        Policy::new(&Objects {
            cluster_roles: cluster_roles(),
            cluster_role_bindings: cluster_role_bindings(),
            ..Objects::default()
        })
    }

    fn request(verb: &str, group: &str, resource: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            namespace: "ml-team".into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn aggregated_roles_hold_what_their_parts_hold() {
        let policy = policy();
        let holds = |role: &str, r: &Attributes| {
            policy
                .cluster_role(role)
                .unwrap()
                .iter()
                .any(|x| x.allows(r))
        };
        let read_pods = request("list", "", "pods");
        let read_secrets = request("get", "", "secrets");
        let write_roles = request("create", "rbac.authorization.k8s.io", "roles");
        let deploy = request("create", "modelplane.ai", "modeldeployments");
        assert!(holds("view", &read_pods) && !holds("view", &read_secrets));
        assert!(
            holds("edit", &read_pods)
                && holds("edit", &read_secrets)
                && !holds("edit", &write_roles)
        );
        assert!(holds("admin", &write_roles) && holds("admin", &deploy));
        assert!(holds(ML_TEAM, &deploy) && !holds(ML_TEAM, &read_pods));
        assert!(!holds(
            ML_TEAM,
            &request("create", "modelplane.ai", "inferenceclusters")
        ));
        assert!(holds(
            PLATFORM,
            &request("create", "modelplane.ai", "inferenceclusters")
        ));
    }

    #[test]
    fn everyone_may_discover_and_ask_about_themselves_and_no_more() {
        let policy = policy();
        let jane = User {
            name: "jane".into(),
            groups: vec![crate::auth::AUTHENTICATED.into()],
            ..User::default()
        };
        let discover = Attributes {
            verb: "get".into(),
            path: "/apis/modelplane.ai/v1alpha1".into(),
            ..Attributes::default()
        };
        assert!(policy.decide(&jane, &discover).allowed);
        let review = Attributes {
            namespace: String::new(),
            ..request("create", "authorization.k8s.io", "selfsubjectaccessreviews")
        };
        assert!(policy.decide(&jane, &review).allowed);
        assert!(!policy.decide(&jane, &request("list", "", "pods")).allowed);
        let version = Attributes {
            verb: "get".into(),
            path: "/version".into(),
            ..Attributes::default()
        };
        assert!(policy.decide(&User::anonymous(), &version).allowed);
        assert!(!policy.decide(&User::anonymous(), &discover).allowed);
    }
}
