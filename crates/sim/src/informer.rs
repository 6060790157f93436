//! Watches turned into an in-memory snapshot, as an informer keeps one: each
//! kind is watched (relisting with backoff on its own), and every change
//! reaches one loop that owns the snapshot.
//!
//! A watch is read as fast as the server sends, whatever the loop is doing:
//! changes queue without bound between them, as in client-go's DeltaFIFO.
//! Over HTTP/2 every watch of a server shares one connection, whose window a
//! watch left unread would spend, stalling the loop's own writes.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource};
use kube::core::DynamicResourceScope;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
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
/// each object as `trim` leaves it (what the loop reads of it).
pub async fn watch(
    client: Client,
    kind: Kind,
    index: usize,
    trim: fn(usize, &mut Value),
    tx: mpsc::UnboundedSender<Change>,
) {
    let api: Api<Watched> = Api::all_with(client, &kind.resource);
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let value = |o: Watched| {
            let mut value = o.value;
            trim(index, &mut value);
            // Kept as long as the object lives, so written out afresh: each
            // map the size of what it holds (read, a map grows by doubling,
            // and trimming leaves the room it had: 10 % more memory).
            serde_json::to_value(&value).unwrap_or(value)
        };
        let change = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                Change::Apply(index, value(o))
            }
            Ok(watcher::Event::Delete(o)) => Change::Delete(index, value(o)),
            Ok(watcher::Event::Init) => Change::Relisting(index),
            Ok(watcher::Event::InitDone) => Change::Relisted(index),
            Err(e) => {
                // Normal until a CRD is installed; the watcher retries.
                tracing::trace!(kind = %kind.resource.kind, error = %e, "watch failed; retrying");
                continue;
            }
        };
        if tx.send(change).is_err() {
            return;
        }
    }
}

/// An object as a watch brings it: parsed once, as a `Value` (kube's
/// `DynamicObject` parses through serde's `flatten`, which buffers each
/// object whole first, and was then written back out as a `Value`), with
/// the metadata the watcher reads copied beside it.
#[derive(Clone, Debug)]
struct Watched {
    metadata: ObjectMeta,
    value: Value,
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Watched, D::Error> {
        let value = deserializer.deserialize_map(WithoutManagedFields { top: true })?;
        let text = |key: &str| Some(value["metadata"].get(key)?.as_str()?.to_string());
        Ok(Watched {
            metadata: ObjectMeta {
                name: text("name"),
                namespace: text("namespace"),
                uid: text("uid"),
                resource_version: text("resourceVersion"),
                ..ObjectMeta::default()
            },
            value,
        })
    }
}

/// Reads an object, skipping its metadata's `managedFields`: no simulated
/// controller reads who owns which field, and the entries are most of a
/// server-side-applied object's size (skipped, they are never allocated).
struct WithoutManagedFields {
    /// The object itself; `false` for its metadata.
    top: bool,
}

impl<'de> Visitor<'de> for WithoutManagedFields {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = match (self.top, key.as_str()) {
                (true, "metadata") => map.next_value_seed(WithoutManagedFields { top: false })?,
                (false, "managedFields") => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                _ => map.next_value()?,
            };
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

impl<'de> DeserializeSeed<'de> for WithoutManagedFields {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        resource.kind.as_str().into()
    }
    fn group(resource: &ApiResource) -> Cow<'_, str> {
        resource.group.as_str().into()
    }
    fn version(resource: &ApiResource) -> Cow<'_, str> {
        resource.version.as_str().into()
    }
    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        resource.api_version.as_str().into()
    }
    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        resource.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
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
    use kube::ResourceExt;
    use serde_json::json;

    fn object(name: &str) -> Value {
        json!({ "metadata": { "name": name, "namespace": "ns" } })
    }

    #[test]
    fn a_watched_object_is_kept_whole_but_for_its_managed_fields() {
        let line = json!({ "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": "n", "uid": "u", "resourceVersion": "7", "labels": { "a": "b" },
                "managedFields": [{ "manager": "kubelet" }] },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] } });
        let watched: Watched = serde_json::from_value(line.clone()).expect("an object");
        let mut expected = line;
        expected["metadata"]
            .as_object_mut()
            .map(|m| m.remove("managedFields"));
        assert_eq!(watched.value, expected);
        // What the watcher reads to resume.
        assert_eq!(watched.resource_version().as_deref(), Some("7"));
        assert_eq!(watched.meta().name.as_deref(), Some("n"));
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
