//! Schema fragments shared by several kinds: credentials, selectors,
//! conditions, DRA-style devices and the curated engine pod template.

use serde_json::json;

use crate::schema::*;

/// Kubernetes label-key regex, as CEL source text inside single quotes.
pub const LABEL_KEY_RE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// Kubernetes label-value regex, as CEL source text inside single quotes.
pub const LABEL_VALUE_RE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// The Crossplane provider configuration that authenticates cloud API calls.
pub fn credentials_ref() -> Schema {
    object()
        .prop(
            "type",
            one_of(&["ProviderConfig", "ClusterProviderConfig"])
                .default(json!("ClusterProviderConfig"))
                .doc("Kind of the Crossplane provider configuration."),
        )
        .prop(
            "name",
            name_len(253)
                .default(json!("default"))
                .doc("Name of the provider configuration."),
        )
        .doc("Crossplane provider configuration that authenticates cloud API calls.")
}

/// `{matchLabels}`: an AND of label equalities; empty matches everything.
pub fn match_labels() -> Schema {
    object()
        .prop(
            "matchLabels",
            string_map().doc("Labels that must all match."),
        )
        .doc("Selects objects by labels; omitted or empty matches everything.")
}

/// `status.conditions`, keyed by `type`.
pub fn conditions() -> Schema {
    array(
        object()
            .req("type", string().doc("Type of the condition, e.g. Ready."))
            .req("status", one_of(&["True", "False", "Unknown"]))
            .prop(
                "reason",
                string().doc("Machine-readable reason in CamelCase."),
            )
            .prop("message", string().doc("Human-readable explanation."))
            .prop("lastTransitionTime", string().format("date-time"))
            .prop("observedGeneration", integer()),
    )
    .list_map(&["type"])
    .doc("Observed conditions of the object.")
}

/// A `{name, key}` reference to a key of a Secret.
pub fn secret_key_ref(default_key: Option<&str>) -> Schema {
    let key = name_len(253).doc("Key within the Secret.");
    let key = match default_key {
        Some(k) => key.default(json!(k)),
        None => key,
    };
    let s = object().req("name", name_len(253).doc("Name of the Secret."));
    match default_key {
        Some(_) => s.prop("key", key),
        None => s.req("key", key),
    }
}

/// One typed DRA attribute value (exactly one field is set).
pub fn attribute_value(one_of_rule: bool) -> Schema {
    let s = object()
        .prop("string", string().max_len(253))
        .prop("version", string().max_len(32).doc("A semantic version."))
        .prop("bool", boolean())
        .prop("int", integer().format("int64"))
        .doc("A typed attribute value: exactly one of string, version, bool or int.");
    if one_of_rule {
        s.rule(
            "[has(self.string), has(self.version), has(self.bool), has(self.int)].filter(x, x).size() == 1",
            "exactly one of string, version, bool or int must be set",
        )
    } else {
        s
    }
}

/// A capacity entry: a Kubernetes quantity such as `81559Mi`.
pub fn capacity_value(min_len: bool) -> Schema {
    let value = string()
        .max_len(32)
        .doc("A Kubernetes quantity, e.g. 81559Mi.");
    let value = if min_len { value.min_len(1) } else { value };
    object().req("value", value)
}

/// One kind of device of an InferenceClass, as a DRA driver would publish it.
pub fn class_device() -> Schema {
    object()
        .req(
            "name",
            name_len(63).doc("Name of this kind of device, e.g. gpu, nic, efa."),
        )
        .prop(
            "claim",
            one_of(&["DRA", "Synthetic"]).default(json!("DRA")).doc(
                "DRA devices are matched and claimed through a ResourceClaim; Synthetic devices only influence placement.",
            ),
        )
        .req(
            "driver",
            name_len(253).doc("DRA driver, also the attribute and capacity domain."),
        )
        .prop(
            "deviceClassName",
            name_len(253).doc("DeviceClass to claim from; required for DRA devices."),
        )
        .prop(
            "count",
            int_range(1, 64)
                .default(json!(1))
                .doc("Devices of this kind per node."),
        )
        .prop(
            "attributes",
            map_of(attribute_value(true))
                .max_props(32)
                .doc("Typed attributes, keyed by bare name."),
        )
        .prop(
            "capacity",
            map_of(capacity_value(true))
                .max_props(32)
                .doc("Capacities, keyed by bare name."),
        )
        .rule(
            "self.claim != 'DRA' || has(self.deviceClassName)",
            "deviceClassName is required when claim is DRA",
        )
}

/// A pool's device as copied into `InferenceCluster.status.gpuPools`.
pub fn status_device() -> Schema {
    object()
        .req("name", string().max_len(63))
        .prop("claim", one_of(&["DRA", "Synthetic"]))
        .req("driver", string().max_len(253))
        .prop("deviceClassName", string().max_len(253))
        .prop("count", integer())
        .prop("attributes", map_of(attribute_value(false)).max_props(32))
        .prop("capacity", map_of(capacity_value(false)).max_props(32))
}

/// The four label rules on a template's `metadata`; `what` prefixes each message.
fn label_rules(s: Schema, what: &str) -> Schema {
    s.rule(
        "!has(self.labels) || self.labels.all(k, !k.startsWith('modelplane.ai/'))",
        &format!("{what} labels must not use the reserved modelplane.ai/ prefix"),
    )
    .rule(
        &format!("!has(self.labels) || self.labels.all(k, k.matches('{LABEL_KEY_RE}'))"),
        &format!("{what} label keys must be valid Kubernetes label keys"),
    )
    .rule(
        "!has(self.labels) || self.labels.all(k, k.split('/')[0].size() <= 253)",
        &format!("{what} label key prefixes must be at most 253 characters"),
    )
    .rule(
        &format!(
            "!has(self.labels) || self.labels.all(k, self.labels[k].matches('{LABEL_VALUE_RE}'))"
        ),
        &format!("{what} label values must be valid Kubernetes label values"),
    )
}

/// Labels of a template's metadata: at most 32, values at most 63 characters.
fn template_labels() -> Schema {
    map_of(string().max_len(63))
        .max_props(32)
        .doc("Labels copied onto what Modelplane composes from this template.")
}

/// `spec.template.metadata` of a ModelDeployment.
pub fn deployment_template_metadata() -> Schema {
    label_rules(object().prop("labels", template_labels()), "template")
        .doc("Metadata copied onto the composed ModelReplicas and ModelEndpoints.")
}

/// A container's environment variable.
fn env_var() -> Schema {
    let key_ref = |what: &str| {
        object()
            .req("name", string().doc(&format!("Name of the {what}.")))
            .req("key", string().doc(&format!("Key within the {what}.")))
            .prop("optional", boolean())
    };
    object()
        .req("name", string().doc("Name of the variable."))
        .prop("value", string())
        .prop(
            "valueFrom",
            object()
                .prop("secretKeyRef", key_ref("Secret"))
                .prop("configMapKeyRef", key_ref("ConfigMap"))
                .prop(
                    "fieldRef",
                    object()
                        .req("fieldPath", string().doc("e.g. status.podIP"))
                        .prop("apiVersion", string()),
                ),
        )
}

/// The engine container: named `engine`, serving OpenAI's API on port 8000.
fn engine_container() -> Schema {
    object()
        .req("name", string().min_len(1).doc("Must be engine."))
        .req("image", string().min_len(1).doc("Engine image."))
        .prop(
            "command",
            array(string()).doc("Entrypoint, passed verbatim."),
        )
        .prop("args", array(string()).doc("Arguments, passed verbatim."))
        .prop("env", array(env_var()).doc("Environment variables."))
}

/// The curated pod template of a member (`members[].template`).
pub fn member_template() -> Schema {
    let metadata = label_rules(
        object()
            .prop("labels", template_labels())
            .prop("annotations", map_of(string().max_len(8192)).max_props(32)),
        "member template",
    )
    .rule(
        &format!("!has(self.annotations) || self.annotations.all(k, k.matches('{LABEL_KEY_RE}'))"),
        "member template annotation keys must be valid Kubernetes annotation keys",
    )
    .rule(
        "!has(self.annotations) || self.annotations.all(k, k.split('/')[0].size() <= 253)",
        "member template annotation key prefixes must be at most 253 characters",
    );
    let spec = object()
        .req(
            "containers",
            array(engine_container())
                .min_items(1)
                .max_items(1)
                .rule(
                    "self.exists_one(c, c.name == 'engine')",
                    "the single container must be named engine",
                )
                .doc("Exactly one container, named engine."),
        )
        .prop(
            "imagePullSecrets",
            array(object().req("name", string())).doc("Secrets for pulling the image."),
        );
    object()
        .prop("metadata", metadata)
        .prop("spec", spec)
        .doc("Pod template of this member: one container named engine, serving on port 8000.")
}

/// The four PrefillDecode / phase rules on an engines-carrying spec.
pub fn serving_mode_rules(s: Schema) -> Schema {
    s.rule(
        "!has(self.serving) || self.serving.mode != 'PrefillDecode' || size(self.engines) == 2",
        "PrefillDecode requires exactly two engines",
    )
    .rule(
        "!has(self.serving) || self.serving.mode != 'PrefillDecode' || self.engines.exists_one(e, has(e.phase) && e.phase == 'Prefill')",
        "PrefillDecode requires exactly one engine with phase Prefill",
    )
    .rule(
        "!has(self.serving) || self.serving.mode != 'PrefillDecode' || self.engines.exists_one(e, has(e.phase) && e.phase == 'Decode')",
        "PrefillDecode requires exactly one engine with phase Decode",
    )
    .rule(
        "(has(self.serving) && self.serving.mode == 'PrefillDecode') || !self.engines.exists(e, has(e.phase))",
        "phase may only be set when serving.mode is PrefillDecode",
    )
}

/// The role-shape rule of an engine; `workers` words the Worker side.
pub fn engine_shape_rule(s: Schema, workers: &str) -> Schema {
    s.rule(
        "(self.members.size() == 1 && self.members[0].role == 'Standalone') || (self.members.exists_one(m, m.role == 'Leader') && self.members.exists(m, m.role == 'Worker') && !self.members.exists(m, m.role == 'Standalone'))",
        &format!("an engine has either one Standalone member, or one Leader and {workers}"),
    )
}

/// `members[].worker`: how many worker nodes a multi-node gang spans.
pub fn worker() -> Schema {
    object()
        .req(
            "nodes",
            int_range(1, 63).doc("Worker pods (one per node) besides the leader."),
        )
        .doc("Size of a multi-node gang; only on the Worker member.")
}

/// A member's role in its engine.
pub fn role() -> Schema {
    one_of(&["Standalone", "Leader", "Worker"])
        .default(json!("Standalone"))
        .doc("Standalone (single pod), or Leader and Worker of a multi-node gang.")
}

/// An engine's phase under PrefillDecode serving.
pub fn phase() -> Schema {
    one_of(&["Prefill", "Decode"])
        .doc("Phase of this engine; only with serving.mode PrefillDecode.")
}

/// The rule that `worker` belongs on the Worker member only.
pub fn worker_only_on_worker(s: Schema) -> Schema {
    s.rule(
        "!has(self.worker) || self.role == 'Worker'",
        "worker may only be set on a Worker member",
    )
}

/// A DRA CEL selector over one device.
pub fn cel_selector() -> Schema {
    object()
        .prop(
            "cel",
            string_len(1, 10240).doc("A DRA CEL expression over one device, e.g. device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0."),
        )
        .min_props(1)
}

/// The deprecated version field kept so old manifests stay valid (a warning).
pub fn removed_version() -> Schema {
    string().doc(
        "Ignored: versions come from the release's recipe. Kept so existing manifests stay valid.",
    )
}
