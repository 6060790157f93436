//! What a workload cluster's simulated controllers see and write: the
//! kinds they watch, the snapshot those watches fill, and the writes each
//! controller's pure step returns.

use serde_json::{Value, json};

use crate::client::Kind;

/// A kind the simulated controllers of a workload cluster read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClusterKind {
    /// `v1` Node.
    Node,
    /// `v1` Pod.
    Pod,
    /// `apps/v1` Deployment.
    Deployment,
    /// `batch/v1` Job.
    Job,
    /// `v1` PersistentVolumeClaim.
    Pvc,
    /// `storage.k8s.io/v1` StorageClass.
    StorageClass,
    /// `resource.k8s.io/v1` ResourceClaimTemplate.
    ClaimTemplate,
    /// `resource.k8s.io/v1` ResourceClaim.
    Claim,
    /// `resource.k8s.io/v1` ResourceSlice.
    Slice,
    /// `resource.k8s.io/v1` DeviceClass.
    DeviceClass,
    /// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
    Lws,
    /// `grove.io/v1alpha1` PodCliqueSet.
    Pcs,
    /// `scheduler.grove.io/v1alpha1` PodGang.
    PodGang,
    /// `gateway.networking.k8s.io/v1` HTTPRoute.
    HttpRoute,
    /// `inference.networking.k8s.io/v1` InferencePool.
    InferencePool,
    /// `v1` Service.
    Service,
    /// `grove.io/v1alpha1` PodClique.
    Pclq,
    /// `scheduling.run.ai/v2` Queue.
    Queue,
    /// `v1` Secret (what a container's `secretKeyRef` reads).
    Secret,
    /// `v1` Event (written, not watched).
    Event,
}

impl ClusterKind {
    /// Every kind watched (all but Event).
    pub const WATCHED: [ClusterKind; 19] = [
        ClusterKind::Node,
        ClusterKind::Pod,
        ClusterKind::Deployment,
        ClusterKind::Job,
        ClusterKind::Pvc,
        ClusterKind::StorageClass,
        ClusterKind::ClaimTemplate,
        ClusterKind::Claim,
        ClusterKind::Slice,
        ClusterKind::DeviceClass,
        ClusterKind::Lws,
        ClusterKind::Pcs,
        ClusterKind::PodGang,
        ClusterKind::HttpRoute,
        ClusterKind::InferencePool,
        ClusterKind::Service,
        ClusterKind::Pclq,
        ClusterKind::Queue,
        ClusterKind::Secret,
    ];

    /// The kinds every cluster serves (built in), watched from the start;
    /// the others are watched once a chart installs their CRD.
    pub const BUILTIN: [ClusterKind; 12] = [
        ClusterKind::Node,
        ClusterKind::Pod,
        ClusterKind::Deployment,
        ClusterKind::Job,
        ClusterKind::Pvc,
        ClusterKind::StorageClass,
        ClusterKind::ClaimTemplate,
        ClusterKind::Claim,
        ClusterKind::Slice,
        ClusterKind::DeviceClass,
        ClusterKind::Service,
        ClusterKind::Secret,
    ];

    /// The API kind.
    pub fn api(self) -> Kind {
        let (api_version, kind, plural, namespaced) = match self {
            ClusterKind::Node => ("v1", "Node", "nodes", false),
            ClusterKind::Pod => ("v1", "Pod", "pods", true),
            ClusterKind::Deployment => ("apps/v1", "Deployment", "deployments", true),
            ClusterKind::Job => ("batch/v1", "Job", "jobs", true),
            ClusterKind::Pvc => (
                "v1",
                "PersistentVolumeClaim",
                "persistentvolumeclaims",
                true,
            ),
            ClusterKind::StorageClass => {
                ("storage.k8s.io/v1", "StorageClass", "storageclasses", false)
            }
            ClusterKind::ClaimTemplate => (
                "resource.k8s.io/v1",
                "ResourceClaimTemplate",
                "resourceclaimtemplates",
                true,
            ),
            ClusterKind::Claim => (
                "resource.k8s.io/v1",
                "ResourceClaim",
                "resourceclaims",
                true,
            ),
            ClusterKind::Slice => (
                "resource.k8s.io/v1",
                "ResourceSlice",
                "resourceslices",
                false,
            ),
            ClusterKind::DeviceClass => {
                ("resource.k8s.io/v1", "DeviceClass", "deviceclasses", false)
            }
            ClusterKind::Lws => (
                "leaderworkerset.x-k8s.io/v1",
                "LeaderWorkerSet",
                "leaderworkersets",
                true,
            ),
            ClusterKind::Pcs => ("grove.io/v1alpha1", "PodCliqueSet", "podcliquesets", true),
            ClusterKind::PodGang => ("scheduler.grove.io/v1alpha1", "PodGang", "podgangs", true),
            ClusterKind::HttpRoute => (
                "gateway.networking.k8s.io/v1",
                "HTTPRoute",
                "httproutes",
                true,
            ),
            ClusterKind::InferencePool => (
                "inference.networking.k8s.io/v1",
                "InferencePool",
                "inferencepools",
                true,
            ),
            ClusterKind::Service => ("v1", "Service", "services", true),
            ClusterKind::Pclq => ("grove.io/v1alpha1", "PodClique", "podcliques", true),
            ClusterKind::Queue => ("scheduling.run.ai/v2", "Queue", "queues", false),
            ClusterKind::Secret => ("v1", "Secret", "secrets", true),
            ClusterKind::Event => ("v1", "Event", "events", true),
        };
        Kind::new(api_version, kind, plural, namespaced)
    }

    /// The watched kind of `group`'s `kind`, if any.
    pub fn of(group: &str, kind: &str) -> Option<ClusterKind> {
        ClusterKind::WATCHED.into_iter().find(|k| {
            let api = k.api();
            api.resource.group == group && api.resource.kind == kind
        })
    }

    /// What the simulated controllers keep of an object of this kind in
    /// their snapshot (see [`super::nodes::trim`]).
    pub fn trim(self, object: &mut Value) {
        if self == ClusterKind::Node {
            super::nodes::trim(object);
        }
    }
}

/// What the watches of a workload cluster show.
pub type Snapshot = crate::informer::Snapshot<ClusterKind>;

/// One write a controller asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Server-side apply of `object` (of kind `kind`) as `manager`.
    Apply {
        /// Its kind.
        kind: ClusterKind,
        /// The object (apiVersion, kind, metadata.name/namespace and the fields owned).
        object: Value,
        /// Field manager.
        manager: &'static str,
    },
    /// Server-side apply of `status` to `object`'s status.
    Status {
        /// Its kind.
        kind: ClusterKind,
        /// The object as observed.
        object: Value,
        /// The status fields owned.
        status: Value,
        /// Field manager.
        manager: &'static str,
    },
    /// A JSON merge patch of `object`'s status as `manager`, as a kubelet
    /// posts its node's (it owns nothing by it that a later write prunes).
    StatusPatch {
        /// Its kind.
        kind: ClusterKind,
        /// The object as observed.
        object: Value,
        /// The status fields to set.
        status: Value,
        /// Field manager.
        manager: &'static str,
    },
    /// A merge patch of an existing object (a binding: never creates).
    Patch {
        /// Its kind.
        kind: ClusterKind,
        /// Namespace ("" when cluster-scoped).
        namespace: String,
        /// Name.
        name: String,
        /// The patch (with `metadata.uid` as a precondition).
        patch: Value,
    },
    /// Deletes an object.
    Delete {
        /// Its kind.
        kind: ClusterKind,
        /// Namespace ("" when cluster-scoped).
        namespace: String,
        /// Name.
        name: String,
    },
    /// Records an Event about `object`.
    Event {
        /// The object it is about.
        object: Value,
        /// `Normal` or `Warning`.
        type_: &'static str,
        /// Reason.
        reason: String,
        /// Message.
        message: String,
        /// Reporting component.
        source: &'static str,
    },
}

/// Everything a cluster's controllers read.
pub struct World<'a> {
    /// The watched objects.
    pub snapshot: &'a Snapshot,
    /// Now, as an RFC 3339 timestamp (for written times).
    pub timestamp: &'a str,
}

impl World<'_> {
    /// Every object of `kind`.
    pub fn all(&self, kind: ClusterKind) -> impl Iterator<Item = &Value> {
        self.snapshot.of(kind).map(|(_, v)| v)
    }

    /// The object `name` of `kind` in `namespace`.
    pub fn get(&self, kind: ClusterKind, namespace: &str, name: &str) -> Option<&Value> {
        self.snapshot.get(kind, namespace, name)
    }

    /// Pods owned by the object of uid `uid`.
    pub fn pods_of<'s>(&'s self, uid: &'s str) -> impl Iterator<Item = &'s Value> + 's {
        self.all(ClusterKind::Pod).filter(move |p| owned_by(p, uid))
    }
}

/// Whether `object` has an owner reference to `uid`.
pub fn owned_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["uid"] == uid)
}

/// An owner reference to `owner` (a controller reference).
pub fn owner_reference(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// `object`'s name.
pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// `object`'s namespace.
pub fn namespace(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// `object`'s uid.
pub fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

/// A stable short digest of `text`, as Kubernetes names carry (`[a-z0-9]`).
pub fn short_hash(text: &str, len: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::new();
    for _ in 0..len {
        out.push(char::from(ALPHABET[(h % ALPHABET.len() as u64) as usize]));
        h /= ALPHABET.len() as u64;
        if h == 0 {
            h = 0x9e37_79b9_7f4a_7c15;
        }
    }
    out
}

/// Whether `pod` is Ready.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether `pod` has finished (Succeeded or Failed).
pub fn pod_done(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// Whether `pod` is being deleted.
pub fn deleting(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// The condition `type_` of `object`'s status, if any.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// A condition, keeping `previous`'s transition time when its status is unchanged.
pub fn condition_value(
    previous: Option<&Value>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    timestamp: &str,
) -> Value {
    let status = if status { "True" } else { "False" };
    let since = previous
        .filter(|p| p["status"] == status)
        .and_then(|p| p["lastTransitionTime"].as_str())
        .unwrap_or(timestamp);
    json!({ "type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": since })
}

/// Whether the conditions of `status` differ from `object`'s (ignoring times).
pub fn conditions_differ(object: &Value, status: &Value) -> bool {
    let strip = |v: &Value| -> Vec<(Value, Value, Value, Value)> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["type"].clone(),
                    c["status"].clone(),
                    c["reason"].clone(),
                    c["message"].clone(),
                )
            })
            .collect()
    };
    strip(&object["status"]["conditions"]) != strip(&status["conditions"])
}
