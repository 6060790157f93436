//! Modelplane's embedded Kubernetes-compatible API server.
//!
//! So far: the [`store`], a SQLite revision log with one global revision,
//! group commit and compaction, on which the HTTP API will sit
//! (`../shared/spec/apiserver.md` §3.2, §3.10).

pub mod store;

pub use store::{Error, Event, EventKind, Revision, Store, Stored, Write};
