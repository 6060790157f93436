//! Pruning: what a subject composed before and composes no more is deleted
//! (after a drain where the composition says so), and objects whose owner
//! the index no longer knows are collected — never while a composition
//! holds, so nothing serving is deleted on an error or a cold cache.

use super::*;

pub(super) async fn prune(
    shared: &Arc<Shared>,
    subject: &Subject,
    plan: &Plan,
    failures: &mut Failures,
) {
    let desired: BTreeSet<(Target, ObjectRef)> = plan
        .composition
        .desired
        .iter()
        .map(|d| (d.target.clone(), ObjectRef::of(&d.object)))
        .collect();
    for key in &plan.owned {
        if desired.contains(key) || !plan.prunable.contains(key) {
            continue;
        }
        let (target, reference) = key;
        let Some(connection) = shared.connection(target) else {
            continue;
        };
        if let Some(why) = connection.unreachable() {
            // What it holds may be stale: decided once it answers again.
            failures.add(
                format!("{} does not answer: {why}", connection.name),
                "unreachable",
            );
            continue;
        }
        if crate::drain::drains(target, reference) {
            let observed = plan.observed.get(key);
            let wait = match crate::drain::step(observed, shared.drain, jiff::Timestamp::now()) {
                crate::drain::Step::Prune => None,
                crate::drain::Step::Wait(left) => Some(left),
                crate::drain::Step::Start => {
                    if let Err(e) =
                        crate::drain::mark(shared, reference, Some(jiff::Timestamp::now())).await
                    {
                        failures.target(&e);
                        continue;
                    }
                    tracing::info!(object = %reference, owner = %plan.owner, drain = ?shared.drain, "draining: out of the routing, deleted once drained");
                    Some(shared.drain)
                }
            };
            if let Some(left) = wait {
                shared
                    .queue
                    .add_after(Work::Reconcile(subject.clone()), left);
                continue;
            }
        }
        match connection.delete(reference).await {
            Ok(()) => {
                tracing::info!(object = %reference, target = %connection.name, owner = %plan.owner, "pruned");
                shared.metrics.pruned_on(target);
            }
            Err(e) => failures.target(&e),
        }
    }
}

/// Deletes objects on `target` whose owners are gone; returns whether it
/// must be retried.
pub(super) async fn collect_orphans(shared: &Arc<Shared>, target: &Target) -> bool {
    let orphans = match shared.index.read() {
        Ok(index) if index.synced() => index
            .orphans(target)
            .into_iter()
            .filter(|(r, _)| index.owned_synced(target, &r.api_version, &r.kind))
            .collect::<Vec<_>>(),
        _ => return false,
    };
    let Some(connection) = shared.connection(target) else {
        return false;
    };
    if connection.unreachable().is_some() {
        // Collected once it answers again (the probe reconciles then).
        return true;
    }
    let mut failed = false;
    for (reference, observed) in orphans {
        // Looked at again just before: an owner may have appeared.
        let still = shared.index.read().is_ok_and(|index| {
            index
                .orphans(target)
                .iter()
                .any(|(r, o)| *r == reference && Arc::ptr_eq(o, &observed))
        });
        if !still {
            continue;
        }
        match connection
            .delete_unchanged(&reference, Some(&observed))
            .await
        {
            Ok(true) => {
                tracing::info!(object = %reference, target = %connection.name, "deleted: its owner is gone");
                shared.metrics.pruned_on(target);
            }
            Ok(false) => tracing::debug!(object = %reference, "changed since observed; kept"),
            Err(TargetError::NotServed { .. }) => {}
            Err(e) => {
                tracing::warn!(error = %e, "orphan not deleted");
                failed = true;
            }
        }
    }
    failed
}
