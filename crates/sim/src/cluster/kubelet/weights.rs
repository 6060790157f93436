//! Where an engine's weights come from and how many bytes they are: the
//! ModelCache volume (unless it is not hydrated yet), a peer serving the
//! model over the pool's fabric (ModelExpress), or a download.

use serde_json::Value;

use super::super::expand::{command_line, environment};
use super::super::launch::{self, Launch, Process};
use super::super::world::{ClusterKind, World, name, namespace};

/// Where an engine's weights come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// The cluster's shared storage (the ModelCache volume, or a download).
    Storage,
    /// A peer pod serving the model, over the pool's fabric (ModelExpress).
    Peer { pod: String, fabric: String },
}
/// The bytes of the model an engine loads: the ModelCache volume's size
/// when it reads from one, else its parameter count at 16 bits.
pub(super) fn model_bytes(world: &World<'_>, pod: &Value, launch: &Launch) -> f64 {
    const GI: f64 = 1024.0 * 1024.0 * 1024.0;
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() else {
            continue;
        };
        let mounted_at = pod["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == volume["name"])
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_default();
        if !mounted_at.is_empty() && launch.model.starts_with(mounted_at) {
            let size = world
                .get(ClusterKind::Pvc, namespace(pod), claim)
                .and_then(|p| p["spec"]["resources"]["requests"]["storage"].as_str())
                .and_then(parse_gi)
                .unwrap_or(10.0);
            return size * GI;
        }
    }
    parameters(&launch.model).map_or(GI, |billions| billions * 2.0 * 1e9)
}
pub(super) fn parse_gi(quantity: &str) -> Option<f64> {
    let (number, unit) = quantity.split_at(
        quantity
            .find(|c: char| c.is_alphabetic())
            .unwrap_or(quantity.len()),
    );
    let n: f64 = number.parse().ok()?;
    Some(match unit {
        "Ti" => n * 1024.0,
        "Gi" | "" => n,
        "Mi" => n / 1024.0,
        "T" => n * 1e12 / 1073741824.0,
        "G" => n * 1e9 / 1073741824.0,
        _ => n,
    })
}
/// Billions of parameters a model's name says (`Qwen3-8B`, `480B-A35B`).
pub(super) fn parameters(model: &str) -> Option<f64> {
    let upper = model.to_uppercase();
    let bytes = upper.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b != b'B' || i == 0 {
            continue;
        }
        let start = upper[..i]
            .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
            .map_or(0, |p| p + 1);
        let ends_word = bytes.get(i + 1).is_none_or(|n| !n.is_ascii_alphanumeric());
        if start < i && ends_word && (start == 0 || !bytes[start - 1].is_ascii_alphabetic()) {
            return upper[start..i].parse().ok();
        }
    }
    None
}
pub(super) fn devices_of(world: &World<'_>, pod: &Value) -> u64 {
    // A pod's claims: named directly, or generated from a template (the
    // name its status gives).
    pod["spec"]["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|claim| {
            let name = match claim["resourceClaimName"].as_str() {
                Some(direct) => direct.to_string(),
                None => pod["status"]["resourceClaimStatuses"]
                    .as_array()?
                    .iter()
                    .find(|s| s["name"] == claim["name"])?["resourceClaimName"]
                    .as_str()?
                    .to_string(),
            };
            world.get(ClusterKind::Claim, namespace(pod), &name)
        })
        .map(|c| {
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .map_or(0, Vec::len) as u64
        })
        .sum()
}
/// The cache claim an engine reads its model from while no hydration Job
/// mounting it has completed (the volume is still empty): one has when the
/// claim records it, or a completed one is still there.
pub(super) fn unhydrated_cache(world: &World<'_>, pod: &Value, launch: &Launch) -> Option<String> {
    let container = &pod["spec"]["containers"][0];
    let volume = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| {
            v["persistentVolumeClaim"]["claimName"].is_string()
                && container["volumeMounts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| {
                        m["name"] == v["name"]
                            && m["mountPath"]
                                .as_str()
                                .is_some_and(|path| launch.model.starts_with(path))
                    })
        })?;
    let claim = volume["persistentVolumeClaim"]["claimName"].as_str()?;
    let recorded = world
        .get(ClusterKind::Pvc, namespace(pod), claim)
        .is_some_and(|pvc| pvc["metadata"]["annotations"][super::super::HYDRATED] == "true");
    let hydrated = recorded
        || world.all(ClusterKind::Job).any(|job| {
            namespace(job) == namespace(pod)
                && super::super::world::condition(job, "Complete")
                    .is_some_and(|c| c["status"] == "True")
                && job["spec"]["template"]["spec"]["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|v| v["persistentVolumeClaim"]["claimName"] == claim)
        });
    (!hydrated).then(|| claim.to_string())
}
/// A pod of the same model that serves already: ModelExpress's source.
pub(super) fn peer_source(
    world: &World<'_>,
    pod: &Value,
    launch: &Launch,
    fabric: &str,
) -> Option<Source> {
    world
        .all(ClusterKind::Pod)
        .filter(|p| name(p) != name(pod) && super::super::world::pod_ready(p))
        .find(|p| {
            let c = &p["spec"]["containers"][0];
            let (_, env) = environment(p, c);
            let (command, args) = command_line(c, &env);
            let mut log = String::new();
            let argv = launch::argv(
                c["image"].as_str().unwrap_or_default(),
                &command,
                &args,
                &env,
                &mut log,
            );
            // A source is a replica of the same model, layout and rank that
            // loaded through ModelExpress (its publisher registered it).
            matches!(launch::process(&argv, log), Process::Engine(l)
                if l.model == launch.model
                    && l.node_rank == launch.node_rank
                    && l.world_size == launch.world_size
                    && matches!(l.load_format.as_deref(), Some("modelexpress" | "mx")))
        })
        .map(|p| Source::Peer {
            pod: name(p).to_string(),
            fabric: fabric.to_string(),
        })
}
