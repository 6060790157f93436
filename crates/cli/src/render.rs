//! `modelplane render`: every object the controllers would create for a
//! fleet and its deployments on a first pass, like `helm template`.
//!
//! Data flow: manifests → fleet (as `schedule` reads it; every cluster Ready)
//! → `compose_model_deployment` per deployment (each seeing the replicas of
//! those before it) → `compose_model_replica` per composed ModelReplica on
//! its cluster's stack → objects grouped by target.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use modelplane_api::types::{InferenceCluster, ModelDeployment, ModelReplica, Source};
use modelplane_compose::{
    CacheInputs, CacheLookup, DeploymentInputs, Desired, ReplicaInputs, Target, Token,
    compose_model_cache, compose_model_deployment, compose_model_replica,
};
use modelplane_scheduler::{Cluster, ExistingReplica, Options, schedule};
use serde_json::{Value, json};

use crate::fleet::{Fleet, deployment_view, key, load};

/// Output format of `render`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Multi-document YAML, grouped by target, with a summary per deployment.
    #[default]
    Yaml,
    /// One JSON object: summaries, control-plane objects, objects per cluster.
    Json,
}

/// Arguments of `modelplane render`.
#[derive(Args, Debug)]
#[command(after_help = "\
Reads InferenceClusters (their spec.stack decides how engines run), InferenceClasses, \
ModelCaches, existing ModelReplicas and ModelDeployments, and prints what the \
controllers would create on a first pass with every cluster Ready: ModelReplicas on the \
control plane; on each cluster the engine workloads (Deployment or LeaderWorkerSet on \
Standard, Grove PodCliqueSet on Dynamo), ResourceClaimTemplates, the InferencePool, \
HTTPRoute and endpoint picker. Per InferenceCluster: its cloud cluster, provider config, \
ServingStack and the recipe's Helm releases on the control plane; the stack's quota, \
gateway and (Dynamo) KAI queue on the cluster. ModelEndpoints appear once replicas are \
Ready, so not on a first pass.

Examples:
  modelplane render -f examples/
  modelplane render -f examples/ --cluster us-west | kubectl apply --dry-run=client -f -")]
pub struct RenderArgs {
    /// Manifest files or directories; `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "PATH", num_args = 1.., required = true)]
    paths: Vec<String>,
    /// Only the objects that go to this InferenceCluster.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

/// What one deployment became.
struct Summary {
    line: String,
    explanations: Vec<String>,
}

/// Runs `render`; returns the exit code.
pub fn run(args: &RenderArgs) -> anyhow::Result<u8> {
    let fleet: Fleet = match load(&args.paths)? {
        Ok(fleet) => fleet,
        Err(code) => return Ok(code),
    };
    if let Some(name) = &args.cluster
        && !fleet
            .clusters
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name.as_str()))
    {
        bail!("no InferenceCluster {name} in the inputs");
    }
    let keep = |target: &Target| match (&args.cluster, target) {
        (None, _) => true,
        (Some(name), Target::Cluster(c)) => c == name,
        (Some(_), Target::ControlPlane) => false,
    };
    let rendered = render(&fleet, args.output, &keep)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.output {
        Format::Yaml => write_yaml(&mut out, &rendered),
        Format::Json => write_json(&mut out, &rendered),
    }
    .and_then(|()| out.flush());
    crate::output::ignore_broken_pipe(written)?;
    Ok(if rendered.held { 1 } else { 0 })
}

/// What a render produced: summaries, and each target's objects already
/// serialized (text is far smaller than value trees, so a large fleet stays
/// light in memory).
struct Rendered {
    summaries: Vec<Summary>,
    objects: BTreeMap<Target, Vec<String>>,
    held: bool,
    /// ModelReplicas per cluster, for each cluster's replica guard.
    hosted: BTreeMap<String, usize>,
}

/// Serializes one object in the output format.
fn serialize(object: &Value, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Yaml => crate::output::to_yaml(object),
        Format::Json => serde_json::to_string_pretty(object)?,
    })
}

/// Serializes the objects `keep` accepts into their target's list.
fn add(
    objects: &mut BTreeMap<Target, Vec<String>>,
    desired: &[Desired],
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<()> {
    for d in desired.iter().filter(|d| keep(&d.target)) {
        objects
            .entry(d.target.clone())
            .or_default()
            .push(serialize(&d.object, format)?);
    }
    Ok(())
}

/// Composes each replica on its cluster and serializes the objects. Runs on
/// its own thread while the main one schedules the next deployments: on two
/// cores the two halves of a render overlap.
fn compose_on_clusters(
    replicas: std::sync::mpsc::Receiver<ModelReplica>,
    by_name: &BTreeMap<&str, &InferenceCluster>,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<BTreeMap<Target, Vec<String>>> {
    let mut objects = BTreeMap::new();
    let no_workloads = BTreeMap::new();
    for replica in replicas {
        let cluster = by_name.get(replica.spec.cluster_name.as_str()).copied();
        let on_cluster = compose_model_replica(ReplicaInputs {
            replica: &replica,
            cluster,
            observed: &no_workloads,
        });
        add(&mut objects, &on_cluster.desired, format, keep)?;
    }
    Ok(objects)
}

fn render(
    fleet: &Fleet,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Rendered> {
    let by_name: BTreeMap<&str, &InferenceCluster> = fleet
        .clusters
        .iter()
        .map(|c| (c.metadata.name.as_deref().unwrap_or_default(), c))
        .collect();
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = scope.spawn(|| compose_on_clusters(rx, &by_name, format, keep));
        let mut rendered = place_deployments(fleet, &by_name, tx, format, keep)?;
        let cluster_objects = worker
            .join()
            .map_err(|_| anyhow::anyhow!("the composing thread panicked"))??;
        rendered.objects.extend(cluster_objects);
        render_platform(fleet, &mut rendered, format, keep)?;
        Ok(rendered)
    })
}

/// Adds every InferenceCluster's objects and its ServingStack's, with a
/// summary per cluster ahead of the deployments'.
fn render_platform(
    fleet: &Fleet,
    rendered: &mut Rendered,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<()> {
    let mut clusters: Vec<&InferenceCluster> = fleet.clusters.iter().collect();
    clusters.sort_by_key(|c| c.metadata.name.clone());
    let mut summaries = Vec::new();
    let mut running = Vec::new();
    for cluster in clusters {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        let hosted = rendered.hosted.get(&name).copied().unwrap_or(0);
        let platform = crate::platform::compose(
            cluster,
            &fleet.classes,
            hosted,
            &fleet.cloud_provider_configs,
        );
        add(
            &mut rendered.objects,
            &platform.cluster.desired,
            format,
            keep,
        )?;
        if let Some(cloud) = &platform.cloud {
            add(&mut rendered.objects, &cloud.desired, format, keep)?;
        }
        let group = match cluster.spec.cluster.source {
            Source::Gke => Some("gcp.m.upbound.io"),
            Source::Nebius => Some("nebius.m.upbound.io"),
            _ => None,
        };
        let missing_project = group.filter(|_| platform.cloud.is_none());
        let mut summary = Summary {
            line: format!(
                "cluster {name} ({}, {:?})",
                serde_json::to_value(cluster.spec.cluster.source)?
                    .as_str()
                    .unwrap_or_default(),
                cluster.spec.stack()
            ),
            explanations: Vec::new(),
        };
        let problems: Vec<String> = platform
            .cluster
            .conditions
            .iter()
            .filter(|c| matches!(c.reason.as_str(), "WaitingForClasses" | "InvalidNodePool"))
            .map(|c| format!("{}: {}", c.reason, c.message))
            .collect();
        if platform.cluster.hold || !problems.is_empty() {
            rendered.held = true;
            let _ = write!(summary.line, ": {}", problems.join("; "));
        }
        if let (Some(stack), Some(recipe)) = (&platform.stack, platform.recipe) {
            add(&mut rendered.objects, &stack.desired, format, keep)?;
            let components: Vec<_> = recipe.components(cluster.spec.stack()).collect();
            let _ = write!(
                summary.line,
                ": recipe {}, {} Helm releases",
                recipe.name,
                components.len()
            );
            // The releases are control-plane objects; name them for a
            // one-cluster render so it shows the whole stack.
            if keep(&Target::Cluster(name.clone())) && !keep(&Target::ControlPlane) {
                summary.explanations.extend(components.iter().map(|c| {
                    format!(
                        "release {} {} ({}) in {}",
                        c.name, c.version, c.chart, c.namespace
                    )
                }));
            }
        }
        if let Some(group) = missing_project {
            summary.explanations.push(format!(
                "its managed resources need the {group} provider config its credentials name \
                 (for the projectID) among the inputs"
            ));
        }
        summaries.push(summary);
        let mut cluster = cluster.clone();
        cluster.status = platform
            .cluster
            .status
            .clone()
            .and_then(|s| serde_json::from_value(s).ok());
        running.push(cluster);
    }
    summaries.extend(render_caches(fleet, &running, rendered, format, keep)?);
    summaries.append(&mut rendered.summaries);
    rendered.summaries = summaries;
    Ok(())
}

/// Adds every ModelCache's objects (PVC, hydration Job, token Secret) on the
/// clusters it matches, given those clusters running.
fn render_caches(
    fleet: &Fleet,
    running: &[InferenceCluster],
    rendered: &mut Rendered,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Vec<Summary>> {
    let mut summaries = Vec::new();
    for cache in &fleet.caches {
        let gated = cache
            .spec
            .hugging_face
            .as_ref()
            .is_some_and(|hf| hf.auth_secret.is_some());
        let composition = compose_model_cache(CacheInputs {
            cache,
            clusters: Some(running),
            // A render reads no Secrets: a gated repository's token shows as
            // a placeholder.
            token: if gated {
                Token::Found(TOKEN_PLACEHOLDER)
            } else {
                Token::NotNeeded
            },
            observed: &BTreeMap::new(),
            previous: &[],
            was_ready: false,
        });
        add(&mut rendered.objects, &composition.desired, format, keep)?;
        let mut on: Vec<&str> = composition
            .desired
            .iter()
            .filter(|d| d.kind() == "PersistentVolumeClaim")
            .filter_map(|d| match &d.target {
                Target::Cluster(c) => Some(c.as_str()),
                Target::ControlPlane => None,
            })
            .collect();
        on.sort_unstable();
        let title = key(&cache.metadata.namespace, &cache.metadata.name);
        summaries.push(Summary {
            line: if on.is_empty() {
                format!("cache {title}: no cluster with cache storage matches")
            } else {
                format!("cache {title}: staged on {}", on.join(", "))
            },
            explanations: Vec::new(),
        });
    }
    Ok(summaries)
}

/// Base64 of `<token from the Secret>`.
const TOKEN_PLACEHOLDER: &str = "PHRva2VuIGZyb20gdGhlIFNlY3JldD4=";

/// Schedules and composes every deployment; sends each ModelReplica to be
/// composed on its cluster.
fn place_deployments(
    fleet: &Fleet,
    by_name: &BTreeMap<&str, &InferenceCluster>,
    to_clusters: std::sync::mpsc::Sender<ModelReplica>,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Rendered> {
    let views: Vec<Cluster> = fleet.cluster_views();
    let mut replicas: Vec<ExistingReplica> = fleet.existing_replicas();
    let mut deployments: Vec<&ModelDeployment> = fleet.deployments.iter().collect();
    deployments.sort_by_key(|d| key(&d.metadata.namespace, &d.metadata.name));

    let mut out = Rendered {
        summaries: Vec::new(),
        objects: BTreeMap::new(),
        held: false,
        hosted: BTreeMap::new(),
    };
    for r in &fleet.replicas {
        *out.hosted.entry(r.spec.cluster_name.clone()).or_default() += 1;
    }
    let ready = Default::default();
    for md in deployments {
        let (deployment, _, note) = deployment_view(md, &fleet.caches);
        let cache = match &md.spec.template.spec.model_cache_ref {
            None => CacheLookup::NotReferenced,
            Some(r) => fleet
                .caches
                .iter()
                .find(|c| {
                    c.metadata.name.as_deref() == Some(r.name.as_str())
                        && c.metadata.namespace == md.metadata.namespace
                })
                .map_or(CacheLookup::Absent, CacheLookup::Present),
        };
        let composition = compose_model_deployment(DeploymentInputs {
            deployment: md,
            cache,
            clusters: Some(&views),
            replicas: &replicas,
            ready: &ready,
            routed: &BTreeSet::new(),
        });
        let title = key(&md.metadata.namespace, &md.metadata.name);
        let mut summary = Summary {
            line: String::new(),
            explanations: Vec::new(),
        };
        if composition.hold {
            out.held = true;
            let why: Vec<String> = composition
                .conditions
                .iter()
                .map(|c| format!("{}: {}", c.reason, c.message))
                .collect();
            summary.line = format!("{title}: held ({})", why.join("; "));
            out.summaries.push(summary);
            continue;
        }
        let mut placed = Vec::new();
        let mut composed = Vec::new();
        for desired in &composition.desired {
            if desired.kind() != "ModelReplica" {
                continue;
            }
            let replica: ModelReplica = serde_json::from_value(desired.object.clone())
                .context("a composed ModelReplica does not fit its type")?;
            let cluster = by_name.get(replica.spec.cluster_name.as_str()).copied();
            let stack = cluster
                .map(|c| format!("{:?}", c.spec.stack()))
                .unwrap_or_default();
            placed.push(format!("{} ({stack})", replica.spec.cluster_name));
            if !fleet
                .replicas
                .iter()
                .any(|r| r.metadata.name == replica.metadata.name)
            {
                *out.hosted
                    .entry(replica.spec.cluster_name.clone())
                    .or_default() += 1;
            }
            composed.push(ExistingReplica::from_resource(&replica));
            // The composing thread only stops early on an error of its own.
            let _ = to_clusters.send(replica);
        }
        let requested = md.spec.replicas;
        summary.line = format!(
            "{title}: {} of {requested} replicas placed{}",
            placed.len(),
            if placed.is_empty() {
                String::new()
            } else {
                format!(" on {}", placed.join(", "))
            }
        );
        if let Some(note) = note {
            summary.explanations.push(note);
        }
        if placed.len() < usize::try_from(requested).unwrap_or(0)
            && let Ok(s) = schedule(
                &deployment,
                &views,
                &replicas,
                Options {
                    fill: true,
                    explain: true,
                },
            )
        {
            summary.explanations.extend(s.explanations.iter().map(|e| {
                let mut at = e.cluster.clone();
                if let Some(pool) = &e.pool {
                    let _ = write!(at, "/{pool}");
                }
                format!("{at}: {}", crate::schedule::reason_text(&e.reason))
            }));
        }
        let own = |r: &ExistingReplica| {
            r.deployment.as_deref() == Some(deployment.name.as_str())
                && r.namespace == deployment.namespace
        };
        replicas.retain(|r| !own(r));
        replicas.extend(composed);
        add(&mut out.objects, &composition.desired, format, keep)?;
        out.summaries.push(summary);
    }
    Ok(out)
}

/// Summaries as comments, then every target's objects (control plane first,
/// then clusters by name), each group under a comment naming it.
fn write_yaml(out: &mut impl Write, rendered: &Rendered) -> std::io::Result<()> {
    for s in &rendered.summaries {
        writeln!(out, "# {}", s.line)?;
        for e in &s.explanations {
            writeln!(out, "#   {e}")?;
        }
    }
    for (target, objects) in &rendered.objects {
        match target {
            Target::ControlPlane => writeln!(out, "# ---- control plane")?,
            Target::Cluster(name) => writeln!(out, "# ---- cluster {name}")?,
        }
        for object in objects {
            out.write_all(b"---\n")?;
            out.write_all(object.as_bytes())?;
        }
    }
    Ok(())
}

/// `{"summaries": [...], "controlPlane": [...], "clusters": {"<name>": [...]}}`.
fn write_json(out: &mut impl Write, rendered: &Rendered) -> std::io::Result<()> {
    let summaries: Vec<Value> = rendered
        .summaries
        .iter()
        .map(|s| json!({ "summary": s.line, "notes": s.explanations }))
        .collect();
    let list = |out: &mut dyn Write, objects: Option<&Vec<String>>| -> std::io::Result<()> {
        out.write_all(b"[")?;
        for (i, object) in objects.into_iter().flatten().enumerate() {
            if i > 0 {
                out.write_all(b",\n")?;
            }
            out.write_all(object.as_bytes())?;
        }
        out.write_all(b"]")
    };
    let summaries = serde_json::to_string_pretty(&summaries).map_err(std::io::Error::other)?;
    write!(out, "{{\n\"summaries\": {summaries},\n\"controlPlane\": ")?;
    list(out, rendered.objects.get(&Target::ControlPlane))?;
    out.write_all(b",\n\"clusters\": {")?;
    let mut first = true;
    for (target, objects) in &rendered.objects {
        if let Target::Cluster(name) = target {
            let sep = if first { "" } else { "," };
            first = false;
            let name = serde_json::to_string(name).map_err(std::io::Error::other)?;
            write!(out, "{sep}\n{name}: ")?;
            list(out, Some(objects))?;
        }
    }
    out.write_all(b"\n}\n}\n")
}
