//! InferenceGateway → the fleet's front door (`behavior.md` §6.3, DECISIONS
//! §D). With the default `Modelplane` backend the built-in gateway serves
//! every ModelService and this composition only publishes its address. With
//! `Traefik` it composes the original's objects: a Helm provider config, the
//! Traefik release (and MetalLB on bare metal), then the GatewayClass and
//! the `modelplane` Gateway that ModelService routes attach to.
//!
//! Not composed: the Gateway API standard-channel CRDs the original installs
//! first; they must already be on the control plane for the Traefik backend.

use modelplane_api::labels;
use modelplane_api::types::{GatewayBackend, InferenceGateway};
use serde_json::{Value, json};

use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};

/// What composing the InferenceGateway reads.
#[derive(Clone, Copy, Debug)]
pub struct GatewayInputs<'a> {
    /// The gateway (`default`).
    pub gateway: &'a InferenceGateway,
    /// Address of the built-in gateway, when it is serving.
    pub builtin_address: Option<&'a str>,
    /// Traefik's release is Ready.
    pub traefik_ready: bool,
    /// MetalLB's release is Ready.
    pub metallb_ready: bool,
    /// `status.addresses[0].value` of the observed `modelplane` Gateway.
    pub gateway_address: Option<&'a str>,
}

fn release(
    name: &str,
    chart: &str,
    repository: &str,
    version: &str,
    namespace: &str,
    values: Value,
) -> Desired {
    Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "helm.m.crossplane.io/v1beta1",
            "kind": "Release",
            "metadata": {
                "name": name,
                "namespace": labels::SYSTEM_NAMESPACE,
                "labels": { labels::RELEASE: name },
                "annotations": { labels::EXTERNAL_NAME: name },
            },
            "spec": {
                "providerConfigRef": { "kind": "ProviderConfig", "name": "modelplane-in-cluster" },
                "forProvider": {
                    "chart": { "name": chart, "repository": repository, "version": version },
                    "namespace": namespace,
                    "values": values,
                },
            },
        }),
        ready_when: ReadinessRule::ConditionTrue("Ready".into()),
    }
}

/// Composes the InferenceGateway.
pub fn compose_inference_gateway(inputs: GatewayInputs<'_>) -> Composition {
    let spec = &inputs.gateway.spec;
    let mut out = Composition::default();
    if spec.backend() == GatewayBackend::Modelplane {
        match inputs.builtin_address.filter(|a| !a.is_empty()) {
            Some(address) => {
                out.status = Some(json!({ "address": address }));
                out.conditions.push(Condition::new(
                    "ControllerReady",
                    true,
                    "ControllerHealthy",
                    "",
                ));
            }
            None => out
                .conditions
                .push(Condition::new("ControllerReady", false, "Installing", "")),
        }
        return out;
    }
    let Some(traefik) = &spec.traefik else {
        out.hold = true;
        return out;
    };
    out.desired.push(Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "helm.m.crossplane.io/v1beta1",
            "kind": "ProviderConfig",
            "metadata": { "name": "modelplane-in-cluster", "namespace": labels::SYSTEM_NAMESPACE },
            "spec": { "credentials": { "source": "InjectedIdentity" } },
        }),
        ready_when: ReadinessRule::Created,
    });
    let metallb = traefik.load_balancer.as_deref() == Some("MetalLB");
    if let (true, Some(pool)) = (metallb, traefik.metallb.as_ref()) {
        out.desired.push(Desired {
            target: Target::ControlPlane,
            object: json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "metallb-system" } }),
            ready_when: ReadinessRule::Created,
        });
        out.desired.push(release(
            "metallb",
            "metallb",
            "https://metallb.github.io/metallb",
            "0.14.9",
            "metallb-system",
            json!({}),
        ));
        if inputs.metallb_ready {
            for (kind, spec) in [
                ("IPAddressPool", json!({ "addresses": [pool.address_pool] })),
                (
                    "L2Advertisement",
                    json!({ "ipAddressPools": ["modelplane"] }),
                ),
            ] {
                out.desired.push(Desired {
                    target: Target::ControlPlane,
                    object: json!({
                        "apiVersion": "metallb.io/v1beta1",
                        "kind": kind,
                        "metadata": { "name": "modelplane", "namespace": "metallb-system" },
                        "spec": spec,
                    }),
                    ready_when: ReadinessRule::Created,
                });
            }
        }
    }
    out.desired.push(release(
        "traefik",
        "traefik",
        "https://traefik.github.io/charts",
        &traefik.version,
        "traefik-system",
        json!({
            "providers": {
                "kubernetesGateway": { "enabled": true, "statusAddress": { "service": { "namespace": "traefik-system", "name": "traefik" } } },
                "kubernetesIngress": { "enabled": false },
            },
            "service": { "nameOverride": "traefik" },
            "gateway": { "enabled": false },
            "gatewayClass": { "enabled": false },
        }),
    ));
    if inputs.traefik_ready {
        out.desired.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": { "name": "traefik" },
                "spec": { "controllerName": "traefik.io/gateway-controller" },
            }),
            ready_when: ReadinessRule::ConditionTrue("Accepted".into()),
        });
        out.desired.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": { "name": "modelplane", "namespace": labels::SYSTEM_NAMESPACE },
                "spec": {
                    "gatewayClassName": "traefik",
                    "listeners": [{ "name": "web", "protocol": "HTTP", "port": 8000, "allowedRoutes": { "namespaces": { "from": "All" } } }],
                },
            }),
            ready_when: ReadinessRule::ConditionTrue("Accepted".into()),
        });
        if inputs.gateway_address.is_none() {
            out.events.push(Event {
                type_: EventType::Normal,
                reason: "ComposingGateway".into(),
                message: "Traefik ready, composing Gateway".into(),
            });
        }
        out.conditions.push(Condition::new(
            "ControllerReady",
            true,
            "ControllerHealthy",
            "",
        ));
    } else {
        out.conditions
            .push(Condition::new("ControllerReady", false, "Installing", ""));
    }
    if let Some(address) = inputs.gateway_address {
        out.status = Some(json!({ "address": address }));
    }
    out
}
