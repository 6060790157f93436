//! What `up` writes through the API server: the CRDs, the default
//! InferenceGateway, and manifests (the example fleet) — applied as kubectl
//! would, server-side, so a later `kubectl apply` of the same files agrees.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiCapabilities;
use serde_json::{Value, json};

/// The field manager of what `up` applies.
const MANAGER: &str = "modelplane-up";

/// Where `kubectl apply` keeps what it last applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How long a kind just installed may take to be served.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// Installs Modelplane's CRDs, Gateway API's HTTPRoute (the ModelServices'
/// routes live on the control plane) and the default InferenceGateway
/// (Modelplane's own gateway) unless one exists.
pub async fn install(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut all = modelplane_api::crds::all_crds();
    all.push(modelplane_sim::helm::crd((
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        true,
    )));
    for crd in all {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        crds.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("installing the CRD {name}"))?;
    }
    let gateway = json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway",
        "metadata": { "name": modelplane_api::labels::GATEWAY_NAME },
        "spec": { "backend": "Modelplane" },
    });
    let (api, _) = api_for(client, &gateway).await?;
    match api
        .create(&Default::default(), &serde_json::from_value(gateway)?)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).context("creating the default InferenceGateway"),
    }
}

/// Applies every object of `files` (`(name, YAML)`), in order; returns how
/// many.
pub async fn manifests(client: &kube::Client, files: &[(&str, &str)]) -> anyhow::Result<usize> {
    let mut applied = 0;
    for (file, text) in files {
        let objects = modelplane_api::validation::yaml::parse_values(text)
            .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        for mut object in objects {
            // As `kubectl apply` records it, so a later `kubectl apply` of
            // the same file computes its patch without a warning.
            let last_applied = serde_json::to_string(&object)?;
            object["metadata"]["annotations"][LAST_APPLIED] = Value::String(last_applied);
            let (api, name) = api_for(client, &object)
                .await
                .with_context(|| file.to_string())?;
            api.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .with_context(|| format!("{file}: applying {} {name}", object["kind"]))?;
            applied += 1;
        }
    }
    Ok(applied)
}

/// The API of `object`'s kind (in its namespace) and its name, waiting for
/// a kind installed a moment ago to be served.
async fn api_for(
    client: &kube::Client,
    object: &Value,
) -> anyhow::Result<(Api<DynamicObject>, String)> {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (api_version, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let deadline = tokio::time::Instant::now() + SERVED_WITHIN;
    let (resource, capabilities): (_, ApiCapabilities) = loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => break found,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("{kind} ({api_version}) is not served"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let api = match (capabilities.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &resource)
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    Ok((api, name.to_string()))
}

/// Where `up` records what it applied once, so a restart never applies it
/// again: a ConfigMap in the system namespace (in the same state as what
/// it records, and readable with kubectl).
pub const RECORD: &str = "modelplane-up";
/// The record's key: when the example fleet was applied.
const EXAMPLE_APPLIED: &str = "exampleAppliedAt";

/// When the example fleet was applied to this control plane, if ever.
pub async fn example_applied(client: &kube::Client) -> anyhow::Result<Option<String>> {
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), modelplane_api::labels::SYSTEM_NAMESPACE);
    let record = records.get_opt(RECORD).await.with_context(|| {
        format!(
            "reading ConfigMap {}/{RECORD}",
            modelplane_api::labels::SYSTEM_NAMESPACE
        )
    })?;
    Ok(record
        .and_then(|r| r.data)
        .and_then(|d| d.get(EXAMPLE_APPLIED).cloned()))
}

/// Records that the example fleet was applied now.
pub async fn record_example_applied(client: &kube::Client) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = json!({ "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": modelplane_api::labels::SYSTEM_NAMESPACE } });
    namespaces
        .patch(
            modelplane_api::labels::SYSTEM_NAMESPACE,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(&namespace),
        )
        .await
        .context("creating the system namespace")?;
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), modelplane_api::labels::SYSTEM_NAMESPACE);
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)?
        .to_string();
    let record = json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": RECORD, "namespace": modelplane_api::labels::SYSTEM_NAMESPACE },
        "data": { EXAMPLE_APPLIED: now } });
    records
        .patch(RECORD, &PatchParams::apply(MANAGER), &Patch::Apply(&record))
        .await
        .with_context(|| format!("recording the example fleet applied in ConfigMap {RECORD}"))?;
    Ok(())
}
