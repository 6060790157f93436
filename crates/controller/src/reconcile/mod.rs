//! One reconcile: snapshot → compose → apply → prune → status.
//!
//! The hold rule lives here: nothing is pruned while the composition holds,
//! while any write of this pass failed, before the control plane's lists
//! are read, or before the owned objects of that kind on that target are
//! listed; an owner that is gone has its objects removed only once the
//! lists say so. A failed pass is retried with backoff and deletes nothing.

mod prune;

use prune::{collect_orphans, prune};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use modelplane_api::labels;
use modelplane_compose::world::{ObjectRef, Subject};
use modelplane_compose::{Composition, Target};
use serde_json::{Value, json};

use crate::index::Kind;
use crate::target::TargetError;
use crate::{Shared, Work};

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Some writes failed.
    #[error("{subject:?}: {}", messages.join("; "))]
    Writes {
        /// What was reconciled.
        subject: Subject,
        /// Each failure.
        messages: Vec<String>,
        /// Each failure's metric label.
        reasons: Vec<&'static str>,
    },
    /// A workload cluster could not be connected.
    #[error(transparent)]
    Connect(#[from] crate::clusters::ConnectError),
}

/// Runs work from the queue until stopped.
pub async fn work(shared: Arc<Shared>) {
    let mut leading = shared.leading.clone();
    loop {
        // A process that does not lead keeps its index warm and waits.
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        let work = shared.queue.next().await;
        let started = std::time::Instant::now();
        let (kind, reasons): (&str, Vec<&'static str>) = match &work {
            Work::Reconcile(subject) => match reconcile(&shared, subject).await {
                Ok(()) => {
                    shared.failing.forget(subject);
                    (subject.type_meta().1, Vec::new())
                }
                Err(e) => {
                    let reasons = match &e {
                        ReconcileError::Writes { reasons, .. } => reasons.clone(),
                        ReconcileError::Connect(_) => vec!["not_connected"],
                    };
                    if shared.failing.is_news(subject, &reasons) {
                        tracing::warn!(error = %e, "reconcile failed; retrying");
                    } else {
                        tracing::debug!(error = %e, "not yet; retrying");
                    }
                    (subject.type_meta().1, reasons)
                }
            },
            Work::Orphans(target) => {
                let failed = collect_orphans(&shared, target).await;
                (
                    "orphans",
                    if failed {
                        vec!["delete_failed"]
                    } else {
                        Vec::new()
                    },
                )
            }
            Work::Connect(cluster) => match crate::clusters::connect(&shared, cluster).await {
                Ok(()) => ("connect", Vec::new()),
                Err(e) => {
                    tracing::info!(error = %e, "not connected yet");
                    ("connect", vec!["not_connected"])
                }
            },
        };
        shared.metrics.reconciled(kind, started.elapsed(), &reasons);
        shared.queue.done(&work, !reasons.is_empty());
    }
}

/// Queues everything now and then, so a missed event is made up for; a
/// world that did not change costs no write.
pub async fn resync(shared: Arc<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let (subjects, clusters) = match shared.index.read() {
            Ok(index) => (
                index.subjects(),
                index.world.clusters.keys().cloned().collect::<Vec<_>>(),
            ),
            Err(_) => return,
        };
        for cluster in clusters {
            shared.queue.add(Work::Connect(cluster));
        }
        for subject in subjects {
            shared.queue.add(Work::Reconcile(subject));
        }
    }
}

/// What a reconcile read from the index, so no lock is held while it writes.
struct Plan {
    composition: Composition,
    owner: ObjectRef,
    uid: String,
    generation: Option<i64>,
    observed_status: Value,
    /// Owned objects observed now.
    owned: Vec<(Target, ObjectRef)>,
    /// The desired objects whose observed copy already holds them.
    unchanged: BTreeSet<(Target, ObjectRef)>,
    /// May prune now (lists read).
    prunable: BTreeSet<(Target, ObjectRef)>,
    /// Observed owned objects of the kinds that drain before they go.
    observed: BTreeMap<(Target, ObjectRef), Value>,
    /// Those of them marked as draining.
    draining: BTreeSet<(Target, ObjectRef)>,
    readiness: crate::status::Readiness,
    /// The ModelReplicas it writes (new ones, or ones placed or sized anew
    /// under the same name), as indices of `composition.desired`: a
    /// placement, which books GPUs.
    placing: Vec<usize>,
    /// Whether the subject is an object with a status (the providers on
    /// demand are not).
    has_status: bool,
    /// Whether its status fields are published before everything composed
    /// can be seen (a cloud cluster's: they say how to reach its cluster).
    fields_first: bool,
    /// Every composed object's target is connected and its kind listed
    /// there: readiness read from the index means something.
    seen: bool,
    /// The index's write count it was read at.
    read_at: u64,
}

/// `true` when every field of `desired` has the same value in `observed`.
pub fn contains(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (Value::Object(o), Value::Object(d)) => d
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|ov| contains(ov, v))),
        (Value::Array(o), Value::Array(d)) => {
            o.len() == d.len() && o.iter().zip(d).all(|(ov, dv)| contains(ov, dv))
        }
        (o, d) => o == d,
    }
}

fn is_shared(object: &Value) -> bool {
    object["metadata"]["annotations"][labels::SHARED] == "true"
}

/// `object` labelled as owned by `uid` (shared objects stay unlabelled:
/// they are never pruned).
fn owned(mut object: Value, uid: &str) -> Value {
    if !is_shared(&object) {
        object["metadata"]["labels"][labels::OWNER_UID] = json!(uid);
    }
    object
}

fn subject_ref(subject: &Subject, object: &Value) -> ObjectRef {
    let (api_version, kind) = subject.type_meta();
    ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .into(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
    }
}

fn plan(shared: &Shared, subject: &Subject) -> Option<Plan> {
    let index = shared.index.read().ok()?;
    let read_at = shared.index.writes();
    if !index.synced() {
        return None;
    }
    let composition = index.world.compose(subject)?;
    let uid = index.uid_of(subject)?.to_string();
    let has_status = *subject != Subject::Providers;
    let object = match subject {
        Subject::Providers => json!({ "metadata": { "name": "providers" } }),
        _ => index.subject_object(subject)?,
    };
    let owner = subject_ref(subject, &object);
    let mut unchanged = BTreeSet::new();
    for d in &composition.desired {
        let reference = ObjectRef::of(&d.object);
        let labelled = owned(d.object.clone(), &uid);
        if index
            .world
            .observed(d)
            .is_some_and(|o| contains(o, &labelled))
        {
            unchanged.insert((d.target.clone(), reference));
        }
    }
    let owned_now = index.owned_by(&uid);
    let prunable = owned_now
        .iter()
        .filter(|(t, r)| index.owned_synced(t, &r.api_version, &r.kind))
        .cloned()
        .collect();
    let observed: BTreeMap<(Target, ObjectRef), Value> = owned_now
        .iter()
        .filter(|(t, r)| crate::drain::drains(t, r))
        .filter_map(|(t, r)| {
            let object = index.world.applied.get(t)?.get(r)?;
            Some(((t.clone(), r.clone()), object.as_ref().clone()))
        })
        .collect();
    let draining = observed
        .iter()
        .filter(|(_, o)| crate::drain::is_draining(o))
        .map(|(k, _)| k.clone())
        .collect();
    let seen = composition
        .desired
        .iter()
        .filter(|d| !is_shared(&d.object))
        .all(|d| {
            let r = ObjectRef::of(&d.object);
            shared.connection(&d.target).is_some()
                && index.owned_synced(&d.target, &r.api_version, &r.kind)
        });
    let (ready, unready) = index.world.readiness(&composition);
    let readiness = crate::status::Readiness { ready, unready };
    let placing = composition
        .desired
        .iter()
        .enumerate()
        .filter(|(_, d)| {
            d.handling().books && !unchanged.contains(&(d.target.clone(), ObjectRef::of(&d.object)))
        })
        .map(|(i, _)| i)
        .collect();
    Some(Plan {
        fields_first: matches!(subject, Subject::Cloud(..)),
        read_at,
        has_status,
        seen,
        placing,
        readiness,
        composition,
        owner,
        uid,
        generation: object["metadata"]["generation"].as_i64(),
        observed_status: object.get("status").cloned().unwrap_or(Value::Null),
        owned: owned_now,
        unchanged,
        prunable,
        observed,
        draining,
    })
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Writes of one reconcile in flight at once: the API server commits
/// concurrent writes together, so a deployment's ten replicas cost one
/// sync instead of ten in a row.
const WRITES_AT_ONCE: usize = 8;

/// What went wrong in one pass, one line per distinct failure (a kind not
/// served fails every object of it alike), with each line's metric label.
#[derive(Default)]
struct Failures {
    messages: Vec<String>,
    reasons: Vec<&'static str>,
}

impl Failures {
    fn add(&mut self, message: String, reason: &'static str) {
        if !self.messages.contains(&message) {
            self.messages.push(message);
            self.reasons.push(reason);
        }
    }

    fn target(&mut self, error: &TargetError) {
        self.add(error.to_string(), error.metric_label());
    }

    /// A failure writing through `connection`: one whose API server has
    /// not answered yet is not connected yet, rather than unreachable.
    fn target_on(&mut self, error: &TargetError, connection: &crate::target::Connection) {
        let label = match error.metric_label() {
            "unreachable" if connection.coming_up() => "not_connected",
            label => label,
        };
        self.add(error.to_string(), label);
    }

    fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// Books every ModelReplica `plan` creates and returns them; none if it
/// also rewrites one that exists (nothing booked then).
fn book_new_replicas(shared: &Shared, plan: &Plan) -> Option<Vec<Value>> {
    let mut index = shared.index.write().ok()?;
    let placing: Vec<Value> = plan
        .placing
        .iter()
        .map(|&i| owned(plan.composition.desired[i].object.clone(), &plan.uid))
        .collect();
    let existing = |r: &Value| {
        index
            .world
            .replicas
            .contains_key(&crate::index::object_key(r))
    };
    if placing.iter().any(existing) {
        return None;
    }
    for replica in &placing {
        // Its cluster hosts it from now on (a Usage guards the cluster):
        // the replica and its deployment are planned once it is written.
        let subjects = index.book_replica(replica).unwrap_or_default();
        for cluster in subjects
            .into_iter()
            .filter(|s| matches!(s, Subject::Cluster(_)))
        {
            shared.queue.add(Work::Reconcile(cluster));
        }
    }
    Some(placing)
}

/// The pools the ModelReplicas `plan` places book GPUs on.
fn pools_booked(plan: &Plan) -> BTreeSet<crate::placing::Pool> {
    plan.placing
        .iter()
        .flat_map(|&i| crate::placing::pools_of(&plan.composition.desired[i].object))
        .collect()
}

/// One desired object to write, to the connection of its target.
struct Write<'a> {
    desired: &'a modelplane_compose::Desired,
    key: (Target, ObjectRef),
    connection: Arc<crate::target::Connection>,
    shared_object: bool,
}

/// Reads the token Secret a gated ModelCache names into the index, so its
/// composition can deliver it to each cluster's hydration Job. Read anew at
/// every reconcile of the cache (a token replaced after a refusal is used
/// at once); a Secret that cannot be read keeps what was read before.
async fn read_cache_token(shared: &Shared, cache: &str) -> bool {
    let named = shared.index.read().ok().and_then(|index| {
        let cache = index.world.caches.get(cache)?;
        let auth = cache.spec.hugging_face.as_ref()?.auth_secret.as_ref()?;
        Some((cache.metadata.namespace.clone()?, auth.name.clone()))
    });
    let Some((namespace, name)) = named else {
        return false;
    };
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(shared.control.client().clone(), &namespace);
    let data = match secrets.get_opt(&name).await {
        // As stored: every value base64-encoded.
        Ok(Some(secret)) => Some(
            serde_json::to_value(&secret.data)
                .ok()
                .and_then(|d| serde_json::from_value(d).ok())
                .unwrap_or_default(),
        ),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(secret = %format!("{namespace}/{name}"), error = %e, "cannot read a cache's token Secret");
            return false;
        }
    };
    let missing = data.is_none();
    if let Ok(mut index) = shared.index.write() {
        index.world.cache_tokens.insert(
            modelplane_compose::world::key(Some(&namespace), &name),
            data,
        );
    }
    missing
}

/// How soon a cache whose token Secret does not exist looks again (Secrets
/// are not watched: a team's are many, and none other is read).
const TOKEN_LOOKED_FOR_EVERY: Duration = Duration::from_secs(5);

/// Reconciles `subject` once.
pub async fn reconcile(shared: &Arc<Shared>, subject: &Subject) -> Result<(), ReconcileError> {
    if let Subject::Cache(cache) = subject
        && read_cache_token(shared, cache).await
    {
        shared
            .queue
            .add_after(Work::Reconcile(subject.clone()), TOKEN_LOOKED_FOR_EVERY);
    }
    let Some(first) = plan(shared, subject) else {
        return Ok(());
    };
    // Deployments place one at a time on a pool, each planned again once
    // it holds the pools it books on: two planned side by side would book
    // the same free GPUs. A plan that writes no ModelReplica (a status, a
    // resync, a scale down) takes no turn, so a hundred deployments
    // requeued by a cluster's change do not hold every worker waiting. The
    // turn ends once its new replicas are booked in the index (where the
    // next plan counts them), before they are written; a plan that moves
    // a replica that exists keeps it until written.
    let (plan, mut placing) = if first.placing.is_empty() {
        (first, None)
    } else {
        let mut pools = pools_booked(&first);
        let mut current = first;
        loop {
            let turn = shared.placing.take(pools.clone()).await;
            // Planned again only if the index moved since: what another
            // turn booked meanwhile is in it.
            if shared.index.writes() != current.read_at {
                let Some(again) = plan(shared, subject) else {
                    return Ok(());
                };
                current = again;
            }
            let wanted = pools_booked(&current);
            if turn.holds(&wanted) {
                break (current, Some(turn));
            }
            // Planned again, it books elsewhere too (what it meant to take
            // was taken meanwhile): ask for every pool it has wanted, so
            // it does not chase pools one at a time.
            drop(turn);
            pools.extend(wanted);
        }
    };
    let booked = placing
        .as_ref()
        .and_then(|_| book_new_replicas(shared, &plan));
    if booked.is_some() {
        placing = None;
    }
    let mut failures = Failures::default();
    let writes = writes_due(shared, &plan, &mut failures).await;
    // Namespaces and CRDs first, one by one: the rest may live in them.
    let (foundations, rest): (Vec<_>, Vec<_>) = writes
        .into_iter()
        .partition(|w| is_foundation(&w.desired.object));
    for write in foundations {
        let (write, applied) = write_one(write, &plan.uid).await;
        applied_one(shared, write, applied, &mut failures);
    }
    // Collected first: a stream holding the mapping closure trips the
    // compiler's proof that this future is Send.
    let writing: Vec<_> = rest.into_iter().map(|w| write_one(w, &plan.uid)).collect();
    let applied: Vec<_> = futures_util::stream::iter(writing)
        .buffered(WRITES_AT_ONCE)
        .collect()
        .await;
    for (write, applied) in applied {
        applied_one(shared, write, applied, &mut failures);
    }
    drop(placing);
    // A booked replica not written (its create failed) frees what it held.
    if let (Some(booked), Ok(mut index)) = (booked, shared.index.write()) {
        for replica in &booked {
            for subject in index.unbook_replica(replica) {
                shared.queue.add(Work::Reconcile(subject));
            }
        }
    }
    if !plan.composition.hold && failures.is_empty() {
        prune(shared, subject, &plan, &mut failures).await;
    }
    publish_status(shared, subject, &plan, &failures.messages).await;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ReconcileError::Writes {
            subject: subject.clone(),
            messages: failures.messages,
            reasons: failures.reasons,
        })
    }
}

/// The desired objects of `plan` that must be written now: not those
/// already as desired, nor any on a cluster that does not answer or is not
/// connected yet (a failure each, and nothing decided about them).
async fn writes_due<'a>(
    shared: &Arc<Shared>,
    plan: &'a Plan,
    failures: &mut Failures,
) -> Vec<Write<'a>> {
    let mut writes = Vec::new();
    for desired in &plan.composition.desired {
        let reference = ObjectRef::of(&desired.object);
        let key = (desired.target.clone(), reference.clone());
        if let Some(connection) = shared.connection(&desired.target)
            && let Some(why) = connection.unreachable()
        {
            // Nothing is written to, or decided about, a cluster that does
            // not answer: its status says so and everything on it stays.
            failures.add(
                format!("{} does not answer: {why}", connection.name),
                "unreachable",
            );
            continue;
        }
        if crate::drain::drains(&desired.target, &reference) && plan.draining.contains(&key) {
            // Wanted again while it drained: it stays, and serves again.
            if let Err(e) = crate::drain::mark(shared, &reference, None).await {
                failures.target(&e);
            }
        }
        if plan.unchanged.contains(&key) {
            continue;
        }
        let shared_object = is_shared(&desired.object);
        if shared_object && shared.shared_applied.lock().is_ok_and(|s| s.contains(&key)) {
            continue;
        }
        let Some(connection) = shared.connection(&desired.target) else {
            if let Target::Cluster(name) = &desired.target {
                shared.queue.add(Work::Connect(name.clone()));
                failures.add(
                    format!("cluster {name} is not connected yet"),
                    "not_connected",
                );
            }
            continue;
        };
        shared.ensure_watch(&desired.target, &reference.api_version, &reference.kind);
        writes.push(Write {
            desired,
            key,
            connection,
            shared_object,
        });
    }
    writes
}

async fn write_one<'a>(write: Write<'a>, uid: &str) -> (Write<'a>, Result<Value, TargetError>) {
    let applied = write
        .connection
        .apply(&owned(write.desired.object.clone(), uid))
        .await;
    (write, applied)
}

/// Objects others are written into.
fn is_foundation(object: &Value) -> bool {
    matches!(
        object["kind"].as_str(),
        Some("Namespace" | "CustomResourceDefinition")
    )
}

fn applied_one(
    shared: &Arc<Shared>,
    write: Write<'_>,
    applied: Result<Value, TargetError>,
    failures: &mut Failures,
) {
    let Write {
        desired,
        key,
        connection,
        shared_object,
    } = write;
    match applied {
        Ok(stored) => {
            tracing::debug!(object = %key.1, target = %connection.name, "applied");
            shared.metrics.applied_on(&desired.target);
            if shared_object {
                if let Ok(mut s) = shared.shared_applied.lock() {
                    s.insert(key);
                }
            } else if let Ok(mut index) = shared.index.write() {
                if desired.handling().books
                    && let Some(kind) = Kind::named(&key.1.kind)
                {
                    // Counted at once by the next deployment's placement,
                    // not once its watch event arrives.
                    index.assume(kind, &stored);
                }
                index.apply_owned(&desired.target, stored);
            }
        }
        Err(e) => failures.target_on(&e, &connection),
    }
}

async fn publish_status(shared: &Arc<Shared>, subject: &Subject, plan: &Plan, failures: &[String]) {
    if !plan.has_status {
        return;
    }
    record(
        shared,
        plan,
        &plan.composition.events,
        crate::events::Recurrence::WhileItHolds,
    )
    .await;
    let error = (!failures.is_empty()).then(|| failures.join("; "));
    // Nothing published yet: what the composition says stands until it can
    // be seen (a replica on a cluster not connected says it is deploying and
    // waiting for its model, as the original does), not a bare `Synced`.
    let first = plan.observed_status["conditions"].as_array().is_none();
    let status = match (&error, plan.seen || first) {
        (_, true) => crate::status::publish(
            &plan.composition,
            &plan.readiness,
            error.as_deref(),
            &plan.observed_status,
            &now(),
            plan.generation,
        ),
        // Not everything composed can be seen yet: the last published
        // readiness stands.
        (None, false) if !plan.fields_first => return,
        (None, false) => {
            crate::status::with_fields(&plan.composition, &plan.observed_status, &now())
        }
        (Some(error), false) => {
            let observed = if plan.fields_first {
                crate::status::with_fields(&plan.composition, &plan.observed_status, &now())
            } else {
                plan.observed_status.clone()
            };
            crate::status::with_synced_error(&observed, error, &now())
        }
    };
    if status == plan.observed_status {
        return;
    }
    for (type_, state, reason, message) in
        crate::status::transitions(&plan.observed_status, &status)
    {
        tracing::info!(object = %plan.owner, condition = %type_, status = %state, reason = %reason, message = %message, "condition changed");
    }
    let story = crate::status::story(&plan.owner.kind, &plan.observed_status, &status);
    record(shared, plan, &story, crate::events::Recurrence::EachTime).await;
    match shared.control.patch_status(&plan.owner, &status).await {
        Ok(stored) => {
            let kind = Kind::named(&plan.owner.kind);
            let concerned = match (kind, shared.index.write()) {
                (Some(kind), Ok(mut index)) => index.assume_status(kind, &stored),
                _ => Vec::new(),
            };
            // A cluster's watch event queues the deployments only if what
            // placement reads changed, which its status taken in here now
            // shows: they are queued here. Other kinds' events queue what
            // they concern themselves.
            if kind == Some(Kind::Cluster) {
                for concerned in concerned.into_iter().filter(|s| s != subject) {
                    shared.queue.add(Work::Reconcile(concerned));
                }
            }
        }
        Err(e) => tracing::warn!(object = %plan.owner, error = %e, "status not written"),
    }
}

async fn record(
    shared: &Arc<Shared>,
    plan: &Plan,
    events: &[modelplane_compose::Event],
    recurrence: crate::events::Recurrence,
) {
    let now = now();
    for event in events {
        if let Err(e) = shared
            .events
            .record(&plan.owner, &plan.uid, event, &now, recurrence)
            .await
        {
            tracing::debug!(object = %plan.owner, error = %e, "event not recorded");
        }
    }
}

/// Failures a fleet coming up goes through on its own: a kind whose CRD a
/// chart installs next, a namespace it creates, a cluster not connected
/// yet, a write while another process leads.
const EXPECTED_WHILE_COMING_UP: &[&str] =
    &["not_served", "not_connected", "not_found", "not_leader"];

/// How long a subject fails only as a fleet coming up does before it is
/// worth a warning.
const QUIET_FOR: Duration = Duration::from_secs(120);

/// Since when each subject has failed, so what a healthy start goes
/// through is logged at debug and only what lasts, or is not expected,
/// warns.
#[derive(Default)]
pub struct Failing {
    since: std::sync::Mutex<std::collections::HashMap<Subject, std::time::Instant>>,
}

impl Failing {
    /// Whether a failure of `subject` for `reasons` is worth a warning:
    /// unexpected, or expected but lasting.
    pub fn is_news(&self, subject: &Subject, reasons: &[&'static str]) -> bool {
        let Ok(mut since) = self.since.lock() else {
            return true;
        };
        let first = *since
            .entry(subject.clone())
            .or_insert_with(std::time::Instant::now);
        let expected = reasons.iter().all(|r| EXPECTED_WHILE_COMING_UP.contains(r));
        !expected || first.elapsed() >= QUIET_FOR
    }

    /// `subject` reconciled: its next failure starts afresh.
    pub fn forget(&self, subject: &Subject) {
        if let Ok(mut since) = self.since.lock() {
            since.remove(subject);
        }
    }
}
