//! Typed access to admitted Modelplane objects.
//!
//! Convention: a field the schema defaults or leaves optional is an
//! `Option`, so an object serializes back to exactly what was stored (only
//! fields that were set); accessor methods such as `InferenceClusterSpec::stack`
//! return the schema default for an unset field. The CRDs themselves come from
//! `crate::crds`, which is the one description of each schema; the
//! `CustomResource` derives here only give each kind its `kube::Resource`
//! identity (group, version, kind, plural) for typed clients.

mod common;
mod infrastructure;
mod models;
mod platform;

pub use common::*;
pub use infrastructure::*;
pub use models::*;
pub use platform::*;
