//! What a workload cluster's simulated controllers see and write: the
//! kinds they watch, the snapshot those watches fill, and the writes each
//! controller's pure step returns.

use serde_json::{Value, json};

use crate::client::Kind;
use crate::informer::Snapshot;

/// The kinds watched in every workload cluster, by index.
pub mod kinds {
    /// `v1` Node.
    pub const NODE: usize = 0;
    /// `v1` Pod.
    pub const POD: usize = 1;
    /// `apps/v1` Deployment.
    pub const DEPLOYMENT: usize = 2;
    /// `batch/v1` Job.
    pub const JOB: usize = 3;
    /// `v1` PersistentVolumeClaim.
    pub const PVC: usize = 4;
    /// `storage.k8s.io/v1` StorageClass.
    pub const STORAGE_CLASS: usize = 5;
    /// `resource.k8s.io/v1` ResourceClaimTemplate.
    pub const CLAIM_TEMPLATE: usize = 6;
    /// `resource.k8s.io/v1` ResourceClaim.
    pub const CLAIM: usize = 7;
    /// `resource.k8s.io/v1` ResourceSlice.
    pub const SLICE: usize = 8;
    /// `resource.k8s.io/v1` DeviceClass.
    pub const DEVICE_CLASS: usize = 9;
    /// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
    pub const LWS: usize = 10;
    /// `grove.io/v1alpha1` PodCliqueSet.
    pub const PCS: usize = 11;
    /// `scheduler.grove.io/v1alpha1` PodGang.
    pub const PODGANG: usize = 12;
    /// `gateway.networking.k8s.io/v1` HTTPRoute.
    pub const HTTPROUTE: usize = 13;
    /// `inference.networking.k8s.io/v1` InferencePool.
    pub const INFERENCE_POOL: usize = 14;
    /// `v1` Service.
    pub const SERVICE: usize = 15;
    /// `grove.io/v1alpha1` PodClique.
    pub const PCLQ: usize = 16;
    /// `scheduling.run.ai/v2` Queue.
    pub const QUEUE: usize = 17;
    /// `v1` Secret (what a container's `secretKeyRef` reads).
    pub const SECRET: usize = 18;
    /// `v1` Event (written, not watched).
    pub const EVENT: usize = 19;
}

/// What the simulated controllers keep of an object of kind `index` in
/// their snapshot (see [`super::nodes::trim`]).
pub fn trim(index: usize, object: &mut Value) {
    if index == kinds::NODE {
        super::nodes::trim(object);
    }
}

/// The API kind of index `index` (see [`kinds`]).
pub fn kind(index: usize) -> Kind {
    match index {
        kinds::NODE => Kind::new("v1", "Node", "nodes", false),
        kinds::POD => Kind::new("v1", "Pod", "pods", true),
        kinds::DEPLOYMENT => Kind::new("apps/v1", "Deployment", "deployments", true),
        kinds::JOB => Kind::new("batch/v1", "Job", "jobs", true),
        kinds::PVC => Kind::new(
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        ),
        kinds::STORAGE_CLASS => {
            Kind::new("storage.k8s.io/v1", "StorageClass", "storageclasses", false)
        }
        kinds::CLAIM_TEMPLATE => Kind::new(
            "resource.k8s.io/v1",
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
            true,
        ),
        kinds::CLAIM => Kind::new(
            "resource.k8s.io/v1",
            "ResourceClaim",
            "resourceclaims",
            true,
        ),
        kinds::SLICE => Kind::new(
            "resource.k8s.io/v1",
            "ResourceSlice",
            "resourceslices",
            false,
        ),
        kinds::DEVICE_CLASS => {
            Kind::new("resource.k8s.io/v1", "DeviceClass", "deviceclasses", false)
        }
        kinds::LWS => Kind::new(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "leaderworkersets",
            true,
        ),
        kinds::PCS => Kind::new("grove.io/v1alpha1", "PodCliqueSet", "podcliquesets", true),
        kinds::PODGANG => Kind::new("scheduler.grove.io/v1alpha1", "PodGang", "podgangs", true),
        kinds::HTTPROUTE => Kind::new(
            "gateway.networking.k8s.io/v1",
            "HTTPRoute",
            "httproutes",
            true,
        ),
        kinds::INFERENCE_POOL => Kind::new(
            "inference.networking.k8s.io/v1",
            "InferencePool",
            "inferencepools",
            true,
        ),
        kinds::SERVICE => Kind::new("v1", "Service", "services", true),
        kinds::PCLQ => Kind::new("grove.io/v1alpha1", "PodClique", "podcliques", true),
        kinds::QUEUE => Kind::new("scheduling.run.ai/v2", "Queue", "queues", false),
        kinds::SECRET => Kind::new("v1", "Secret", "secrets", true),
        _ => Kind::new("v1", "Event", "events", true),
    }
}

/// How many kinds are watched.
pub const WATCHED: usize = kinds::EVENT;

/// The kinds every cluster serves (built in), watched from the start; the
/// others are watched once a chart installs their CRD.
pub const BUILTIN: [usize; 12] = [
    kinds::NODE,
    kinds::POD,
    kinds::DEPLOYMENT,
    kinds::JOB,
    kinds::PVC,
    kinds::STORAGE_CLASS,
    kinds::CLAIM_TEMPLATE,
    kinds::CLAIM,
    kinds::SLICE,
    kinds::DEVICE_CLASS,
    kinds::SERVICE,
    kinds::SECRET,
];

/// The watched kind of `group`'s `kind`, if any.
pub fn index_of(group: &str, kind_name: &str) -> Option<usize> {
    (0..WATCHED).find(|i| {
        let k = kind(*i);
        k.resource.group == group && k.resource.kind == kind_name
    })
}

/// One write a controller asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Server-side apply of `object` (of kind `kind`) as `manager`.
    Apply {
        /// Kind index.
        kind: usize,
        /// The object (apiVersion, kind, metadata.name/namespace and the fields owned).
        object: Value,
        /// Field manager.
        manager: &'static str,
    },
    /// Server-side apply of `status` to `object`'s status.
    Status {
        /// Kind index.
        kind: usize,
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
        /// Kind index.
        kind: usize,
        /// The object as observed.
        object: Value,
        /// The status fields to set.
        status: Value,
        /// Field manager.
        manager: &'static str,
    },
    /// A merge patch of an existing object (a binding: never creates).
    Patch {
        /// Kind index.
        kind: usize,
        /// Namespace ("" when cluster-scoped).
        namespace: String,
        /// Name.
        name: String,
        /// The patch (with `metadata.uid` as a precondition).
        patch: Value,
    },
    /// Deletes an object.
    Delete {
        /// Kind index.
        kind: usize,
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
    /// Every object of kind `index`.
    pub fn all(&self, index: usize) -> impl Iterator<Item = &Value> {
        self.snapshot.of(index).map(|(_, v)| v)
    }

    /// The object `name` of kind `index` in `namespace`.
    pub fn get(&self, index: usize, namespace: &str, name: &str) -> Option<&Value> {
        self.snapshot.get(index, namespace, name)
    }

    /// Pods owned by the object of uid `uid`.
    pub fn pods_of<'s>(&'s self, uid: &'s str) -> impl Iterator<Item = &'s Value> + 's {
        self.all(kinds::POD).filter(move |p| owned_by(p, uid))
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
