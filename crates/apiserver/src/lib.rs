//! Modelplane's embedded Kubernetes-compatible API server
//! (`../shared/spec/apiserver.md`).
//!
//! Layers, each importing only those below it:
//! - storage: the store (a SQLite revision log with one global revision,
//!   group commit, compaction and the watch fan-out) and each cluster's
//!   keyspace of it;
//! - rules: the resource table ([`resources`]), object metadata and
//!   lifecycle ([`object`]), the stored form (codec), selectors, patches,
//!   server-side apply, tables, OpenAPI, protobuf;
//! - the server: one cluster's state ([`ApiServer`]: its keys, resource
//!   table and compiled schemas);
//! - domains: garbage collection, namespaces, CRDs, discovery, logical
//!   clusters ([`Clusters`]);
//! - HTTP: the Kubernetes REST surface ([`router`]);
//! - serving: TLS, the token, the data directory ([`serve`], [`run`]).
//!
//! The public surface is what `modelplane up`, its tests and benchmarks
//! use; the rest is the crate's own.

mod apply;
pub mod auth;
mod clusters;
mod codec;
mod compaction;
mod crd;
mod data_dir;
mod discovery;
mod gc;
mod http;
mod jsonpath;
mod keyspace;
mod kubeconfig;
mod metadata_rules;
mod metrics;
mod namespaces;
pub mod object;
mod openapi;
mod owners;
mod patch;
mod protobuf;
pub mod resources;
mod selector;
mod serve;
mod server;
mod store;
mod table;

pub use clusters::{Clusters, CreateError};
pub use compaction::{COMPACT_EVERY, RETENTION, Retention};
pub use data_dir::{DataDir, DataDirError};
pub use gc::sweep as collect_garbage;
pub use http::{MAX_BODY, router};
pub use namespaces::create as create_namespace;
pub use serve::{Config, Embedded, MAX_CONNECTIONS, run, serve, serve_clusters};
pub use server::{ApiServer, Shared};
pub use store::{Error, Event, EventKind, Revision, Store, Stored, Write};
