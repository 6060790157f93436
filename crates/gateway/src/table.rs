//! The routing table: a pure compile of ModelServices, ModelEndpoints and
//! Secrets (the objects the controllers watch; `modelplane gateway
//! --config` loads them from files) into an immutable snapshot that every
//! request reads with one atomic load.
//!
//! Data flow: each ModelService's entries select endpoints by labels (the
//! first entry that matches an endpoint owns it, as the composed HTTPRoute
//! does) → each entry becomes a weighted [`Group`], split into the
//! endpoints Modelplane composed (labelled `modelplane.ai/deployment`) and
//! the external ones (everything else: SaaS providers, hand-made
//! endpoints), which take traffic only while no composed endpoint is
//! healthy → model names (the service's name, `namespace/name`, and the
//! names its endpoints' engines serve) index the services → API-key Secrets become
//! [`ApiKey`]s. Endpoint health and load ([`EndpointState`]) carry over from
//! the previous table by endpoint identity, so a reload forgets nothing.
//! Objects that cannot be routed are skipped and reported, never fatal.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use http::HeaderValue;
use http::uri::{Authority, Scheme};
use k8s_openapi::api::core::v1::Secret;
use modelplane_api::labels;
use modelplane_api::routing::{group_endpoints, parse_url};
use modelplane_api::types::{ModelEndpoint, ModelService};

/// Label that marks a Secret as a gateway API key.
pub const API_KEY_LABEL: &str = "modelplane.ai/gateway-api-key";
/// Annotation listing the services an API key may use (`ns/name`, `ns/*`, `*`).
pub const API_KEY_SERVICES: &str = "modelplane.ai/services";
/// The Secret data key holding an API key.
pub const API_KEY_FIELD: &str = "key";
/// Annotation of a ModelEndpoint: the model name its engine serves
/// (`--served-model-name`), when it differs from the ModelService's name.
pub const SERVED_MODEL_ANNOTATION: &str = "modelplane.ai/served-model-name";
/// ModelService annotation: how long its engines may take to the response
/// head (`90s`, `20m`, `1h`), for services whose non-streamed answers take
/// longer than the gateway's default.
pub const FIRST_BYTE_TIMEOUT_ANNOTATION: &str = "modelplane.ai/first-byte-timeout";

/// A duration as `90s`, `20m`, `1h` or plain seconds.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        _ => return None,
    };
    // Zero would time out every request: not a timeout anyone means.
    (seconds > 0).then(|| std::time::Duration::from_secs(seconds))
}

/// What the table is compiled from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// Every ModelService.
    pub services: &'a [ModelService],
    /// Every ModelEndpoint.
    pub endpoints: &'a [ModelEndpoint],
    /// Secrets: API keys and the credentials of external endpoints.
    pub secrets: &'a [Secret],
}

/// The compiled routing table.
#[derive(Debug, Default)]
pub struct Table {
    services: HashMap<String, Arc<Service>>,
    models: BTreeMap<String, Vec<Arc<Service>>>,
    keys: Vec<ApiKey>,
    states: HashMap<String, Arc<EndpointState>>,
    /// ModelDeployments with endpoints no ModelService routes to, by
    /// deployment name: `namespace/name` of each.
    unrouted: BTreeMap<String, Vec<String>>,
    /// Objects left out, and why.
    pub skipped: Vec<String>,
}

/// One ModelService, ready to route.
#[derive(Debug)]
pub struct Service {
    /// `namespace/name`.
    pub id: String,
    /// The path prefix it serves under: `/namespace/name/`.
    pub prefix: String,
    /// Groups of the endpoints Modelplane composed, by entry.
    pub self_hosted: Vec<Group>,
    /// Groups of the external endpoints, used while no composed one is healthy.
    pub external: Vec<Group>,
    /// Time its engines may take to the response head, when the service
    /// sets its own ([`FIRST_BYTE_TIMEOUT_ANNOTATION`]).
    pub first_byte_timeout: Option<std::time::Duration>,
    /// Its metric handles, set when the table is published.
    pub metrics: std::sync::OnceLock<Arc<crate::metrics::ServiceMetrics>>,
    /// When the ModelService was created (seconds since the epoch; 0 when
    /// unknown): what `/v1/models` says as `created`.
    pub created: i64,
}

impl Service {
    /// Whether a request to it can be served at `now_ms`: some endpoint
    /// of it, composed or external, is healthy.
    pub fn servable(&self, now_ms: u64) -> bool {
        self.self_hosted
            .iter()
            .chain(&self.external)
            .flat_map(|g| g.endpoints.iter())
            .any(|e| e.state.healthy(now_ms))
    }
}

/// The endpoints one ModelService entry selected, and its weight.
#[derive(Debug, Clone)]
pub struct Group {
    /// Relative share of the service's traffic.
    pub weight: u64,
    /// The endpoints, in name order.
    pub endpoints: Arc<[Arc<Endpoint>]>,
}

/// One routable ModelEndpoint.
#[derive(Debug)]
pub struct Endpoint {
    /// `namespace/name`.
    pub id: String,
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host:port`.
    pub authority: Authority,
    /// What replaces the service prefix (`spec.rewritePath`); without it the
    /// path is sent unchanged.
    pub rewrite: Option<String>,
    /// `Authorization` sent upstream, from `spec.auth.secretRef`.
    pub bearer: Option<HeaderValue>,
    /// The model name its engine serves, if declared.
    pub served_model: Option<String>,
    /// Not composed by Modelplane.
    pub external: bool,
    /// Health and load, shared across tables.
    pub state: Arc<EndpointState>,
}

/// Health and load of one endpoint, kept across reloads.
#[derive(Debug)]
pub struct EndpointState {
    /// Requests in flight to it now.
    pub outstanding: AtomicUsize,
    /// Consecutive failures seen by requests.
    pub failures: AtomicU32,
    /// Ejected until this time (milliseconds on the gateway's clock).
    pub ejected_until: AtomicU64,
    /// Ejections in a row, for the backoff.
    pub ejections: AtomicU32,
    /// In rotation by the active health checks (until enough fail in a row).
    pub probe_ok: AtomicBool,
    /// Active health checks failed in a row.
    pub probe_failures: AtomicU32,
}

impl Default for EndpointState {
    fn default() -> Self {
        EndpointState {
            outstanding: AtomicUsize::new(0),
            failures: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            ejections: AtomicU32::new(0),
            probe_ok: AtomicBool::new(true),
            probe_failures: AtomicU32::new(0),
        }
    }
}

impl EndpointState {
    /// Whether requests may go to it at `now_ms`.
    pub fn healthy(&self, now_ms: u64) -> bool {
        self.probe_ok.load(Ordering::Relaxed)
            && self.ejected_until.load(Ordering::Relaxed) <= now_ms
    }
}

/// One API key and what it may reach.
#[derive(Debug)]
pub struct ApiKey {
    /// The Secret it came from (`namespace/name`), for logs; never the key.
    pub source: String,
    key: Vec<u8>,
    allowed: Vec<String>,
}

impl ApiKey {
    /// Whether this key may use the service `namespace/name`.
    pub fn allows(&self, service: &str) -> bool {
        let namespace = service.split('/').next().unwrap_or_default();
        self.allowed.iter().any(|pattern| {
            pattern == "*"
                || pattern == service
                || pattern.strip_suffix("/*").is_some_and(|ns| ns == namespace)
        })
    }
}

/// Compares in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How a model name resolved.
#[derive(Debug)]
pub enum ModelMatch<'a> {
    /// One service answers it.
    One(&'a Arc<Service>),
    /// Several do (same name in several namespaces): the caller must say which.
    Ambiguous(Vec<&'a str>),
    /// None does.
    None,
}

impl Table {
    /// Compiles `inputs`, carrying endpoint state over from `previous`.
    pub fn compile(inputs: Inputs<'_>, previous: Option<&Table>) -> Table {
        let mut table = Table::default();
        let secrets: HashMap<(String, String), &Secret> = inputs
            .secrets
            .iter()
            .map(|s| ((namespace_of(&s.metadata), name_of(&s.metadata)), s))
            .collect();
        table.keys = api_keys(inputs.secrets, &mut table.skipped);
        // A service selects only in its own namespace: group once, not per service.
        let mut by_namespace: HashMap<&str, Vec<&ModelEndpoint>> = HashMap::new();
        for endpoint in inputs.endpoints {
            by_namespace
                .entry(endpoint.metadata.namespace.as_deref().unwrap_or("default"))
                .or_default()
                .push(endpoint);
        }
        for service in inputs.services {
            let namespace = service
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = name_of(&service.metadata);
            let id = format!("{namespace}/{name}");
            // Only what some entry selects goes on to the first-match grouping.
            let no_labels = BTreeMap::new();
            let candidates: Vec<ModelEndpoint> = by_namespace
                .get(namespace.as_str())
                .into_iter()
                .flatten()
                .filter(|e| {
                    let labels = e.metadata.labels.as_ref().unwrap_or(&no_labels);
                    service
                        .spec
                        .endpoints
                        .iter()
                        .any(|entry| entry.selector.matches(labels))
                })
                .map(|e| (*e).clone())
                .collect();
            let mut service_out = Service {
                id: id.clone(),
                prefix: format!("/{namespace}/{name}/"),
                self_hosted: Vec::new(),
                external: Vec::new(),
                first_byte_timeout: service
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(FIRST_BYTE_TIMEOUT_ANNOTATION))
                    .and_then(|t| parse_duration(t)),
                metrics: std::sync::OnceLock::new(),
                created: service
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_second()),
            };
            let mut aliases = Vec::new();
            for (entry, selected) in service
                .spec
                .endpoints
                .iter()
                .zip(group_endpoints(service, &candidates))
            {
                let weight = u64::try_from(entry.weight()).unwrap_or(1).max(1);
                let (mut own, mut external) = (Vec::new(), Vec::new());
                for endpoint in selected {
                    let Some(compiled) = table.endpoint(endpoint, &secrets, previous, &mut aliases)
                    else {
                        continue;
                    };
                    if compiled.external {
                        external.push(compiled);
                    } else {
                        own.push(compiled);
                    }
                }
                for (list, out) in [
                    (own, &mut service_out.self_hosted),
                    (external, &mut service_out.external),
                ] {
                    if !list.is_empty() {
                        out.push(Group {
                            weight,
                            endpoints: list.into(),
                        });
                    }
                }
            }
            let service_out = Arc::new(service_out);
            aliases.push(name.clone());
            aliases.push(id.clone());
            aliases.sort();
            aliases.dedup();
            for alias in aliases {
                table
                    .models
                    .entry(alias)
                    .or_default()
                    .push(service_out.clone());
            }
            table.services.insert(id, service_out);
        }
        table.unrouted = unrouted(inputs.services, inputs.endpoints);
        table
    }

    /// The ModelDeployments named `model` (among those `allowed`) whose
    /// endpoints no ModelService routes to.
    pub fn unrouted(&self, model: &str, allowed: impl Fn(&str) -> bool) -> Vec<&str> {
        self.unrouted
            .get(model)
            .into_iter()
            .flatten()
            .filter(|d| allowed(d))
            .map(String::as_str)
            .collect()
    }

    /// Compiles one endpoint, or notes why it is skipped.
    fn endpoint(
        &mut self,
        endpoint: &ModelEndpoint,
        secrets: &HashMap<(String, String), &Secret>,
        previous: Option<&Table>,
        aliases: &mut Vec<String>,
    ) -> Option<Arc<Endpoint>> {
        let namespace = namespace_of(&endpoint.metadata);
        let id = format!("{namespace}/{}", name_of(&endpoint.metadata));
        let Some(url) = parse_url(&endpoint.spec.url) else {
            self.skipped.push(format!(
                "ModelEndpoint {id}: invalid spec.url {:?}",
                endpoint.spec.url
            ));
            return None;
        };
        let scheme = match url.scheme.as_str() {
            "http" => Scheme::HTTP,
            "https" => Scheme::HTTPS,
            other => {
                self.skipped.push(format!(
                    "ModelEndpoint {id}: scheme {other:?} is not http or https"
                ));
                return None;
            }
        };
        let host = if url.host.contains(':') {
            format!("[{}]", url.host)
        } else {
            url.host.clone()
        };
        let Ok(authority) = format!("{host}:{}", url.port).parse::<Authority>() else {
            self.skipped
                .push(format!("ModelEndpoint {id}: invalid host {:?}", url.host));
            return None;
        };
        let bearer = match &endpoint.spec.auth {
            None => None,
            Some(auth) => {
                let reference = &auth.secret_ref;
                let value = secrets
                    .get(&(namespace.clone(), reference.name.clone()))
                    .and_then(|s| secret_value(s, &reference.key));
                let Some(value) = value else {
                    self.skipped.push(format!(
                        "ModelEndpoint {id}: spec.auth.secretRef: Secret {namespace}/{} has no key {:?}",
                        reference.name, reference.key
                    ));
                    return None;
                };
                let Ok(mut header) = HeaderValue::from_str(&format!("Bearer {}", value.trim()))
                else {
                    self.skipped.push(format!(
                        "ModelEndpoint {id}: the credential is not a valid header value"
                    ));
                    return None;
                };
                header.set_sensitive(true);
                Some(header)
            }
        };
        let labels = endpoint.metadata.labels.clone().unwrap_or_default();
        let served_model = endpoint
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SERVED_MODEL_ANNOTATION))
            .cloned();
        if let Some(served) = &served_model {
            aliases.push(served.clone());
        }
        let state_key = format!("{id} {}", endpoint.spec.url);
        let state = previous
            .and_then(|p| p.states.get(&state_key).cloned())
            .or_else(|| self.states.get(&state_key).cloned())
            .unwrap_or_default();
        self.states.insert(state_key, state.clone());
        Some(Arc::new(Endpoint {
            id,
            scheme,
            authority,
            rewrite: endpoint.spec.rewrite_path.clone(),
            bearer,
            served_model,
            external: !labels.contains_key(labels::DEPLOYMENT),
            state,
        }))
    }

    /// The service `namespace/name`.
    pub fn service(&self, id: &str) -> Option<&Arc<Service>> {
        self.services.get(id)
    }

    /// Every service, in id order.
    pub fn services(&self) -> Vec<&Arc<Service>> {
        let mut all: Vec<&Arc<Service>> = self.services.values().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// The service a request's `model` names, among those `allowed`.
    pub fn model(&self, model: &str, allowed: impl Fn(&str) -> bool) -> ModelMatch<'_> {
        let matches: Vec<&Arc<Service>> = self
            .models
            .get(model)
            .into_iter()
            .flatten()
            .filter(|s| allowed(&s.id))
            .collect();
        match matches.as_slice() {
            [] => ModelMatch::None,
            [one] => ModelMatch::One(one),
            many => ModelMatch::Ambiguous(many.iter().map(|s| s.id.as_str()).collect()),
        }
    }

    /// The model names a caller may use, one per service: its name, or
    /// `namespace/name` where several visible services share the name.
    pub fn model_names(&self, allowed: impl Fn(&str) -> bool) -> Vec<(String, &Service)> {
        self.services()
            .into_iter()
            .filter(|s| allowed(&s.id))
            .map(|service| {
                let name = service
                    .id
                    .split_once('/')
                    .map_or(service.id.as_str(), |(_, n)| n);
                let shared = self
                    .models
                    .get(name)
                    .is_some_and(|all| all.iter().filter(|s| allowed(&s.id)).count() > 1);
                let shown = if shared {
                    service.id.clone()
                } else {
                    name.to_string()
                };
                (shown, service.as_ref())
            })
            .collect()
    }

    /// Whether API keys are required.
    pub fn requires_keys(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The key a request presented, checked against every key.
    pub fn key(&self, presented: &[u8]) -> Option<&ApiKey> {
        // Every key is compared, so timing says nothing about which matched.
        self.keys.iter().fold(None, |found, k| {
            if constant_time_eq(&k.key, presented) {
                Some(k)
            } else {
                found
            }
        })
    }

    /// The table as data, for people (`modelplane gateway --check`) and
    /// golden tests: services with their groups and endpoints, model
    /// names, API keys by source (never the key), what was left out.
    pub fn describe(&self) -> serde_json::Value {
        let endpoint = |e: &Arc<Endpoint>| {
            let mut out = serde_json::json!({
                "endpoint": e.id,
                "upstream": format!("{}://{}", e.scheme, e.authority),
            });
            if let Some(rewrite) = &e.rewrite {
                out["rewritePath"] = rewrite.as_str().into();
            }
            if let Some(served) = &e.served_model {
                out["servedModel"] = served.as_str().into();
            }
            if e.bearer.is_some() {
                out["credential"] = "bearer token from its Secret".into();
            }
            out
        };
        let groups = |groups: &[Group]| -> Vec<serde_json::Value> {
            groups
                .iter()
                .map(|g| serde_json::json!({ "weight": g.weight, "endpoints": g.endpoints.iter().map(endpoint).collect::<Vec<_>>() }))
                .collect()
        };
        let services: Vec<serde_json::Value> = self
            .services()
            .into_iter()
            .map(|s| {
                serde_json::json!({
                    "service": s.id, "prefix": s.prefix,
                    "composed": groups(&s.self_hosted), "external": groups(&s.external),
                })
            })
            .collect();
        let models: BTreeMap<&str, Vec<&str>> = self
            .models
            .iter()
            .map(|(name, services)| {
                (
                    name.as_str(),
                    services.iter().map(|s| s.id.as_str()).collect(),
                )
            })
            .collect();
        let keys: Vec<serde_json::Value> = self
            .keys
            .iter()
            .map(|k| serde_json::json!({ "secret": k.source, "services": k.allowed }))
            .collect();
        serde_json::json!({ "services": services, "models": models, "apiKeys": keys, "skipped": self.skipped })
    }

    /// Every endpoint, once each.
    pub fn endpoints(&self) -> Vec<Arc<Endpoint>> {
        let mut seen = std::collections::HashSet::new();
        self.services
            .values()
            .flat_map(|s| s.self_hosted.iter().chain(&s.external))
            .flat_map(|g| g.endpoints.iter().cloned())
            .filter(|e| seen.insert(e.id.clone()))
            .collect()
    }
}

fn name_of(metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    metadata.name.clone().unwrap_or_default()
}

fn namespace_of(metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// A Secret's value at `key`, from `data` or `stringData`.
fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key).cloned())
        .or_else(|| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        })
}

fn api_keys(secrets: &[Secret], skipped: &mut Vec<String>) -> Vec<ApiKey> {
    let mut keys = Vec::new();
    for secret in secrets {
        let labelled = secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(API_KEY_LABEL))
            .is_some_and(|v| v == "true");
        if !labelled {
            continue;
        }
        let namespace = namespace_of(&secret.metadata);
        let source = format!("{namespace}/{}", name_of(&secret.metadata));
        let Some(key) = secret_value(secret, API_KEY_FIELD).filter(|k| !k.trim().is_empty()) else {
            skipped.push(format!(
                "Secret {source}: an API key Secret needs a non-empty {API_KEY_FIELD:?}"
            ));
            continue;
        };
        let allowed = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(API_KEY_SERVICES))
            .map_or_else(
                || vec![format!("{namespace}/*")],
                |list| {
                    list.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                },
            );
        keys.push(ApiKey {
            source,
            key: key.trim().as_bytes().to_vec(),
            allowed,
        });
    }
    keys
}

/// Deployment name → `namespace/name` of each ModelDeployment that has
/// composed endpoints (labelled with it) that no service in their
/// namespace selects.
fn unrouted(
    services: &[ModelService],
    endpoints: &[ModelEndpoint],
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let no_labels = BTreeMap::new();
    for endpoint in endpoints {
        let labels = endpoint.metadata.labels.as_ref().unwrap_or(&no_labels);
        let Some(deployment) = labels.get(modelplane_api::labels::DEPLOYMENT) else {
            continue;
        };
        let namespace = namespace_of(&endpoint.metadata);
        let routed = services.iter().any(|s| {
            namespace_of(&s.metadata) == namespace
                && s.spec.endpoints.iter().any(|e| e.selector.matches(labels))
        });
        let id = format!("{namespace}/{deployment}");
        let ids = out.entry(deployment.clone()).or_default();
        if !routed && !ids.contains(&id) {
            ids.push(id);
        }
    }
    out.retain(|_, ids| !ids.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole_and_allow_by_pattern() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        let key = ApiKey {
            source: "ns/k".into(),
            key: b"k".to_vec(),
            allowed: vec!["ml/*".into(), "other/one".into()],
        };
        assert!(key.allows("ml/anything"));
        assert!(key.allows("other/one"));
        assert!(!key.allows("other/two"));
        assert!(!key.allows("mlx/a"));
    }

    #[test]
    fn a_deployment_no_service_routes_is_known_by_name_and_a_service_lists_only_while_it_can_serve()
    {
        let endpoint: ModelEndpoint = serde_json::from_value(serde_json::json!({
            "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
            "metadata": { "name": "qwen-edge-0", "namespace": "ml",
                "labels": { "modelplane.ai/deployment": "qwen" } },
            "spec": { "url": "http://127.0.0.1:9/ml/qwen-edge-0/v1" } }))
        .expect("an endpoint");
        let service: ModelService = serde_json::from_value(serde_json::json!({
            "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
            "metadata": { "name": "qwen", "namespace": "ml",
                "creationTimestamp": "2026-12-05T10:00:00Z" },
            "spec": { "endpoints": [{ "selector": { "matchLabels": { "modelplane.ai/deployment": "qwen" } } }] } }))
        .expect("a service");
        let bare = Table::compile(
            Inputs {
                services: &[],
                endpoints: std::slice::from_ref(&endpoint),
                secrets: &[],
            },
            None,
        );
        assert_eq!(bare.unrouted("qwen", |_| true), ["ml/qwen"]);
        let routed = Table::compile(
            Inputs {
                services: std::slice::from_ref(&service),
                endpoints: std::slice::from_ref(&endpoint),
                secrets: &[],
            },
            None,
        );
        assert!(routed.unrouted("qwen", |_| true).is_empty());
        let qwen = routed.service("ml/qwen").expect("compiled");
        assert_eq!(qwen.created, 1_796_464_800, "2026-12-05T10:00:00Z");
        assert!(qwen.servable(0));
        for e in routed.endpoints() {
            e.state.probe_ok.store(false, Ordering::Relaxed);
        }
        assert!(!qwen.servable(0), "no healthy endpoint: not listed");
    }
}
