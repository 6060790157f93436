//! `modelplane render`: every object the controllers would create for a
//! fleet and its deployments on a first pass, like `helm template`.
//!
//! Data flow: manifests → a [`World`] as the controllers would observe
//! them → every cluster brought to running by its own compositions
//! ([`World::assume_running`]) → every deployment placed in key order, each
//! seeing the replicas of those before it → each subject's composition, the
//! same `World::compose` the controllers apply → objects grouped by target.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use anyhow::bail;
use clap::{Args, ValueEnum};
use modelplane_api::types::{InferenceCluster, Source};
use modelplane_api::{labels, names};
use modelplane_compose::recipes;
use modelplane_compose::world::first_pass::Placed;
use modelplane_compose::world::{self, Subject, World};
use modelplane_compose::{Desired, Target};
use serde_json::{Value, json};

use crate::fleet::{Fleet, load};

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

/// Composes `subjects` from `world` and serializes what `keep` accepts, in
/// order. The cores share the work: composing a fleet's replicas and
/// writing their objects as text is most of a render.
fn compose_all(
    world: &World,
    subjects: &[Subject],
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Vec<Vec<(Target, String)>>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = subjects.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = subjects
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || -> anyhow::Result<Vec<Vec<(Target, String)>>> {
                    part.iter()
                        .map(|subject| {
                            let composition = world.compose(subject).unwrap_or_default();
                            serialized(&composition.desired, format, keep)
                        })
                        .collect()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(subjects.len());
        for worker in workers {
            let part = worker
                .join()
                .map_err(|_| anyhow::anyhow!("a composing thread panicked"))??;
            out.extend(part);
        }
        Ok(out)
    })
}

/// The objects of `desired` that `keep` accepts, serialized.
fn serialized(
    desired: &[Desired],
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Vec<(Target, String)>> {
    desired
        .iter()
        .filter(|d| keep(&d.target))
        .map(|d| Ok((d.target.clone(), serialize(&d.object, format)?)))
        .collect()
}

/// The fleet's first pass, composed by the world the controllers use:
/// every cluster brought to running, every deployment placed in key order,
/// then each kind's composition — ModelReplicas and their workloads, each
/// cluster with its cloud cluster and stack, each cache.
fn render(
    fleet: &Fleet,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Rendered> {
    let mut world = fleet.world();
    world.assume_running();
    let placed = world.place_deployments();
    let mut rendered = Rendered {
        summaries: Vec::new(),
        objects: BTreeMap::new(),
        held: false,
    };
    let mut summaries = Vec::new();
    for p in &placed {
        summaries.push(deployment_summary(&world, p, &mut rendered.held));
        add(&mut rendered.objects, &p.composition.desired, format, keep)?;
        // A deployment that holds keeps the replicas it has, as given.
        if p.composition.hold && keep(&Target::ControlPlane) {
            for replica in p.replicas.iter().filter_map(|k| world.replicas.get(k)) {
                let object = serde_json::to_value(&**replica)?;
                rendered
                    .objects
                    .entry(Target::ControlPlane)
                    .or_default()
                    .push(serialize(&object, format)?);
            }
        }
    }
    let replicas: Vec<Subject> = placed
        .iter()
        .flat_map(|p| p.replicas.iter().cloned().map(Subject::Replica))
        .collect();
    for objects in compose_all(&world, &replicas, format, keep)? {
        for (target, object) in objects {
            rendered.objects.entry(target).or_default().push(object);
        }
    }
    render_platform(&world, &mut rendered, format, keep)?;
    // The Crossplane providers the fleet's clouds need, and each
    // ModelService's route (its backends appear once endpoints are Ready).
    let fleet_wide: Vec<Subject> = std::iter::once(Subject::Providers)
        .chain(world.services.keys().cloned().map(Subject::Service))
        .collect();
    for objects in compose_all(&world, &fleet_wide, format, keep)? {
        for (target, object) in objects {
            rendered.objects.entry(target).or_default().push(object);
        }
    }
    let caches = render_caches(&world, &mut rendered, format, keep)?;
    rendered.summaries.extend(caches);
    rendered.summaries.append(&mut summaries);
    Ok(rendered)
}

/// What deployment `p` became, in one line and its notes: where each
/// replica went, or why it holds; for replicas short of the count, why
/// they found no place, per cluster and pool, as its composition notes.
fn deployment_summary(world: &World, p: &Placed, held: &mut bool) -> Summary {
    let composition = &p.composition;
    let mut explanations = Vec::new();
    if composition.hold {
        *held = true;
        let why: Vec<String> = composition
            .conditions
            .iter()
            .map(|c| format!("{}: {}", c.reason, c.message))
            .collect();
        return Summary {
            line: format!("{}: held ({})", p.key, why.join("; ")),
            explanations,
        };
    }
    let placed: Vec<String> = p
        .replicas
        .iter()
        .filter_map(|k| world.replicas.get(k))
        .map(|r| {
            let stack = world
                .clusters
                .get(&r.spec.cluster_name)
                .map(|c| format!("{:?}", c.spec.stack()))
                .unwrap_or_default();
            format!("{} ({stack})", r.spec.cluster_name)
        })
        .collect();
    let requested = world.deployments.get(&p.key).map_or(0, |d| d.spec.replicas);
    let missing_cache = composition
        .conditions
        .iter()
        .find(|c| c.type_ == "ModelCacheResolved" && c.status != "True");
    if let Some(cache) = missing_cache {
        explanations.push(cache.message.clone());
    }
    explanations.extend(composition.notes.iter().cloned());
    Summary {
        line: format!(
            "{}: {} of {requested} replicas placed{}",
            p.key,
            placed.len(),
            if placed.is_empty() {
                String::new()
            } else {
                format!(" on {}", placed.join(", "))
            }
        ),
        explanations,
    }
}

/// Adds every InferenceCluster's objects, its cloud cluster's and its
/// ServingStack's, with a summary per cluster ahead of the deployments'.
fn render_platform(
    world: &World,
    rendered: &mut Rendered,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<()> {
    let mut summaries = Vec::new();
    for (name, cluster) in &world.clusters {
        let composition = world
            .compose(&Subject::Cluster(name.clone()))
            .unwrap_or_default();
        add(&mut rendered.objects, &composition.desired, format, keep)?;
        let xr = composition
            .desired
            .iter()
            .find(|d| modelplane_compose::clouds::XR_KINDS.contains(&d.kind()));
        let mut missing_project = None;
        if let Some(xr) = xr
            && let Some(&kind) = modelplane_compose::clouds::XR_KINDS
                .iter()
                .find(|k| **k == xr.kind())
        {
            let key = world::key(xr.object["metadata"]["namespace"].as_str(), xr.name());
            let cloud = world
                .compose(&Subject::Cloud(kind, key))
                .unwrap_or_default();
            missing_project = cloud
                .conditions
                .iter()
                .any(|c| c.reason == "CannotCompose")
                .then(|| {
                    xr.object["apiVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                });
            add(&mut rendered.objects, &cloud.desired, format, keep)?;
        }
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
        let problems: Vec<String> = composition
            .conditions
            .iter()
            .filter(|c| matches!(c.reason.as_str(), "WaitingForClasses" | "InvalidNodePool"))
            .map(|c| format!("{}: {}", c.reason, c.message))
            .collect();
        if composition.hold || !problems.is_empty() {
            rendered.held = true;
            let _ = write!(summary.line, ": {}", problems.join("; "));
        }
        render_stack(world, name, cluster, rendered, &mut summary, format, keep)?;
        if let Some(api_version) = missing_project {
            let group = match cluster.spec.cluster.source {
                Source::Gke => "gcp.m.upbound.io",
                Source::Nebius => "nebius.m.upbound.io",
                _ => api_version.split('/').next().unwrap_or_default(),
            };
            summary.explanations.push(format!(
                "its managed resources need the {group} provider config its credentials name \
                 (for the projectID) among the inputs"
            ));
        }
        summaries.push(summary);
    }
    summaries.append(&mut rendered.summaries);
    rendered.summaries = summaries;
    Ok(())
}

/// Adds cluster `name`'s ServingStack composition, naming its recipe (and,
/// for a one-cluster render, its Helm releases) in `summary`.
fn render_stack(
    world: &World,
    name: &str,
    cluster: &InferenceCluster,
    rendered: &mut Rendered,
    summary: &mut Summary,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<()> {
    let Some(stack) = world.serving_stack(name) else {
        return Ok(());
    };
    let recipe = stack
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::RECIPE))
        .and_then(|r| recipes::all().iter().find(|k| &k.name == r));
    let Some(recipe) = recipe else {
        return Ok(());
    };
    let key = world::key(
        stack.metadata.namespace.as_deref(),
        &names::serving_stack_name(name),
    );
    let composition = world.compose(&Subject::Stack(key)).unwrap_or_default();
    add(&mut rendered.objects, &composition.desired, format, keep)?;
    let components: Vec<_> = recipe.components(cluster.spec.stack()).collect();
    let _ = write!(
        summary.line,
        ": recipe {}, {} Helm releases",
        recipe.name,
        components.len()
    );
    // The releases are control-plane objects; name them for a one-cluster
    // render so it shows the whole stack.
    if keep(&Target::Cluster(name.to_string())) && !keep(&Target::ControlPlane) {
        summary.explanations.extend(components.iter().map(|c| {
            format!(
                "release {} {} ({}) in {}",
                c.name, c.version, c.chart, c.namespace
            )
        }));
    }
    Ok(())
}

/// Adds every ModelCache's objects (PVC, hydration Job, token Secret) on the
/// clusters it matches.
fn render_caches(
    world: &World,
    rendered: &mut Rendered,
    format: Format,
    keep: &(dyn Fn(&Target) -> bool + Sync),
) -> anyhow::Result<Vec<Summary>> {
    let mut summaries = Vec::new();
    for title in world.caches.keys() {
        let composition = world
            .compose(&Subject::Cache(title.clone()))
            .unwrap_or_default();
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
