//! Committed changes, told to those listening in the keyspace they were
//! made in. One channel for the whole store woke every watch of every
//! logical cluster on each write, to have all but a few drop it: with a
//! hundred simulated clusters, some three thousand wake-ups (and copies of
//! the event) per write. A channel per keyspace wakes only that cluster's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::broadcast;

use super::Event;

/// Changes a listener may fall behind by before it must resume from the
/// log (`RecvError::Lagged`). Slots are allocated up front, per keyspace
/// listened to.
const ROOT_BUFFER: usize = 4096;
const LOGICAL_BUFFER: usize = 1024;

/// Live changes by keyspace (`""` for the root, `~name` for a logical
/// cluster), as the keyspace module names them.
#[derive(Default)]
pub struct Fanout {
    by_space: Mutex<HashMap<String, broadcast::Sender<Event>>>,
    /// Bumped by every change of what decides access (RBAC objects,
    /// ServiceAccounts) in any keyspace, before the writer hears its write
    /// is done: a policy built at an older count is stale.
    access: AtomicU64,
}

/// Key prefixes (within a keyspace) of what decides access.
const ACCESS_PREFIXES: [&str; 2] = ["/rbac.authorization.k8s.io/", "/core/serviceaccounts/"];

/// The keyspace a store key is in.
pub fn space_of(key: &str) -> &str {
    if key.starts_with('~') {
        key.split_once('/').map_or(key, |(space, _)| space)
    } else {
        ""
    }
}

impl Fanout {
    /// Every change in `space` from now on.
    pub fn subscribe(&self, space: &str) -> broadcast::Receiver<Event> {
        let Ok(mut by_space) = self.by_space.lock() else {
            // Poisoned: a receiver that is closed at once.
            return broadcast::channel(1).1;
        };
        let buffer = if space.is_empty() {
            ROOT_BUFFER
        } else {
            LOGICAL_BUFFER
        };
        by_space
            .entry(space.to_string())
            .or_insert_with(|| broadcast::channel(buffer).0)
            .subscribe()
    }

    /// How many changes of what decides access there have been.
    pub fn access_generation(&self) -> u64 {
        self.access.load(Ordering::Acquire)
    }

    /// Tells `event` to its keyspace's listeners; a keyspace nobody
    /// listens to any more is forgotten.
    pub fn send(&self, event: Event) {
        let space = space_of(&event.key).to_string();
        let key = &event.key[space.len()..];
        if ACCESS_PREFIXES.iter().any(|p| key.starts_with(p)) {
            self.access.fetch_add(1, Ordering::AcqRel);
        }
        let Ok(mut by_space) = self.by_space.lock() else {
            return;
        };
        if let Some(sender) = by_space.get(&space)
            && sender.send(event).is_err()
        {
            by_space.remove(&space);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::EventKind;

    fn event(key: &str) -> Event {
        Event {
            kind: EventKind::Added,
            key: key.into(),
            revision: 1,
            value: Arc::from(&b"{}"[..]),
            prev: None,
            rendered: Default::default(),
        }
    }

    #[test]
    fn a_change_reaches_the_listeners_of_its_own_keyspace_only() {
        let fanout = Fanout::default();
        let mut root = fanout.subscribe("");
        let mut east = fanout.subscribe("~us-east");
        let mut west = fanout.subscribe("~us-west");
        fanout.send(event("~us-east/apps/deployments/ml-team/a"));
        fanout.send(event("/core/pods/ml-team/b"));
        assert_eq!(
            east.try_recv().map(|e| e.key).as_deref(),
            Ok("~us-east/apps/deployments/ml-team/a")
        );
        assert!(east.try_recv().is_err());
        assert_eq!(
            root.try_recv().map(|e| e.key).as_deref(),
            Ok("/core/pods/ml-team/b")
        );
        assert!(root.try_recv().is_err());
        assert!(west.try_recv().is_err());
    }

    #[test]
    fn a_keyspace_nobody_listens_to_is_forgotten() {
        let fanout = Fanout::default();
        drop(fanout.subscribe("~gone"));
        fanout.send(event("~gone/core/pods/x/y"));
        assert!(fanout.by_space.lock().is_ok_and(|m| m.is_empty()));
        assert_eq!(space_of("~c80/core/pods/x/y"), "~c80");
        assert_eq!(space_of("/core/pods/x/y"), "");
    }
}
