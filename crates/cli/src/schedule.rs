//! `modelplane schedule`: where the scheduler would place a deployment's
//! replicas on a fleet described by manifests, and why not elsewhere.
//!
//! Data flow: paths → `validate`'s admission (bad input is reported exactly
//! as `validate` reports it) → typed objects → scheduler inputs (a cluster
//! with a status is taken as it is; one without any status gets its pools
//! from its node pools and classes, and counts as Ready with a placeholder
//! gateway) → `schedule()` per deployment → a table or JSON.

use std::fmt::Write as _;

use anyhow::bail;
use clap::{Args, ValueEnum};
use modelplane_api::types::ModelDeployment;
use modelplane_scheduler::{
    Cluster, Deployment, DropReason, ExistingReplica, Explanation, Hold, Options, Reason, Schedule,
    schedule,
};
use serde_json::Value;

use std::sync::Arc;

use crate::fleet::{Fleet, deployment_view, key, load};

/// Output format of `schedule`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table per deployment.
    #[default]
    Table,
    /// The placement of one deployment as JSON (see docs/schedule.md).
    Json,
}

/// Arguments of `modelplane schedule`.
#[derive(Args, Debug)]
#[command(after_help = "\
Reads InferenceClusters (with their status, if any), InferenceClasses, ModelCaches, \
existing ModelReplicas and ModelDeployments. A cluster with a status is taken as it is \
(without status.gateway.address or a Ready condition it gets no new replicas, as on the \
control plane). A cluster without any status gets its pools from its node pools and \
classes, and counts as Ready with a placeholder gateway address. Several deployments are placed one after the other \
(by namespace/name), each seeing the replicas of those before it.

Exit status: 0 when a placement was computed, 1 when input is invalid or a deployment \
is held (a selector does not compile, no cluster matches), 2 when input cannot be read.

Examples:
  modelplane schedule -f examples/ --explain
  modelplane schedule -f fleet/ -f model.yaml --deployment ml-team/qwen3-8b -o json")]
pub struct ScheduleArgs {
    /// Manifest files or directories; `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "PATH", num_args = 1.., required = true)]
    paths: Vec<String>,
    /// The deployment to place, as namespace/name (required for JSON when
    /// there are several).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    deployment: Option<String>,
    /// Also say why every cluster and pool not chosen was not chosen.
    #[arg(long)]
    explain: bool,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Runs `schedule`; returns the exit code.
pub fn run(args: &ScheduleArgs) -> anyhow::Result<u8> {
    let fleet: Fleet = match load(&args.paths)? {
        Ok(fleet) => fleet,
        Err(code) => return Ok(code),
    };

    let mut deployments: Vec<&ModelDeployment> = fleet.deployments.iter().collect();
    deployments.sort_by_key(|d| key(&d.metadata.namespace, &d.metadata.name));
    if let Some(wanted) = &args.deployment {
        deployments.retain(|d| &key(&d.metadata.namespace, &d.metadata.name) == wanted);
        if deployments.is_empty() {
            bail!("no ModelDeployment {wanted} in the inputs");
        }
    }
    if deployments.is_empty() {
        bail!("no ModelDeployment in the inputs; pass one with -f");
    }
    if args.output == Format::Json && deployments.len() > 1 {
        let names: Vec<String> = deployments
            .iter()
            .map(|d| key(&d.metadata.namespace, &d.metadata.name))
            .collect();
        bail!(
            "several ModelDeployments ({}); pick one with --deployment",
            names.join(", ")
        );
    }

    // The clusters as render sees them: each brought to running by its own
    // compositions, a status given in the inputs taken as it is.
    let clusters: Arc<Vec<Cluster>> = {
        let mut world = fleet.world();
        world.assume_running();
        world.cluster_views()
    };
    let mut replicas: Vec<ExistingReplica> = fleet.existing_replicas();

    let mut code = 0;
    let mut out = String::new();
    for (i, md) in deployments.iter().enumerate() {
        let (deployment, fill, note) = deployment_view(md, &fleet.caches);
        let result = schedule(
            &deployment,
            &clusters,
            &replicas,
            Options {
                fill,
                explain: modelplane_scheduler::Explain::Always,
            },
        );
        if i > 0 {
            out.push('\n');
        }
        match (&result, args.output) {
            (Ok(s), Format::Json) => out.push_str(&(serde_json::to_string_pretty(s)? + "\n")),
            (Ok(s), Format::Table) => {
                render_table(&mut out, &deployment, s, note.as_deref(), args.explain)
            }
            (Err(hold), Format::Json) => {
                code = 1;
                out.push_str(&(serde_json::to_string_pretty(&hold_json(hold))? + "\n"));
            }
            (Err(hold), Format::Table) => {
                code = 1;
                render_hold(&mut out, &deployment, hold, args.explain);
            }
        }
        if let Ok(s) = &result {
            let own = |r: &ExistingReplica| {
                r.deployment.as_deref() == Some(deployment.name.as_str())
                    && r.namespace == deployment.namespace
            };
            replicas.retain(|r| !own(r));
            replicas.extend(
                s.placements
                    .iter()
                    .map(|p| ExistingReplica::from_placement(&deployment, p)),
            );
        }
    }
    crate::output::emit(&out)?;
    Ok(code)
}

fn hold_json(hold: &Hold) -> Value {
    match hold {
        Hold::InvalidSelector(e) => serde_json::json!({
            "hold": "InvalidNodeSelector",
            "message": hold.to_string(),
            "engine": e.engine,
            "member": e.member,
            "request": e.request,
            "selector": e.selector,
            "expression": e.expression,
            "line": e.error.line,
            "column": e.error.column,
            "error": e.error.message,
        }),
        Hold::NoClusters { explanations } => serde_json::json!({
            "hold": "NoClusters",
            "message": hold.to_string(),
            "explanations": explanations,
        }),
    }
}

fn render_hold(out: &mut String, d: &Deployment, hold: &Hold, explain: bool) {
    let _ = writeln!(
        out,
        "{}/{}: held, existing replicas stay",
        d.namespace, d.name
    );
    match hold {
        Hold::InvalidSelector(e) => {
            let _ = writeln!(
                out,
                "  engine {} member {} request {} selector {}: invalid CEL at {}:{}: {}",
                e.engine,
                e.member,
                e.request,
                e.selector,
                e.error.line,
                e.error.column,
                e.error.message
            );
            for (i, line) in e.expression.lines().enumerate() {
                let _ = writeln!(out, "    | {line}");
                if i + 1 == e.error.line {
                    let _ = writeln!(
                        out,
                        "    | {}^",
                        " ".repeat(e.error.column.saturating_sub(1))
                    );
                }
            }
        }
        Hold::NoClusters { explanations } => {
            let _ = writeln!(out, "  no InferenceCluster matches the cluster selector");
            if explain {
                render_explanations(out, explanations);
            }
        }
    }
}

fn devices_text(requests: &[modelplane_scheduler::ResolvedRequest]) -> String {
    if requests.is_empty() {
        return "-".into();
    }
    requests
        .iter()
        .map(|r| {
            format!(
                "{}: {} × {}",
                r.name,
                r.count,
                if r.device_class_name.is_empty() {
                    "?"
                } else {
                    &r.device_class_name
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_table(out: &mut String, d: &Deployment, s: &Schedule, note: Option<&str>, explain: bool) {
    let clusters: std::collections::BTreeSet<&str> =
        s.placements.iter().map(|p| p.cluster.as_str()).collect();
    let _ = writeln!(
        out,
        "{}/{}: {} of {} replicas placed on {} ({} candidate clusters)",
        d.namespace,
        d.name,
        s.placements.len(),
        s.requested,
        if clusters.is_empty() {
            "no cluster".to_string()
        } else {
            clusters.into_iter().collect::<Vec<_>>().join(", ")
        },
        s.candidates
    );
    if let Some(note) = note {
        let _ = writeln!(out, "  note: {note}");
    }
    let mut rows = vec![
        [
            "CLUSTER", "INDEX", "STATE", "ENGINE", "MEMBER", "POOL", "DEVICES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in &s.placements {
        for e in &p.engines {
            for m in &e.members {
                rows.push(vec![
                    p.cluster.clone(),
                    p.index.to_string(),
                    if p.retained { "kept" } else { "new" }.into(),
                    e.name.clone(),
                    format!("{:?}", m.role),
                    m.pool.clone(),
                    devices_text(&m.device_requests),
                ]);
            }
        }
    }
    if rows.len() > 1 {
        write_rows(out, &rows);
    }
    if !s.dropped.is_empty() {
        let _ = writeln!(out, "  replaced or removed:");
        let mut rows = vec![
            ["CLUSTER", "INDEX", "REPLICA", "REASON"]
                .map(String::from)
                .to_vec(),
        ];
        for d in &s.dropped {
            rows.push(vec![
                d.cluster.clone(),
                d.index.to_string(),
                if d.replica.is_empty() {
                    "-".into()
                } else {
                    d.replica.clone()
                },
                drop_text(d.reason).into(),
            ]);
        }
        write_rows(out, &rows);
    }
    if explain {
        render_explanations(out, &s.explanations);
    }
}

fn render_explanations(out: &mut String, explanations: &[Explanation]) {
    if explanations.is_empty() {
        return;
    }
    let _ = writeln!(out, "  not chosen:");
    let mut rows = vec![
        ["CLUSTER", "POOL", "ENGINE", "REASON"]
            .map(String::from)
            .to_vec(),
    ];
    for e in explanations {
        rows.push(vec![
            e.cluster.clone(),
            e.pool.clone().unwrap_or_else(|| "-".into()),
            e.engine.clone().unwrap_or_else(|| "-".into()),
            reason_text(&e.reason),
        ]);
    }
    write_rows(out, &rows);
}

fn write_rows(out: &mut String, rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let mut line = String::from("  ");
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

fn drop_text(reason: DropReason) -> &'static str {
    match reason {
        DropReason::ClusterNotCandidate => {
            "cluster is gone or no longer matches the cluster selector"
        }
        DropReason::Duplicate => "another replica has the same cluster and index",
        DropReason::Evicted => "an untolerated NoExecute taint drains the cluster",
        DropReason::NoLongerFits => "its engines or pinned pools no longer fit the deployment",
        DropReason::ScaledDown => "scaled down",
    }
}

/// A reason in words (the scheduler's, shared with status messages).
pub fn reason_text(reason: &Reason) -> String {
    reason.to_string()
}
