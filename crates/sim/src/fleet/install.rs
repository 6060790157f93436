//! What the simulated clouds install on the control plane before they
//! answer anything: every Crossplane CRD, the `Fault` CRD, and each cloud
//! account's credentials and `default` ClusterProviderConfig.

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};

use super::{CREDENTIALS_NAMESPACE, MANAGER, RETRY};
use crate::client::{self, Kind as ApiKind, builtin};
use crate::crossplane::{self, KINDS};

/// Installs every Crossplane CRD and the simulated clouds' credentials.
pub(super) async fn install(control: &Client) {
    for kind in KINDS {
        let crd = crossplane::crd(kind);
        while let Err(e) = client::apply(control, &builtin::crd(), &crd, MANAGER).await {
            tracing::warn!(crd = %crd["metadata"]["name"], error = %e, "cannot install CRD; retrying");
            tokio::time::sleep(RETRY).await;
        }
    }
    let _ = client::apply(control, &builtin::crd(), &fault_crd(), MANAGER).await;
    let namespace = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": CREDENTIALS_NAMESPACE } });
    let _ = client::apply(control, &builtin::namespace(), &namespace, MANAGER).await;
    // Each simulated cloud account: the `default` ClusterProviderConfig
    // compose refers to, with credentials the simulated cloud accepts.
    for family in ["aws", "gcp", "azure", "nebius", "vultr"] {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": format!("sim-{family}-credentials"), "namespace": CREDENTIALS_NAMESPACE },
            "stringData": { "credentials": format!("simulated {family} account") },
        });
        let mut config = json!({
            "apiVersion": format!("{family}.m.upbound.io/v1beta1"),
            "kind": "ClusterProviderConfig",
            "metadata": { "name": "default" },
            "spec": { "credentials": { "source": "Secret", "secretRef": {
                "namespace": CREDENTIALS_NAMESPACE, "name": format!("sim-{family}-credentials"), "key": "credentials",
            } } },
        });
        // GCP and Nebius name the account's project in the config.
        if matches!(family, "gcp" | "nebius") {
            config["spec"]["projectID"] = json!(format!("sim-{family}-project"));
        }
        let kind = ApiKind::new(
            &format!("{family}.m.upbound.io/v1beta1"),
            "ClusterProviderConfig",
            "clusterproviderconfigs",
            false,
        );
        for _ in 0..30 {
            let done = client::create(control, &builtin::secret(), &secret)
                .await
                .is_ok()
                && client::create(control, &kind, &config).await.is_ok();
            if done {
                break;
            }
            // The CRD was just applied and may not be served yet.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The `Fault` CRD: any spec (the simulator validates it and says so in
/// its status), printer columns for what a user scans.
fn fault_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "faults.sim.modelplane.ai" },
        "spec": {
            "group": "sim.modelplane.ai", "scope": "Cluster",
            "names": { "plural": "faults", "singular": "fault", "kind": "Fault" },
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
                "additionalPrinterColumns": [
                    { "name": "CLUSTER", "type": "string", "jsonPath": ".spec.cluster" },
                    { "name": "TYPE", "type": "string", "jsonPath": ".spec.type" },
                    { "name": "ACTIVE", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Active')].status" },
                    { "name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
            }],
        },
    })
}
