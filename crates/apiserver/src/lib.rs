//! Modelplane's embedded Kubernetes-compatible API server.
//!
//! So far: the [`store`], a SQLite revision log with one global revision,
//! group commit and compaction; the [`resources`] it serves; and the
//! [`object`] metadata rules. The HTTP API will sit on them
//! (`../shared/spec/apiserver.md` §3).

pub mod apply;
pub mod clusters;
pub mod compaction;
pub mod crd;
pub mod discovery;
pub mod fanout;
pub mod gc;
pub mod http;
pub mod jsonpath;
pub mod keyspace;
pub mod logs;
pub mod metrics;
pub mod namespaces;
pub mod object;
pub mod openapi;
pub mod owners;
pub mod patch;
pub mod printers;
pub mod protobuf;
pub mod resources;
pub mod selector;
pub mod serve;
pub mod store;
pub mod table;

pub use store::{Error, Event, EventKind, Revision, Store, Stored, Write};
