//! Watches turned into an in-memory snapshot, as an informer keeps one: each
//! kind is watched (relisting with backoff on its own), and every change
//! reaches one loop that owns the snapshot.
//!
//! A watch is read as fast as the server sends, whatever the loop is doing:
//! changes queue without bound between them, as in client-go's DeltaFIFO.
//! Over HTTP/2 every watch of a server shares one connection, whose window a
//! watch left unread would spend, stalling the loop's own writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures_util::StreamExt;
use kube::Client;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::client::Kind;

/// What names a watched kind to its snapshot: the caller's own enum of the
/// kinds it watches.
pub trait Watched: Copy + Ord + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static {}

impl<K: Copy + Ord + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static> Watched for K {}

/// An object: its kind, namespace, name.
pub type Key<K> = (K, String, String);

/// One watch event.
#[derive(Debug)]
pub enum Change<K> {
    /// Created or changed.
    Apply(K, Value),
    /// Deleted.
    Delete(K, Value),
    /// A relist begins.
    Relisting(K),
    /// A relist ended: what it did not list is gone.
    Relisted(K),
}

/// Watches `kind` (the caller's `watched`) and sends every change until
/// `tx` closes, each object as `trim` leaves it (what the loop reads of
/// it), through the one watch driver the controller and the gateway use
/// too.
pub async fn watch<K: Watched>(
    client: Client,
    kind: Kind,
    watched: K,
    trim: fn(K, &mut Value),
    tx: mpsc::UnboundedSender<Change<K>>,
) {
    let api = modelplane_watch::api(client, &kind.resource, None);
    let shape = move |mut value: Value| {
        trim(watched, &mut value);
        // Kept as long as the object lives.
        modelplane_watch::compact(value)
    };
    let mut changes = modelplane_watch::changes(api, watcher::Config::default(), shape).boxed();
    while let Some(change) = changes.next().await {
        let changes = match change {
            Ok(modelplane_watch::Change::Applied(o)) => vec![Change::Apply(watched, o)],
            Ok(modelplane_watch::Change::Deleted(o)) => vec![Change::Delete(watched, o)],
            Ok(modelplane_watch::Change::Listed(objects)) => {
                std::iter::once(Change::Relisting(watched))
                    .chain(objects.into_iter().map(|o| Change::Apply(watched, o)))
                    .chain(std::iter::once(Change::Relisted(watched)))
                    .collect()
            }
            Err(e) => {
                // Normal until a CRD is installed; the watcher retries.
                tracing::trace!(kind = %kind.resource.kind, error = %e, "watch failed; retrying");
                continue;
            }
        };
        for change in changes {
            if tx.send(change).is_err() {
                return;
            }
        }
    }
}

/// Keeps the whole object.
pub fn keep_all<K>(_: K, _: &mut Value) {}

/// The key of `object` of `kind`.
pub fn key_of<K>(kind: K, object: &Value) -> Key<K> {
    (
        kind,
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// What the watches have shown.
#[derive(Debug)]
pub struct Snapshot<K> {
    /// Shared with what is planned from them, which most often is nothing:
    /// an object is not copied to be looked at.
    objects: BTreeMap<Key<K>, Arc<Value>>,
    relisting: HashMap<K, BTreeSet<Key<K>>>,
}

impl<K> Default for Snapshot<K> {
    fn default() -> Self {
        Snapshot {
            objects: BTreeMap::new(),
            relisting: HashMap::new(),
        }
    }
}

/// What a change did to the snapshot.
#[derive(Debug)]
pub enum Touched<K> {
    /// `key` is now `object`.
    Applied(Key<K>, Arc<Value>),
    /// `key` was `object` and is gone.
    Deleted(Key<K>, Arc<Value>),
}

impl<K: Watched> Snapshot<K> {
    /// Applies `change`, returning what it touched.
    pub fn change(&mut self, change: Change<K>) -> Vec<Touched<K>> {
        match change {
            Change::Apply(kind, object) => {
                let key = key_of(kind, &object);
                if let Some(seen) = self.relisting.get_mut(&kind) {
                    seen.insert(key.clone());
                }
                let object = Arc::new(object);
                self.objects.insert(key.clone(), object.clone());
                vec![Touched::Applied(key, object)]
            }
            Change::Delete(kind, object) => {
                let key = key_of(kind, &object);
                self.objects.remove(&key);
                vec![Touched::Deleted(key, Arc::new(object))]
            }
            Change::Relisting(kind) => {
                self.relisting.insert(kind, BTreeSet::new());
                Vec::new()
            }
            Change::Relisted(kind) => {
                let seen = self.relisting.remove(&kind).unwrap_or_default();
                let stale: Vec<Key<K>> = self
                    .objects
                    .keys()
                    .filter(|k| k.0 == kind && !seen.contains(*k))
                    .cloned()
                    .collect();
                stale
                    .into_iter()
                    .filter_map(|key| {
                        let object = self.objects.remove(&key)?;
                        Some(Touched::Deleted(key, object))
                    })
                    .collect()
            }
        }
    }

    /// The object `name` of `kind` in `namespace` ("" when cluster-scoped).
    pub fn get(&self, kind: K, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(kind, namespace.to_string(), name.to_string()))
            .map(|o| &**o)
    }

    /// The object at `key`.
    pub fn at(&self, key: &Key<K>) -> Option<&Value> {
        self.objects.get(key).map(|o| &**o)
    }

    /// The object at `key`, shared.
    pub fn shared(&self, key: &Key<K>) -> Option<Arc<Value>> {
        self.objects.get(key).cloned()
    }

    /// Every object of `kind`.
    pub fn of(&self, kind: K) -> impl Iterator<Item = (&Key<K>, &Value)> {
        let start = (kind, String::new(), String::new());
        self.objects
            .range(start..)
            .take_while(move |(k, _)| k.0 == kind)
            .map(|(k, o)| (k, &**o))
    }

    /// Every key.
    pub fn keys(&self) -> impl Iterator<Item = &Key<K>> {
        self.objects.keys()
    }

    /// Every object.
    pub fn iter(&self) -> impl Iterator<Item = (&Key<K>, &Value)> {
        self.objects.iter().map(|(k, o)| (k, &**o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str) -> Value {
        json!({ "metadata": { "name": name, "namespace": "ns" } })
    }

    #[test]
    fn a_relist_forgets_what_it_did_not_list() {
        let mut s = Snapshot::<u8>::default();
        s.change(Change::Apply(0, object("a")));
        s.change(Change::Apply(0, object("b")));
        s.change(Change::Apply(1, object("c")));
        s.change(Change::Relisting(0));
        s.change(Change::Apply(0, object("b")));
        let touched = s.change(Change::Relisted(0));
        assert!(matches!(&touched[..], [Touched::Deleted(k, _)] if k.2 == "a"));
        assert_eq!(s.of(0).count(), 1);
        assert!(s.get(1, "ns", "c").is_some(), "other kinds are untouched");
    }
}
