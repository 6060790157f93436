//! What the simulated fleet's harnesses share: waiting for objects to turn
//! Ready by watching them, never by listing them again and again. A
//! harness polling with kubectl took a fifth of the machine from the
//! process it measured (a `kubectl get` of 1,000 ModelReplicas costs it
//! 0.9 CPU-seconds, and the API server as much again).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use futures_util::StreamExt;
use kube::Client;
use kube::api::{ListParams, ObjectList, WatchEvent, WatchParams};
use kube::core::Request;
use serde::Deserialize;

/// What a harness reads of an object: its name and its conditions. Parsing
/// each watched object whole (as a `DynamicObject`) cost the scale harness
/// a seventh of the machine's CPU.
#[derive(Clone, Debug, Deserialize)]
pub struct Conditioned {
    metadata: Named,
    #[serde(default, deserialize_with = "null_as_default")]
    status: Status,
}

#[derive(Clone, Debug, Deserialize)]
struct Named {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Status {
    #[serde(default, deserialize_with = "null_as_default")]
    conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

/// A field that may be missing or `null`, as Kubernetes writes either.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl Conditioned {
    fn is_ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == "True")
    }

    fn key(self) -> (Option<String>, String) {
        (self.metadata.namespace, self.metadata.name)
    }
}

/// Waits until `want` objects of the collection at `path` (such as
/// `/api/v1/nodes`) have the condition Ready True: one list, then a watch
/// from it, listing again only when the watch fails, expires or ends. Calls
/// `counted` with each new count. A list that fails (the API not up yet)
/// is tried again after half a second.
pub async fn until_ready(
    client: &Client,
    path: &str,
    want: usize,
    mut counted: impl FnMut(usize),
) -> anyhow::Result<()> {
    let collection = Request::new(path);
    let retry = || tokio::time::sleep(Duration::from_millis(500));
    let mut last = None;
    let mut count = |ready: &HashSet<(Option<String>, String)>| {
        if last != Some(ready.len()) {
            last = Some(ready.len());
            counted(ready.len());
        }
        ready.len() >= want
    };
    loop {
        let list = collection.list(&ListParams::default())?;
        let Ok(list) = client.request::<ObjectList<Conditioned>>(list).await else {
            retry().await;
            continue;
        };
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let mut ready: HashSet<_> = list
            .items
            .into_iter()
            .filter(Conditioned::is_ready)
            .map(Conditioned::key)
            .collect();
        if count(&ready) {
            return Ok(());
        }
        let watch = collection.watch(&WatchParams::default(), &version)?;
        let Ok(events) = client.request_events::<Conditioned>(watch).await else {
            retry().await;
            continue;
        };
        let mut events = events.boxed();
        while let Some(event) = events.next().await {
            // A line that fails: list again, after a pause.
            let Ok(event) = event else {
                retry().await;
                break;
            };
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) if o.is_ready() => {
                    ready.insert(o.key());
                }
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    ready.remove(&o.key());
                }
                WatchEvent::Bookmark(_) => {}
                // Expired or failed: list again.
                WatchEvent::Error(_) => break,
            }
            if count(&ready) {
                return Ok(());
            }
        }
    }
}

/// The number in environment variable `name`, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The release binary, or the one `MODELPLANE` names (a baseline built
/// from another commit, run side by side).
pub fn binary() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("MODELPLANE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/modelplane"),
        PathBuf::from,
    );
    if !path.exists() {
        anyhow::bail!(
            "{} is missing: cargo build --release -p modelplane first",
            path.display()
        );
    }
    Ok(path)
}

/// A `modelplane up`, killed when dropped.
pub struct Up(pub Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
