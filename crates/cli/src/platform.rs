//! The platform part of `modelplane render`: what each InferenceCluster and
//! its ServingStack compose once the cluster runs.
//!
//! A render has no live observations, so it assumes the steady state: a
//! provisioned cluster is Ready with its kubeconfig in the Secret
//! `<cluster>-kubeconfig-<hash>` and its ServingStack's provider configs
//! exist. Existing clusters use the Secret their spec names.

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{
    CacheStorage, CloudClusterStatus, Condition, InferenceClass, InferenceCluster, ServingStack,
    ServingStackStatus, Source, StackSecret,
};
use modelplane_compose::clouds;
use modelplane_compose::recipes::{self, Recipe};
use modelplane_compose::{
    ClusterInputs, Composition, StackInputs, compose_inference_cluster, compose_serving_stack,
};
use serde_json::Value;

/// One cluster's platform compositions.
pub struct Platform {
    /// The InferenceCluster's.
    pub cluster: Composition,
    /// Its ServingStack's, when it composes one.
    pub stack: Option<Composition>,
    /// The recipe the stack installs.
    pub recipe: Option<&'static Recipe>,
    /// The cloud cluster's managed resources, for the clouds composed so far.
    pub cloud: Option<Composition>,
}

fn ready() -> Option<Vec<Condition>> {
    Some(vec![Condition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Condition::default()
    }])
}

/// The RWX storage class each cloud's cluster composition manages
/// (`api.md` §10); Vultr has none, so caches cannot stage there.
fn managed_storage_class(source: Source) -> Option<&'static str> {
    match source {
        Source::Eks => Some("modelplane-rwx-efs"),
        Source::Gke => Some("modelplane-rwx"),
        Source::Aks | Source::Nebius => Some("modelplane-rwx-fs"),
        Source::Vultr | Source::Existing => None,
    }
}

/// A cloud cluster XR's managed resources, running; `None` for a GKE or
/// Nebius cluster whose provider config (and so its project) is not given.
fn compose_cloud(xr: &Value, provider_configs: &[Value]) -> Option<Composition> {
    clouds::compose_cloud(
        xr,
        clouds::CloudObservations {
            provider_configs,
            control_plane_ready: true,
            // The EFS StorageClass needs the file system's ID, which only
            // exists once AWS created it.
            file_system_id: None,
        },
    )
    .ok()
}

/// Composes a cluster as it stands once running, hosting `hosted_replicas`.
pub fn compose(
    cluster: &InferenceCluster,
    classes: &[InferenceClass],
    hosted_replicas: usize,
    provider_configs: &[Value],
) -> Platform {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let running = CloudClusterStatus {
        secrets: Some(vec![StackSecret {
            type_: "Kubeconfig".into(),
            name: names::child_name(&[name, "kubeconfig"]),
            key: "kubeconfig".into(),
            namespace: None,
        }]),
        cache: managed_storage_class(cluster.spec.cluster.source).map(|class| CacheStorage {
            storage_class_name: Some(class.into()),
        }),
        conditions: ready(),
    };
    let inputs = |serving_stack| ClusterInputs {
        cluster,
        classes,
        hosted_replicas,
        cloud_cluster: Some(&running),
        serving_stack,
    };
    let first = compose_inference_cluster(inputs(None));
    let cloud = first
        .desired
        .iter()
        .find(|d| d.kind().ends_with("Cluster") && d.kind() != "ClusterUsage")
        .and_then(|d| compose_cloud(&d.object, provider_configs));
    let Some(mut ss) = first
        .desired
        .iter()
        .find(|d| d.kind() == "ServingStack")
        .and_then(|d| serde_json::from_value::<ServingStack>(d.object.clone()).ok())
    else {
        return Platform {
            cluster: first,
            stack: None,
            recipe: None,
            cloud,
        };
    };
    ss.status = Some(ServingStackStatus {
        gateway: None,
        conditions: ready(),
    });
    let steady = compose_inference_cluster(inputs(Some(&ss)));
    let recipe = ss
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::RECIPE))
        .and_then(|r| recipes::all().iter().find(|k| &k.name == r));
    let stack = recipe.map(|recipe| {
        compose_serving_stack(StackInputs {
            serving_stack: &ss,
            recipe,
            provider_configs_observed: true,
            gateway_address: None,
        })
    });
    Platform {
        cluster: steady,
        stack,
        recipe,
        cloud,
    }
}
