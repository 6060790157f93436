//! The status a composition publishes: compose's fields and conditions,
//! Crossplane's `Ready` (every composed object ready by its rule) and
//! `Synced` (every write made), each condition keeping its
//! `lastTransitionTime` while its status stays the same. Pure.

use modelplane_compose::Composition;
use serde_json::{Map, Value, json};

/// Whether what a composition applied is ready: if not, which objects are
/// not (named in the `Ready` condition's message, as Crossplane does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Every composed object ready by its rule.
    pub ready: bool,
    /// `Kind/name` of those not observed or not ready yet.
    pub unready: Vec<String>,
}

impl Readiness {
    /// The `Ready` condition's message: the first three unready objects.
    fn message(&self) -> String {
        let named = self.unready.iter().take(3).cloned().collect::<Vec<_>>();
        match self.unready.len() {
            0 => String::new(),
            n if n <= 3 => format!("Unready resources: {}", named.join(", ")),
            n => format!("Unready resources: {} and {} more", named.join(", "), n - 3),
        }
    }
}

/// The status to publish for `composition`, given the one observed now.
pub fn publish(
    composition: &Composition,
    readiness: &Readiness,
    sync_error: Option<&str>,
    observed: &Value,
    now: &str,
    generation: Option<i64>,
) -> Value {
    let mut status = match &composition.status {
        Some(Value::Object(fields)) => fields.clone(),
        _ => Map::new(),
    };
    let mut conditions: Vec<Value> = composition
        .conditions
        .iter()
        .map(|c| {
            let mut condition = json!({ "type": c.type_, "status": c.status, "reason": c.reason });
            if !c.message.is_empty() {
                condition["message"] = json!(c.message);
            }
            condition
        })
        .collect();
    conditions.push(match sync_error {
        None => json!({ "type": "Synced", "status": "True", "reason": "ReconcileSuccess" }),
        Some(message) => json!({
            "type": "Synced", "status": "False", "reason": "ReconcileError", "message": message,
        }),
    });
    conditions.push(match (&composition.waiting, readiness.unready.is_empty()) {
        _ if readiness.ready => {
            json!({ "type": "Ready", "status": "True", "reason": "Available" })
        }
        // Every composed object is ready; the subject waits for more (a
        // deployment short of replicas): its own words.
        (Some(waiting), true) => json!({
            "type": "Ready", "status": "False", "reason": waiting.reason,
            "message": waiting.message,
        }),
        _ => {
            let mut creating = json!({ "type": "Ready", "status": "False", "reason": "Creating" });
            let message = readiness.message();
            if !message.is_empty() {
                creating["message"] = json!(message);
            }
            creating
        }
    });
    let before = observed["conditions"].as_array();
    for condition in &mut conditions {
        let kept = before
            .into_iter()
            .flatten()
            .find(|old| old["type"] == condition["type"] && old["status"] == condition["status"]);
        condition["lastTransitionTime"] = kept
            .and_then(|old| old.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        if let Some(generation) = generation {
            condition["observedGeneration"] = json!(generation);
        }
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// `observed` with only its `Synced` condition set to the failure
/// `message`: what is published while the composed objects cannot all be
/// seen (a cluster not connected or not listed yet), so a cold cache never
/// turns a serving object not Ready.
pub fn with_synced_error(observed: &Value, message: &str, now: &str) -> Value {
    let mut status = match observed {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Synced");
    let kept = observed["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Synced" && c["status"] == "False")
        .and_then(|c| c.get("lastTransitionTime").cloned());
    conditions.push(json!({
        "type": "Synced", "status": "False", "reason": "ReconcileError", "message": message,
        "lastTransitionTime": kept.unwrap_or_else(|| json!(now)),
    }));
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// `observed` with the composition's own status fields and conditions set,
/// its `Ready` and `Synced` kept: what a cloud cluster publishes while its
/// cluster cannot be seen yet — how to reach that cluster comes from the
/// control plane's managed resources alone, and nothing can be seen there
/// until it is published.
pub fn with_fields(composition: &Composition, observed: &Value, now: &str) -> Value {
    let mut status = match observed {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    if let Some(Value::Object(fields)) = &composition.status {
        for (field, value) in fields {
            if field != "conditions" {
                status.insert(field.clone(), value.clone());
            }
        }
    }
    let before = observed["conditions"].as_array();
    let mut conditions: Vec<Value> = Vec::new();
    for c in &composition.conditions {
        let mut condition = json!({ "type": c.type_, "status": c.status, "reason": c.reason });
        if !c.message.is_empty() {
            condition["message"] = json!(c.message);
        }
        let kept = before
            .into_iter()
            .flatten()
            .find(|old| old["type"] == condition["type"] && old["status"] == condition["status"]);
        condition["lastTransitionTime"] = kept
            .and_then(|old| old.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        conditions.push(condition);
    }
    // In the order `publish` writes them.
    for type_ in ["Synced", "Ready"] {
        conditions.extend(
            before
                .into_iter()
                .flatten()
                .find(|c| c["type"] == type_)
                .cloned(),
        );
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// The condition types whose status changed from `before` to `after`, with
/// their new reason and message: what an Event tells.
pub fn transitions(before: &Value, after: &Value) -> Vec<(String, String, String, String)> {
    let old = before["conditions"].as_array();
    after["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            !old.into_iter()
                .flatten()
                .any(|o| o["type"] == c["type"] && o["status"] == c["status"])
        })
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (
                text("type"),
                text("status"),
                text("reason"),
                text("message"),
            )
        })
        .collect()
}

/// The Events that tell an object's story as its conditions change (what
/// `kubectl get events` shows between the composition's own): a
/// ModelReplica's engine starting (its workloads applied, pulling and
/// loading weights) and serving, anything becoming Ready, and anything
/// Ready that stops being so.
pub fn story(kind: &str, before: &Value, after: &Value) -> Vec<modelplane_compose::Event> {
    use modelplane_compose::{Event, EventType};
    let condition = |status: &Value, type_: &str| -> Option<(String, String, String)> {
        status["conditions"].as_array()?.iter().find_map(|c| {
            (c["type"] == type_).then(|| {
                let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (text("status"), text("reason"), text("message"))
            })
        })
    };
    let mut told = Vec::new();
    let event = |type_, reason: &str, message: String| Event {
        type_,
        reason: reason.into(),
        message,
    };
    if kind == "ModelReplica" {
        let was = condition(before, "ModelReady").map(|(_, reason, _)| reason);
        if let Some((_, reason, _)) = condition(after, "ModelReady")
            && was.as_deref() != Some(reason.as_str())
        {
            match reason.as_str() {
                "ModelStarting" => told.push(event(
                    EventType::Normal,
                    "ModelStarting",
                    "Workloads applied; the engine is starting (pulling its image, loading weights)"
                        .into(),
                )),
                "Serving" => told.push(event(EventType::Normal, "Serving", "The engine serves".into())),
                _ => {}
            }
        }
    }
    let was_ready = condition(before, "Ready").is_some_and(|(s, _, _)| s == "True");
    if let Some((state, reason, message)) = condition(after, "Ready") {
        let says = if message.is_empty() {
            reason.clone()
        } else {
            format!("{reason}: {message}")
        };
        match (was_ready, state.as_str()) {
            (false, "True") => {
                told.push(event(EventType::Normal, "Ready", format!("Ready ({says})")))
            }
            (true, "False") => told.push(event(
                EventType::Warning,
                "NotReady",
                format!("No longer ready ({says})"),
            )),
            _ => {}
        }
    }
    told
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readiness(ready: bool) -> Readiness {
        Readiness {
            ready,
            unready: Vec::new(),
        }
    }
    use modelplane_compose::Condition;

    fn composition(ok: bool) -> Composition {
        Composition {
            conditions: vec![Condition::new("ModelReady", ok, "Serving", "")],
            status: Some(json!({ "replicas": 1 })),
            ..Composition::default()
        }
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let first = publish(
            &composition(false),
            &readiness(false),
            None,
            &Value::Null,
            "t1",
            Some(1),
        );
        assert_eq!(first["replicas"], 1);
        let again = publish(
            &composition(false),
            &readiness(false),
            None,
            &first,
            "t2",
            Some(1),
        );
        assert_eq!(
            first, again,
            "nothing changed: the same status, times included"
        );
        let ready = publish(
            &composition(true),
            &readiness(true),
            None,
            &again,
            "t3",
            Some(1),
        );
        let time = |s: &Value, t: &str| {
            s["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == t))
                .map(|c| c["lastTransitionTime"].clone())
        };
        assert_eq!(time(&ready, "ModelReady"), Some(json!("t3")));
        assert_eq!(time(&ready, "Synced"), Some(json!("t1")));
        let changed = transitions(&again, &ready);
        let types: Vec<&str> = changed.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(types, ["ModelReady", "Ready"]);
    }

    #[test]
    fn an_unseen_world_changes_only_synced() {
        let ready = publish(
            &composition(true),
            &readiness(true),
            None,
            &Value::Null,
            "t1",
            None,
        );
        let unseen = with_synced_error(&ready, "cluster edge is not connected yet", "t2");
        let status = |s: &Value, t: &str| {
            s["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == t))
                .map(|c| c["status"].clone())
        };
        assert_eq!(status(&unseen, "Ready"), Some(json!("True")));
        assert_eq!(status(&unseen, "ModelReady"), Some(json!("True")));
        assert_eq!(status(&unseen, "Synced"), Some(json!("False")));
        assert_eq!(unseen["replicas"], 1);
    }

    #[test]
    fn an_unseen_cloud_cluster_publishes_its_fields_and_keeps_its_conditions() {
        let before = publish(
            &composition(false),
            &readiness(false),
            None,
            &Value::Null,
            "t1",
            None,
        );
        let mut reached = composition(false);
        reached.status = Some(json!({ "secrets": [{ "type": "Kubeconfig" }] }));
        let after = with_fields(&reached, &before, "t2");
        assert_eq!(after["secrets"][0]["type"], "Kubeconfig");
        assert_eq!(after["replicas"], 1, "fields it no longer sets stay");
        assert_eq!(after["conditions"], before["conditions"], "nothing changed");
        // A condition the composition no longer states goes; Ready stays.
        let composed = Composition::default();
        let later = with_fields(&composed, &after, "t3");
        let types: Vec<&str> = later["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(types, ["Synced", "Ready"]);
    }

    #[test]
    fn not_ready_names_what_is_not_ready_as_crossplane_does() {
        let waiting = |unready: &[&str]| {
            let status = publish(
                &composition(true),
                &Readiness {
                    ready: false,
                    unready: unready.iter().map(|u| u.to_string()).collect(),
                },
                None,
                &Value::Null,
                "t",
                None,
            );
            status["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
                .expect("Ready")
        };
        assert_eq!(
            waiting(&["ServingStack/us-east-stack"])["message"],
            "Unready resources: ServingStack/us-east-stack"
        );
        assert_eq!(
            waiting(&["A/a", "B/b", "C/c", "D/d", "E/e"])["message"],
            "Unready resources: A/a, B/b, C/c and 2 more"
        );
        assert!(waiting(&[]).get("message").is_none());
    }

    #[test]
    fn a_failed_write_is_synced_false_with_its_message() {
        let status = publish(
            &composition(true),
            &readiness(false),
            Some("boom"),
            &Value::Null,
            "t",
            None,
        );
        let synced = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Synced").cloned())
            .expect("synced");
        assert_eq!(synced["status"], "False");
        assert_eq!(synced["message"], "boom");
    }

    #[test]
    fn a_replica_tells_its_story_once_per_step() {
        let status = |ready: &str, model: &str| {
            serde_json::json!({ "conditions": [
                { "type": "ModelReady", "status": if model == "Serving" { "True" } else { "False" }, "reason": model },
                { "type": "Ready", "status": ready, "reason": "Available" } ] })
        };
        let reasons = |before: &Value, after: &Value| -> Vec<String> {
            story("ModelReplica", before, after)
                .into_iter()
                .map(|e| e.reason)
                .collect()
        };
        let waiting = status("False", "WaitingForModel");
        let starting = status("False", "ModelStarting");
        let serving = status("True", "Serving");
        assert!(
            reasons(&Value::Null, &waiting).is_empty(),
            "being created is no news"
        );
        assert_eq!(reasons(&waiting, &starting), ["ModelStarting"]);
        assert_eq!(reasons(&starting, &serving), ["Serving", "Ready"]);
        assert!(reasons(&serving, &serving).is_empty());
        assert_eq!(reasons(&serving, &starting), ["ModelStarting", "NotReady"]);
    }
}
