//! The release's locked serving-stack recipes (DECISIONS §A2, §A7): data
//! under `recipes/`, embedded here, one per (cloud, accelerator, OS).
//!
//! Data flow: `common.yaml` holds every recipe's components; each recipe file
//! names the clusters it matches and the components it adds or changes (a
//! component with the same name takes the fields it sets, values merged
//! key by key). [`resolve`] picks a cluster's recipe from its source and its
//! pools' accelerators; [`Recipe::components`] lists what a stack installs.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use modelplane_api::types::{InferenceClass, InferenceCluster, Source, Stack};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which stacks a component belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stacks {
    /// Every cluster.
    #[default]
    Both,
    /// LeaderWorkerSet clusters only.
    Standard,
    /// Grove + KAI + ModelExpress clusters only.
    Dynamo,
}

impl Stacks {
    /// Whether a cluster on `stack` gets the component.
    pub fn includes(self, stack: Stack) -> bool {
        matches!(
            (self, stack),
            (Stacks::Both, _)
                | (Stacks::Standard, Stack::Standard)
                | (Stacks::Dynamo, Stack::Dynamo)
        )
    }
}

/// One Helm chart of a recipe.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    /// Component name (unique in a recipe).
    pub name: String,
    /// Helm chart.
    #[serde(default)]
    pub chart: String,
    /// Chart repository (https or oci).
    #[serde(default)]
    pub repository: String,
    /// Chart version.
    #[serde(default)]
    pub version: String,
    /// Namespace the release installs into.
    #[serde(default)]
    pub namespace: String,
    /// Stacks that get it.
    #[serde(default)]
    pub stacks: Stacks,
    /// Helm values.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub values: Value,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Criteria {
    cloud: Source,
    #[serde(default)]
    accelerators: Vec<String>,
    os: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    #[serde(default)]
    criteria: Option<Criteria>,
    #[serde(default)]
    components: Vec<Component>,
}

/// A resolved recipe: its criteria and its full component list.
#[derive(Clone, Debug)]
pub struct Recipe {
    /// File name without `.yaml`, e.g. `eks-h100-ubuntu`.
    pub name: String,
    /// The cloud (or Existing) it is for.
    pub cloud: Source,
    /// Accelerator types it covers; empty covers every one.
    pub accelerators: Vec<String>,
    /// Node OS.
    pub os: String,
    /// Every component, common ones first.
    pub components: Vec<Component>,
}

impl Recipe {
    /// The components a cluster on `stack` gets.
    pub fn components(&self, stack: Stack) -> impl Iterator<Item = &Component> {
        self.components
            .iter()
            .filter(move |c| c.stacks.includes(stack))
    }
}

const COMMON: &str = include_str!("../../../recipes/common.yaml");

/// Every recipe file, by name.
const FILES: &[(&str, &str)] = &[
    (
        "eks-h100-ubuntu",
        include_str!("../../../recipes/eks-h100-ubuntu.yaml"),
    ),
    (
        "eks-h200-ubuntu",
        include_str!("../../../recipes/eks-h200-ubuntu.yaml"),
    ),
    (
        "eks-l4-ubuntu",
        include_str!("../../../recipes/eks-l4-ubuntu.yaml"),
    ),
    (
        "eks-any-ubuntu",
        include_str!("../../../recipes/eks-any-ubuntu.yaml"),
    ),
    (
        "gke-h100-cos",
        include_str!("../../../recipes/gke-h100-cos.yaml"),
    ),
    (
        "gke-l4-cos",
        include_str!("../../../recipes/gke-l4-cos.yaml"),
    ),
    (
        "gke-any-cos",
        include_str!("../../../recipes/gke-any-cos.yaml"),
    ),
    (
        "aks-h100-ubuntu",
        include_str!("../../../recipes/aks-h100-ubuntu.yaml"),
    ),
    (
        "aks-any-ubuntu",
        include_str!("../../../recipes/aks-any-ubuntu.yaml"),
    ),
    (
        "nebius-h100-ubuntu",
        include_str!("../../../recipes/nebius-h100-ubuntu.yaml"),
    ),
    (
        "nebius-h200-ubuntu",
        include_str!("../../../recipes/nebius-h200-ubuntu.yaml"),
    ),
    (
        "nebius-any-ubuntu",
        include_str!("../../../recipes/nebius-any-ubuntu.yaml"),
    ),
    (
        "vultr-l40s-ubuntu",
        include_str!("../../../recipes/vultr-l40s-ubuntu.yaml"),
    ),
    (
        "vultr-any-ubuntu",
        include_str!("../../../recipes/vultr-any-ubuntu.yaml"),
    ),
    (
        "existing-any-any",
        include_str!("../../../recipes/existing-any-any.yaml"),
    ),
];

/// Merges `patch` into `base`: objects key by key, anything else replaced.
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) if !p.is_null() => *b = p.clone(),
        _ => {}
    }
}

fn apply(base: &mut Vec<Component>, overlay: Vec<Component>) {
    for c in overlay {
        match base.iter_mut().find(|b| b.name == c.name) {
            None => base.push(c),
            Some(b) => {
                for (field, value) in [
                    (&mut b.chart, c.chart),
                    (&mut b.repository, c.repository),
                    (&mut b.version, c.version),
                    (&mut b.namespace, c.namespace),
                ] {
                    if !value.is_empty() {
                        *field = value;
                    }
                }
                merge(&mut b.values, &c.values);
            }
        }
    }
}

fn load() -> Result<Vec<Recipe>, String> {
    let common: RecipeFile =
        serde_saphyr::from_str(COMMON).map_err(|e| format!("recipes/common.yaml: {e}"))?;
    FILES
        .iter()
        .map(|(name, text)| {
            let file: RecipeFile =
                serde_saphyr::from_str(text).map_err(|e| format!("recipes/{name}.yaml: {e}"))?;
            let criteria = file
                .criteria
                .ok_or_else(|| format!("recipes/{name}.yaml: no criteria"))?;
            let mut components = common.components.clone();
            apply(&mut components, file.components);
            Ok(Recipe {
                name: (*name).to_string(),
                cloud: criteria.cloud,
                accelerators: criteria.accelerators,
                os: criteria.os,
                components,
            })
        })
        .collect()
}

/// Every recipe of this release. The files are part of the binary and
/// checked by tests, so a parse error is a build defect: it panics.
pub fn all() -> &'static [Recipe] {
    static RECIPES: OnceLock<Vec<Recipe>> = OnceLock::new();
    RECIPES.get_or_init(|| load().unwrap_or_else(|e| panic!("embedded recipe is invalid: {e}")))
}

/// The accelerator types of a cluster's pools, from their classes.
pub fn accelerators(cluster: &InferenceCluster, classes: &[InferenceClass]) -> Vec<String> {
    let mut out: Vec<String> = cluster
        .spec
        .node_pools
        .iter()
        .flatten()
        .filter_map(|pool| {
            classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(pool.class_name.as_str()))
        })
        .filter_map(|class| {
            let p = class.spec.provisioning.as_ref()?;
            let accelerator = [
                p.gke.as_ref().map(|b| &b.accelerator),
                p.eks.as_ref().map(|b| &b.accelerator),
                p.aks.as_ref().map(|b| &b.accelerator),
                p.nebius.as_ref().map(|b| &b.accelerator),
                p.vultr.as_ref().map(|b| &b.accelerator),
            ]
            .into_iter()
            .flatten()
            .next()?;
            Some(accelerator.type_.clone())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The recipe of a cluster: the one for its cloud covering all its pools'
/// accelerators, else its cloud's general recipe.
pub fn resolve(source: Source, accelerators: &[String]) -> &'static Recipe {
    let recipes = all();
    let specific = recipes.iter().find(|r| {
        r.cloud == source
            && !r.accelerators.is_empty()
            && !accelerators.is_empty()
            && accelerators.iter().all(|a| r.accelerators.contains(a))
    });
    let general = || {
        recipes
            .iter()
            .find(|r| r.cloud == source && r.accelerators.is_empty())
    };
    specific
        .or_else(general)
        .or_else(|| recipes.iter().find(|r| r.cloud == Source::Existing))
        .unwrap_or_else(|| &recipes[0])
}

/// Components by name, for lookups.
pub fn by_name(recipe: &Recipe) -> BTreeMap<&str, &Component> {
    recipe
        .components
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect()
}
