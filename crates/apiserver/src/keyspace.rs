//! One cluster's view of the shared store.
//!
//! Every logical cluster (`/clusters/<name>/…`) keeps its objects in the
//! same store as the root cluster, under keys that start with `~<name>`;
//! the root cluster's keys start with `/`, so no root prefix ever reaches
//! them. A [`Keyspace`] adds its prefix to every key going in and takes it
//! off every key coming out, so the server above it cannot tell which
//! cluster it is serving. Revisions stay the store's: one sequence for all.

use std::sync::Arc;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::oneshot;

use crate::store::{Error, Event, Revision, Store, Stored, Write};

/// One cluster's keys in the shared store.
#[derive(Clone)]
pub struct Keyspace {
    store: Arc<Store>,
    /// Empty for the root cluster, `~<name>` for a logical one.
    prefix: Arc<str>,
}

impl Keyspace {
    /// The root cluster's keys.
    pub fn root(store: Arc<Store>) -> Keyspace {
        Keyspace {
            store,
            prefix: Arc::from(""),
        }
    }

    /// The keys of the logical cluster `name`.
    pub fn logical(store: Arc<Store>, name: &str) -> Keyspace {
        Keyspace {
            store,
            prefix: Arc::from(logical_prefix(name)),
        }
    }

    /// The store underneath, shared by every cluster.
    pub fn shared(&self) -> &Arc<Store> {
        &self.store
    }

    fn inner(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// `key` without this space's prefix, if it is one of this space's keys.
    fn outer<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(&*self.prefix)
            .filter(|rest| rest.starts_with('/'))
    }

    fn strip(&self, mut stored: Stored) -> Stored {
        if !self.prefix.is_empty() {
            stored.key = stored.key[self.prefix.len()..].to_string();
        }
        stored
    }

    fn strip_event(&self, mut event: Event) -> Event {
        if !self.prefix.is_empty() {
            event.key = event.key[self.prefix.len()..].to_string();
        }
        event
    }

    fn map_write(&self, write: Write) -> Write {
        if self.prefix.is_empty() {
            return write;
        }
        match write {
            Write::Create { key, value } => Write::Create {
                key: self.inner(&key),
                value,
            },
            Write::Update {
                key,
                expected,
                value,
            } => Write::Update {
                key: self.inner(&key),
                expected,
                value,
            },
            Write::Delete { key, expected } => Write::Delete {
                key: self.inner(&key),
                expected,
            },
        }
    }

    /// See [`Store::submit`]: queues now, resolves once durable.
    pub fn submit(
        &self,
        write: Write,
    ) -> impl Future<Output = Result<Result<Stored, Error>, oneshot::error::RecvError>> + Send + 'static
    {
        let pending = self.store.submit(self.map_write(write));
        let space = self.clone();
        async move { Ok(pending.await?.map(|s| space.strip(s))) }
    }

    /// See [`Store::write`].
    pub fn write(&self, write: Write) -> Result<Stored, Error> {
        self.store
            .write(self.map_write(write))
            .map(|s| self.strip(s))
    }

    /// See [`Store::write_all`].
    pub fn write_all(&self, writes: Vec<Write>) -> Vec<Result<Stored, Error>> {
        let writes = writes.into_iter().map(|w| self.map_write(w)).collect();
        self.store
            .write_all(writes)
            .into_iter()
            .map(|r| r.map(|s| self.strip(s)))
            .collect()
    }

    /// See [`Store::get`].
    pub fn get(&self, key: &str) -> Result<Option<Stored>, Error> {
        Ok(self.store.get(&self.inner(key))?.map(|s| self.strip(s)))
    }

    /// See [`Store::list`].
    pub fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<(Revision, Vec<Stored>), Error> {
        let after = start_after.map(|k| self.inner(k));
        let (revision, items) = self
            .store
            .list(&self.inner(prefix), after.as_deref(), limit)?;
        Ok((revision, items.into_iter().map(|s| self.strip(s)).collect()))
    }

    /// See [`Store::events_since`].
    pub fn events_since(&self, prefix: &str, after: Revision) -> Result<Vec<Event>, Error> {
        let events = self.store.events_since(&self.inner(prefix), after)?;
        Ok(events.into_iter().map(|e| self.strip_event(e)).collect())
    }

    /// See [`Store::value_before`].
    pub fn value_before(&self, key: &str, revision: Revision) -> Result<Option<Arc<[u8]>>, Error> {
        self.store.value_before(&self.inner(key), revision)
    }

    /// This space's changes from now on (see [`Store::subscribe`]).
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            events: self.store.subscribe(&self.prefix),
            space: self.clone(),
        }
    }

    /// This space's objects that name `owner` (see [`Store::dependents`]).
    pub fn dependents(&self, owner: &str) -> Vec<String> {
        self.store
            .dependents(owner)
            .iter()
            .filter_map(|k| self.outer(k).map(str::to_string))
            .collect()
    }

    /// Whether an object of this space has `uid`.
    pub fn has_uid(&self, uid: &str) -> bool {
        self.store
            .key_of_uid(uid)
            .is_some_and(|k| self.outer(&k).is_some())
    }

    /// The owner uids this space's objects name, with the keys naming each.
    pub fn owners(&self) -> Vec<(String, Vec<String>)> {
        self.store
            .owners()
            .into_iter()
            .filter_map(|(owner, keys)| {
                let keys: Vec<String> = keys
                    .iter()
                    .filter_map(|k| self.outer(k).map(str::to_string))
                    .collect();
                (!keys.is_empty()).then_some((owner, keys))
            })
            .collect()
    }

    /// See [`Store::revision`].
    pub fn revision(&self) -> Result<Revision, Error> {
        self.store.revision()
    }

    /// See [`Store::compacted`].
    pub fn compacted(&self) -> Result<Revision, Error> {
        self.store.compacted()
    }

    /// See [`Store::compact`]: history is one log for every cluster.
    pub fn compact(&self, revision: Revision) -> Result<Revision, Error> {
        self.store.compact(revision)
    }

    /// See [`Store::durability`].
    pub fn durability(&self) -> Result<(String, i64), Error> {
        self.store.durability()
    }
}

/// The store key prefix of the logical cluster `name`.
pub fn logical_prefix(name: &str) -> String {
    format!("~{name}")
}

/// A space's changes: the store's, with other clusters' left out.
pub struct Subscription {
    events: broadcast::Receiver<Event>,
    space: Keyspace,
}

impl Subscription {
    /// The next change in this space (see `broadcast::Receiver::recv`).
    pub async fn recv(&mut self) -> Result<Event, RecvError> {
        loop {
            let event = self.events.recv().await?;
            if self.space.outer(&event.key).is_some() {
                return Ok(self.space.strip_event(event));
            }
        }
    }
}
