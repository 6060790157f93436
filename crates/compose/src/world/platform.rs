//! The platform kinds' compositions from the world: InferenceClusters,
//! their ServingStacks and cloud cluster XRs, the providers on demand and
//! the InferenceGateway, each first without and then with what only its
//! first pass makes observable.

use modelplane_api::labels;
use modelplane_api::types::{InferenceClass, InferenceCluster, ServingStack};
use serde_json::Value;

use super::{World, condition_true, key};
use crate::{
    ClusterInputs, Composition, Desired, GatewayInputs, StackInputs, Target,
    compose_inference_cluster, compose_inference_gateway, compose_serving_stack,
};

impl World {
    pub(super) fn compose_cluster(&self, key: &str) -> Option<Composition> {
        let cluster = self.clusters.get(key)?;
        let classes: Vec<InferenceClass> = self.classes.values().map(|c| (**c).clone()).collect();
        let hosted_replicas = self
            .replicas
            .values()
            .filter(|r| r.spec.cluster_name == key)
            .count();
        let cloud_cluster = self.cloud_cluster(cluster);
        let serving_stack = self.serving_stack(key);
        let composition = compose_inference_cluster(ClusterInputs {
            cluster,
            classes: &classes,
            hosted_replicas,
            cloud_cluster: cloud_cluster.as_ref(),
            serving_stack: serving_stack.as_ref(),
        });
        Some(match self.reachability.get(key) {
            Some(reachable) => {
                crate::cluster::with_reachability(composition, key, reachable.as_ref())
            }
            None => composition,
        })
    }

    pub(super) fn compose_stack(&self, key: &str) -> Option<Composition> {
        let observed = self.applied_object(&Target::ControlPlane, "ServingStack", key)?;
        let serving_stack: ServingStack = serde_json::from_value((**observed).clone()).ok()?;
        let recipe_name = serving_stack
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::RECIPE))?;
        let recipe = crate::recipes::all()
            .iter()
            .find(|r| &r.name == recipe_name)?;
        let cluster = serving_stack
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::CLUSTER))
            .cloned()
            .unwrap_or_default();
        let gateway = self
            .applied_object(
                &Target::Cluster(cluster),
                "Gateway",
                &self::key(Some(labels::SYSTEM_NAMESPACE), labels::CLUSTER_GATEWAY_NAME),
            )
            .and_then(|g| {
                g["status"]["addresses"][0]["value"]
                    .as_str()
                    .map(str::to_string)
            });
        let inputs = |provider_configs_observed| StackInputs {
            serving_stack: &serving_stack,
            recipe,
            provider_configs_observed,
            gateway_address: gateway.as_deref(),
        };
        // The provider configs are what a stack composes before anything
        // else; the rest waits until they are observed.
        let first = compose_serving_stack(inputs(false));
        let observed =
            !first.desired.is_empty() && first.desired.iter().all(|d| self.observed(d).is_some());
        Some(if observed {
            compose_serving_stack(inputs(true))
        } else {
            // Incomplete until its provider configs are seen (a cold cache
            // after a restart): it may not prune what the full one keeps.
            Composition {
                hold: true,
                ..first
            }
        })
    }

    /// A cloud cluster XR's managed resources: first without what only
    /// exists once the cloud made it (the control plane's kubeconfig, the
    /// file system's ID), then with it once observed. An XR whose provider
    /// config is missing holds: what exists keeps serving.
    pub(super) fn compose_cloud(&self, kind: &str, key: &str) -> Option<Composition> {
        let xr = self.applied_object(&Target::ControlPlane, kind, key)?;
        let configs: Vec<Value> = self
            .provider_configs
            .values()
            .map(|c| (**c).clone())
            .collect();
        let observations = |control_plane_ready, file_system_id| crate::clouds::CloudObservations {
            provider_configs: &configs,
            control_plane_ready,
            file_system_id,
        };
        let first = match crate::clouds::compose_cloud(xr, observations(false, None)) {
            Ok(first) => first,
            Err(e) => {
                return Some(Composition {
                    hold: true,
                    conditions: vec![crate::Condition::new(
                        "Composed",
                        false,
                        "CannotCompose",
                        e.to_string(),
                    )],
                    ..Composition::default()
                });
            }
        };
        let observed = |d: &Desired| self.observed(d).map(|o| &**o);
        let control_plane_ready = first
            .desired
            .iter()
            .filter(|d| !d.object["spec"]["writeConnectionSecretToRef"].is_null())
            .any(|d| observed(d).is_some_and(|o| condition_true(o, "Ready")));
        let file_system_id = first
            .desired
            .iter()
            .filter(|d| d.kind() == "FileSystem")
            .find_map(|d| observed(d)?["status"]["atProvider"]["id"].as_str());
        if !control_plane_ready {
            // Incomplete until the kubeconfig's resource is seen Ready (a
            // cold cache, or the cloud briefly reporting it not Ready): it
            // may not prune the releases the full one keeps.
            return Some(Composition {
                hold: true,
                ..first
            });
        }
        crate::clouds::compose_cloud(xr, observations(true, file_system_id)).ok()
    }

    /// The providers on demand: a cloud's run while a cluster uses it or its
    /// managed resources remain.
    pub(super) fn compose_providers(&self) -> Composition {
        let clusters: Vec<InferenceCluster> =
            self.clusters.values().map(|c| (**c).clone()).collect();
        let leftovers = self
            .applied
            .get(&Target::ControlPlane)
            .into_iter()
            .flat_map(|objects| objects.keys())
            // Provider configs name a cloud but are not its managed resources.
            .filter(|r| !r.kind.ends_with("ProviderConfig") && r.kind != "ProviderConfigUsage")
            .filter_map(|r| crate::providers::cloud_of_group(r.group()))
            .collect();
        let traefik = self
            .gateways
            .get(labels::GATEWAY_NAME)
            .is_some_and(|g| g.spec.backend() == modelplane_api::types::GatewayBackend::Traefik);
        crate::compose_providers(crate::ProvidersInputs {
            clusters: &clusters,
            leftovers: &leftovers,
            traefik,
        })
    }

    pub(super) fn compose_gateway(&self, key: &str) -> Option<Composition> {
        let gateway = self.gateways.get(key)?;
        let cp = Target::ControlPlane;
        let release_ready = |name: &str| {
            self.applied_object(
                &cp,
                "Release",
                &self::key(Some(labels::SYSTEM_NAMESPACE), name),
            )
            .is_some_and(|r| condition_true(r, "Ready"))
        };
        let address = self
            .applied_object(
                &cp,
                "Gateway",
                &self::key(Some(labels::SYSTEM_NAMESPACE), "modelplane"),
            )
            .and_then(|g| {
                g["status"]["addresses"][0]["value"]
                    .as_str()
                    .map(str::to_string)
            });
        Some(compose_inference_gateway(GatewayInputs {
            gateway,
            builtin_address: self.builtin_gateway.as_deref(),
            traefik_ready: release_ready("traefik"),
            metallb_ready: release_ready("metallb"),
            gateway_address: address.as_deref(),
        }))
    }
}
