//! What each Helm chart Modelplane installs brings into a workload cluster:
//! its CRDs, and the simulated controller that starts with it. A chart the
//! simulator does not know fails its Release instead of pretending.

use serde_json::{Value, json};

/// A simulated in-cluster controller a chart starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    /// Envoy Gateway: accepts its GatewayClass, programs Gateways.
    EnvoyGateway,
    /// The NVIDIA DRA driver: DeviceClasses and per-node ResourceSlices.
    DraDriver,
    /// The EFA DRA driver (DRANET): the EFA DeviceClass and slices.
    Dranet,
    /// The LeaderWorkerSet controller.
    LeaderWorkerSet,
    /// The Grove operator.
    Grove,
    /// The KAI gang scheduler.
    Kai,
    /// The ModelExpress server (peer-to-peer weight transfer).
    ModelExpress,
}

/// A CRD a chart installs: (group, version, kind, plural, namespaced).
pub type CrdKind = (&'static str, &'static str, &'static str, &'static str, bool);

/// What one chart installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chart {
    /// Chart name, as a Release's `forProvider.chart.name` gives it.
    pub name: &'static str,
    /// CRDs it installs.
    pub crds: &'static [CrdKind],
    /// The controller it starts, if the simulator runs one.
    pub controller: Option<Controller>,
}

const GATEWAY_API: &str = "gateway.networking.k8s.io";

/// Every chart the simulator knows.
pub const CHARTS: &[Chart] = &[
    Chart {
        name: "gateway-helm",
        crds: &[
            (GATEWAY_API, "v1", "GatewayClass", "gatewayclasses", false),
            (GATEWAY_API, "v1", "Gateway", "gateways", true),
            (GATEWAY_API, "v1", "HTTPRoute", "httproutes", true),
            (GATEWAY_API, "v1", "GRPCRoute", "grpcroutes", true),
            (
                GATEWAY_API,
                "v1beta1",
                "ReferenceGrant",
                "referencegrants",
                true,
            ),
            (
                "gateway.envoyproxy.io",
                "v1alpha1",
                "EnvoyProxy",
                "envoyproxies",
                true,
            ),
            (
                "gateway.envoyproxy.io",
                "v1alpha1",
                "Backend",
                "backends",
                true,
            ),
            (
                "gateway.envoyproxy.io",
                "v1alpha1",
                "EnvoyExtensionPolicy",
                "envoyextensionpolicies",
                true,
            ),
        ],
        controller: Some(Controller::EnvoyGateway),
    },
    Chart {
        name: "inferencepool-crds",
        crds: &[(
            "inference.networking.k8s.io",
            "v1",
            "InferencePool",
            "inferencepools",
            true,
        )],
        controller: None,
    },
    Chart {
        name: "lws",
        crds: &[(
            "leaderworkerset.x-k8s.io",
            "v1",
            "LeaderWorkerSet",
            "leaderworkersets",
            true,
        )],
        controller: Some(Controller::LeaderWorkerSet),
    },
    Chart {
        name: "grove-charts",
        crds: &[
            (
                "grove.io",
                "v1alpha1",
                "PodCliqueSet",
                "podcliquesets",
                true,
            ),
            ("grove.io", "v1alpha1", "PodClique", "podcliques", true),
            (
                "grove.io",
                "v1alpha1",
                "PodCliqueScalingGroup",
                "podcliquescalinggroups",
                true,
            ),
            (
                "scheduler.grove.io",
                "v1alpha1",
                "PodGang",
                "podgangs",
                true,
            ),
        ],
        controller: Some(Controller::Grove),
    },
    Chart {
        name: "kai-scheduler",
        crds: &[
            ("scheduling.run.ai", "v2", "Queue", "queues", false),
            (
                "scheduling.run.ai",
                "v2alpha2",
                "PodGroup",
                "podgroups",
                true,
            ),
        ],
        controller: Some(Controller::Kai),
    },
    Chart {
        name: "nvidia-dra-driver-gpu",
        crds: &[(
            "resource.nvidia.com",
            "v1beta1",
            "ComputeDomain",
            "computedomains",
            true,
        )],
        controller: Some(Controller::DraDriver),
    },
    Chart {
        name: "modelexpress",
        crds: &[],
        controller: Some(Controller::ModelExpress),
    },
    Chart {
        name: "gpu-operator",
        crds: &[(
            "nvidia.com",
            "v1",
            "ClusterPolicy",
            "clusterpolicies",
            false,
        )],
        controller: None,
    },
    Chart {
        name: "skyhook-operator",
        crds: &[(
            "skyhook.nvidia.com",
            "v1alpha1",
            "Skyhook",
            "skyhooks",
            false,
        )],
        controller: None,
    },
    Chart {
        name: "kube-prometheus-stack",
        crds: &[
            (
                "monitoring.coreos.com",
                "v1",
                "ServiceMonitor",
                "servicemonitors",
                true,
            ),
            (
                "monitoring.coreos.com",
                "v1",
                "PodMonitor",
                "podmonitors",
                true,
            ),
            (
                "monitoring.coreos.com",
                "v1",
                "PrometheusRule",
                "prometheusrules",
                true,
            ),
            (
                "monitoring.coreos.com",
                "v1",
                "Prometheus",
                "prometheuses",
                true,
            ),
        ],
        controller: None,
    },
    Chart {
        name: "cert-manager",
        crds: &[
            ("cert-manager.io", "v1", "Certificate", "certificates", true),
            ("cert-manager.io", "v1", "Issuer", "issuers", true),
            (
                "cert-manager.io",
                "v1",
                "ClusterIssuer",
                "clusterissuers",
                false,
            ),
        ],
        controller: None,
    },
    Chart {
        name: "network-operator",
        crds: &[(
            "mellanox.com",
            "v1alpha1",
            "NicClusterPolicy",
            "nicclusterpolicies",
            false,
        )],
        controller: None,
    },
    Chart {
        name: "aws-ebs-csi-driver",
        crds: &[],
        controller: None,
    },
    Chart {
        name: "aws-efa-k8s-device-plugin",
        crds: &[],
        controller: None,
    },
    Chart {
        name: "cluster-autoscaler",
        crds: &[],
        controller: None,
    },
    Chart {
        name: "aws-dranet",
        crds: &[],
        controller: Some(Controller::Dranet),
    },
    Chart {
        name: "csi-mounted-fs-path",
        crds: &[],
        controller: None,
    },
];

/// The chart `name`, or the message the Release fails with.
pub fn chart(name: &str) -> Result<&'static Chart, String> {
    CHARTS.iter().find(|c| c.name == name).ok_or_else(|| {
        format!(
            "chart {name:?} is not simulated: the simulated fleet installs only {}",
            CHARTS.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// The CRD for a chart's kind: any content, with the status (and, for
/// LeaderWorkerSets, scale) subresource the real CRD has.
pub fn crd((group, version, kind, plural, namespaced): CrdKind) -> Value {
    let mut subresources = json!({ "status": {} });
    if kind == "LeaderWorkerSet" || kind == "PodCliqueSet" {
        subresources["scale"] = json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        });
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind },
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": subresources,
                "schema": { "openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                } },
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chart_of_every_recipe_is_known() {
        let recipes = concat!(env!("CARGO_MANIFEST_DIR"), "/../../recipes");
        for entry in std::fs::read_dir(recipes).expect("recipes") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("read");
            for line in text.lines() {
                if let Some(name) = line.trim().strip_prefix("chart:") {
                    assert!(
                        chart(name.trim()).is_ok(),
                        "{}: chart {name} unknown",
                        path.display()
                    );
                }
            }
        }
    }

    #[test]
    fn an_unknown_chart_fails_with_a_message_naming_it() {
        let error = chart("mystery").expect_err("unknown");
        assert!(
            error.starts_with("chart \"mystery\" is not simulated"),
            "{error}"
        );
    }
}
