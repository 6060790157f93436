//! The controller in process against the embedded API server, called
//! through its router with no socket: the control plane is the store's
//! root cluster, each workload cluster a logical cluster of it, reached by
//! the controller only through its InferenceCluster's kubeconfig Secret —
//! a connector maps the kubeconfig's server path to the router. What the
//! platform runs beside the controller (Crossplane's Helm provider, Envoy
//! Gateway, the workloads' own controllers) is played by the test, as the
//! process tests' `existing` module plays it through kubectl.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use modelplane_apiserver::{Clusters, Embedded, Store};
use modelplane_controller::clusters::Connector;
use serde_json::{Value, json};

use super::existing::{CONTROL_PLANE_KINDS, WORKLOAD_CLUSTER_KINDS};

/// Where the kubeconfigs say the server is: never dialled.
const SERVER: &str = "https://in-process.invalid";

/// A control plane and its logical clusters, in process.
pub struct Plane {
    _dir: tempfile::TempDir,
    embedded: Option<Embedded>,
    router: axum::Router,
    down: Down,
    /// The control plane's client.
    pub root: kube::Client,
}

/// The clusters whose API servers do not answer the controller, by path
/// prefix (`/clusters/<name>`).
type Down = Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// A kube client calling `router` in process, every path under `prefix`
/// (a logical cluster's `/clusters/<name>`, or none for the root); refused,
/// as a connection is, while `down` holds the prefix.
fn client_at(router: axum::Router, prefix: &str, down: Option<Down>) -> kube::Client {
    let prefix = prefix.trim_end_matches('/').to_string();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (router, prefix, down) = (router.clone(), prefix.clone(), down.clone());
        async move {
            if down.is_some_and(|d| d.lock().is_ok_and(|d| d.contains(&prefix))) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("{prefix}: connection refused"),
                ));
            }
            let (mut parts, body) = request.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            if let Ok(uri) = format!("{prefix}{path}").parse() {
                parts.uri = uri;
            }
            let request = http::Request::from_parts(parts, axum::body::Body::new(body));
            match tower::ServiceExt::oneshot(router, request).await {
                Ok(response) => Ok(response),
                Err(never) => match never {},
            }
        }
    });
    kube::Client::new(service, "default")
}

impl Plane {
    /// A fresh store, served in process.
    pub async fn start() -> Plane {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.db")).expect("store");
        let clusters: Arc<Clusters> = Clusters::open(store);
        let embedded = Embedded::start(clusters).await.expect("the server's work");
        let router = embedded.router();
        let root = client_at(router.clone(), "", None);
        Plane {
            _dir: dir,
            embedded: Some(embedded),
            router,
            down: Down::default(),
            root,
        }
    }

    /// The client of `cluster` (the control plane when none).
    pub fn client(&self, cluster: Option<&str>) -> kube::Client {
        match cluster {
            Some(name) => client_at(self.router.clone(), &format!("/clusters/{name}"), None),
            None => self.root.clone(),
        }
    }

    /// How the controller reaches a workload cluster: by its kubeconfig's
    /// server path, in process (refused while the cluster is down).
    pub fn connector(&self) -> Connector {
        let (router, down) = (self.router.clone(), self.down.clone());
        Connector::new(move |config: kube::Config| {
            Ok(client_at(
                router.clone(),
                config.cluster_url.path(),
                Some(down.clone()),
            ))
        })
    }

    /// Whether `cluster`'s API server answers the controller (the test's
    /// own clients always reach it, as kubectl beside a broken proxy does).
    pub fn set_up(&self, cluster: &str, up: bool) {
        if let Ok(mut down) = self.down.lock() {
            let prefix = format!("/clusters/{cluster}");
            if up {
                down.remove(&prefix);
            } else {
                down.insert(prefix);
            }
        }
    }

    /// Applies `objects` server-side in `cluster`, as kubectl would.
    pub async fn apply(&self, cluster: Option<&str>, objects: &[Value]) {
        let client = self.client(cluster);
        for object in objects {
            let api = api_for(&client, object).await;
            let name = object["metadata"]["name"].as_str().expect("a name");
            api.patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(object),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {name}: {e}"));
        }
    }

    /// Merges `status` into the status of `kind`'s object `name` in
    /// `cluster`, as its controller would.
    pub async fn set_status(
        &self,
        cluster: Option<&str>,
        (api_version, kind): (&str, &str),
        namespace: Option<&str>,
        name: &str,
        status: Value,
    ) {
        let object = json!({ "apiVersion": api_version, "kind": kind,
            "metadata": { "name": name, "namespace": namespace } });
        let api = api_for(&self.client(cluster), &object).await;
        let patch = Patch::Merge(json!({ "status": status }));
        // One deleted meanwhile has no status to set.
        let _ = api
            .patch_status(name, &PatchParams::default(), &patch)
            .await;
    }

    /// The objects of `kind` in `cluster` (and `namespace`, if given).
    pub async fn list(
        &self,
        cluster: Option<&str>,
        (api_version, kind): (&str, &str),
        namespace: Option<&str>,
    ) -> Vec<Value> {
        let object = json!({ "apiVersion": api_version, "kind": kind,
            "metadata": { "name": "-", "namespace": namespace } });
        let api = api_for(&self.client(cluster), &object).await;
        let list = api.list(&Default::default()).await.expect("a list");
        list.items
            .into_iter()
            .map(|o| serde_json::to_value(o).expect("json"))
            .collect()
    }

    /// The control plane: Modelplane's CRDs, Crossplane's kinds, the
    /// system and team namespaces.
    pub async fn control_plane(&self) {
        let mut crds = modelplane_api::crds::all_crds();
        crds.extend(
            CONTROL_PLANE_KINDS
                .iter()
                .map(|k| modelplane_sim::helm::crd(*k)),
        );
        self.apply(None, &crds).await;
        self.apply(
            None,
            &[namespace("modelplane-system"), namespace("ml-team")],
        )
        .await;
    }

    /// The workload cluster `name`: a logical cluster with its charts'
    /// CRDs, and its kubeconfig in the Secret `<name>-kubeconfig` of
    /// `modelplane-system`.
    pub async fn existing_cluster(&self, name: &str) {
        self.apply(
            None,
            &[
                json!({ "apiVersion": "tenancy.modelplane.ai/v1alpha1", "kind": "LogicalCluster",
                "metadata": { "name": name } }),
            ],
        )
        .await;
        let crds: Vec<Value> = WORKLOAD_CLUSTER_KINDS
            .iter()
            .map(|k| modelplane_sim::helm::crd(*k))
            .collect();
        // Served once the logical cluster starts: retried until then.
        for _ in 0..100 {
            let client = self.client(Some(name));
            if kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
                .list(&Default::default())
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.apply(Some(name), &crds).await;
        self.apply(Some(name), &[namespace("modelplane-system")])
            .await;
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {SERVER}/clusters/{name}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: in-process\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: admin\ncurrent-context: {name}\n"
        );
        self.apply(
            None,
            &[json!({ "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": format!("{name}-kubeconfig"), "namespace": "modelplane-system" },
                "stringData": { "kubeconfig": kubeconfig } })],
        )
        .await;
    }

    /// Runs the controller in process until the returned handle drops.
    pub fn controller(&self, config: modelplane_controller::Config) -> Controller {
        let config = modelplane_controller::Config {
            connector: self.connector(),
            ..config
        };
        let control =
            modelplane_controller::target::Connection::new("control plane", self.root.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = modelplane_controller::run(config, control, async {
                let _ = stopped.await;
            })
            .await;
        });
        Controller {
            stop: Some(stop),
            task,
        }
    }

    /// Stands in, until `stop`, for Crossplane's Helm provider and Envoy
    /// Gateway on each of `gateways` (`(cluster, address)`): Helm releases
    /// Ready (their namespace created on their cluster), GatewayClasses
    /// Accepted, each Gateway given its cluster's address.
    pub async fn platform(
        &self,
        gateways: &[(&str, &str)],
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        while !*stop.borrow() {
            self.install_releases(gateways).await;
            for (cluster, address) in gateways {
                self.admit_gateways(cluster, address).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn install_releases(&self, gateways: &[(&str, &str)]) {
        let releases = self
            .list(
                None,
                ("helm.m.crossplane.io/v1beta1", "Release"),
                Some("modelplane-system"),
            )
            .await;
        for release in releases {
            let name = release["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(ns) = release["spec"]["forProvider"]["namespace"].as_str() {
                for (cluster, _) in gateways {
                    self.apply(Some(cluster), &[namespace(ns)]).await;
                }
            }
            self.set_status(
                None,
                ("helm.m.crossplane.io/v1beta1", "Release"),
                Some("modelplane-system"),
                name,
                json!({ "conditions": [
                    { "type": "Ready", "status": "True", "reason": "Available" },
                    { "type": "Synced", "status": "True", "reason": "ReconcileSuccess" }] }),
            )
            .await;
        }
    }

    async fn admit_gateways(&self, cluster: &str, address: &str) {
        let class = ("gateway.networking.k8s.io/v1", "GatewayClass");
        for c in self.list(Some(cluster), class, None).await {
            let name = c["metadata"]["name"].as_str().unwrap_or_default();
            let accepted = json!({ "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted" }] });
            self.set_status(Some(cluster), class, None, name, accepted)
                .await;
        }
        let gateway = ("gateway.networking.k8s.io/v1", "Gateway");
        for g in self.list(Some(cluster), gateway, None).await {
            let name = g["metadata"]["name"].as_str().unwrap_or_default();
            let ns = g["metadata"]["namespace"].as_str();
            let programmed = json!({
                "addresses": [{ "type": "IPAddress", "value": address }],
                "conditions": [
                    { "type": "Accepted", "status": "True", "reason": "Accepted" },
                    { "type": "Programmed", "status": "True", "reason": "Programmed" }] });
            self.set_status(Some(cluster), gateway, ns, name, programmed)
                .await;
        }
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        // The server's tasks end with the runtime; dropped here so its
        // store closes before the directory goes.
        drop(self.embedded.take());
    }
}

/// The controller running in process; stopped when dropped.
pub struct Controller {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Controller {
    /// Stops it and waits for its tasks to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn namespace(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } })
}

/// The API of `object`'s kind, found by discovery (a CRD just installed
/// may take a moment to be served).
async fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let mut tries = 0;
    let (resource, capabilities) = loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => break found,
            Err(e) if tries > 100 => panic!("{kind} ({api_version}) is not served: {e}"),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    match (capabilities.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        (kube::discovery::Scope::Namespaced, None) => Api::all_with(client.clone(), &resource),
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    }
}
