//! Kubernetes Events (core `v1`, which `kubectl describe` and `kubectl get
//! events` read on every server) on the objects Modelplane reconciles: what
//! a composition says happened, and failures. Each reason and message is
//! recorded once per object by a process, however many passes repeat it,
//! so a quiet fleet stays unwritten.

use std::collections::HashSet;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, PostParams};
use modelplane_compose::world::ObjectRef;
use serde_json::json;

/// Who Events say reported them.
pub const COMPONENT: &str = "modelplane";

/// Records Events through one client.
pub struct Recorder {
    client: Client,
    gate: std::sync::Arc<crate::lease::WriteGate>,
    /// `(uid, reason, message)` of every Event recorded.
    sent: Mutex<HashSet<(String, String, String)>>,
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

    /// Records `event` on `object` (uid `uid`) at `now` (RFC 3339).
    pub async fn record(
        &self,
        object: &ObjectRef,
        uid: &str,
        event: &modelplane_compose::Event,
        now: &str,
    ) -> Result<(), kube::Error> {
        let namespace = if object.namespace.is_empty() {
            "default".to_string()
        } else {
            object.namespace.clone()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key = (uid.to_string(), event.reason.clone(), event.message.clone());
        if self.sent.lock().is_ok_and(|s| s.contains(&key)) || !self.gate.is_open() {
            return Ok(());
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
        api.create(&PostParams::default(), &body).await?;
        if let Ok(mut sent) = self.sent.lock() {
            // Bounded: a process that recorded this many starts over.
            if sent.len() > 100_000 {
                sent.clear();
            }
            sent.insert(key);
        }
        Ok(())
    }
}
