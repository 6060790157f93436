//! Role-based access control as kube-apiserver's RBAC authorizer decides
//! it: a request is allowed when some binding that applies to the user
//! grants a role with a rule that covers it. ClusterRoleBindings grant
//! everywhere; RoleBindings only in their namespace, to a Role of that
//! namespace or a ClusterRole. There is no deny. An aggregated ClusterRole
//! holds the rules of every ClusterRole its selectors pick, as
//! Kubernetes' aggregation controller fills them in.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::User;
use super::request::Attributes;
use crate::selector::LabelSelector;

/// One rule of a role.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    let items = value.get(field).and_then(Value::as_array);
    items
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn str_of<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Rule {
    /// A `PolicyRule` object.
    pub fn from_value(rule: &Value) -> Rule {
        Rule {
            verbs: strings(rule, "verbs"),
            api_groups: strings(rule, "apiGroups"),
            resources: strings(rule, "resources"),
            resource_names: strings(rule, "resourceNames"),
            non_resource_urls: strings(rule, "nonResourceURLs"),
        }
    }

    /// As a `PolicyRule` object (empty lists left out, as Kubernetes
    /// writes them).
    pub fn to_value(&self) -> Value {
        let mut rule = serde_json::Map::new();
        for (field, items) in [
            ("verbs", &self.verbs),
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !items.is_empty() || field == "verbs" {
                rule.insert(field.into(), items.clone().into());
            }
        }
        Value::Object(rule)
    }

    /// Whether the rule covers the request.
    pub fn allows(&self, request: &Attributes) -> bool {
        if !has(&self.verbs, &request.verb) {
            return false;
        }
        if !request.resource_request {
            return self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || *url == request.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| request.path.starts_with(prefix))
            });
        }
        has(&self.api_groups, &request.api_group)
            && self.covers_resource(request)
            && (self.resource_names.is_empty() || self.resource_names.contains(&request.name))
    }

    fn covers_resource(&self, request: &Attributes) -> bool {
        let combined = request.resource_path();
        self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!request.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(request.subresource.as_str()))
        })
    }
}

/// `items` holds `wanted`, or `*`.
fn has(items: &[String], wanted: &str) -> bool {
    items.iter().any(|i| i == "*" || i == wanted)
}

/// Whom a binding grants its role to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    pub name: String,
    /// A ServiceAccount's namespace; the binding's when empty.
    pub namespace: String,
}

impl Subject {
    /// Whether the subject names `user`, for a binding in `namespace`
    /// (empty for a ClusterRoleBinding).
    pub fn applies_to(&self, user: &User, namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() {
                    namespace
                } else {
                    &self.namespace
                };
                !namespace.is_empty()
                    && user.name == super::service_account_user(namespace, &self.name)
            }
            _ => false,
        }
    }
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Clone, Debug)]
pub struct Binding {
    /// `ClusterRoleBinding` or `RoleBinding`, for reasons.
    pub kind: &'static str,
    pub name: String,
    /// Empty for a ClusterRoleBinding.
    pub namespace: String,
    /// `Role` or `ClusterRole`.
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<Subject>,
}

impl Binding {
    fn from_value(binding: &Value, kind: &'static str) -> Binding {
        let subjects = binding.get("subjects").and_then(Value::as_array);
        Binding {
            kind,
            name: str_of(binding, "/metadata/name").into(),
            namespace: str_of(binding, "/metadata/namespace").into(),
            role_kind: str_of(binding, "/roleRef/kind").into(),
            role_name: str_of(binding, "/roleRef/name").into(),
            subjects: subjects
                .into_iter()
                .flatten()
                .map(|s| Subject {
                    kind: str_of(s, "/kind").into(),
                    name: str_of(s, "/name").into(),
                    namespace: str_of(s, "/namespace").into(),
                })
                .collect(),
        }
    }

    fn applies_to(&self, user: &User) -> Option<&Subject> {
        self.subjects
            .iter()
            .find(|s| s.applies_to(user, &self.namespace))
    }
}

/// The stored RBAC objects of one cluster.
#[derive(Debug, Default)]
pub struct Objects {
    pub cluster_roles: Vec<Value>,
    pub roles: Vec<Value>,
    pub cluster_role_bindings: Vec<Value>,
    pub role_bindings: Vec<Value>,
}

/// One cluster's RBAC policy, indexed for deciding requests.
#[derive(Debug, Default)]
pub struct Policy {
    /// Each ClusterRole's rules, aggregation applied.
    cluster_roles: HashMap<String, Arc<[Rule]>>,
    /// Each Role's rules, by namespace and name.
    roles: HashMap<(String, String), Arc<[Rule]>>,
    cluster_bindings: Vec<Binding>,
    /// RoleBindings by namespace.
    bindings: HashMap<String, Vec<Binding>>,
}

/// What the authorizer decided, and why (`SubjectAccessReview.status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

fn rules_of(role: &Value) -> Vec<Rule> {
    let rules = role.get("rules").and_then(Value::as_array);
    rules.into_iter().flatten().map(Rule::from_value).collect()
}

impl Policy {
    /// The policy of these objects.
    pub fn new(objects: &Objects) -> Policy {
        let cluster_roles = aggregate(&objects.cluster_roles);
        let roles = objects
            .roles
            .iter()
            .map(|role| {
                let key = (
                    str_of(role, "/metadata/namespace").to_string(),
                    str_of(role, "/metadata/name").to_string(),
                );
                (key, Arc::from(rules_of(role)))
            })
            .collect();
        let cluster_bindings = objects
            .cluster_role_bindings
            .iter()
            .map(|b| Binding::from_value(b, "ClusterRoleBinding"))
            .collect();
        let mut bindings: HashMap<String, Vec<Binding>> = HashMap::new();
        for binding in &objects.role_bindings {
            let binding = Binding::from_value(binding, "RoleBinding");
            bindings
                .entry(binding.namespace.clone())
                .or_default()
                .push(binding);
        }
        Policy {
            cluster_roles,
            roles,
            cluster_bindings,
            bindings,
        }
    }

    /// A ClusterRole's rules, aggregation applied.
    pub fn cluster_role(&self, name: &str) -> Option<&[Rule]> {
        self.cluster_roles.get(name).map(|r| &**r)
    }

    /// The rules a binding grants, if its role exists.
    fn granted(&self, binding: &Binding) -> Option<&[Rule]> {
        match binding.role_kind.as_str() {
            "ClusterRole" => self.cluster_role(&binding.role_name),
            "Role" if !binding.namespace.is_empty() => self
                .roles
                .get(&(binding.namespace.clone(), binding.role_name.clone()))
                .map(|r| &**r),
            _ => None,
        }
    }

    /// The bindings that can grant `user` anything in `namespace` (every
    /// ClusterRoleBinding, then that namespace's RoleBindings), with the
    /// subject that names the user.
    fn applying<'p>(
        &'p self,
        user: &'p User,
        namespace: &'p str,
    ) -> impl Iterator<Item = (&'p Binding, &'p Subject)> + 'p {
        let in_namespace = (!namespace.is_empty())
            .then(|| self.bindings.get(namespace))
            .flatten();
        self.cluster_bindings
            .iter()
            .chain(in_namespace.into_iter().flatten())
            .filter_map(move |b| b.applies_to(user).map(|s| (b, s)))
    }

    /// Whether `user` may make `request`.
    pub fn decide(&self, user: &User, request: &Attributes) -> Decision {
        for (binding, subject) in self.applying(user, &request.namespace) {
            let Some(rules) = self.granted(binding) else {
                continue;
            };
            if rules.iter().any(|r| r.allows(request)) {
                let at = if binding.namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in namespace {:?}", binding.namespace)
                };
                return Decision {
                    allowed: true,
                    reason: format!(
                        "RBAC: allowed by {} {:?} of {} {:?} to {} {:?}{at}",
                        binding.kind,
                        binding.name,
                        binding.role_kind,
                        binding.role_name,
                        subject.kind,
                        subject.name
                    ),
                };
            }
        }
        Decision {
            allowed: false,
            reason: String::new(),
        }
    }

    /// Every rule granted to `user` in `namespace` (`SelfSubjectRulesReview`):
    /// the rules of the ClusterRoleBindings and of that namespace's
    /// RoleBindings, each once.
    pub fn rules_for(&self, user: &User, namespace: &str) -> Vec<Rule> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (binding, _) in self.applying(user, namespace) {
            for rule in self.granted(binding).into_iter().flatten() {
                if seen.insert(rule) {
                    out.push(rule.clone());
                }
            }
        }
        out
    }
}

/// Each ClusterRole's rules: its own, or for an aggregated one those of
/// every ClusterRole its selectors pick (themselves aggregated, followed
/// without looping), each rule once.
fn aggregate(roles: &[Value]) -> HashMap<String, Arc<[Rule]>> {
    let own: HashMap<&str, (&Value, Vec<LabelSelector>)> = roles
        .iter()
        .map(|role| {
            let selectors = role.pointer("/aggregationRule/clusterRoleSelectors");
            let selectors = selectors
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(LabelSelector::from_object)
                .collect();
            (str_of(role, "/metadata/name"), (role, selectors))
        })
        .collect();
    let mut out = HashMap::new();
    for name in own.keys() {
        let mut rules = Vec::new();
        let mut visited = HashSet::new();
        collect(name, &own, &mut visited, &mut rules);
        let mut seen = HashSet::new();
        rules.retain(|r| seen.insert(r.clone()));
        out.insert(name.to_string(), Arc::from(rules));
    }
    out
}

type Roles<'a> = HashMap<&'a str, (&'a Value, Vec<LabelSelector>)>;

fn collect<'a>(
    name: &'a str,
    roles: &Roles<'a>,
    visited: &mut HashSet<&'a str>,
    out: &mut Vec<Rule>,
) {
    if !visited.insert(name) {
        return;
    }
    let Some((role, selectors)) = roles.get(name) else {
        return;
    };
    if role.get("aggregationRule").is_none_or(Value::is_null) {
        out.extend(rules_of(role));
        return;
    }
    let mut picked: Vec<&str> = roles
        .iter()
        .filter(|(other, (r, _))| {
            *other != &name
                && selectors
                    .iter()
                    .any(|s| s.matches(r.pointer("/metadata/labels").unwrap_or(&Value::Null)))
        })
        .map(|(other, _)| *other)
        .collect();
    picked.sort_unstable();
    for other in picked {
        collect(other, roles, visited, out);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const NAMES: [&str; 3] = ["a", "b", "c"];
    const VERBS: [&str; 4] = ["get", "list", "create", "*"];
    const GROUPS: [&str; 3] = ["", "apps", "*"];
    const RESOURCES: [&str; 6] = [
        "pods",
        "deployments",
        "deployments/scale",
        "*/scale",
        "secrets",
        "*",
    ];
    const URLS: [&str; 3] = ["/metrics", "/api/*", "*"];

    fn pick(from: &[&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
        proptest::sample::subsequence(from.to_vec(), 0..=from.len())
    }

    fn rule() -> impl Strategy<Value = Value> {
        (
            pick(&VERBS),
            pick(&GROUPS),
            pick(&RESOURCES),
            pick(&NAMES),
            pick(&URLS),
        )
            .prop_map(|(verbs, groups, resources, names, urls)| {
                json!({ "verbs": verbs, "apiGroups": groups, "resources": resources,
                        "resourceNames": names, "nonResourceURLs": urls })
            })
    }

    fn role(namespace: Option<&'static str>) -> impl Strategy<Value = Value> {
        (proptest::sample::select(NAMES.to_vec()), proptest::collection::vec(rule(), 0..3)).prop_map(
            move |(name, rules)| json!({ "metadata": { "name": name, "namespace": namespace }, "rules": rules }),
        )
    }

    fn subject() -> impl Strategy<Value = Value> {
        let kind = proptest::sample::select(vec!["User", "Group", "ServiceAccount"]);
        let namespace = proptest::sample::select(vec!["", "ml", "web"]);
        (kind, proptest::sample::select(NAMES.to_vec()), namespace)
            .prop_map(|(kind, name, ns)| json!({ "kind": kind, "name": name, "namespace": ns }))
    }

    fn binding(namespace: Option<&'static str>) -> impl Strategy<Value = Value> {
        let kind = proptest::sample::select(vec!["Role", "ClusterRole"]);
        (
            proptest::sample::select(NAMES.to_vec()),
            kind,
            proptest::sample::select(NAMES.to_vec()),
            proptest::collection::vec(subject(), 0..3),
        )
            .prop_map(move |(name, kind, role, subjects)| {
                json!({ "metadata": { "name": name, "namespace": namespace },
                        "roleRef": { "kind": kind, "name": role }, "subjects": subjects })
            })
    }

    fn objects() -> impl Strategy<Value = Objects> {
        (
            proptest::collection::vec(role(None), 0..3),
            proptest::collection::vec(prop_oneof![role(Some("ml")), role(Some("web"))], 0..3),
            proptest::collection::vec(binding(None), 0..2),
            proptest::collection::vec(prop_oneof![binding(Some("ml")), binding(Some("web"))], 0..3),
        )
            .prop_map(
                |(cluster_roles, roles, cluster_role_bindings, role_bindings)| Objects {
                    cluster_roles,
                    roles,
                    cluster_role_bindings,
                    role_bindings,
                },
            )
    }

    fn user() -> impl Strategy<Value = User> {
        let names = vec![
            "a",
            "b",
            "system:serviceaccount:ml:a",
            "system:serviceaccount:web:b",
        ];
        (proptest::sample::select(names), pick(&NAMES)).prop_map(|(name, groups)| User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..User::default()
        })
    }

    fn request() -> impl Strategy<Value = Attributes> {
        (
            any::<bool>(),
            proptest::sample::select(vec!["get", "list", "create", "delete"]),
            proptest::sample::select(vec!["", "apps"]),
            proptest::sample::select(vec!["pods", "deployments", "secrets"]),
            proptest::sample::select(vec!["", "scale", "status"]),
            proptest::sample::select(vec!["", "ml", "web"]),
            proptest::sample::select(vec!["", "a", "b"]),
            proptest::sample::select(vec!["/metrics", "/api/v1", "/healthz"]),
        )
            .prop_map(
                |(resource_request, verb, group, resource, sub, ns, name, path)| Attributes {
                    verb: verb.into(),
                    resource_request,
                    path: path.into(),
                    api_group: group.into(),
                    resource: resource.into(),
                    subresource: sub.into(),
                    namespace: ns.into(),
                    name: name.into(),
                    ..Attributes::default()
                },
            )
    }

    /// RBAC read straight off the objects, every binding and role looked
    /// up by a scan, each rule field matched as the RBAC docs state it.
    fn reference(objects: &Objects, user: &User, r: &Attributes) -> bool {
        let listed = |v: &Value, f: &str| -> Vec<String> {
            v[f].as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        };
        let rule_allows = |rule: &Value| {
            let verbs = listed(rule, "verbs");
            if !verbs.iter().any(|v| v == "*" || *v == r.verb) {
                return false;
            }
            if !r.resource_request {
                return listed(rule, "nonResourceURLs").iter().any(|u| {
                    u == "*"
                        || *u == r.path
                        || (u.ends_with('*') && r.path.starts_with(&u[..u.len() - 1]))
                });
            }
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let names = listed(rule, "resourceNames");
            listed(rule, "apiGroups")
                .iter()
                .any(|g| g == "*" || *g == r.api_group)
                && listed(rule, "resources").iter().any(|x| {
                    x == "*"
                        || *x == resource
                        || (!r.subresource.is_empty() && *x == format!("*/{}", r.subresource))
                })
                && (names.is_empty() || names.contains(&r.name))
        };
        let applies = |b: &Value| {
            let ns = b["metadata"]["namespace"].as_str().unwrap_or("");
            b["subjects"].as_array().into_iter().flatten().any(|s| {
                let name = s["name"].as_str().unwrap_or("");
                match s["kind"].as_str().unwrap_or("") {
                    "User" => user.name == name,
                    "Group" => user.groups.iter().any(|g| g == name),
                    _ => {
                        let sns = s["namespace"]
                            .as_str()
                            .filter(|n| !n.is_empty())
                            .unwrap_or(ns);
                        !sns.is_empty()
                            && user.name == format!("system:serviceaccount:{sns}:{name}")
                    }
                }
            })
        };
        let role_rules = |b: &Value| -> Vec<Value> {
            let ns = b["metadata"]["namespace"].as_str();
            let (kind, name) = (b["roleRef"]["kind"].as_str(), b["roleRef"]["name"].as_str());
            let found = match kind {
                Some("ClusterRole") => objects
                    .cluster_roles
                    .iter()
                    .find(|x| x["metadata"]["name"].as_str() == name),
                Some("Role") if ns.is_some() => objects.roles.iter().find(|x| {
                    x["metadata"]["name"].as_str() == name
                        && x["metadata"]["namespace"].as_str() == ns
                }),
                _ => None,
            };
            found
                .and_then(|x| x["rules"].as_array().cloned())
                .unwrap_or_default()
        };
        let in_namespace = objects.role_bindings.iter().filter(|b| {
            !r.namespace.is_empty() && b["metadata"]["namespace"].as_str() == Some(&r.namespace)
        });
        objects
            .cluster_role_bindings
            .iter()
            .chain(in_namespace)
            .filter(|b| applies(b))
            .any(|b| role_rules(b).iter().any(rule_allows))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]
        #[test]
        fn the_authorizer_decides_as_the_rules_read_straight(
            objects in objects(), user in user(), request in request()
        ) {
            // Names repeat at random; RBAC keys objects by name, so the
            // first of each name stands (as the store would keep one).
            let mut objects = objects;
            for list in [&mut objects.cluster_roles, &mut objects.roles] {
                let mut seen = HashSet::new();
                list.retain(|o| seen.insert((o["metadata"]["namespace"].to_string(), o["metadata"]["name"].to_string())));
            }
            let policy = Policy::new(&objects);
            prop_assert_eq!(policy.decide(&user, &request).allowed, reference(&objects, &user, &request));
        }
    }
}
