//! Kubernetes Events (core `v1`, which `kubectl describe` and `kubectl get
//! events` read on every server) on the objects Modelplane reconciles: what
//! a composition says happened, and failures. As client-go's recorder does,
//! an Event that happens again is not a new object: its `count` goes up and
//! its `lastTimestamp` moves, so `kubectl get events --sort-by
//! .lastTimestamp` shows it again during an incident. What a composition
//! says on every pass (a deployment that cannot place) is counted again at
//! most once a minute, so a quiet fleet stays almost unwritten; a change
//! of state (a replica serving, a node lost) is counted each time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use modelplane_compose::world::ObjectRef;
use serde_json::json;

/// Who Events say reported them.
pub const COMPONENT: &str = "modelplane";

/// How often an Event a composition repeats on every pass is counted again.
const REPEATED_EVERY: Duration = Duration::from_secs(60);

/// How an Event recurs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recurrence {
    /// Said on every pass while it holds: counted again at most once a
    /// minute.
    WhileItHolds,
    /// Said once each time it happens: counted every time.
    EachTime,
}

/// An Event recorded: its name, count, and when it was last counted.
struct Recorded {
    name: String,
    count: i32,
    at: Instant,
}

/// Records Events through one client.
pub struct Recorder {
    client: Client,
    gate: std::sync::Arc<crate::lease::WriteGate>,
    /// `(uid, reason, message)` of every Event recorded.
    sent: Mutex<HashMap<(String, String, String), Recorded>>,
}

impl Recorder {
    /// A recorder writing through `client`.
    pub fn new(client: Client, gate: std::sync::Arc<crate::lease::WriteGate>) -> Recorder {
        Recorder {
            client,
            gate,
            sent: Mutex::default(),
        }
    }

    /// Records `event` on `object` (uid `uid`) at `now` (RFC 3339): a new
    /// Event the first time, else the same one counted again.
    pub async fn record(
        &self,
        object: &ObjectRef,
        uid: &str,
        event: &modelplane_compose::Event,
        now: &str,
        recurrence: Recurrence,
    ) -> Result<(), kube::Error> {
        if !self.gate.is_open() {
            return Ok(());
        }
        let namespace = if object.namespace.is_empty() {
            "default".to_string()
        } else {
            object.namespace.clone()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key = (uid.to_string(), event.reason.clone(), event.message.clone());
        let again = self.sent.lock().ok().and_then(|sent| {
            sent.get(&key).map(|r| {
                let due = recurrence == Recurrence::EachTime || r.at.elapsed() >= REPEATED_EVERY;
                (r.name.clone(), r.count, due)
            })
        });
        if let Some((name, count, due)) = again {
            if !due {
                return Ok(());
            }
            let counted = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "count": count + 1, "lastTimestamp": now })),
                )
                .await;
            match counted {
                Ok(_) => {
                    self.remember(key, name, count + 1);
                    return Ok(());
                }
                // Gone (Events expire): recorded anew below.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let type_ = match event.type_ {
            modelplane_compose::EventType::Normal => "Normal",
            modelplane_compose::EventType::Warning => "Warning",
        };
        let body: Event = serde_json::from_value(json!({
            "metadata": { "generateName": format!("{}.", object.name), "namespace": namespace },
            "involvedObject": {
                "apiVersion": object.api_version, "kind": object.kind,
                "name": object.name, "uid": uid,
                "namespace": if object.namespace.is_empty() { None } else { Some(&object.namespace) },
            },
            "reason": event.reason, "message": event.message, "type": type_,
            "source": { "component": COMPONENT }, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }))
        .map_err(kube::Error::SerdeError)?;
        let created = api.create(&PostParams::default(), &body).await?;
        self.remember(key, created.metadata.name.unwrap_or_default(), 1);
        Ok(())
    }

    fn remember(&self, key: (String, String, String), name: String, count: i32) {
        if let Ok(mut sent) = self.sent.lock() {
            // Bounded: a process that recorded this many starts over.
            if sent.len() > 100_000 {
                sent.clear();
            }
            sent.insert(
                key,
                Recorded {
                    name,
                    count,
                    at: Instant::now(),
                },
            );
        }
    }
}
