//! ModelCache → per matched cluster a PVC, a hydration Job and, for gated
//! repositories, a token Secret (`behavior.md` §7; plain manifests on each
//! cluster, DECISIONS §E).
//!
//! Data flow: the cache's selector picks clusters; a cluster counts once it
//! is reachable and publishes an RWX storage class; each cluster's phase is
//! read from what is observed there (PVC bound, Job complete or failed); the
//! Job and Secret are composed until that cluster is Ready.

use std::collections::BTreeMap;

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{CacheClusterStatus, CachePhase, InferenceCluster, ModelCache};
use serde_json::{Value, json};

use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};

/// What is observed of a cache on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Staging {
    /// The PVC exists.
    pub pvc_observed: bool,
    /// The PVC is `Bound`.
    pub pvc_bound: bool,
    /// The Job has `Complete=True`.
    pub job_complete: bool,
    /// The Job has `Failed=True`.
    pub job_failed: bool,
    /// Why its container last failed, as its pod's terminated state says
    /// (the tail of its log: `FallbackToLogsOnError`), while the pod is
    /// there to tell.
    pub failure: Option<String>,
}

/// The Hugging Face token for a gated repository.
#[derive(Clone, Copy, Debug)]
pub enum Token<'a> {
    /// The cache has no `authSecret`.
    NotNeeded,
    /// The Secret has not been looked up yet.
    Unresolved,
    /// The Secret or its key is missing or empty.
    Missing,
    /// The key's value, base64 as stored in the Secret.
    Found(&'a str),
}

/// What composing a ModelCache reads.
#[derive(Clone, Copy, Debug)]
pub struct CacheInputs<'a> {
    /// The cache.
    pub cache: &'a ModelCache,
    /// Every InferenceCluster; `None` when not read yet.
    pub clusters: Option<&'a [InferenceCluster]>,
    /// The token, when the repository is gated.
    pub token: Token<'a>,
    /// What is observed on each cluster, by cluster name.
    pub observed: &'a BTreeMap<String, Staging>,
    /// The cache's own last published per-cluster status: Ready latches,
    /// and so does why a Job failed once its pods are gone.
    pub previous: &'a [CacheClusterStatus],
    /// The cache was Ready before this pass.
    pub was_ready: bool,
}

/// The clusters in `phase` with why their container failed, one sentence
/// per distinct failure: `a, b: 401 Client Error…; c: …`; empty when none
/// failed there. A cluster whose failure is not known is named with what
/// to look at.
fn failures(phases: &[(String, CachePhase, Option<String>)], phase: CachePhase) -> String {
    let mut by_failure: Vec<(String, Vec<&str>)> = Vec::new();
    for (cluster, _, failure) in phases
        .iter()
        .filter(|(_, p, f)| *p == phase && (phase == CachePhase::Failed || f.is_some()))
    {
        let said = failure.as_deref().map_or_else(
            || "its container kept failing (its pod's log said why while it retried)".to_string(),
            last_lines,
        );
        match by_failure.iter_mut().find(|(f, _)| *f == said) {
            Some((_, clusters)) => clusters.push(cluster),
            None => by_failure.push((said, vec![cluster])),
        }
    }
    by_failure
        .into_iter()
        .map(|(failure, clusters)| format!("{}: {failure}", clusters.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The last two lines of a log's tail, on one line: where a download's
/// error says what went wrong.
fn last_lines(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(2)..].join(" ")
}

/// The storage class a cluster publishes for caches, once it is reachable.
fn storage_class(cluster: &InferenceCluster) -> Option<&str> {
    let status = cluster.status.as_ref()?;
    status.provider_config_ref.as_ref()?.name.as_ref()?;
    status
        .cache
        .as_ref()?
        .storage_class_name
        .as_deref()
        .filter(|s| !s.is_empty())
}

fn script(repo: &str, revision: Option<&str>) -> String {
    let revision = revision
        .map(|r| format!(" --revision {r}"))
        .unwrap_or_default();
    format!(
        "set -e\nif [ -f /mnt/artifact/.modelplane-hydrated ]; then exit 0; fi\npip install --quiet huggingface_hub\nhf download {repo}{revision} --local-dir /mnt/artifact\ntouch /mnt/artifact/.modelplane-hydrated\n"
    )
}

/// Composes a ModelCache.
pub fn compose_model_cache(inputs: CacheInputs<'_>) -> Composition {
    let cache = inputs.cache;
    let mut out = Composition::default();
    let (Some(clusters), false) = (inputs.clusters, matches!(inputs.token, Token::Unresolved))
    else {
        // Not everything is known yet: keep what exists.
        out.hold = true;
        return out;
    };
    let name = cache.metadata.name.clone().unwrap_or_default();
    let namespace = cache.metadata.namespace.clone().unwrap_or_default();
    let Some(hf) = &cache.spec.hugging_face else {
        out.hold = true;
        return out;
    };
    let selector = cache.spec.cluster_selector.clone().unwrap_or_default();
    let selected: Vec<&InferenceCluster> = clusters
        .iter()
        .filter(|c| selector.matches(c.metadata.labels.as_ref().unwrap_or(&Default::default())))
        .collect();
    let matched: Vec<(&str, &str)> = selected
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, storage_class(c)?)))
        .collect();
    // A selected cluster that briefly publishes no storage class (or is not
    // reachable) may already hold this cache's PVC under running replicas:
    // keep what exists there instead of letting it be pruned (the original
    // drops it, hazard H7).
    let staged_before = |cluster: &str| {
        inputs
            .previous
            .iter()
            .any(|c| c.name == cluster && c.phase.is_some())
            || inputs.observed.get(cluster).is_some_and(|s| s.pvc_observed)
    };
    if selected.iter().any(|c| {
        let name = c.metadata.name.as_deref().unwrap_or_default();
        storage_class(c).is_none() && staged_before(name)
    }) {
        out.hold = true;
    }
    if matched.is_empty() {
        let message = if selected.is_empty() {
            "no InferenceCluster matches the cache's clusterSelector".to_string()
        } else {
            let names: Vec<&str> = selected
                .iter()
                .filter_map(|c| c.metadata.name.as_deref())
                .collect();
            format!(
                "{} match but publish no ReadWriteMany storage class yet (not reachable, or their stack offers none)",
                names.join(", ")
            )
        };
        out.conditions.push(Condition::new(
            "ClustersMatched",
            false,
            "NoClusters",
            message.clone(),
        ));
        out.conditions.push(Condition::new(
            "ArtifactReady",
            false,
            "NoClusters",
            message,
        ));
        out.status = Some(json!({ "summary": { "ready": "0/0" }, "clusters": [] }));
        return out;
    }
    let pvc = names::cache_pvc_name(&namespace, &name);
    let secret = names::cache_auth_secret_name(&namespace, &name);

    let key = hf
        .auth_secret
        .as_ref()
        .and_then(|a| a.key.clone())
        .unwrap_or_else(|| "HF_TOKEN".into());
    let token = match inputs.token {
        Token::Found(t) if !t.is_empty() => Some(t),
        _ => None,
    };
    let job = names::cache_job_name_with_token(&namespace, &name, token);
    let auth_missing =
        matches!(inputs.token, Token::Missing) || matches!(inputs.token, Token::Found(""));
    let cache_label = json!({ labels::MODEL_CACHE: name });

    let mut phases = Vec::new();
    for (cluster, class) in &matched {
        let seen = inputs.observed.get(*cluster).cloned().unwrap_or_default();
        let before = inputs.previous.iter().find(|c| c.name == *cluster);
        let latched = before.is_some_and(|c| c.phase == Some(CachePhase::Ready));
        let phase = if seen.job_failed {
            CachePhase::Failed
        } else if seen.pvc_bound && (seen.job_complete || latched) {
            CachePhase::Ready
        } else if seen.pvc_bound {
            CachePhase::Hydrating
        } else {
            CachePhase::Pending
        };
        // The failed Job deletes its pod: what it said is kept from before.
        let failure = seen.failure.clone().or_else(|| {
            (phase == CachePhase::Failed)
                .then(|| before.and_then(|c| c.message.clone()))
                .flatten()
        });
        let target = Target::Cluster((*cluster).to_string());
        out.desired
            .push(Desired::team_namespace(cluster, &namespace));
        out.desired.push(Desired {
            target: target.clone(),
            object: json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": { "name": pvc, "namespace": namespace, "labels": cache_label },
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": class,
                    "resources": { "requests": { "storage": format!("{}Gi", hf.size_gib) } },
                },
            }),
            ready_when: ReadinessRule::FieldEquals {
                path: "/status/phase".into(),
                value: "Bound".into(),
            },
        });
        if phase != CachePhase::Ready && !auth_missing {
            if let Some(token) = token {
                out.desired.push(Desired {
                    target: target.clone(),
                    object: json!({
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": { "name": secret, "namespace": namespace, "labels": cache_label },
                        "data": { key.clone(): token },
                    }),
                    ready_when: ReadinessRule::Created,
                });
            }
            let env: Vec<Value> = if token.is_some() {
                vec![
                    json!({ "name": "HF_TOKEN", "valueFrom": { "secretKeyRef": { "name": secret, "key": key } } }),
                ]
            } else {
                Vec::new()
            };
            out.desired.push(Desired {
                target,
                object: json!({
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": { "name": job, "namespace": namespace, "labels": cache_label },
                    "spec": {
                        "backoffLimit": 3,
                        "ttlSecondsAfterFinished": 180,
                        "template": {
                            "metadata": { "labels": cache_label },
                            "spec": {
                                "restartPolicy": "OnFailure",
                                "containers": [{
                                    "name": "hydrate",
                                    "image": "python:3.11-slim",
                                    "command": ["/bin/sh", "-c", script(&hf.repo, hf.revision.as_deref())],
                                    "env": env,
                                    "volumeMounts": [{ "name": "artifact", "mountPath": "/mnt/artifact" }],
                                    // Why a download failed (a refused token, a
                                    // missing repository) outlives the log:
                                    // the cache's status reads it.
                                    "terminationMessagePolicy": "FallbackToLogsOnError",
                                }],
                                "volumes": [{ "name": "artifact", "persistentVolumeClaim": { "claimName": pvc } }],
                            },
                        },
                    },
                }),
                ready_when: ReadinessRule::ConditionTrue("Complete".into()),
            });
        }
        phases.push(((*cluster).to_string(), phase, failure));
    }

    let ready = phases
        .iter()
        .filter(|(_, p, _)| *p == CachePhase::Ready)
        .count();
    let n = phases.len();
    let clusters: Vec<Value> = phases
        .iter()
        .map(
            |(c, p, failure)| match failure.as_ref().filter(|_| *p != CachePhase::Ready) {
                Some(failure) => json!({ "name": c, "phase": p, "message": failure }),
                None => json!({ "name": c, "phase": p }),
            },
        )
        .collect();
    out.status = Some(json!({
        "summary": { "ready": format!("{ready}/{n}") },
        "clusters": clusters,
    }));
    out.conditions
        .push(Condition::new("ClustersMatched", true, "Matched", ""));
    let names: Vec<&str> = matched.iter().map(|(c, _)| *c).collect();
    out.conditions.push(if auth_missing && ready < n {
        let auth = hf
            .auth_secret
            .as_ref()
            .map(|a| a.name.clone())
            .unwrap_or_default();
        let message = format!("authSecret {namespace}/{auth} is missing or has no key '{key}'");
        out.events.push(Event {
            type_: EventType::Warning,
            reason: "AuthSecretMissing".into(),
            message: message.clone(),
        });
        Condition::new("ArtifactReady", false, "AuthSecretMissing", message)
    } else if phases.iter().any(|(_, p, _)| *p == CachePhase::Failed) {
        let message = format!(
            "the hydration Job {namespace}/{job} failed on {}",
            failures(&phases, CachePhase::Failed)
        );
        out.events.push(Event {
            type_: EventType::Warning,
            reason: "HydrationFailed".into(),
            message: message.clone(),
        });
        Condition::new("ArtifactReady", false, "Failed", message)
    } else if ready == n {
        Condition::new("ArtifactReady", true, "Staged", "")
    } else if ready > 0 {
        Condition::new("ArtifactReady", false, "Partial", "")
    } else {
        let retrying = failures(&phases, CachePhase::Hydrating);
        let message = if retrying.is_empty() {
            String::new()
        } else {
            format!("retrying on {retrying}")
        };
        Condition::new("ArtifactReady", false, "Hydrating", message)
    });
    if !names
        .iter()
        .any(|c| inputs.observed.get(*c).is_some_and(|s| s.pvc_observed))
    {
        out.events.push(Event {
            type_: EventType::Normal,
            reason: "Staging".into(),
            message: format!("Staging {} to {n} clusters: {}", hf.repo, names.join(", ")),
        });
    }
    if ready == n && !inputs.was_ready {
        out.events.push(Event {
            type_: EventType::Normal,
            reason: "Staged".into(),
            message: format!("Artifact staged on all {n} clusters"),
        });
    }
    out
}
