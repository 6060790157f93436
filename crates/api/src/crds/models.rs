//! Schemas of the ML team's kinds: ModelDeployment, ModelReplica,
//! ModelService, ModelEndpoint, ModelCache.

use serde_json::json;

use super::common::*;
use crate::schema::*;

fn device_request() -> Schema {
    object()
        .req(
            "name",
            name_len(63).doc("Request name; becomes the DRA DeviceRequest name."),
        )
        .prop(
            "count",
            int_range(1, 64)
                .default(json!(1))
                .doc("Devices per node (per pod)."),
        )
        .req(
            "selectors",
            array(cel_selector())
                .min_items(1)
                .max_items(8)
                .atomic()
                .doc("CEL selectors, all of which a device must satisfy."),
        )
}

fn deployment_member() -> Schema {
    worker_only_on_worker(
        object()
            .prop("role", role())
            .prop(
                "nodeSelector",
                object()
                    .req(
                        "devices",
                        array(device_request())
                            .min_items(1)
                            .max_items(16)
                            .list_map(&["name"]),
                    )
                    .doc("Devices every pod of this member needs on its node."),
            )
            .prop("worker", worker())
            .req("template", member_template()),
    )
}

fn engines(member: Schema, workers: &str, claims_rule: (&str, &str)) -> Schema {
    let engine = object()
        .req(
            "name",
            name_len(63).doc("Engine name, used in workload names."),
        )
        .prop(
            "copies",
            int_range(1, 64)
                .default(json!(1))
                .doc("Identical copies of this engine inside one replica."),
        )
        .prop("phase", phase())
        .req(
            "members",
            array(member)
                .min_items(1)
                .max_items(2)
                .atomic()
                .doc("[Standalone], or a Leader and a Worker."),
        );
    let engine = engine_shape_rule(engine, workers).rule(claims_rule.0, claims_rule.1);
    array(engine)
        .min_items(1)
        .max_items(8)
        .list_map(&["name"])
        .doc("Engines of one replica, all placed on the same cluster.")
}

fn toleration() -> Schema {
    object()
        .prop(
            "key",
            string().doc("Taint key; empty with Exists tolerates everything."),
        )
        .prop(
            "operator",
            one_of(&["Exists", "Equal"]).default(json!("Equal")),
        )
        .prop("value", string())
        .prop(
            "effect",
            one_of(&["NoSchedule", "NoExecute"]).doc("Empty tolerates all effects."),
        )
        .rule(
            "self.operator != 'Equal' || (has(self.key) && self.key != '')",
            "operator Equal requires a non-empty key",
        )
        .rule(
            "self.operator != 'Exists' || !has(self.value)",
            "operator Exists must not set value",
        )
}

fn model_cache_ref() -> Schema {
    object()
        .req(
            "name",
            string()
                .min_len(1)
                .doc("A ModelCache in the same namespace."),
        )
        .doc("Model weights staged on each cluster, mounted at /mnt/models.")
}

/// ModelDeployment: serve this container with these devices, N times.
pub fn model_deployment() -> (Schema, Schema) {
    let template_spec = serving_mode_rules(
        object()
            .prop(
                "clusterSelector",
                match_labels().doc("InferenceClusters this deployment may be placed on."),
            )
            .prop("modelCacheRef", model_cache_ref())
            .prop(
                "serving",
                object()
                    .req(
                        "mode",
                        one_of(&["Unified", "PrefillDecode"]).default(json!("Unified")),
                    )
                    .doc("Unified when absent; PrefillDecode splits prefill and decode engines."),
            )
            .prop(
                "tolerations",
                array(toleration())
                    .atomic()
                    .doc("Cluster taints this deployment tolerates."),
            )
            .req(
                "engines",
                engines(
                    deployment_member(),
                    "one or more Workers",
                    (
                        "self.members.exists(m, has(m.nodeSelector))",
                        "at least one member must set nodeSelector",
                    ),
                ),
            ),
    );
    let spec = object()
        .req(
            "replicas",
            int_range(1, 10).doc("Number of replicas, each a full copy on one cluster."),
        )
        .req(
            "template",
            object()
                .prop("metadata", deployment_template_metadata())
                .req("spec", template_spec)
                .doc("What every replica runs."),
        );
    let status = object()
        .prop(
            "replicas",
            object()
                .prop(
                    "desired",
                    integer().doc("Replicas asked for (spec.replicas)."),
                )
                .prop("total", integer().doc("Replicas placed."))
                .prop("ready", integer().doc("Placed replicas that are Ready.")),
        )
        .prop(
            "ready",
            string().doc("Ready replicas of those asked for, as `ready/desired`."),
        )
        .prop("conditions", conditions());
    (spec, status)
}

fn resolved_request() -> Schema {
    object()
        .req("name", name_len(63))
        .req("deviceClassName", name_len(253))
        .prop("count", int_range(1, 64).default(json!(1)))
        .prop(
            "selectors",
            array(object().prop("cel", string_len(1, 10240)).min_props(1))
                .max_items(8)
                .atomic(),
        )
}

fn replica_member() -> Schema {
    worker_only_on_worker(
        object()
            .prop("role", role())
            .req(
                "nodePoolName",
                string().min_len(1).doc("Pool on the pinned cluster."),
            )
            .prop(
                "deviceRequests",
                array(resolved_request())
                    .min_items(1)
                    .max_items(16)
                    .list_map(&["name"])
                    .doc("Requests resolved against the pool's DRA devices."),
            )
            .prop("worker", worker())
            .req("template", member_template()),
    )
}

/// ModelReplica: one complete serving instance of a deployment on one cluster.
pub fn model_replica() -> (Schema, Schema) {
    let spec = serving_mode_rules(
        object()
            .req(
                "clusterName",
                string()
                    .min_len(1)
                    .doc("InferenceCluster this replica is pinned to."),
            )
            .prop("modelCacheRef", object().req("name", string().min_len(1)))
            .prop(
                "serving",
                object().prop(
                    "mode",
                    one_of(&["Unified", "PrefillDecode"]).default(json!("Unified")),
                ),
            )
            .req(
                "engines",
                engines(
                    replica_member(),
                    "one Worker member",
                    (
                        "self.members.exists(m, has(m.deviceRequests))",
                        "at least one member must carry deviceRequests",
                    ),
                ),
            ),
    );
    let status = object().prop("conditions", conditions());
    (spec, status)
}

/// ModelService: one stable OpenAI-compatible URL over a set of endpoints.
pub fn model_service() -> (Schema, Schema) {
    let entry = object()
        .prop(
            "weight",
            int_range(1, 1_000_000)
                .default(json!(1))
                .doc("Relative share of traffic."),
        )
        .req(
            "selector",
            object()
                .req("matchLabels", string_map())
                .doc("ModelEndpoints of this entry, by labels."),
        );
    let spec = object().req(
        "endpoints",
        array(entry)
            .min_items(1)
            .doc("Weighted groups of ModelEndpoints."),
    );
    let status = object()
        .prop(
            "address",
            string().doc("URL of this service on the fleet gateway."),
        )
        .prop("conditions", conditions());
    (spec, status)
}

/// ModelEndpoint: one addressable inference backend.
pub fn model_endpoint() -> (Schema, Schema) {
    let spec = object()
        .req(
            "url",
            string().min_len(1).doc("scheme://host[:port][/path]."),
        )
        .prop(
            "rewritePath",
            string().doc("Path prefix requests are rewritten to for this backend."),
        )
        .prop(
            "auth",
            object()
                .req(
                    "secretRef",
                    secret_key_ref(None)
                        .doc("Secret whose value is sent upstream as a bearer token."),
                )
                .doc("Credentials the gateway presents to this endpoint."),
        );
    let status = object()
        .prop("routing", object().prop("backendName", string()))
        .prop("conditions", conditions());
    (spec, status)
}

/// ModelCache: model weights staged once per matched cluster.
pub fn model_cache() -> (Schema, Schema) {
    let hugging_face = object()
        .req(
            "repo",
            string().min_len(1).doc("Hugging Face repository id."),
        )
        .prop(
            "revision",
            string().doc("Branch, tag or commit; default branch if unset."),
        )
        .prop(
            "authSecret",
            object()
                .req("name", string().min_len(1))
                .prop("key", string().default(json!("HF_TOKEN")))
                .doc("Secret in this namespace holding a Hugging Face token."),
        )
        .req(
            "sizeGiB",
            int_range(1, 100_000).doc("Volume size per cluster, in GiB."),
        );
    let spec = object()
        .req("source", one_of(&["HuggingFace"]))
        .prop("huggingFace", hugging_face)
        .prop(
            "clusterSelector",
            match_labels().doc("Clusters to stage on; omitted means every cluster."),
        )
        .rule(
            "self.source != 'HuggingFace' || has(self.huggingFace)",
            "huggingFace is required when source is HuggingFace",
        );
    let status = object()
        .prop(
            "summary",
            object().prop("ready", string().doc("<ready>/<matched>, e.g. 2/3.")),
        )
        .prop(
            "clusters",
            array(
                object()
                    .req("name", string())
                    .prop(
                        "phase",
                        one_of(&["Pending", "Hydrating", "Ready", "Failed"]),
                    )
                    .prop("message", string()),
            ),
        )
        .prop("conditions", conditions());
    (spec, status)
}
