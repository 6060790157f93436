//! Pod templates shared by both stacks (`behavior.md` §5.3): placement on the
//! pinned pool, the device claim, the GPU toleration, `/dev/shm`, the model
//! cache volume and the `--model=/mnt/models` convenience.

use k8s_openapi::api::core::v1::{Container, EnvVar, PodTemplateSpec};
use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{ModelReplica, ReplicaMember, Role};
use serde_json::{Map, Value, json};

/// A pod template under construction, stack-independent: the stack wraps
/// it (Deployment, LeaderWorkerSet, PodCliqueSet) and injects its variables.
#[derive(Clone, Debug)]
pub struct PodPlan {
    /// Pod labels.
    pub labels: Map<String, Value>,
    /// Pod annotations.
    pub annotations: Map<String, Value>,
    /// The engine container (and, under PrefillDecode, a sidecar after it).
    pub containers: Vec<Map<String, Value>>,
    /// Pod spec fields other than containers, in output order.
    pub spec: Map<String, Value>,
}

impl PodPlan {
    /// The engine container.
    pub fn engine(&mut self) -> &mut Map<String, Value> {
        &mut self.containers[0]
    }

    /// The pod template as JSON; `extra_spec` fields (e.g. `schedulerName`)
    /// come first in the pod spec.
    pub fn into_template(self, extra_spec: Vec<(&str, Value)>) -> Value {
        let PodPlan {
            labels,
            annotations,
            containers,
            spec: mut rest,
        } = self;
        let volumes = rest.remove("volumes");
        let mut spec = Map::new();
        for (k, v) in extra_spec {
            spec.insert(k.to_string(), v);
        }
        spec.extend(rest);
        spec.insert(
            "containers".into(),
            Value::Array(containers.into_iter().map(Value::Object).collect()),
        );
        if let Some(volumes) = volumes {
            spec.insert("volumes".into(), volumes);
        }
        let mut metadata = Map::new();
        if !labels.is_empty() {
            metadata.insert("labels".into(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            metadata.insert("annotations".into(), Value::Object(annotations));
        }
        let mut template = Map::new();
        if !metadata.is_empty() {
            template.insert("metadata".into(), Value::Object(metadata));
        }
        template.insert("spec".into(), Value::Object(spec));
        Value::Object(template)
    }
}

/// The lowercase role used in names.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Standalone => "standalone",
        Role::Leader => "leader",
        Role::Worker => "worker",
    }
}

/// The engine container as the user wrote it.
fn user_container(template: &PodTemplateSpec) -> Container {
    template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first().cloned())
        .unwrap_or_default()
}

/// Whether `args` already choose a model.
fn names_a_model(args: &[String]) -> bool {
    args.iter()
        .any(|a| a == "--model" || a.starts_with("--model="))
}

fn env_json(env: &[EnvVar]) -> Value {
    serde_json::to_value(env).unwrap_or(Value::Array(Vec::new()))
}

/// What the pod of one member needs from its replica.
pub struct MemberContext<'a> {
    /// The replica.
    pub replica: &'a ModelReplica,
    /// The engine's name.
    pub engine: &'a str,
    /// The member.
    pub member: &'a ReplicaMember,
    /// The pod serves traffic (Standalone or Leader): port, probe, cache arg.
    pub serving: bool,
    /// `args` is always emitted, even empty (the Deployment backend does so).
    pub always_args: bool,
}

/// Builds the pod of one member: container, placement, claim and volumes.
pub fn member_pod(ctx: &MemberContext<'_>) -> PodPlan {
    let replica = ctx.replica;
    let replica_name = replica.metadata.name.clone().unwrap_or_default();
    let namespace = replica.metadata.namespace.clone().unwrap_or_default();
    let cache = replica
        .spec
        .model_cache_ref
        .as_ref()
        .map(|c| c.name.clone());
    let user = user_container(&ctx.member.template);
    let claims = ctx
        .member
        .device_requests
        .as_ref()
        .is_some_and(|r| !r.is_empty());

    let mut args = user.args.clone().unwrap_or_default();
    // An empty `command` is no command (Kubernetes drops it; the original tests
    // truthiness), so the cache's `--model` is still added.
    let has_command = user.command.as_ref().is_some_and(|c| !c.is_empty());
    if ctx.serving && cache.is_some() && !has_command && !names_a_model(&args) {
        args.push(format!("--model={}", labels::CACHE_MOUNT));
    }

    let mut container = Map::new();
    container.insert("name".into(), json!(labels::ENGINE_CONTAINER));
    container.insert(
        "image".into(),
        json!(user.image.clone().unwrap_or_default()),
    );
    if let Some(command) = &user.command {
        container.insert("command".into(), json!(command));
    }
    if ctx.always_args || !args.is_empty() {
        container.insert("args".into(), json!(args));
    }
    if let Some(env) = user.env.as_ref().filter(|e| !e.is_empty()) {
        container.insert("env".into(), env_json(env));
    }
    if ctx.serving {
        container.insert(
            "ports".into(),
            json!([{ "containerPort": labels::ENGINE_PORT }]),
        );
        container.insert(
            "readinessProbe".into(),
            readiness_probe(i64::from(labels::ENGINE_PORT)),
        );
    }
    if claims {
        container.insert(
            "resources".into(),
            json!({ "claims": [{ "name": "devices" }] }),
        );
    }
    let mut mounts = vec![json!({ "name": "dshm", "mountPath": "/dev/shm" })];
    let mut volumes = vec![json!({ "name": "dshm", "emptyDir": { "medium": "Memory" } })];
    if let Some(cache) = &cache {
        mounts.push(json!({ "name": "model-cache", "mountPath": labels::CACHE_MOUNT }));
        volumes.push(json!({
            "name": "model-cache",
            "persistentVolumeClaim": { "claimName": names::cache_pvc_name(&namespace, cache) },
        }));
    }
    container.insert("volumeMounts".into(), Value::Array(mounts));

    let mut spec = Map::new();
    spec.insert(
        "nodeSelector".into(),
        json!({ labels::POOL: ctx.member.node_pool_name }),
    );
    spec.insert(
        "tolerations".into(),
        json!([{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }]),
    );
    if let Some(secrets) = ctx
        .member
        .template
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .filter(|s| !s.is_empty())
    {
        spec.insert(
            "imagePullSecrets".into(),
            serde_json::to_value(secrets).unwrap_or_default(),
        );
    }
    if claims {
        spec.insert(
            "resourceClaims".into(),
            json!([{
                "name": "devices",
                "resourceClaimTemplateName": names::claim_template_name(&replica_name, ctx.engine, role_name(ctx.member.role())),
            }]),
        );
    }
    spec.insert("volumes".into(), Value::Array(volumes));

    let metadata = ctx.member.template.metadata.clone().unwrap_or_default();
    let to_map = |m: Option<std::collections::BTreeMap<String, String>>| -> Map<String, Value> {
        m.unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect()
    };
    PodPlan {
        labels: to_map(metadata.labels),
        annotations: to_map(metadata.annotations),
        containers: vec![container],
        spec,
    }
}

/// `GET /health` on `port`, 30 s after start, every 10 s, 5 s timeout.
pub fn readiness_probe(port: i64) -> Value {
    json!({
        "httpGet": { "path": "/health", "port": port },
        "initialDelaySeconds": 30,
        "periodSeconds": 10,
        "timeoutSeconds": 5,
    })
}

/// Prepends `vars` to the engine container's env.
pub fn prepend_env(container: &mut Map<String, Value>, vars: Vec<Value>) {
    if vars.is_empty() {
        return;
    }
    let mut env = vars;
    if let Some(Value::Array(existing)) = container.remove("env") {
        env.extend(existing);
    }
    insert_after(container, "args", "env", Value::Array(env));
}

/// Inserts `key` right after `after` (or after `command`, `image`), keeping
/// the container's field order stable.
pub(crate) fn insert_after(
    container: &mut Map<String, Value>,
    after: &str,
    key: &str,
    value: Value,
) {
    let anchor = [after, "command", "image"]
        .into_iter()
        .find(|k| container.contains_key(*k))
        .map(str::to_string);
    let mut out = Map::new();
    let entries = std::mem::take(container);
    let mut placed = false;
    for (k, v) in entries {
        let is_anchor = anchor.as_deref() == Some(k.as_str());
        out.insert(k, v);
        if is_anchor && !placed {
            out.insert(key.to_string(), value.clone());
            placed = true;
        }
    }
    if !placed {
        out.insert(key.to_string(), value);
    }
    *container = out;
}

/// A plain `{name, value}` env entry.
pub fn env(name: &str, value: &str) -> Value {
    json!({ "name": name, "value": value })
}
