//! Modelplane's API: the `modelplane.ai/v1alpha1` and
//! `infrastructure.modelplane.ai/v1alpha1` kinds as Rust types, their
//! CustomResourceDefinitions, the names and labels of composed objects, and
//! manifest validation.
//!
//! Data flow: `crds` describes each kind once (schema, names, columns);
//! `validation` checks manifests against those schemas; `types` gives the
//! controllers typed access to admitted objects; `names` and `labels` are the
//! contracts the composers and the scheduler share.
#![warn(missing_docs)]

pub mod crds;
pub mod labels;
pub mod names;
pub mod python;
pub mod routing;
pub mod schema;
pub mod types;
pub mod validation;
