//! The RBAC the controller needs, derived from what it watches and applies
//! (`modelplane_compose::kinds`, its own kinds, the provider configs it
//! reads), so the roles a platform team installs cannot fall behind a
//! composition that starts applying a new kind.

use modelplane_compose::Target;
use modelplane_compose::kinds;
use serde_json::{Value, json};

/// What the controller does to what it applies: it watches every kind from
/// its start, applies server-side and prunes.
const WRITE: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
/// What it only reads.
const READ: &[&str] = &["get", "list", "watch"];

/// Modelplane's own API groups: every kind in them, with their status.
const OWN_GROUPS: &[&str] = &["modelplane.ai", "infrastructure.modelplane.ai"];

/// One rule of a ClusterRole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API group (`""` for the core group).
    pub group: String,
    /// Resources (plural names; `*` for every one of the group).
    pub resources: Vec<String>,
    /// Verbs.
    pub verbs: &'static [&'static str],
}

impl Rule {
    fn new(group: &str, resources: Vec<String>, verbs: &'static [&'static str]) -> Rule {
        Rule {
            group: group.to_string(),
            resources,
            verbs,
        }
    }

    /// Whether this rule lets `verb` act on `resource` of `group`.
    pub fn allows(&self, group: &str, resource: &str, verb: &str) -> bool {
        self.group == group
            && self.verbs.contains(&verb)
            && self.resources.iter().any(|r| r == "*" || r == resource)
    }

    fn to_json(&self) -> Value {
        json!({ "apiGroups": [self.group], "resources": self.resources, "verbs": self.verbs })
    }
}

/// The rules the controller needs on `target`.
pub fn rules(target: &Target) -> Vec<Rule> {
    let mut rules = Vec::new();
    if *target == Target::ControlPlane {
        rules.extend(
            OWN_GROUPS
                .iter()
                .map(|g| Rule::new(g, vec!["*".into()], WRITE)),
        );
    }
    rules.extend(by_group(kinds::on(target), WRITE));
    rules.push(Rule::new(
        "apiextensions.k8s.io",
        vec!["customresourcedefinitions".into()],
        READ,
    ));
    if let Target::Cluster(_) = target {
        // What the Roles it applies there grant, which it must hold.
        rules.extend(
            kinds::GRANTED_ON_CLUSTER
                .iter()
                .map(|(group, resource, verbs)| {
                    Rule::new(group, vec![resource.to_string()], verbs)
                }),
        );
        // What replicas' status reads: their serving pods (granted above)
        // and the GPU nodes those run on.
        rules.push(Rule::new("", vec!["nodes".into()], READ));
    }
    if *target == Target::ControlPlane {
        rules.extend(by_group(crate::PROVIDER_CONFIGS, READ));
        rules.push(Rule::new("", vec!["events".into()], &["create"]));
        rules.push(Rule::new(
            "coordination.k8s.io",
            vec!["leases".into()],
            &["get", "create", "update"],
        ));
    }
    rules
}

/// One rule per API group of `listed` (`apiVersion`, `kind`), outside
/// Modelplane's own groups. A cloud provider's groups (`*.upbound.io`) are
/// granted whole: their kinds' plurals are the provider's to choose.
fn by_group(listed: &[(&str, &str)], verbs: &'static [&'static str]) -> Vec<Rule> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (api_version, kind) in listed {
        let group = api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
            .to_string();
        if OWN_GROUPS.contains(&group.as_str()) {
            continue;
        }
        let resource = if group.ends_with(".upbound.io") {
            "*".to_string()
        } else {
            plural(kind)
        };
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, resources)) if !resources.contains(&resource) => resources.push(resource),
            Some(_) => {}
            None => groups.push((group, vec![resource])),
        }
    }
    groups
        .into_iter()
        .map(|(group, resources)| Rule::new(&group, resources, verbs))
        .collect()
}

/// The resource name Kubernetes gives `kind`: lower case, plural as its
/// code generators make it (`Policy` → `policies`, `EnvoyProxy` →
/// `envoyproxies`, `ResourceQuota` → `resourcequotas`).
pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    let consonant_y =
        lower.ends_with('y') && !lower[..lower.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if lower.ends_with(['s', 'x', 'z']) || lower.ends_with("ch") || lower.ends_with("sh") {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// A ClusterRole `name` with the rules for `target`.
pub fn cluster_role(name: &str, target: &Target) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": name, "labels": { "app.kubernetes.io/name": "modelplane" } },
        "rules": rules(target).iter().map(Rule::to_json).collect::<Vec<_>>(),
    })
}

/// The ServiceAccount `namespace/name`, the ClusterRole `name` for
/// `target`, and the binding of one to the other: what `kubectl apply`
/// needs to give the controller its rights there.
pub fn manifests(namespace: &str, name: &str, target: &Target) -> Vec<Value> {
    let labels = json!({ "app.kubernetes.io/name": "modelplane" });
    vec![
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": name, "namespace": namespace, "labels": labels },
        }),
        cluster_role(name, target),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": name, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
            "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": namespace }],
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_the_ones_kubernetes_serves() {
        for (kind, resource) in [
            ("Deployment", "deployments"),
            ("ResourceQuota", "resourcequotas"),
            ("GatewayClass", "gatewayclasses"),
            ("EnvoyProxy", "envoyproxies"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("Queue", "queues"),
            ("HTTPRoute", "httproutes"),
            ("Namespace", "namespaces"),
        ] {
            assert_eq!(plural(kind), resource, "{kind}");
        }
    }

    #[test]
    fn a_cloud_providers_groups_are_granted_whole_and_its_own_configs_read() {
        let rules = rules(&Target::ControlPlane);
        assert!(
            rules
                .iter()
                .any(|r| r.allows("eks.aws.m.upbound.io", "nodegroups", "delete"))
        );
        assert!(
            rules
                .iter()
                .any(|r| r.allows("gcp.m.upbound.io", "providerconfigs", "watch"))
        );
        assert!(
            !rules
                .iter()
                .any(|r| r.allows("gcp.m.upbound.io", "providerconfigs", "delete"))
        );
        assert!(
            rules
                .iter()
                .any(|r| r.allows("modelplane.ai", "modelreplicas/status", "patch"))
        );
    }

    #[test]
    fn a_workload_cluster_grants_only_what_is_applied_there() {
        let rules = rules(&Target::Cluster("any".into()));
        assert!(
            rules
                .iter()
                .any(|r| r.allows("grove.io", "podcliquesets", "patch"))
        );
        assert!(!rules.iter().any(|r| r.group == "modelplane.ai"));
        assert!(!rules.iter().any(|r| r.group == "coordination.k8s.io"));
    }
}
