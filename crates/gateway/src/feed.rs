//! The gateway's objects from an API server's watches, for `modelplane
//! gateway --kubeconfig`: ModelServices, ModelEndpoints and Secrets, kept in
//! an index fed by the one watch driver (`modelplane-watch`: kube-runtime
//! watchers, relisting with backoff on their own).
//!
//! Data flow: watch events update the index synchronously → once every
//! kind is listed, the events ready at that moment are taken together →
//! each object's routing inputs (specs, labels, annotations, Secret data:
//! what the table reads) are compared with those it replaces → only a
//! change compiles and swaps a new table (STYLE.md 2). A status write or a
//! resync publishes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Client, Resource};
use modelplane_api::types::{ModelEndpoint, ModelService};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::{Objects, publish};
use crate::state::Gateway;

/// One watch change, of whichever kind.
enum Change {
    Service(modelplane_watch::Change),
    Endpoint(modelplane_watch::Change),
    Secret(modelplane_watch::Change),
}

/// Objects of one kind by `namespace/name`, whether listed once, and
/// whether what the table reads of them changed since it was compiled.
struct Kind<T> {
    objects: BTreeMap<String, T>,
    listed: bool,
    changed: bool,
}

impl<T> Default for Kind<T> {
    fn default() -> Self {
        Kind {
            objects: BTreeMap::new(),
            listed: false,
            changed: false,
        }
    }
}

fn key<T: Resource>(object: &T) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// What the routing table reads of an object, and nothing else: a change
/// elsewhere (status, resourceVersion, managed fields) publishes nothing.
trait Routed {
    fn routing(&self) -> Value;
}

fn meta(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Value {
    json!([m.namespace, m.name, m.labels, m.annotations])
}

impl Routed for ModelService {
    fn routing(&self) -> Value {
        json!([meta(&self.metadata), self.spec])
    }
}

impl Routed for ModelEndpoint {
    fn routing(&self) -> Value {
        json!([meta(&self.metadata), self.spec])
    }
}

impl Routed for Secret {
    fn routing(&self) -> Value {
        json!([meta(&self.metadata), self.type_, self.data])
    }
}

/// `object` typed; `None` (and a warning) when it does not parse.
fn typed<T: DeserializeOwned>(object: Value) -> Option<T> {
    let name = object["metadata"]["name"].to_string();
    serde_json::from_value(object)
        .inspect_err(|e| tracing::warn!(object = %name, error = %e, "left out: it does not parse"))
        .ok()
}

impl<T: Resource + Routed + DeserializeOwned> Kind<T> {
    /// Takes in one change; compared object by object, so a burst of
    /// status writes costs each its own comparison, not a copy of the
    /// whole kind.
    fn apply(&mut self, change: modelplane_watch::Change) {
        match change {
            modelplane_watch::Change::Listed(objects) => {
                self.objects = objects
                    .into_iter()
                    .filter_map(typed::<T>)
                    .map(|o| (key(&o), o))
                    .collect();
                self.listed = true;
                self.changed = true;
            }
            modelplane_watch::Change::Applied(o) => {
                let Some(o) = typed::<T>(o) else { return };
                let key = key(&o);
                let same = self
                    .objects
                    .get(&key)
                    .is_some_and(|old| old.routing() == o.routing());
                self.changed |= !same;
                self.objects.insert(key, o);
            }
            modelplane_watch::Change::Deleted(o) => {
                let key = format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                );
                self.changed |= self.objects.remove(&key).is_some();
            }
        }
    }
}

/// The changes of every `T` `client` reaches, through the one watch driver.
fn changes_of<T: Resource<DynamicType = ()>>(
    client: &Client,
) -> impl futures_util::Stream<Item = Result<modelplane_watch::Change, watcher::Error>> + Send {
    let resource = kube::api::ApiResource::erase::<T>(&());
    let api = modelplane_watch::api(client.clone(), &resource, None);
    modelplane_watch::changes(api, watcher::Config::default(), modelplane_watch::whole)
}

/// Keeps `gateway`'s table compiled from what `client`'s API server holds,
/// until `shutdown`.
pub async fn watch(
    gateway: Arc<Gateway>,
    client: Client,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let services = changes_of::<ModelService>(&client).map(|e| e.map(Change::Service));
    let endpoints = changes_of::<ModelEndpoint>(&client).map(|e| e.map(Change::Endpoint));
    let secrets = changes_of::<Secret>(&client).map(|e| e.map(Change::Secret));
    let mut changes =
        futures_util::stream::select(futures_util::stream::select(services, endpoints), secrets)
            .boxed();
    let (mut s, mut e, mut k) = (Kind::default(), Kind::default(), Kind::default());
    tokio::pin!(shutdown);
    loop {
        let next = tokio::select! {
            next = changes.next() => next,
            () = &mut shutdown => return,
        };
        let Some(first) = next else {
            return;
        };
        // Take what else is ready now too: one compile for a burst.
        let mut batch = vec![first];
        while let Some(Some(more)) = changes.next().now_or_never() {
            batch.push(more);
        }
        for change in batch {
            match change {
                Ok(Change::Service(ev)) => s.apply(ev),
                Ok(Change::Endpoint(ev)) => e.apply(ev),
                Ok(Change::Secret(ev)) => k.apply(ev),
                Err(error) => tracing::warn!("watch failed, retrying: {error}"),
            }
        }
        let listed = s.listed && e.listed && k.listed;
        if !listed || !(s.changed || e.changed || k.changed) {
            continue;
        }
        (s.changed, e.changed, k.changed) = (false, false, false);
        let objects = Objects {
            services: s.objects.values().cloned().collect(),
            endpoints: e.objects.values().cloned().collect(),
            secrets: k.objects.values().cloned().collect(),
            ignored: 0,
        };
        let started = Instant::now();
        for reason in publish(&gateway, &objects) {
            tracing::warn!("left out: {reason}");
        }
        tracing::info!(
            services = objects.services.len(),
            endpoints = objects.endpoints.len(),
            took_us = started.elapsed().as_micros() as u64,
            "routing table published"
        );
    }
}
