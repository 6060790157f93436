//! One watch driver for every index Modelplane keeps (the controller's,
//! the gateway's routing feed, the simulator's informers): a kube-runtime
//! watcher (relisting with backoff on its own) turned into [`Change`]s of
//! plain JSON objects — a relist whole, then each apply and delete — each
//! object parsed once and shaped by its user before it is kept.
//!
//! Data flow: watch events → [`Object`] (parsed straight into a `Value`,
//! its `managedFields` skipped, never allocated) → the user's `shape` (what
//! it keeps of the object) → [`Change`] → the user's index, which alone
//! writes what it holds.

use std::borrow::Cow;

use futures_util::{Stream, StreamExt};
use kube::Resource;
use kube::api::{Api, ApiResource, ObjectMeta};
use kube::core::DynamicResourceScope;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// What one watch saw.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A list, whole (the first, or a relist after the watch expired):
    /// what it does not hold is gone.
    Listed(Vec<Value>),
    /// An object created or changed.
    Applied(Value),
    /// An object deleted, as last seen.
    Deleted(Value),
}

/// Watches what `api` reaches, with `config`, until the stream is dropped;
/// each object as `shape` leaves it. A failed list or watch is an `Err`
/// item (the watcher backs off and tries again on its own).
pub fn changes(
    api: Api<Object>,
    config: watcher::Config,
    shape: impl Fn(Value) -> Value + Send + 'static,
) -> impl Stream<Item = Result<Change, watcher::Error>> + Send {
    let events = watcher(api, config).default_backoff().boxed();
    futures_util::stream::unfold(
        (events, Vec::new(), shape),
        |(mut events, mut listing, shape)| async move {
            loop {
                let change = match events.next().await? {
                    Err(e) => Err(e),
                    Ok(watcher::Event::Init) => {
                        listing.clear();
                        continue;
                    }
                    Ok(watcher::Event::InitApply(o)) => {
                        listing.push(shape(o.value));
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        Ok(Change::Listed(std::mem::take(&mut listing)))
                    }
                    Ok(watcher::Event::Apply(o)) => Ok(Change::Applied(shape(o.value))),
                    Ok(watcher::Event::Delete(o)) => Ok(Change::Deleted(shape(o.value))),
                };
                return Some((change, (events, listing, shape)));
            }
        },
    )
}

/// The objects of `resource` everywhere `client` reaches (or in
/// `namespace`), for [`changes`].
pub fn api(client: kube::Client, resource: &ApiResource, namespace: Option<&str>) -> Api<Object> {
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, resource),
        None => Api::all_with(client, resource),
    }
}

/// `object` written out afresh, for one kept as long as it lives: each map
/// the size of what it holds (read, a map grows by doubling, and trimming
/// leaves the room it had: 10 % more memory).
pub fn compact(object: Value) -> Value {
    serde_json::to_value(&object).unwrap_or(object)
}

/// Keeps the object as it came.
pub fn whole(object: Value) -> Value {
    object
}

/// An object as a watch brings it: parsed once, as a `Value` (kube's
/// `DynamicObject` parses through serde's `flatten`, which buffers each
/// object whole first), with the metadata the watcher reads to resume
/// copied beside it.
#[derive(Clone, Debug)]
pub struct Object {
    metadata: ObjectMeta,
    /// The object, without its `managedFields`.
    pub value: Value,
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Object, D::Error> {
        let value = deserializer.deserialize_map(WithoutManagedFields { top: true })?;
        let text = |key: &str| Some(value["metadata"].get(key)?.as_str()?.to_string());
        Ok(Object {
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

/// Reads an object, skipping its metadata's `managedFields`: nothing here
/// reads who owns which field, and the entries are most of a
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

impl Resource for Object {
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    #[test]
    fn a_watched_object_is_kept_whole_but_for_its_managed_fields() {
        let line = json!({ "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": "n", "uid": "u", "resourceVersion": "7", "labels": { "a": "b" },
                "managedFields": [{ "manager": "kubelet" }] },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] } });
        let watched: Object = serde_json::from_value(line.clone()).expect("an object");
        let mut expected = line;
        expected["metadata"]
            .as_object_mut()
            .map(|m| m.remove("managedFields"));
        assert_eq!(watched.value, expected);
        // What the watcher reads to resume.
        assert_eq!(watched.resource_version().as_deref(), Some("7"));
        assert_eq!(watched.meta().name.as_deref(), Some("n"));
    }
}
