//! The gateway's objects from files, for `modelplane gateway --config`:
//! YAML (or JSON) streams of ModelServices, ModelEndpoints and Secrets,
//! `List`s included, from files or directories. The controllers will feed
//! the same [`Objects`] from watches later.
//!
//! Data flow: [`load`] reads every file → typed objects, or an error naming
//! the file, line and object → [`publish`] compiles and swaps the table →
//! [`watch`] polls the files and does both again when one changes; a
//! reload that fails keeps the table that works.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use modelplane_api::types::{ModelEndpoint, ModelService};
use modelplane_api::validation::yaml::parse_documents;
use serde_json::Value;

use crate::state::Gateway;
use crate::table::{Inputs, Table};

/// Objects the gateway routes by.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    /// ModelServices.
    pub services: Vec<ModelService>,
    /// ModelEndpoints.
    pub endpoints: Vec<ModelEndpoint>,
    /// Secrets (API keys, endpoint credentials).
    pub secrets: Vec<Secret>,
    /// Documents of other kinds, left out.
    pub ignored: usize,
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not YAML.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where.
        line: u32,
        /// What the parser said.
        message: String,
    },
    /// A document is not a valid object of its kind.
    #[error("{path}:{line}: {kind}/{name}: {message}")]
    Object {
        /// The file.
        path: PathBuf,
        /// The document's first line.
        line: u32,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

impl Objects {
    /// The routing table of these objects, keeping endpoint health from
    /// `previous` (the table they replace).
    pub fn compile(&self, previous: Option<&Table>) -> Table {
        Table::compile(
            Inputs {
                services: &self.services,
                endpoints: &self.endpoints,
                secrets: &self.secrets,
            },
            previous,
        )
    }
}

/// Every file under `paths` (directories: their `.yaml`, `.yml` and `.json`
/// files, recursively, in name order).
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    for path in paths {
        collect(path, &mut out)?;
    }
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let read_error = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(read_error)?;
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_error)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        let wanted = entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if entry.is_dir() || wanted {
            collect(&entry, out)?;
        }
    }
    Ok(())
}

/// Loads every object under `paths`.
pub fn load(paths: &[PathBuf]) -> Result<Objects, ConfigError> {
    let mut objects = Objects::default();
    for path in files(paths)? {
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let documents = parse_documents(&text).map_err(|e| ConfigError::Parse {
            path: path.clone(),
            line: e.line,
            message: e.message,
        })?;
        for document in documents {
            let items = document.list_items().unwrap_or_else(|| vec![document]);
            for item in items {
                add(&mut objects, &path, item.line, item.value)?;
            }
        }
    }
    Ok(objects)
}

fn add(objects: &mut Objects, path: &Path, line: u32, value: Value) -> Result<(), ConfigError> {
    let kind = value["kind"].as_str().unwrap_or_default().to_string();
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let error = |message: String| ConfigError::Object {
        path: path.to_path_buf(),
        line,
        kind: kind.clone(),
        name: name.clone(),
        message,
    };
    match (api_version, kind.as_str()) {
        ("modelplane.ai/v1alpha1", "ModelService") => objects
            .services
            .push(serde_json::from_value(value).map_err(|e| error(e.to_string()))?),
        ("modelplane.ai/v1alpha1", "ModelEndpoint") => objects
            .endpoints
            .push(serde_json::from_value(value).map_err(|e| error(e.to_string()))?),
        ("v1", "Secret") => objects
            .secrets
            .push(serde_json::from_value(value).map_err(|e| error(e.to_string()))?),
        _ => objects.ignored += 1,
    }
    Ok(())
}

/// Compiles `objects` into a table (keeping endpoint health from the
/// current one) and swaps it in; returns what was left out.
pub fn publish(gateway: &Gateway, objects: &Objects) -> Vec<String> {
    let started = Instant::now();
    let table = objects.compile(Some(&gateway.table()));
    let skipped = table.skipped.clone();
    gateway.publish(table, started.elapsed());
    skipped
}

/// The files' modification times, to notice changes.
fn stamps(paths: &[PathBuf]) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
    files(paths)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (p, modified, len)
        })
        .collect()
}

/// Reloads the table whenever a file under `paths` changes, checking every
/// `interval`, until `shutdown`.
pub async fn watch(
    gateway: Arc<Gateway>,
    paths: Vec<PathBuf>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut seen = stamps(&paths);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = &mut shutdown => return,
        }
        let now = stamps(&paths);
        if now == seen {
            continue;
        }
        seen = now;
        match load(&paths) {
            Ok(objects) => {
                let skipped = publish(&gateway, &objects);
                tracing::info!(
                    services = objects.services.len(),
                    endpoints = objects.endpoints.len(),
                    "routing table reloaded"
                );
                for reason in skipped {
                    tracing::warn!("left out: {reason}");
                }
            }
            Err(e) => tracing::error!("reload failed, keeping the current routing table: {e}"),
        }
    }
}
