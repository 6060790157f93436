//! Leader election on a `coordination.k8s.io` Lease, and the gate every
//! write passes.
//!
//! One process leads: it holds the Lease `modelplane-controller` in
//! `modelplane-system`, renewing it every `renew` (a third of the lease
//! duration). Others wait and take it once it has not been renewed for the
//! lease duration. Every update is conditional on the Lease's
//! resourceVersion, so two candidates never both win.
//!
//! The [`WriteGate`] fences a leader that stalled: leadership is valid only
//! until the lease duration after the last renewal *was sent*, measured on
//! this process's monotonic clock, so a process paused past that (SIGSTOP,
//! a long GC-like stall) makes no write when it wakes — not before it has
//! renewed (or retaken) the Lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The Lease's name.
pub const LEASE_NAME: &str = "modelplane-controller";

/// May this process write now?
pub struct WriteGate {
    start: Instant,
    /// Milliseconds since `start` until which writes are allowed; 0 never.
    until_ms: AtomicU64,
}

impl Default for WriteGate {
    fn default() -> Self {
        WriteGate {
            start: Instant::now(),
            until_ms: AtomicU64::new(0),
        }
    }
}

impl WriteGate {
    /// A gate that is always open (no leader election).
    pub fn open() -> Arc<WriteGate> {
        let gate = WriteGate::default();
        gate.until_ms.store(u64::MAX, Ordering::SeqCst);
        Arc::new(gate)
    }

    /// Whether writes are allowed now.
    pub fn is_open(&self) -> bool {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.until_ms.load(Ordering::SeqCst)
    }

    /// Allows writes until `until`.
    fn open_until(&self, until: Instant) {
        let ms = u64::try_from(until.saturating_duration_since(self.start).as_millis())
            .unwrap_or(u64::MAX);
        self.until_ms.store(ms, Ordering::SeqCst);
    }

    fn close(&self) {
        self.until_ms.store(0, Ordering::SeqCst);
    }
}

/// How leader election runs.
#[derive(Clone, Debug)]
pub struct Election {
    /// This process's identity in the Lease.
    pub identity: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// How long a Lease not renewed stays held.
    pub duration: Duration,
}

fn now_micro() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Microsecond)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        .unwrap_or_default()
}

/// Whether the Lease, as read, is free for `identity` to take.
fn takeable(lease: &Lease, identity: &str) -> bool {
    let Some(spec) = &lease.spec else {
        return true;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration =
        jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let renewed = spec.renew_time.as_ref().map(|t| t.0);
    // To the microsecond: whole seconds would keep an expired Lease held for
    // up to a second longer than its duration.
    renewed.is_none_or(|at| jiff::Timestamp::now().duration_since(at) > duration)
}

/// Campaigns for the Lease forever: opens `gate` while leading, closes it
/// when leadership is lost; `leading` says when it changes.
pub async fn campaign(
    client: Client,
    election: Election,
    gate: Arc<WriteGate>,
    leading: tokio::sync::watch::Sender<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let renew = election.duration / 3;
    loop {
        let sent = Instant::now();
        match try_hold(&api, &election).await {
            Ok(true) => {
                gate.open_until(sent + election.duration);
                if !*leading.borrow() {
                    tracing::info!(identity = %election.identity, "leading");
                    leading.send_replace(true);
                }
            }
            Ok(false) => {
                gate.close();
                if *leading.borrow() {
                    tracing::warn!(identity = %election.identity, "lost the lease");
                    leading.send_replace(false);
                }
            }
            Err(e) => {
                // The gate closes by itself once the last renewal expires.
                tracing::warn!(error = %e, "lease not renewed");
            }
        }
        tokio::time::sleep(renew).await;
    }
}

/// Takes or renews the Lease; `Ok(false)` when another holds it.
async fn try_hold(api: &Api<Lease>, election: &Election) -> Result<bool, kube::Error> {
    let seconds = i32::try_from(election.duration.as_secs()).unwrap_or(15);
    let now = now_micro();
    let Some(current) = api.get_opt(LEASE_NAME).await? else {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": LEASE_NAME, "namespace": election.namespace },
            "spec": { "holderIdentity": election.identity, "leaseDurationSeconds": seconds,
                      "acquireTime": now, "renewTime": now, "leaseTransitions": 0 },
        }))
        .map_err(kube::Error::SerdeError)?;
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    if !takeable(&current, &election.identity) {
        return Ok(false);
    }
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_default();
    let taking = spec.holder_identity.as_deref() != Some(election.identity.as_str());
    let micro = serde_json::from_value(json!(now)).map_err(kube::Error::SerdeError)?;
    if taking {
        spec.holder_identity = Some(election.identity.clone());
        spec.acquire_time =
            Some(serde_json::from_value(json!(now)).map_err(kube::Error::SerdeError)?);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(micro);
    spec.lease_duration_seconds = Some(seconds);
    // Conditional on the version read: a race with another candidate is a
    // 409, and the loser does not lead.
    match api
        .replace(LEASE_NAME, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_closes_once_its_time_passes() {
        let gate = WriteGate::default();
        assert!(!gate.is_open(), "closed until leading");
        gate.open_until(Instant::now() + Duration::from_secs(60));
        assert!(gate.is_open());
        gate.open_until(Instant::now() - Duration::from_millis(1));
        assert!(!gate.is_open(), "a stalled leader's renewal has expired");
        assert!(WriteGate::open().is_open());
    }

    #[test]
    fn a_lease_is_takeable_when_free_ours_or_expired() {
        let lease = |holder: &str, renewed_secs_ago: f64| -> Lease {
            let renewed =
                jiff::Timestamp::now() - jiff::SignedDuration::from_secs_f64(renewed_secs_ago);
            serde_json::from_value(json!({ "metadata": { "name": LEASE_NAME },
                "spec": { "holderIdentity": holder, "leaseDurationSeconds": 15,
                          "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string() } }))
            .expect("lease")
        };
        assert!(takeable(&lease("", 0.0), "me"));
        assert!(takeable(&lease("me", 0.0), "me"));
        assert!(!takeable(&lease("other", 5.0), "me"));
        assert!(takeable(&lease("other", 30.0), "me"));
        assert!(
            takeable(&lease("other", 15.5), "me"),
            "half a second past its duration is expired"
        );
    }
}
