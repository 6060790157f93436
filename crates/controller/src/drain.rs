//! A ModelReplica leaves the routing before it goes. When a deployment no
//! longer wants a replica (scaled down, moved), its ModelEndpoint is pruned
//! at once — every gateway stops sending it new requests — while the
//! replica and its workloads stay for the drain period, so the requests it
//! is serving finish. The start of the drain is kept on the replica
//! (`modelplane.ai/draining-since`, written by the field manager
//! `modelplane-drain`, so the deployment's own applies never remove it);
//! once the period has passed the replica is pruned as any object is. A
//! replica wanted again before that (scaled back up) stops draining.

use std::sync::Arc;
use std::time::Duration;

use modelplane_compose::Target;
use modelplane_compose::world::ObjectRef;
use serde_json::Value;

use crate::Shared;

/// The annotation that says since when a replica drains.
pub const DRAINING_SINCE: &str = "modelplane.ai/draining-since";

/// Whether `reference` on `target` drains before it is pruned, as its
/// kind's handling says.
pub fn drains(target: &Target, reference: &ObjectRef) -> bool {
    modelplane_compose::kinds::handling(target, &reference.kind).drains
}

/// What pruning a draining kind's object does now.
pub enum Step {
    /// Its drain starts now: mark it, come back after `Duration`.
    Start,
    /// Still draining: come back after `Duration`.
    Wait(Duration),
    /// Drained: prune it.
    Prune,
}

/// Since when the observed `object` drains, if it does.
fn since(object: &Value) -> Option<jiff::Timestamp> {
    object["metadata"]["annotations"][DRAINING_SINCE]
        .as_str()?
        .parse()
        .ok()
}

/// The step for the observed `object`, draining for `period`.
pub fn step(object: Option<&Value>, period: Duration, now: jiff::Timestamp) -> Step {
    let Some(started) = object.and_then(since) else {
        return Step::Start;
    };
    let elapsed = now.duration_since(started).unsigned_abs();
    match period.checked_sub(elapsed) {
        Some(left) if !left.is_zero() => Step::Wait(left),
        _ => Step::Prune,
    }
}

/// Whether the observed `object` is marked as draining.
pub fn is_draining(object: &Value) -> bool {
    since(object).is_some()
}

/// Marks (with `Some(since)`) or unmarks the replica `reference`.
pub async fn mark(
    shared: &Arc<Shared>,
    reference: &ObjectRef,
    since: Option<jiff::Timestamp>,
) -> Result<(), crate::target::TargetError> {
    let mut patch = serde_json::json!({
        "apiVersion": reference.api_version, "kind": reference.kind,
        "metadata": { "name": reference.name, "namespace": reference.namespace },
    });
    if let Some(since) = since {
        patch["metadata"]["annotations"] = serde_json::json!({ DRAINING_SINCE: since.to_string() });
    }
    shared
        .control
        .apply_as(&patch, "modelplane-drain")
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_replica_drains_for_the_period_then_goes() {
        let now: jiff::Timestamp = "2026-12-02T10:00:30Z".parse().expect("time");
        let period = Duration::from_secs(30);
        assert!(matches!(step(None, period, now), Step::Start));
        let marked = |at: &str| json!({ "metadata": { "annotations": { DRAINING_SINCE: at } } });
        assert!(matches!(
            step(Some(&marked("2026-12-02T10:00:10Z")), period, now),
            Step::Wait(left) if left == Duration::from_secs(10)
        ));
        assert!(matches!(
            step(Some(&marked("2026-12-02T10:00:00Z")), period, now),
            Step::Prune
        ));
        assert!(is_draining(&marked("2026-12-02T10:00:00Z")));
        assert!(!is_draining(&json!({ "metadata": {} })));
    }
}
