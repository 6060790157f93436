//! One API server the controller writes to — the control plane or a
//! workload cluster — and the only code that performs writes (STYLE.md 1):
//! server-side apply as `modelplane`, forced; deletes; status patches. Kinds
//! are resolved through the server's discovery and remembered, so a kind
//! the server does not serve (a CRD not installed yet) is an error naming
//! it, retried later, never a crash.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, Error as KubeError};
use modelplane_api::labels::FIELD_MANAGER;
use modelplane_compose::world::ObjectRef;
use modelplane_watch::Object;
use serde_json::Value;

use crate::lease::WriteGate;

/// How long a new connection whose API server has not answered yet is
/// taken to be coming up rather than unreachable.
const COMING_UP_FOR: Duration = Duration::from_secs(30);

/// How long "not served" is believed before discovery is asked again.
const NOT_SERVED_FOR: Duration = Duration::from_secs(5);

/// A write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The server does not serve the kind (its CRD is not installed).
    #[error(
        "{kind} ({api_version}) is not served by {target}: its CustomResourceDefinition is not installed"
    )]
    NotServed {
        /// The kind's apiVersion.
        api_version: String,
        /// The kind.
        kind: String,
        /// Where.
        target: String,
    },
    /// This process does not hold the leader Lease (or its hold lapsed).
    #[error("{target}: not written: this controller is not the leader")]
    NotLeader {
        /// Where.
        target: String,
    },
    /// The server refused or could not be reached.
    #[error("{target}: {action} {object}: {source}")]
    Api {
        /// Where.
        target: String,
        /// What was being done.
        action: &'static str,
        /// To what.
        object: String,
        /// The client's error.
        #[source]
        source: Box<KubeError>,
    },
}

impl TargetError {
    /// The label for error counters.
    pub fn metric_label(&self) -> &'static str {
        match self {
            TargetError::NotServed { .. } => "not_served",
            TargetError::NotLeader { .. } => "not_leader",
            TargetError::Api { source, .. } => match source.as_ref() {
                KubeError::Api(s) if s.code == 409 => "conflict",
                KubeError::Api(s) if s.code == 422 => "invalid",
                // An apply creates what is missing: what is not found is
                // the namespace it goes in (a chart's, not installed yet).
                KubeError::Api(s) if s.code == 404 => "not_found",
                KubeError::Api(_) => "refused",
                _ => "unreachable",
            },
        }
    }
}

#[derive(Clone)]
enum Resolved {
    Served(ApiResource, bool),
    NotServed(Instant),
}

/// What discovery said of each kind, since its group's CRDs last changed.
#[derive(Default)]
struct Kinds {
    known: HashMap<(String, String), Resolved>,
    /// Per group: its CRDs' changes, and questions on their way.
    groups: HashMap<String, Group>,
    /// Counts the times everything was forgotten (a relist of the CRDs).
    epoch: u64,
}

#[derive(Default)]
struct Group {
    /// Counts the changes of the group's CRDs: an answer asked for before
    /// one is not kept after it (it may say "not served" of the kind just
    /// installed, and whoever was woken by the change would believe it).
    generation: u64,
    /// Discovery questions about the group not answered yet.
    asking: usize,
}

/// When a question was asked: the epoch and its group's generation.
type Asked = (u64, u64);

/// The API group of `api_version` (`""` for the core group's `v1`).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

impl Kinds {
    fn get(&self, key: &(String, String)) -> Option<Resolved> {
        self.known.get(key).cloned()
    }

    fn asked(&self, group: &str) -> Asked {
        (
            self.epoch,
            self.groups.get(group).map_or(0, |g| g.generation),
        )
    }

    /// A question about `group` leaves.
    fn ask(&mut self, group: &str) -> Asked {
        self.groups.entry(group.to_string()).or_default().asking += 1;
        self.asked(group)
    }

    /// Its answer came (or failed); kept unless the group's CRDs changed
    /// since it was asked.
    fn answered(&mut self, key: (String, String), resolved: Option<Resolved>, asked: Asked) {
        let group = group_of(&key.0).to_string();
        if let Some(g) = self.groups.get_mut(&group) {
            g.asking = g.asking.saturating_sub(1);
        }
        if let Some(resolved) = resolved
            && asked == self.asked(&group)
        {
            self.known.insert(key, resolved);
        }
    }

    fn forget(&mut self) {
        self.known.clear();
        self.epoch += 1;
    }

    /// Forgets what was said of `group`'s kinds; true if someone may wait
    /// on one of them: one was found not served, or a question about the
    /// group is on its way (its answer will not be kept).
    fn forget_group(&mut self, group: &str) -> bool {
        let entry = self.groups.entry(group.to_string()).or_default();
        entry.generation += 1;
        let mut awaited = entry.asking > 0;
        self.known.retain(|(api_version, _), resolved| {
            let of_group = group_of(api_version) == group;
            awaited |= of_group && matches!(resolved, Resolved::NotServed(_));
            !of_group
        });
        awaited
    }
}

/// A connection to one API server.
pub struct Connection {
    /// How messages name it (`control plane`, `cluster us-east`).
    pub name: String,
    client: Client,
    kinds: RwLock<Kinds>,
    /// Writes pass only while this process leads.
    gate: Arc<WriteGate>,
    /// Why its API server does not answer, while it does not.
    unreachable: std::sync::Mutex<Option<String>>,
    /// When it was made, and whether its API server has answered since:
    /// one that has not yet (a cluster reached at a new address after a
    /// restart) is coming up, not failing.
    born: Instant,
    answered: std::sync::atomic::AtomicBool,
    /// Woken when its CustomResourceDefinitions change: a kind that was
    /// not served may be now.
    pub kinds_changed: tokio::sync::Notify,
}

impl Connection {
    /// A connection named `name` through `client`.
    pub fn new(name: impl Into<String>, client: Client) -> Connection {
        Connection {
            name: name.into(),
            client,
            kinds: RwLock::default(),
            gate: WriteGate::open(),
            unreachable: std::sync::Mutex::default(),
            born: Instant::now(),
            answered: std::sync::atomic::AtomicBool::new(false),
            kinds_changed: tokio::sync::Notify::new(),
        }
    }

    /// Records that its API server answered.
    pub fn answered(&self) {
        self.answered
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether it is new and its API server has not answered yet: what
    /// fails then is logged quietly and not reported as unreachable.
    pub fn coming_up(&self) -> bool {
        !self.answered.load(std::sync::atomic::Ordering::Relaxed)
            && self.born.elapsed() < COMING_UP_FOR
    }

    /// Why its API server does not answer, if it does not (as its watches
    /// last found).
    pub fn unreachable(&self) -> Option<String> {
        self.unreachable.lock().ok()?.clone()
    }

    /// Records whether its API server answers; true when that changed.
    pub fn set_unreachable(&self, why: Option<String>) -> bool {
        let Ok(mut state) = self.unreachable.lock() else {
            return false;
        };
        let changed = state.is_some() != why.is_some();
        *state = why;
        changed
    }

    /// The same, writing only while `gate` is open.
    pub fn gated(mut self, gate: Arc<WriteGate>) -> Connection {
        self.gate = gate;
        self
    }

    /// The gate its writes pass.
    pub fn gate(&self) -> &Arc<WriteGate> {
        &self.gate
    }

    fn check_gate(&self) -> Result<(), TargetError> {
        if self.gate.is_open() {
            Ok(())
        } else {
            Err(TargetError::NotLeader {
                target: self.name.clone(),
            })
        }
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The resource of `api_version`/`kind` and whether it is namespaced.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), TargetError> {
        let key = (api_version.to_string(), kind.to_string());
        let known = self.kinds.read().ok().and_then(|k| k.get(&key));
        match known {
            Some(Resolved::Served(resource, namespaced)) => return Ok((resource, namespaced)),
            Some(Resolved::NotServed(at)) if at.elapsed() < NOT_SERVED_FOR => {
                return Err(self.not_served(api_version, kind));
            }
            _ => {}
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let asked = self.kinds.write().map_or((0, 0), |mut k| k.ask(group));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let answer = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => Ok(Resolved::Served(resource, caps.scope == Scope::Namespaced)),
            Err(KubeError::Discovery(_)) => Ok(Resolved::NotServed(Instant::now())),
            Err(KubeError::Api(s)) if s.code == 404 => Ok(Resolved::NotServed(Instant::now())),
            Err(source) => Err(source),
        };
        if let Ok(mut kinds) = self.kinds.write() {
            kinds.answered(key, answer.as_ref().ok().cloned(), asked);
        }
        match answer {
            Ok(Resolved::Served(resource, namespaced)) => Ok((resource, namespaced)),
            Ok(Resolved::NotServed(_)) => Err(self.not_served(api_version, kind)),
            Err(source) => Err(TargetError::Api {
                target: self.name.clone(),
                action: "discovering",
                object: format!("{kind} ({api_version})"),
                source: Box::new(source),
            }),
        }
    }

    /// Forgets what discovery said (after a CRD was installed or removed).
    pub fn forget_kinds(&self) {
        if let Ok(mut kinds) = self.kinds.write() {
            kinds.forget();
        }
    }

    /// Forgets what discovery said of `group`'s kinds (after its CRD was
    /// installed, changed or removed); true if one of them was found not
    /// served, so someone may be waiting for it.
    pub fn forget_group(&self, group: &str) -> bool {
        self.kinds
            .write()
            .is_ok_and(|mut kinds| kinds.forget_group(group))
    }

    fn not_served(&self, api_version: &str, kind: &str) -> TargetError {
        TargetError::NotServed {
            api_version: api_version.into(),
            kind: kind.into(),
            target: self.name.clone(),
        }
    }

    /// Its objects of `object`'s kind, each answer read as the watches
    /// read theirs (without `managedFields`): the index keeps what an
    /// apply answers until the watch brings the change, and the entries
    /// would be most of it.
    async fn api(&self, object: &ObjectRef) -> Result<Api<Object>, TargetError> {
        let (resource, namespaced) = self.resolve(&object.api_version, &object.kind).await?;
        let namespace = namespaced.then_some(object.namespace.as_str());
        Ok(modelplane_watch::api(
            self.client.clone(),
            &resource,
            namespace,
        ))
    }

    fn failed(&self, action: &'static str, object: &ObjectRef, source: KubeError) -> TargetError {
        TargetError::Api {
            target: self.name.clone(),
            action,
            object: object.to_string(),
            source: Box::new(source),
        }
    }

    /// Applies `object` server-side as `modelplane`, taking over fields
    /// another manager set (as controllers do); returns what the server
    /// stored.
    pub async fn apply(&self, object: &Value) -> Result<Value, TargetError> {
        self.apply_as(object, FIELD_MANAGER).await
    }

    /// The same, as field manager `manager` (what it applies is its own,
    /// apart from what `modelplane` applies).
    pub async fn apply_as(&self, object: &Value, manager: &str) -> Result<Value, TargetError> {
        let reference = ObjectRef::of(object);
        let api = self.api(&reference).await?;
        self.check_gate()?;
        let params = PatchParams::apply(manager).force();
        api.patch(&reference.name, &params, &Patch::Apply(object))
            .await
            .map(|stored| modelplane_watch::compact(stored.value))
            .map_err(|e| self.failed("applying", &reference, e))
    }

    /// Deletes the object (already gone is fine), in the background: its
    /// dependents go after it, as `kubectl delete` does.
    pub async fn delete(&self, object: &ObjectRef) -> Result<(), TargetError> {
        self.delete_unchanged(object, None).await.map(|_| ())
    }

    /// Deletes the object only if it is still the one observed — the same
    /// uid and resourceVersion — so an object taken over meanwhile (a
    /// re-created owner applied it again) is kept. Returns whether it was
    /// deleted (or already gone).
    pub async fn delete_unchanged(
        &self,
        object: &ObjectRef,
        observed: Option<&Value>,
    ) -> Result<bool, TargetError> {
        let api = self.api(object).await?;
        self.check_gate()?;
        let mut params = DeleteParams::background();
        if let Some(observed) = observed {
            let text = |k: &str| observed["metadata"][k].as_str().map(str::to_string);
            params.preconditions = Some(kube::api::Preconditions {
                uid: text("uid"),
                resource_version: text("resourceVersion"),
            });
        }
        match api.delete(&object.name, &params).await {
            Ok(_) => Ok(true),
            Err(KubeError::Api(s)) if s.code == 404 => Ok(true),
            Err(KubeError::Api(s)) if s.code == 409 && observed.is_some() => Ok(false),
            Err(e) => Err(self.failed("deleting", object, e)),
        }
    }

    /// Writes `status` (the whole status) to the object's status
    /// subresource, as `modelplane`.
    pub async fn patch_status(
        &self,
        object: &ObjectRef,
        status: &Value,
    ) -> Result<Value, TargetError> {
        let api = self.api(object).await?;
        self.check_gate()?;
        let patch = serde_json::json!({
            "apiVersion": object.api_version,
            "kind": object.kind,
            "status": status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_status(&object.name, &params, &Patch::Apply(&patch))
            .await
            .map(|stored| modelplane_watch::compact(stored.value))
            .map_err(|e| self.failed("writing the status of", object, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(api_version: &str, kind: &str) -> (String, String) {
        (api_version.to_string(), kind.to_string())
    }

    fn not_served() -> Option<Resolved> {
        Some(Resolved::NotServed(Instant::now()))
    }

    #[test]
    fn an_answer_asked_for_before_its_groups_crds_changed_is_not_kept() {
        let gateway = key("gateway.networking.k8s.io/v1", "Gateway");
        let mut kinds = Kinds::default();
        let asked = kinds.ask("gateway.networking.k8s.io");
        // The chart installs the CRD while discovery's answer is on its way:
        // whoever asked is waiting for it.
        assert!(kinds.forget_group("gateway.networking.k8s.io"));
        kinds.answered(gateway.clone(), not_served(), asked);
        assert!(
            kinds.get(&gateway).is_none(),
            "the stale 'not served' would hold the watch until its 60 s timer"
        );
        let asked = kinds.ask("gateway.networking.k8s.io");
        kinds.answered(gateway.clone(), not_served(), asked);
        assert!(kinds.get(&gateway).is_some());
        // A relist of the CRDs forgets everything, and what was on its way.
        let asked = kinds.ask("gateway.networking.k8s.io");
        kinds.forget();
        kinds.answered(gateway.clone(), not_served(), asked);
        assert!(kinds.get(&gateway).is_none());
    }

    #[test]
    fn a_crd_change_forgets_only_its_group_and_says_whether_it_was_awaited() {
        let gateway = key("gateway.networking.k8s.io/v1", "Gateway");
        let lws = key("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet");
        let pod = key("v1", "Pod");
        let served = Resolved::Served(
            ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            true,
        );
        let mut kinds = Kinds::default();
        for (k, group, answer) in [
            (&gateway, "gateway.networking.k8s.io", not_served()),
            (&lws, "leaderworkerset.x-k8s.io", not_served()),
            (&pod, "", Some(served)),
        ] {
            let asked = kinds.ask(group);
            kinds.answered(k.clone(), answer, asked);
        }
        // Another group's CRD installed meanwhile keeps what was said.
        let asked = kinds.ask("leaderworkerset.x-k8s.io");
        assert!(!kinds.forget_group("grove.io"), "nobody waits on grove.io");
        kinds.answered(lws.clone(), not_served(), asked);
        assert!(kinds.get(&lws).is_some());
        assert!(kinds.forget_group("gateway.networking.k8s.io"));
        assert!(kinds.get(&gateway).is_none());
        assert!(kinds.get(&lws).is_some() && kinds.get(&pod).is_some());
    }

    #[test]
    fn a_missing_crd_is_named_with_the_cluster() {
        let error = TargetError::NotServed {
            api_version: "leaderworkerset.x-k8s.io/v1".into(),
            kind: "LeaderWorkerSet".into(),
            target: "cluster us-east".into(),
        };
        assert_eq!(
            error.to_string(),
            "LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) is not served by cluster us-east: its CustomResourceDefinition is not installed"
        );
        assert_eq!(error.metric_label(), "not_served");
    }
}
