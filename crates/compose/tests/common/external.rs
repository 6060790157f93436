//! Typed LeaderWorkerSet and PodCliqueSet, written from `external.md` §1–§2,
//! rejecting unknown fields so a composed object must fit them exactly.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderWorkerSet {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: LwsSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LwsSpec {
    pub replicas: Option<i32>,
    pub leader_worker_template: LeaderWorkerTemplate,
    pub startup_policy: Option<String>,
    pub rollout_strategy: Option<serde_json::Value>,
    pub network_config: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    pub size: Option<i32>,
    pub leader_template: Option<PodTemplateSpec>,
    pub worker_template: PodTemplateSpec,
    pub restart_policy: Option<String>,
    pub sub_group_policy: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodCliqueSet {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: PcsSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PcsSpec {
    pub replicas: i32,
    pub update_strategy: Option<serde_json::Value>,
    pub template: PcsTemplate,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PcsTemplate {
    pub cliques: Vec<CliqueTemplate>,
    pub clique_startup_type: Option<String>,
    pub priority_class_name: Option<String>,
    pub headless_service_config: Option<serde_json::Value>,
    pub topology_constraint: Option<serde_json::Value>,
    pub termination_delay: Option<String>,
    pub resource_claim_templates: Option<Vec<serde_json::Value>>,
    pub resource_sharing: Option<Vec<serde_json::Value>>,
    pub pod_clique_scaling_groups: Option<Vec<ScalingGroup>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CliqueTemplate {
    pub name: String,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub topology_constraint: Option<serde_json::Value>,
    pub resource_sharing: Option<Vec<serde_json::Value>>,
    pub spec: CliqueSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CliqueSpec {
    pub role_name: String,
    pub pod_spec: PodSpec,
    pub replicas: i32,
    pub min_available: Option<i32>,
    pub starts_after: Option<Vec<String>>,
    pub auto_scaling_config: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScalingGroup {
    pub name: String,
    pub clique_names: Vec<String>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub replicas: Option<i32>,
    pub min_available: Option<i32>,
    pub scale_config: Option<serde_json::Value>,
    pub resource_sharing: Option<Vec<serde_json::Value>>,
    pub topology_constraint: Option<serde_json::Value>,
}
