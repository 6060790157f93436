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

/// An object: its kind's index (in the caller's list), namespace, name.
pub type Key = (usize, String, String);

/// One watch event.
#[derive(Debug)]
pub enum Change {
    /// Created or changed.
    Apply(usize, Value),
    /// Deleted.
    Delete(usize, Value),
    /// A relist begins.
    Relisting(usize),
    /// A relist ended: what it did not list is gone.
    Relisted(usize),
}

/// Watches `kind` (index `index`) and sends every change until `tx` closes,
/// each object as `trim` leaves it (what the loop reads of it), through
/// the one watch driver the controller and the gateway use too.
pub async fn watch(
    client: Client,
    kind: Kind,
    index: usize,
    trim: fn(usize, &mut Value),
    tx: mpsc::UnboundedSender<Change>,
) {
    let api = modelplane_watch::api(client, &kind.resource, None);
    let shape = move |mut value: Value| {
        trim(index, &mut value);
        // Kept as long as the object lives.
        modelplane_watch::compact(value)
    };
    let mut changes = modelplane_watch::changes(api, watcher::Config::default(), shape).boxed();
    while let Some(change) = changes.next().await {
        let changes = match change {
            Ok(modelplane_watch::Change::Applied(o)) => vec![Change::Apply(index, o)],
            Ok(modelplane_watch::Change::Deleted(o)) => vec![Change::Delete(index, o)],
            Ok(modelplane_watch::Change::Listed(objects)) => {
                std::iter::once(Change::Relisting(index))
                    .chain(objects.into_iter().map(|o| Change::Apply(index, o)))
                    .chain(std::iter::once(Change::Relisted(index)))
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
pub fn keep_all(_: usize, _: &mut Value) {}

/// The key of `object` of kind `index`.
pub fn key_of(index: usize, object: &Value) -> Key {
    (
        index,
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
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Shared with what is planned from them, which most often is nothing:
    /// an object is not copied to be looked at.
    objects: BTreeMap<Key, Arc<Value>>,
    relisting: HashMap<usize, BTreeSet<Key>>,
}

/// What a change did to the snapshot.
#[derive(Debug)]
pub enum Touched {
    /// `key` is now `object`.
    Applied(Key, Arc<Value>),
    /// `key` was `object` and is gone.
    Deleted(Key, Arc<Value>),
}

impl Snapshot {
    /// Applies `change`, returning what it touched.
    pub fn change(&mut self, change: Change) -> Vec<Touched> {
        match change {
            Change::Apply(index, object) => {
                let key = key_of(index, &object);
                if let Some(seen) = self.relisting.get_mut(&index) {
                    seen.insert(key.clone());
                }
                let object = Arc::new(object);
                self.objects.insert(key.clone(), object.clone());
                vec![Touched::Applied(key, object)]
            }
            Change::Delete(index, object) => {
                let key = key_of(index, &object);
                self.objects.remove(&key);
                vec![Touched::Deleted(key, Arc::new(object))]
            }
            Change::Relisting(index) => {
                self.relisting.insert(index, BTreeSet::new());
                Vec::new()
            }
            Change::Relisted(index) => {
                let seen = self.relisting.remove(&index).unwrap_or_default();
                let stale: Vec<Key> = self
                    .objects
                    .keys()
                    .filter(|k| k.0 == index && !seen.contains(*k))
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

    /// The object `name` of kind `index` in `namespace` ("" when cluster-scoped).
    pub fn get(&self, index: usize, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(index, namespace.to_string(), name.to_string()))
            .map(|o| &**o)
    }

    /// The object at `key`.
    pub fn at(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key).map(|o| &**o)
    }

    /// The object at `key`, shared.
    pub fn shared(&self, key: &Key) -> Option<Arc<Value>> {
        self.objects.get(key).cloned()
    }

    /// Every object of kind `index`.
    pub fn of(&self, index: usize) -> impl Iterator<Item = (&Key, &Value)> {
        let start = (index, String::new(), String::new());
        self.objects
            .range(start..)
            .take_while(move |(k, _)| k.0 == index)
            .map(|(k, o)| (k, &**o))
    }

    /// Every key.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.objects.keys()
    }

    /// Every object.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Value)> {
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
        let mut s = Snapshot::default();
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
