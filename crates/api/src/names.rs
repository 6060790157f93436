//! Names of composed objects (`behavior.md` §3): readable, hash-suffixed and
//! at most 63 characters, so they are valid DNS labels and never collide.

use sha2::{Digest, Sha256};

/// Longest readable prefix; with `-` and five hex characters the name stays ≤ 63.
const PREFIX_MAX: usize = 57;

fn short_hash(full: &str) -> String {
    let digest = Sha256::digest(full.as_bytes());
    let mut hex = String::with_capacity(6);
    for byte in digest.iter().take(3) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex.truncate(5);
    hex
}

fn readable_prefix(text: &str) -> &str {
    let cut = text
        .char_indices()
        .nth(PREFIX_MAX)
        .map_or(text.len(), |(i, _)| i);
    text[..cut].trim_end_matches('-')
}

/// `child_name(parts…)`: the parts joined with `-`, cut to 57 characters,
/// plus `-` and the first five hex digits of the SHA-256 of the full join.
pub fn child_name(parts: &[&str]) -> String {
    let full = parts.join("-");
    format!("{}-{}", readable_prefix(&full), short_hash(&full))
}

/// `opaque_name(visible, discriminators…)`: like [`child_name`], but only
/// `visible` is readable; the discriminators feed the hash alone.
pub fn opaque_name(visible: &str, discriminators: &[&str]) -> String {
    let mut all = vec![visible];
    all.extend_from_slice(discriminators);
    let full = all.join("-");
    format!("{}-{}", readable_prefix(visible), short_hash(&full))
}

/// Name of a ModelReplica and of its ModelEndpoint.
pub fn replica_name(deployment: &str, cluster: &str, index: u32) -> String {
    opaque_name(deployment, &[cluster, &index.to_string()])
}

/// Name of an engine's workload (Deployment, LeaderWorkerSet, PodCliqueSet).
pub fn workload_name(replica: &str, engine: &str) -> String {
    child_name(&[replica, engine])
}

/// Name of a member's ResourceClaimTemplate.
pub fn claim_template_name(replica: &str, engine: &str, role: &str) -> String {
    child_name(&[replica, engine, &role.to_ascii_lowercase(), "devices"])
}

/// Name of a model cache's PVC on each cluster.
pub fn cache_pvc_name(namespace: &str, cache: &str) -> String {
    child_name(&["modelcache", namespace, cache])
}

/// Name of a model cache's hydration Job.
pub fn cache_job_name(namespace: &str, cache: &str) -> String {
    child_name(&["modelcache", namespace, cache, "hydrate"])
}

/// Name of a gated model cache's hydration Job run with `token`: a new
/// token (one given after the Hub refused the last) is a new Job, so a
/// failed one is not left standing. The token feeds the name's hash alone.
pub fn cache_job_name_with_token(namespace: &str, cache: &str, token: Option<&str>) -> String {
    match token {
        None => cache_job_name(namespace, cache),
        Some(token) => opaque_name(&cache_job_name(namespace, cache), &[token]),
    }
}

/// Name of a model cache's token Secret on each cluster.
pub fn cache_auth_secret_name(namespace: &str, cache: &str) -> String {
    child_name(&["modelcache", namespace, cache, "auth"])
}

/// Name of an InferenceCluster's ServingStack.
pub fn serving_stack_name(cluster: &str) -> String {
    child_name(&[cluster, "serving-stack"])
}

/// Name of the provider config that reaches an InferenceCluster.
pub fn cluster_provider_config_name(cluster: &str) -> String {
    child_name(&[cluster, "cluster-kubeconfig"])
}

/// Name of a ServingStack's provider configs.
pub fn serving_stack_provider_config_name(serving_stack: &str) -> String {
    child_name(&[serving_stack, "cluster"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_names_match_the_reference_examples() {
        assert_eq!(replica_name("my-model", "cluster-a", 0), "my-model-5ab63");
        assert_eq!(replica_name("my-model", "cluster-b", 0), "my-model-f0b76");
        assert_eq!(replica_name("my-model", "cluster-a", 1), "my-model-609c5");
    }

    #[test]
    fn child_names_match_the_reference_examples() {
        assert_eq!(
            workload_name("test-replica", "main"),
            "test-replica-main-6b608"
        );
        assert_eq!(workload_name("r", "main"), "r-main-bb4e3");
        assert_eq!(
            claim_template_name("test-replica", "main", "Standalone"),
            "test-replica-main-standalone-devices-e609d"
        );
        assert_eq!(
            cache_pvc_name("ml-team", "qwen"),
            "modelcache-ml-team-qwen-17db2"
        );
    }

    #[test]
    fn long_names_stay_within_63_characters_without_trailing_dashes() {
        let long = format!("{}-{}", "a".repeat(56), "b".repeat(20));
        let name = child_name(&[&long]);
        assert_eq!(name.len(), 57 - 1 + 6);
        assert!(!name.contains("--"));
        assert!(opaque_name(&"x".repeat(80), &["c", "0"]).len() <= 63);
    }
}

/// Name of a Grove PodCliqueSet for an engine of a replica: a readable
/// prefix of at most 22 characters and a hash, so the set, its scaling group
/// (`g`) and its longest clique (`leader`) stay within Grove's 45-character
/// limit.
pub fn pod_clique_set_name(replica: &str, engine: &str) -> String {
    let visible = format!("{replica}-{engine}");
    let cut = visible
        .char_indices()
        .nth(22)
        .map_or(visible.len(), |(i, _)| i);
    // `/` cannot occur in either name, so distinct pairs hash apart.
    let identity = format!("{replica}/{engine}");
    format!(
        "{}-{}",
        visible[..cut].trim_end_matches('-'),
        short_hash(&identity)
    )
}

#[cfg(test)]
mod grove_tests {
    use super::*;

    #[test]
    fn pod_clique_set_names_leave_room_for_group_and_clique() {
        let long = pod_clique_set_name(&"r".repeat(63), &"e".repeat(63));
        assert!(long.len() + "g".len() + "leader".len() <= 45, "{long}");
        assert_ne!(
            pod_clique_set_name("a", "b-c"),
            pod_clique_set_name("a-b", "c")
        );
    }
}
