//! The model kinds' compositions from the world: ModelDeployments (their
//! replicas placed by the scheduler), ModelReplicas (their workloads'
//! readiness and pods' truth read back), ModelEndpoints, ModelServices and
//! ModelCaches.

use std::collections::{BTreeMap, BTreeSet};

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{InferenceCluster, ModelEndpoint, ModelReplica};

use super::{World, condition_true, key, typed_condition_true};
use crate::{
    CacheLookup, Composition, DeploymentInputs, EndpointInputs, ServiceInputs, Target,
    compose_model_deployment, compose_model_endpoint, compose_model_service,
};

impl World {
    /// A ModelCache's volume and hydration Job (and, for a gated
    /// repository, the Secret with its token) on every cluster it selects,
    /// each cluster's staging read back from what was observed there. A
    /// token not read yet holds.
    pub(super) fn compose_cache(&self, key: &str) -> Option<Composition> {
        let cache = self.caches.get(key)?;
        let clusters: Vec<InferenceCluster> =
            self.clusters.values().map(|c| (**c).clone()).collect();
        let namespace = cache.metadata.namespace.as_deref().unwrap_or_default();
        let name = cache.metadata.name.as_deref().unwrap_or_default();
        let pvc = names::cache_pvc_name(namespace, name);
        let auth = cache
            .spec
            .hugging_face
            .as_ref()
            .and_then(|hf| hf.auth_secret.as_ref());
        let token = match auth {
            None => crate::Token::NotNeeded,
            Some(auth) => match self
                .cache_tokens
                .get(&self::key(Some(namespace), &auth.name))
            {
                None => crate::Token::Unresolved,
                Some(None) => crate::Token::Missing,
                Some(Some(data)) => match data.get(auth.key.as_deref().unwrap_or("HF_TOKEN")) {
                    Some(value) => crate::Token::Found(value),
                    None => crate::Token::Missing,
                },
            },
        };
        let token_value = match token {
            crate::Token::Found(value) if !value.is_empty() => Some(value),
            _ => None,
        };
        let job = names::cache_job_name_with_token(namespace, name, token_value);
        let observed: BTreeMap<String, crate::Staging> = self
            .clusters
            .keys()
            .map(|cluster| {
                let target = Target::Cluster(cluster.clone());
                let get = |kind, name: &str| {
                    self.applied_object(&target, kind, &self::key(Some(namespace), name))
                };
                let claim = get("PersistentVolumeClaim", &pvc);
                let hydration = get("Job", &job);
                let staging = crate::Staging {
                    pvc_observed: claim.is_some(),
                    pvc_bound: claim.is_some_and(|c| c["status"]["phase"] == "Bound"),
                    job_complete: hydration.is_some_and(|j| condition_true(j, "Complete")),
                    job_failed: hydration.is_some_and(|j| condition_true(j, "Failed")),
                    failure: self
                        .workloads
                        .get(cluster)
                        .and_then(|state| state.hydration_failure(namespace, &job))
                        .map(str::to_string),
                };
                (cluster.clone(), staging)
            })
            .collect();
        let status = cache.status.clone().unwrap_or_default();
        let previous = status.clusters.unwrap_or_default();
        Some(crate::compose_model_cache(crate::CacheInputs {
            cache,
            clusters: self.synced.then_some(clusters.as_slice()),
            token,
            observed: &observed,
            previous: &previous,
            was_ready: typed_condition_true(status.conditions.as_ref()),
        }))
    }

    pub(super) fn compose_endpoint(&self, key: &str) -> Option<Composition> {
        let endpoint = self.endpoints.get(key)?;
        let first = compose_model_endpoint(EndpointInputs {
            endpoint,
            backend_observed: false,
        });
        let observed =
            !first.desired.is_empty() && first.desired.iter().all(|d| self.observed(d).is_some());
        Some(if observed {
            compose_model_endpoint(EndpointInputs {
                endpoint,
                backend_observed: true,
            })
        } else {
            first
        })
    }

    pub(super) fn compose_service(&self, key: &str) -> Option<Composition> {
        let service = self.services.get(key)?;
        let endpoints: Vec<&ModelEndpoint> = self.endpoints.values().map(|e| e.as_ref()).collect();
        let gateway = self.gateways.get(labels::GATEWAY_NAME);
        let gateway_address = gateway
            .and_then(|g| g.status.as_ref())
            .and_then(|s| s.address.clone());
        let builtin = gateway
            .is_some_and(|g| g.spec.backend() == modelplane_api::types::GatewayBackend::Modelplane);
        let first = compose_model_service(ServiceInputs {
            service,
            endpoints: &endpoints,
            gateway_address: gateway_address.as_deref(),
            route_accepted: false,
        });
        // The built-in gateway serves ModelServices directly: an observed
        // route is accepted; another gateway says so in the route's status.
        let accepted = first.desired.iter().any(|d| {
            self.observed(d).is_some_and(|route| {
                builtin
                    || route["status"]["parents"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|p| {
                            p["conditions"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                        })
            })
        });
        Some(if accepted {
            compose_model_service(ServiceInputs {
                service,
                endpoints: &endpoints,
                gateway_address: gateway_address.as_deref(),
                route_accepted: true,
            })
        } else {
            first
        })
    }

    pub(super) fn compose_deployment(&self, key: &str) -> Option<Composition> {
        let deployment = self.deployments.get(key)?;
        let namespace = deployment.metadata.namespace.as_deref();
        let cache = match &deployment.spec.template.spec.model_cache_ref {
            None => CacheLookup::NotReferenced,
            Some(_) if !self.synced => CacheLookup::Unresolved,
            Some(reference) => match self.caches.get(&self::key(namespace, &reference.name)) {
                Some(cache) => CacheLookup::Present(cache),
                None => CacheLookup::Absent,
            },
        };
        let clusters = self.cluster_views();
        let name = deployment.metadata.name.as_deref().unwrap_or_default();
        let ready: BTreeSet<String> = self
            .replicas
            .in_deployment(namespace, name)
            .filter(|(_, r)| {
                typed_condition_true(r.status.as_ref().and_then(|s| s.conditions.as_ref()))
            })
            .filter_map(|(_, r)| r.metadata.name.clone())
            .collect();
        let routed: BTreeSet<String> = self
            .endpoints
            .in_deployment(namespace, name)
            .filter_map(|(_, e)| e.metadata.name.clone())
            .collect();
        Some(compose_model_deployment(DeploymentInputs {
            deployment,
            cache,
            clusters: self.synced.then_some(clusters.as_slice()),
            replicas: &self.replicas,
            ready: &ready,
            routed: &routed,
        }))
    }

    pub(super) fn compose_replica(&self, key: &str) -> Option<Composition> {
        let replica = self.replicas.get(key)?;
        let cluster = self
            .clusters
            .get(&replica.spec.cluster_name)
            .map(|c| c.as_ref());
        // Each workload's observed readiness (by the rule it was composed
        // with) is read as it is composed: one pass.
        let composition = crate::compose_model_replica_reading(replica, cluster, |workload| {
            self.observed(workload)
                .map(|o| workload.ready_when.is_met(o))
        });
        let composition = self.with_pod_truth(replica, composition);
        let name = &replica.spec.cluster_name;
        Some(match self.reachability.get(name) {
            Some(reachable) => {
                crate::cluster::with_cluster_reachability(composition, name, reachable.as_ref())
            }
            None => composition,
        })
    }

    /// `composition` of `replica`, its `ModelReady` saying why it is not
    /// (a node not Ready, a pod the scheduler cannot place, a container
    /// that cannot start) from what its serving pods show, with an event
    /// for each new occurrence.
    pub(super) fn with_pod_truth(
        &self,
        replica: &ModelReplica,
        mut composition: Composition,
    ) -> Composition {
        let Some(state) = self.workloads.get(&replica.spec.cluster_name) else {
            return composition;
        };
        let Some(model_ready) = composition
            .conditions
            .iter_mut()
            .find(|c| c.type_ == "ModelReady" && c.status != "True")
        else {
            return composition;
        };
        let namespace = replica.metadata.namespace.as_deref().unwrap_or_default();
        let name = replica.metadata.name.as_deref().unwrap_or_default();
        let Some((reason, message)) =
            crate::observed::why_not_ready(state.pods_of(namespace, name), |node| {
                state.nodes.get(node)
            })
        else {
            return composition;
        };
        model_ready.reason = reason.to_string();
        model_ready.message = message.clone();
        composition.events.push(crate::Event {
            type_: crate::EventType::Warning,
            reason: reason.to_string(),
            message,
        });
        composition
    }
}
