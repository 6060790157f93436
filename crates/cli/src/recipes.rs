//! `modelplane recipes`: the locked serving-stack recipes of this release.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use modelplane_api::types::{Source, Stack};
use modelplane_compose::recipes::{self, Stacks};

/// A cloud, as `--cloud` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CloudArg {
    /// Amazon EKS.
    #[value(name = "EKS", alias = "eks")]
    Eks,
    /// Google GKE.
    #[value(name = "GKE", alias = "gke")]
    Gke,
    /// Azure AKS.
    #[value(name = "AKS", alias = "aks")]
    Aks,
    /// Nebius.
    #[value(name = "Nebius", alias = "nebius")]
    Nebius,
    /// Vultr.
    #[value(name = "Vultr", alias = "vultr")]
    Vultr,
    /// Existing clusters.
    #[value(name = "Existing", alias = "existing")]
    Existing,
}

impl From<CloudArg> for Source {
    fn from(c: CloudArg) -> Source {
        match c {
            CloudArg::Eks => Source::Eks,
            CloudArg::Gke => Source::Gke,
            CloudArg::Aks => Source::Aks,
            CloudArg::Nebius => Source::Nebius,
            CloudArg::Vultr => Source::Vultr,
            CloudArg::Existing => Source::Existing,
        }
    }
}

/// A stack, as `--stack` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StackArg {
    /// LeaderWorkerSet.
    #[value(name = "Standard", alias = "standard")]
    Standard,
    /// Grove, KAI Scheduler and ModelExpress.
    #[value(name = "Dynamo", alias = "dynamo")]
    Dynamo,
}

/// Arguments of `modelplane recipes`.
#[derive(Args, Debug)]
#[command(after_help = "\
Each recipe is a fixed list of Helm charts for one (cloud, accelerator, OS): the GPU stack \
from NVIDIA AI Cluster Runtime and Modelplane's serving pieces. A cluster gets the recipe \
of its cloud that covers all its pools' accelerators, else its cloud's general one. \
Clusters carry no version fields: a release upgrades them by changing its recipes.

Examples:
  modelplane recipes
  modelplane recipes --cloud EKS --stack Dynamo")]
pub struct RecipesArgs {
    /// Only this cloud's recipes.
    #[arg(long, value_enum)]
    cloud: Option<CloudArg>,
    /// Only the components this stack installs.
    #[arg(long, value_enum)]
    stack: Option<StackArg>,
}

/// Prints the recipes as a table.
pub fn run(args: &RecipesArgs) -> anyhow::Result<()> {
    let stack = args.stack.map(|s| match s {
        StackArg::Standard => Stack::Standard,
        StackArg::Dynamo => Stack::Dynamo,
    });
    let mut rows = vec![
        [
            "RECIPE",
            "ACCELERATORS",
            "COMPONENT",
            "VERSION",
            "NAMESPACE",
            "STACKS",
            "CHART",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in recipes::all() {
        if args.cloud.is_some_and(|c| Source::from(c) != r.cloud) {
            continue;
        }
        let accelerators = if r.accelerators.is_empty() {
            "any".to_string()
        } else {
            r.accelerators.join(",")
        };
        for c in &r.components {
            if stack.is_some_and(|s| !c.stacks.includes(s)) {
                continue;
            }
            rows.push(vec![
                r.name.clone(),
                accelerators.clone(),
                c.name.clone(),
                c.version.clone(),
                c.namespace.clone(),
                match c.stacks {
                    Stacks::Both => "both",
                    Stacks::Standard => "Standard",
                    Stacks::Dynamo => "Dynamo",
                }
                .to_string(),
                format!("{}/{}", c.repository.trim_end_matches('/'), c.chart),
            ]);
        }
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    crate::output::emit(&out)
}
