//! What the server serves: the built-in kinds of `apiserver.md` §3.16 (and
//! the storage-only ones the simulated clusters need), each with how it is
//! addressed, and the store key of an object.

/// Every verb a served resource answers, as discovery lists them and
/// RBAC's "all" rules name them.
pub const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A resource the server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// API group; empty for the core group.
    pub group: String,
    /// Version served.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural (the URL segment).
    pub plural: String,
    /// Singular, lowercase.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories for kubectl (`get all`, `get modelplane`).
    pub categories: Vec<String>,
    /// Has a status subresource.
    pub status: bool,
    /// Printer columns beyond NAME (a CRD's `additionalPrinterColumns`);
    /// empty means NAME and AGE.
    pub columns: Vec<Column>,
    /// The scale subresource, if any.
    pub scale: Option<ScalePaths>,
    /// The OpenAPI v3 schema of the kind (a CRD's `openAPIV3Schema`), if known.
    /// Shared: a thousand clusters with the same CRD hold one copy.
    pub schema: Option<std::sync::Arc<serde_json::Value>>,
}

/// One printer column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// A simple JSONPath (`.spec.replicas`).
    pub json_path: String,
    /// Description for `kubectl explain`-style help.
    pub description: String,
    /// 0 shows by default; more only with `-o wide`.
    pub priority: i64,
}

/// Where the scale subresource reads and writes the parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// `.spec.replicas`.
    pub spec_replicas: String,
    /// `.status.replicas`.
    pub status_replicas: String,
    /// A path to a label selector string, if any.
    pub label_selector: Option<String>,
}

impl Resource {
    /// Whether a create keeps the object's `status`: a kubelet registers
    /// its Node with the node's status in one create, which kube-apiserver's
    /// node strategy keeps; every other kind with a status subresource
    /// starts without one.
    pub fn keeps_status_on_create(&self) -> bool {
        self.group.is_empty() && self.plural == "nodes"
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store key of an object; `namespace` is ignored for cluster-scoped
    /// resources.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.prefix()),
            _ => format!("{}{name}", self.prefix()),
        }
    }

    /// The key prefix of every object of this resource.
    pub fn prefix(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("/{group}/{}/", self.plural)
    }

    /// The key prefix of this resource's objects in one namespace.
    pub fn namespace_prefix(&self, namespace: &str) -> String {
        format!("{}{namespace}/", self.prefix())
    }

    /// The core group's namespaces.
    pub fn is_namespaces(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }

    /// CustomResourceDefinitions: their writes change what is served.
    pub fn is_crds(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.plural == "customresourcedefinitions"
    }

    /// Names must be DNS-1123 labels (namespaces, logical clusters) rather
    /// than subdomains.
    pub fn names_are_labels(&self) -> bool {
        self.is_namespaces()
            || (self.group == LOGICAL_CLUSTERS_GROUP && self.plural == "logicalclusters")
    }
}

/// `(group, version, kind, plural, namespaced, short names, status)`.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
);

/// Built-in kinds: those the controllers use (must), then those the
/// simulated workload clusters store and watch.
const BUILTINS: &[Row] = &[
    ("", "v1", "Namespace", "namespaces", false, &["ns"], true),
    ("", "v1", "ConfigMap", "configmaps", true, &["cm"], false),
    ("", "v1", "Secret", "secrets", true, &[], false),
    ("", "v1", "Event", "events", true, &["ev"], false),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        false,
    ),
    ("", "v1", "Service", "services", true, &["svc"], true),
    ("", "v1", "Endpoints", "endpoints", true, &["ep"], false),
    ("", "v1", "Pod", "pods", true, &["po"], true),
    ("", "v1", "Node", "nodes", false, &["no"], true),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        &["pvc"],
        true,
    ),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        &["pv"],
        true,
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        &["ev"],
        false,
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        false,
    ),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        true,
    ),
    ("batch", "v1", "Job", "jobs", true, &[], true),
    (
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
        &["quota"],
        true,
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        &["rs"],
        true,
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        &["sts"],
        true,
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"], true),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        &["pc"],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        false,
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        &["sc"],
        false,
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "DeviceClass",
        "deviceclasses",
        false,
        &[],
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        false,
        &[],
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        true,
        &[],
        true,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        true,
        &[],
        false,
    ),
    // What kubectl's other generators create (create cronjob, ingress, pdb,
    // autoscale): stored and served as kinds, with no controller behind them.
    ("batch", "v1", "CronJob", "cronjobs", true, &["cj"], true),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        &["ing"],
        true,
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
        &[],
        false,
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        &["netpol"],
        false,
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
        true,
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
        &["hpa"],
        true,
    ),
    (
        "",
        "v1",
        "LimitRange",
        "limitranges",
        true,
        &["limits"],
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
    ),
];

/// The kinds in the `all` category.
const ALL: [&str; 9] = [
    "pods",
    "services",
    "daemonsets",
    "deployments",
    "replicasets",
    "statefulsets",
    "jobs",
    "cronjobs",
    "horizontalpodautoscalers",
];

/// Every built-in resource.
pub fn builtins() -> Vec<Resource> {
    BUILTINS
        .iter()
        .map(
            |&(group, version, kind, plural, namespaced, short, status)| Resource {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: plural.into(),
                singular: kind.to_ascii_lowercase(),
                namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                // `kubectl get all`, as Kubernetes groups them.
                categories: if ALL.contains(&plural) {
                    vec!["all".to_string()]
                } else {
                    Vec::new()
                },
                status,
                columns: Vec::new(),
                schema: None,
                scale: matches!(kind, "Deployment" | "ReplicaSet" | "StatefulSet").then(|| {
                    ScalePaths {
                        spec_replicas: ".spec.replicas".into(),
                        status_replicas: ".status.replicas".into(),
                        label_selector: None,
                    }
                }),
            },
        )
        .collect()
}

/// Checks a name as Kubernetes does: a DNS-1123 subdomain (lowercase
/// alphanumerics, `-` and `.`, starting and ending alphanumeric, ≤ 253), or
/// for namespaces a DNS-1123 label (no `.`, ≤ 63). Returns the message a
/// Kubernetes API server gives.
pub fn validate_name(name: &str, label: bool) -> Result<(), String> {
    let max = if label { 63 } else { 253 };
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let allowed = |c: char| alnum(c) || c == '-' || (!label && c == '.');
    let ok = !name.is_empty()
        && name.len() <= max
        && name.chars().all(allowed)
        && name.starts_with(alnum)
        && name.ends_with(alnum);
    if ok {
        return Ok(());
    }
    if name.is_empty() {
        return Err("name or generateName is required".into());
    }
    if name.len() > max {
        return Err(format!("must be no more than {max} characters"));
    }
    Err(if label {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into()
    } else {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()
    })
}

/// The group of `LogicalCluster`.
pub const LOGICAL_CLUSTERS_GROUP: &str = "tenancy.modelplane.ai";

/// The `LogicalCluster` kind, served by the root cluster only (see the
/// logical clusters module).
pub fn logical_clusters() -> Resource {
    Resource {
        group: LOGICAL_CLUSTERS_GROUP.into(),
        version: "v1alpha1".into(),
        kind: "LogicalCluster".into(),
        plural: "logicalclusters".into(),
        singular: "logicalcluster".into(),
        namespaced: false,
        short_names: vec!["lc".into()],
        categories: Vec::new(),
        status: false,
        columns: Vec::new(),
        scale: None,
        schema: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(group: &str, plural: &str) -> Resource {
        builtins()
            .into_iter()
            .find(|r| r.group == group && r.plural == plural)
            .expect("built in")
    }

    #[test]
    fn keys_separate_namespaces_and_scopes() {
        let cm = find("", "configmaps");
        assert_eq!(cm.key(Some("ns"), "a"), "/core/configmaps/ns/a");
        assert!(
            cm.key(Some("ns"), "a")
                .starts_with(&cm.namespace_prefix("ns"))
        );
        assert!(
            !cm.key(Some("ns2"), "a")
                .starts_with(&cm.namespace_prefix("ns"))
        );
        let sc = find("storage.k8s.io", "storageclasses");
        assert_eq!(
            sc.key(Some("ignored"), "fast"),
            "/storage.k8s.io/storageclasses/fast"
        );
        assert_eq!(sc.api_version(), "storage.k8s.io/v1");
        assert_eq!(cm.api_version(), "v1");
    }

    #[test]
    fn the_must_kinds_are_served() {
        for (group, plural) in [
            ("", "namespaces"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("events.k8s.io", "events"),
            ("coordination.k8s.io", "leases"),
            ("", "configmaps"),
            ("", "secrets"),
        ] {
            find(group, plural);
        }
    }

    #[test]
    fn names_follow_rfc_1123() {
        assert!(validate_name("qwen3-8b", false).is_ok());
        assert!(validate_name("a.b.c", false).is_ok());
        assert!(validate_name("a.b", true).is_err(), "labels have no dots");
        assert!(validate_name("Upper", false).is_err());
        assert!(validate_name("-x", false).is_err());
        assert!(validate_name("x-", false).is_err());
        assert!(validate_name(&"a".repeat(64), true).is_err());
        assert!(validate_name(&"a".repeat(253), false).is_ok());
        assert_eq!(
            validate_name(&"a".repeat(254), false),
            Err("must be no more than 253 characters".into())
        );
    }
}
