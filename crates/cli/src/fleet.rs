//! The fleet a command reads from manifests: admitted exactly as `validate`
//! admits them, then typed, and the world they describe.

use std::collections::BTreeMap;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use modelplane_api::types::{
    InferenceClass, InferenceCluster, ModelCache, ModelDeployment, ModelReplica, ModelService,
};
use modelplane_compose::world::{self, ObjectRef, World};
use modelplane_scheduler::{Deployment, ExistingReplica};
use serde_json::Value;
use std::sync::Arc;

use crate::validate::{check_paths, print_problems};

/// Base64 of `<token from the Secret>`: what a gated ModelCache's token
/// shows as in a render, which reads no Secrets.
pub const TOKEN_PLACEHOLDER: &str = "PHRva2VuIGZyb20gdGhlIFNlY3JldD4=";

/// The typed objects of the inputs.
#[derive(Default)]
pub struct Fleet {
    /// InferenceClusters.
    pub clusters: Vec<InferenceCluster>,
    /// InferenceClasses.
    pub classes: Vec<InferenceClass>,
    /// ModelCaches.
    pub caches: Vec<ModelCache>,
    /// ModelReplicas.
    pub replicas: Vec<ModelReplica>,
    /// ModelDeployments.
    pub deployments: Vec<ModelDeployment>,
    /// ModelServices.
    pub services: Vec<ModelService>,
    /// The InferenceGateway, if given.
    pub gateway: Option<modelplane_api::types::InferenceGateway>,
    /// `(apiVersion, kind)` of every other object given (managed resources, Secrets…).
    pub others: Vec<(String, String)>,
    /// Cloud provider configs given (their project IDs name GKE and Nebius resources).
    pub cloud_provider_configs: Vec<Value>,
}

impl Fleet {
    /// The world these objects describe, as the controllers would first
    /// observe it: Modelplane's own objects and the cloud provider configs
    /// given. A gated ModelCache's token reads as [`TOKEN_PLACEHOLDER`]: no
    /// Secret is read.
    pub fn world(&self) -> World {
        let mut world = World::default();
        let named = |m: &ObjectMeta| {
            world::key(
                m.namespace.as_deref(),
                m.name.as_deref().unwrap_or_default(),
            )
        };
        for c in &self.clusters {
            world
                .clusters
                .insert(named(&c.metadata), Arc::new(c.clone()));
        }
        for c in &self.classes {
            world
                .classes
                .insert(named(&c.metadata), Arc::new(c.clone()));
        }
        for c in &self.caches {
            world.caches.insert(named(&c.metadata), Arc::new(c.clone()));
            let auth = c
                .spec
                .hugging_face
                .as_ref()
                .and_then(|hf| hf.auth_secret.as_ref());
            if let Some(auth) = auth {
                let secret = world::key(c.metadata.namespace.as_deref(), &auth.name);
                let field = auth.key.clone().unwrap_or_else(|| "HF_TOKEN".into());
                let data = BTreeMap::from([(field, TOKEN_PLACEHOLDER.to_string())]);
                world.cache_tokens.insert(secret, Some(data));
            }
        }
        for r in &self.replicas {
            world
                .replicas
                .insert(named(&r.metadata), Arc::new(r.clone()));
        }
        for d in &self.deployments {
            world
                .deployments
                .insert(named(&d.metadata), Arc::new(d.clone()));
        }
        for s in &self.services {
            world
                .services
                .insert(named(&s.metadata), Arc::new(s.clone()));
        }
        if let Some(g) = &self.gateway {
            world
                .gateways
                .insert(named(&g.metadata), Arc::new(g.clone()));
        }
        for c in &self.cloud_provider_configs {
            world
                .provider_configs
                .insert(ObjectRef::of(c), Arc::new(c.clone()));
        }
        world
    }

    /// The scheduler's view of every existing ModelReplica.
    pub fn existing_replicas(&self) -> Vec<ExistingReplica> {
        self.replicas
            .iter()
            .map(ExistingReplica::from_resource)
            .collect()
    }
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> anyhow::Result<T> {
    serde_json::from_value(value).context("an admitted object does not fit its type")
}

pub fn key(namespace: &Option<String>, name: &Option<String>) -> String {
    format!(
        "{}/{}",
        namespace.as_deref().unwrap_or("default"),
        name.as_deref().unwrap_or_default()
    )
}

/// The scheduler's deployment, whether it may place new replicas, and a note.
pub fn deployment_view(
    md: &ModelDeployment,
    caches: &[ModelCache],
) -> (Deployment, bool, Option<String>) {
    let Some(cache_ref) = &md.spec.template.spec.model_cache_ref else {
        return (Deployment::from_resource(md, None), true, None);
    };
    let cache = caches.iter().find(|c| {
        c.metadata.name.as_deref() == Some(cache_ref.name.as_str())
            && c.metadata.namespace == md.metadata.namespace
    });
    match cache {
        Some(cache) => {
            let selector: Option<BTreeMap<String, String>> = cache
                .spec
                .cluster_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .filter(|m| !m.is_empty());
            (Deployment::from_resource(md, selector.as_ref()), true, None)
        }
        None => (
            Deployment::from_resource(md, None),
            false,
            Some(format!(
                "ModelCache {} is not in the inputs: new replicas are held until it exists",
                cache_ref.name
            )),
        ),
    }
}

/// One object read for a fleet.
enum Read {
    Cluster(Box<InferenceCluster>),
    Class(Box<InferenceClass>),
    Cache(Box<ModelCache>),
    Replica(Box<ModelReplica>),
    Deployment(Box<ModelDeployment>),
    Gateway(Box<modelplane_api::types::InferenceGateway>),
    Service(Box<ModelService>),
    Other,
    /// A foreign kind, as written.
    Foreign(Value),
}

fn read(object: Value, admitted: bool) -> anyhow::Result<Read> {
    if !admitted {
        return Ok(Read::Foreign(object));
    }
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    Ok(match kind.as_str() {
        "InferenceCluster" => Read::Cluster(Box::new(typed(object)?)),
        "InferenceClass" => Read::Class(Box::new(typed(object)?)),
        "ModelCache" => Read::Cache(Box::new(typed(object)?)),
        "ModelReplica" => Read::Replica(Box::new(typed(object)?)),
        "ModelDeployment" => Read::Deployment(Box::new(typed(object)?)),
        "InferenceGateway" => Read::Gateway(Box::new(typed(object)?)),
        "ModelService" => Read::Service(Box::new(typed(object)?)),
        _ => Read::Other,
    })
}

/// Reads and admits the manifests of `paths`; on invalid input prints the
/// problems as `validate` does and returns the exit code instead. Lines are
/// read only when something is wrong, and the cores share the work, so a
/// fleet dump of 11,000 documents loads in a fraction of the time.
pub fn load(paths: &[String]) -> anyhow::Result<Result<Fleet, u8>> {
    let Some(objects) = crate::validate::admitted(paths, read)? else {
        let reports = check_paths(paths, &[])?;
        print_problems(&reports, false)?;
        return Ok(Err(if reports.iter().any(|r| r.unreadable()) {
            2
        } else {
            1
        }));
    };
    let mut fleet = Fleet::default();
    for object in objects {
        match object {
            Read::Cluster(c) => fleet.clusters.push(*c),
            Read::Class(c) => fleet.classes.push(*c),
            Read::Cache(c) => fleet.caches.push(*c),
            Read::Replica(r) => fleet.replicas.push(*r),
            Read::Deployment(d) => fleet.deployments.push(*d),
            Read::Gateway(g) => fleet.gateway = Some(*g),
            Read::Service(s) => fleet.services.push(*s),
            Read::Other => {}
            Read::Foreign(object) => {
                let api_version = object["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let kind = object["kind"].as_str().unwrap_or_default().to_string();
                if kind.ends_with("ProviderConfig") {
                    fleet.cloud_provider_configs.push(object);
                }
                fleet.others.push((api_version, kind));
            }
        }
    }
    Ok(Ok(fleet))
}
