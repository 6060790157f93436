//! Kubernetes CEL for Modelplane: the `x-kubernetes-validations` rules of
//! its CRDs (admission) and, later, DRA device selectors.
//!
//! Everything goes through `kube-cel`, which implements the Kubernetes CEL
//! libraries; its `cel` crate is used only through its re-export.
#![warn(missing_docs)]

pub mod admission;
pub mod dra;
pub mod quantity;
pub mod rules;
pub mod semver;

pub use admission::{Admission, Problem, Review, SchemaAdmission};
