//! The fleet's provider-level work: each provider's health, and Helm
//! releases (installed into a workload cluster through the kubeconfig
//! their ProviderConfig's Secret holds).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::work::{Effect, Work};
use super::{Fleet, FleetKind, Key, RETRY};
use crate::clock::timestamp;
use crate::cloud::{self, Observation, Phase};
use crate::helm;

impl Fleet {
    pub(super) fn provider_health(&self, key: &Key, object: Arc<Value>) -> Work {
        let running = self.provider_running(&key.2);
        let installed =
            json!({ "type": "Installed", "status": "True", "reason": "ActivePackageRevision" });
        let healthy = if running {
            json!({ "type": "Healthy", "status": "True", "reason": "HealthyPackageRevision" })
        } else {
            json!({ "type": "Healthy", "status": "False", "reason": "UnhealthyPackageRevision",
                "message": "Deployment has 0 available replicas: its DeploymentRuntimeConfig sets replicas: 0" })
        };
        let conditions = [installed, healthy];
        let changed = conditions.iter().any(|c| {
            cloud::condition(&object, c["type"].as_str().unwrap_or_default())
                .is_none_or(|p| p["status"] != c["status"] || p["reason"] != c["reason"])
        });
        let stamp = timestamp();
        let status = changed.then(|| {
            json!({
                "conditions": conditions.iter().map(|c| { let mut c = c.clone(); c["lastTransitionTime"] = json!(stamp); c }).collect::<Vec<_>>(),
                "currentIdentifier": object["spec"]["package"],
                "resolvedPackage": object["spec"]["package"],
            })
        });
        Work {
            kind: key.0,
            object,
            effect: None,
            status,
        }
    }

    /// A Helm release: its provider config's kubeconfig Secret must exist;
    /// an unknown chart fails; installing takes the profile's release time.
    pub(super) fn plan_release(
        &mut self,
        key: &Key,
        object: Arc<Value>,
        now: Duration,
    ) -> Option<Work> {
        let running = self.provider_running("provider-helm");
        let chart_name = object["spec"]["forProvider"]["chart"]["name"]
            .as_str()
            .unwrap_or_default();
        let chart = helm::chart(chart_name);
        let credentials = self.release_kubeconfig(key, &object);
        let blocked = credentials.as_ref().err().cloned();
        if running && blocked.is_none() && !self.since.contains_key(key) {
            self.since.insert(key.clone(), now);
        }
        let observation = Observation {
            object: &object,
            provider_running: running,
            blocked: blocked.clone(),
            failure: chart.as_ref().err().map(String::as_str),
            since: self.since.get(key).copied(),
            provisioning: self
                .hands
                .config
                .profile
                .scale(self.hands.config.profile.release),
            now,
        };
        let phase = cloud::phase(&observation);
        match &phase {
            Phase::Creating { ready_at } => self.wake(key.clone(), *ready_at),
            Phase::Blocked(_) => self.wake(key.clone(), now + RETRY),
            _ => {}
        }
        let effect = match (&phase, credentials, chart) {
            (Phase::Available, Ok(kubeconfig), Ok(chart)) => Some(Effect::Release {
                kubeconfig,
                chart,
                namespace: object["spec"]["forProvider"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string(),
            }),
            _ => None,
        };
        let at_provider = (phase == Phase::Available).then(|| {
            json!({ "revision": 1, "state": "deployed", "releaseDescription": "Install complete" })
        });
        let status = cloud::status_update(&object, &phase, at_provider, &timestamp());
        (effect.is_some() || status.is_some()).then_some(Work {
            kind: key.0,
            object,
            effect,
            status,
        })
    }

    /// The kubeconfig a Release's provider config points at.
    fn release_kubeconfig(&self, key: &Key, object: &Value) -> Result<String, String> {
        let config_name = object["spec"]["providerConfigRef"]["name"]
            .as_str()
            .unwrap_or("default");
        let config_kind = FleetKind::of("helm.m.crossplane.io", "ProviderConfig")
            .ok_or("helm ProviderConfig is not served")?;
        let config = self.get(config_kind, &key.1, config_name).ok_or_else(|| {
            format!("cannot connect to the provider: cannot get referenced ProviderConfig: ProviderConfig.helm.m.crossplane.io \"{config_name}\" not found")
        })?;
        let secret_ref = &config["spec"]["credentials"]["secretRef"];
        let namespace = secret_ref["namespace"].as_str().unwrap_or(&key.1);
        let name = secret_ref["name"].as_str().unwrap_or_default();
        let field = secret_ref["key"].as_str().unwrap_or("kubeconfig");
        let secret = self.get(FleetKind::Secret, namespace, name).ok_or_else(|| {
            format!("cannot connect to the provider: cannot get credentials secret {namespace}/{name}: not found")
        })?;
        secret_field(secret, field).ok_or_else(|| {
            format!("cannot connect to the provider: credentials secret {namespace}/{name} has no key {field}")
        })
    }
}

/// A Secret's `key`, decoded from `data` (base64) or read from `stringData`.
pub(super) fn secret_field(secret: &Value, key: &str) -> Option<String> {
    if let Some(text) = secret["stringData"][key].as_str() {
        return Some(text.to_string());
    }
    let encoded = secret["data"][key].as_str()?;
    let bytes = base64_decode(encoded)?;
    String::from_utf8(bytes).ok()
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use k8s_openapi::ByteString;
    serde_json::from_value::<ByteString>(json!(text))
        .ok()
        .map(|b| b.0)
}
