//! Placement turns, per pool: a deployment that books GPUs holds the pools
//! it books on from its plan until its replicas are in the index, so two
//! plans never book the same free GPUs; deployments placing on other pools
//! go on side by side. A turn takes all its pools at once or waits for
//! all of them (no turn holds one pool while waiting for another, so no
//! two turns wait on each other).

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::Notify;

/// A node pool of a cluster: `(cluster, pool)`; the pool is empty for a
/// replica whose members name none (it books nothing on a pool).
pub type Pool = (String, String);

/// The pools some turn holds.
#[derive(Default)]
pub struct Turns {
    held: Mutex<BTreeSet<Pool>>,
    freed: Notify,
}

/// A turn on some pools, given back when dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
    pools: BTreeSet<Pool>,
}

impl Turns {
    /// Waits until no turn holds any of `pools`, then holds them all.
    pub async fn take(&self, pools: BTreeSet<Pool>) -> Turn<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Counted as waiting before looking: a turn given back between
            // the look and the wait still wakes this one.
            freed.as_mut().enable();
            // A panic elsewhere with the lock held leaves the set as it
            // was: still the pools held.
            if self.try_hold(&pools) {
                return Turn { turns: self, pools };
            }
            freed.await;
        }
    }
}

impl Turns {
    /// Holds all of `pools` if no turn holds any of them.
    fn try_hold(&self, pools: &BTreeSet<Pool>) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let free = held.is_disjoint(pools);
        if free {
            held.extend(pools.iter().cloned());
        }
        free
    }
}

impl Turn<'_> {
    /// Whether this turn holds every one of `pools`.
    pub fn holds(&self, pools: &BTreeSet<Pool>) -> bool {
        pools.is_subset(&self.pools)
    }

    /// The pools it holds.
    pub fn pools(&self) -> &BTreeSet<Pool> {
        &self.pools
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut held = self
            .turns
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for pool in &self.pools {
            held.remove(pool);
        }
        drop(held);
        self.turns.freed.notify_waiters();
    }
}

/// The pools a ModelReplica books on: each engine member's node pool on
/// its cluster.
pub fn pools_of(replica: &Value) -> BTreeSet<Pool> {
    let cluster = replica["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut pools: BTreeSet<Pool> = replica["spec"]["engines"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["members"].as_array().into_iter().flatten())
        .filter_map(|m| m["nodePoolName"].as_str())
        .filter(|p| !p.is_empty())
        .map(|p| (cluster.clone(), p.to_string()))
        .collect();
    if pools.is_empty() {
        pools.insert((cluster, String::new()));
    }
    pools
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn pools(names: &[(&str, &str)]) -> BTreeSet<Pool> {
        names
            .iter()
            .map(|(c, p)| (c.to_string(), p.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn turns_on_other_pools_go_together_and_on_the_same_pool_wait() {
        let turns = Turns::default();
        let a = turns.take(pools(&[("c1", "p1")])).await;
        // Another pool: taken at once, beside the first.
        let b = tokio::time::timeout(
            Duration::from_millis(100),
            turns.take(pools(&[("c1", "p2")])),
        )
        .await
        .expect("another pool is free");
        // One of the held pools among others: waits, holding none of them.
        let waiting = turns.take(pools(&[("c2", "p1"), ("c1", "p1")]));
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("a held pool was taken again"),
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let c = tokio::time::timeout(
            Duration::from_millis(100),
            turns.take(pools(&[("c2", "p1")])),
        )
        .await
        .expect("a waiting turn holds nothing");
        drop(c);
        drop(a);
        let taken = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("given back, the waiting turn goes");
        assert_eq!(taken.pools().len(), 2);
        assert!(b.holds(&pools(&[("c1", "p2")])));
        assert!(!b.holds(&pools(&[("c1", "p2"), ("c1", "p1")])));
    }

    #[test]
    fn a_replica_books_on_its_members_pools() {
        let replica = json!({ "spec": { "clusterName": "c", "engines": [
            { "members": [{ "nodePoolName": "gpu" }, { "nodePoolName": "cpu" }] },
        ] } });
        assert_eq!(pools_of(&replica), pools(&[("c", "cpu"), ("c", "gpu")]));
        let unpinned = json!({ "spec": { "clusterName": "c", "engines": [] } });
        assert_eq!(pools_of(&unpinned), pools(&[("c", "")]));
    }
}
