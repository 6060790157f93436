//! The few API calls the simulated controllers make, over kube-rs: they
//! reach every API server, the control plane's and each workload cluster's,
//! only through a kubeconfig, as the real ones do.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{GroupVersionKind, Request, request};
use kube::{Client, Config, Resource};
use serde_json::Value;

use crate::error::Error;

/// A kind the simulator reads or writes.
#[derive(Clone, Debug)]
pub struct Kind {
    /// Its API resource.
    pub resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl Kind {
    /// `api_version`/`kind` served as `plural`.
    pub fn new(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            ),
            namespaced,
        }
    }

    /// Requests for its objects in `namespace` (as [`Kind::api`]).
    fn request(&self, namespace: Option<&str>) -> Request {
        Request::new(DynamicObject::url_path(
            &self.resource,
            namespace.filter(|_| self.namespaced),
        ))
    }

    /// Its API in `namespace` (all namespaces when `None`, or when cluster-scoped).
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// The built-in kinds the simulator writes.
pub mod builtin {
    use super::Kind;

    /// `v1` Namespace.
    pub fn namespace() -> Kind {
        Kind::new("v1", "Namespace", "namespaces", false)
    }
    /// `v1` Secret.
    pub fn secret() -> Kind {
        Kind::new("v1", "Secret", "secrets", true)
    }
    /// `v1` Node.
    pub fn node() -> Kind {
        Kind::new("v1", "Node", "nodes", false)
    }
    /// `apiextensions.k8s.io/v1` CustomResourceDefinition.
    pub fn crd() -> Kind {
        Kind::new(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        )
    }
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(object: &Value) -> Option<&str> {
    object["metadata"]["namespace"].as_str()
}

/// Sends a write, reading its answer for its status only: the simulated
/// controllers learn what they wrote from their watches, as the real ones
/// do, and parsing the object the server answers would be work thrown away
/// (a fifth of the simulator's time while a thousand clusters' nodes
/// register).
async fn send(
    client: &Client,
    request: Result<http::Request<Vec<u8>>, request::Error>,
) -> Result<(), kube::Error> {
    let request = request.map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await.map(drop)
}

/// Server-side applies `object` (of `kind`) as `manager`, forcing conflicts
/// (each simulated controller owns what it writes).
pub async fn apply(
    client: &Client,
    kind: &Kind,
    object: &Value,
    manager: &str,
) -> Result<(), kube::Error> {
    let request = kind.request(namespace_of(object)).patch(
        name_of(object),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(object),
    );
    send(client, request).await
}

/// Server-side applies `status` to the status of `object` as `manager`.
pub async fn apply_status(
    client: &Client,
    kind: &Kind,
    object: &Value,
    status: &Value,
    manager: &str,
) -> Result<(), kube::Error> {
    let mut metadata = serde_json::json!({ "name": name_of(object) });
    // The status is for this object, not one created since under its name.
    if let Some(uid) = object["metadata"]["uid"].as_str() {
        metadata["uid"] = uid.into();
    }
    let patch = serde_json::json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "metadata": metadata,
        "status": status,
    });
    let request = kind.request(namespace_of(object)).patch_subresource(
        "status",
        name_of(object),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&patch),
    );
    send(client, request).await
}

/// A JSON merge patch of `object`'s status as `manager`.
pub async fn merge_status(
    client: &Client,
    kind: &Kind,
    object: &Value,
    status: &Value,
    manager: &str,
) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    let request = kind.request(namespace_of(object)).patch_subresource(
        "status",
        name_of(object),
        &params,
        &Patch::Merge(serde_json::json!({ "status": status })),
    );
    send(client, request).await
}

/// A JSON merge patch of an existing object (never creates one).
pub async fn merge(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    name: &str,
    patch: &Value,
) -> Result<(), kube::Error> {
    let request =
        kind.request(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch));
    send(client, request).await
}

/// Creates `object` unless it exists.
pub async fn create(client: &Client, kind: &Kind, object: &Value) -> Result<(), kube::Error> {
    create_new(client, kind, object, None).await.map(drop)
}

/// Creates `object` as `manager` (the client's default when `None`): false
/// if it existed already.
pub async fn create_new(
    client: &Client,
    kind: &Kind,
    object: &Value,
    manager: Option<&str>,
) -> Result<bool, kube::Error> {
    let params = PostParams {
        field_manager: manager.map(str::to_string),
        ..PostParams::default()
    };
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = kind.request(namespace_of(object)).create(&params, body);
    match send(client, request).await {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes `name` of `kind`, if it exists.
pub async fn delete(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), kube::Error> {
    match kind
        .api(client, namespace)
        .delete(name, &Default::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A client for the cluster a kubeconfig (its current context) names.
pub async fn connect(kubeconfig: &Kubeconfig) -> Result<Client, kube::Error> {
    let config = Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    // Over HTTP/2 where the server speaks it: one connection carries every
    // watch and write of a cluster (kube's own HTTP/1.1 client held one per
    // watch, eleven or more per cluster). Safe because the informers read
    // every watch at once (see the informer module).
    modelplane_kubeclient::client(config)
}

/// The server URL of a kubeconfig's current context.
pub fn server(kubeconfig: &Kubeconfig) -> Option<String> {
    let context = kubeconfig.current_context.as_deref()?;
    let cluster = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .cluster
        .clone();
    kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster)?
        .cluster
        .as_ref()?
        .server
        .clone()
}

/// `root`'s current context moved to the logical cluster `name`
/// (`<root server>/clusters/<name>`) and named after it, as YAML.
pub fn logical_kubeconfig(root: &Kubeconfig, name: &str) -> Result<String, Error> {
    let current = root
        .current_context
        .as_deref()
        .ok_or_else(|| Error::Kubeconfig("has no current context".into()))?;
    let mut context = root
        .contexts
        .iter()
        .find(|c| c.name == current)
        .cloned()
        .ok_or_else(|| Error::Kubeconfig(format!("has no context {current}")))?;
    let inner = context
        .context
        .as_mut()
        .ok_or_else(|| Error::Kubeconfig("has an empty current context".into()))?;
    let mut cluster = root
        .clusters
        .iter()
        .find(|c| c.name == inner.cluster)
        .cloned()
        .ok_or_else(|| Error::Kubeconfig(format!("has no cluster {}", inner.cluster)))?;
    let auth = root
        .auth_infos
        .iter()
        .find(|a| Some(&a.name) == inner.user.as_ref())
        .cloned();
    if let Some(c) = cluster.cluster.as_mut() {
        let server = c.server.as_deref().unwrap_or_default();
        let base = server
            .split_once("/clusters/")
            .map_or(server, |(base, _)| base)
            .trim_end_matches('/');
        c.server = Some(format!("{base}/clusters/{name}"));
    }
    cluster.name = name.to_string();
    inner.cluster = name.to_string();
    context.name = name.to_string();
    let out = Kubeconfig {
        clusters: vec![cluster],
        contexts: vec![context],
        auth_infos: auth.into_iter().collect(),
        current_context: Some(name.to_string()),
        ..Kubeconfig::default()
    };
    serde_saphyr::to_string(&out).map_err(|e| Error::Kubeconfig(format!("cannot be written: {e}")))
}
