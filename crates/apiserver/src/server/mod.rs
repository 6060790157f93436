//! The server's state for one cluster (the root one or a logical one): its
//! keys of the store, the resource table (built-in kinds and those of the
//! stored CRDs, kept in step with every CRD write), the compiled schemas of
//! custom kinds, and what every cluster of a store shares (admission, the
//! background tasks, metrics). The HTTP layer serves it; the domain modules
//! (garbage collection, namespaces, logical clusters) work on it.

use std::sync::Arc;

use serde_json::Value;

use crate::keyspace::Keyspace;
use crate::resources::{Resource, builtins};
use crate::store::{Revision, Store, Stored};

pub(crate) mod served;

/// Most watches open at once by default; each holds a task and a channel, so
/// a client that leaks them gets 429 instead of exhausting the server.
pub const MAX_WATCHES: usize = 10_000;

/// The server's state: one cluster (the root one or a logical one).
pub struct ApiServer {
    pub(crate) store: Keyspace,
    /// Built-in kinds and those of the stored CRDs.
    pub(crate) resources: std::sync::RwLock<Arc<Vec<Resource>>>,
    /// What every cluster of the store shares: admission for Modelplane's
    /// kinds and the compiled schemas of other CRDs.
    pub(crate) shared: Arc<Shared>,
    /// The same for the other custom kinds, from their CRDs' schemas, by
    /// `apiVersion` and plural; each kept with the schema it was compiled from.
    pub(crate) schemas: std::sync::RwLock<CompiledSchemas>,
    /// The kinds of each stored CRD: a CRD's write replaces its own entry
    /// without reading the others again. Held while the table is rebuilt
    /// from it.
    pub(crate) crds: std::sync::Mutex<served::CrdKinds>,
    /// The groups of the CRD writes on their way: until a write is in the
    /// table, discovery and a request for a kind of its group read the
    /// stored CRDs again (a client that heard of the CRD on a watch may ask
    /// for its kind first).
    pub(crate) crd_writes: std::sync::Mutex<Vec<String>>,
    /// Serves `LogicalCluster` (the root cluster of a store).
    pub(crate) root: bool,
    /// Watches open now, and how many may be ([`MAX_WATCHES`] by default).
    pub(crate) watches: std::sync::atomic::AtomicUsize,
    pub(crate) watch_limit: std::sync::atomic::AtomicUsize,
}

/// A CRD write on its way (see [`ApiServer::crd_write`]).
pub(crate) struct CrdWrite<'a> {
    pub(crate) server: &'a ApiServer,
    pub(crate) group: String,
}

impl Drop for CrdWrite<'_> {
    fn drop(&mut self) {
        // The write itself put the CRD in the table (`crd_written`); a write
        // that failed changed nothing.
        let mut writes = lock(&self.server.crd_writes);
        if let Some(at) = writes.iter().position(|g| *g == self.group) {
            writes.swap_remove(at);
        }
    }
}

/// A lock whose holder panicked is still taken: what it guards is rebuilt
/// whole by each holder.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kept once per store, for every cluster in it: Modelplane's admission
/// (validation, pruning, defaulting and CEL for Modelplane's kinds) and each
/// distinct schema of another CRD with its compiled form, so a thousand
/// clusters with the same CRD hold and compile it once.
#[derive(Default)]
pub struct Shared {
    pub(crate) admission: modelplane_cel::Admission,
    /// The background work requests start (collections, namespace
    /// terminations, watch streams), stopped with the server.
    pub(crate) tasks: modelplane_supervisor::Supervisor,
    pub(crate) schemas: std::sync::Mutex<std::collections::HashMap<String, Interned>>,
    /// What the server answered, for `/metrics`.
    pub(crate) metrics: crate::metrics::Metrics,
}

pub(crate) struct Interned {
    pub(crate) schema: Arc<Value>,
    pub(crate) compiled: Option<Arc<modelplane_cel::SchemaAdmission>>,
}

impl Shared {
    /// The one shared copy of `schema`. Copies no cluster holds any more
    /// are dropped on the way.
    pub(crate) fn intern(&self, schema: &Arc<Value>) -> Arc<Value> {
        let Ok(mut schemas) = self.schemas.lock() else {
            return schema.clone();
        };
        schemas.retain(|_, interned| Arc::strong_count(&interned.schema) > 1);
        schemas
            .entry(schema.to_string())
            .or_insert_with(|| Interned {
                schema: schema.clone(),
                compiled: None,
            })
            .schema
            .clone()
    }

    /// The compiled form of `schema`, compiling it the first time.
    pub(crate) fn compile(&self, schema: &Arc<Value>) -> Arc<modelplane_cel::SchemaAdmission> {
        let compile = || Arc::new(modelplane_cel::SchemaAdmission::compile((**schema).clone()));
        let Ok(mut schemas) = self.schemas.lock() else {
            return compile();
        };
        let interned = schemas
            .entry(schema.to_string())
            .or_insert_with(|| Interned {
                schema: schema.clone(),
                compiled: None,
            });
        interned.compiled.get_or_insert_with(compile).clone()
    }
}

pub(crate) type CompiledSchemas =
    std::collections::HashMap<(String, String), (Arc<Value>, Arc<modelplane_cel::SchemaAdmission>)>;

/// Key prefix of the stored CRDs.
pub(crate) const CRD_PREFIX: &str = "/apiextensions.k8s.io/customresourcedefinitions/";

impl ApiServer {
    /// A server over `store`, serving the built-in kinds and every CRD stored.
    pub fn new(store: Store) -> Arc<ApiServer> {
        ApiServer::in_space(Keyspace::root(Arc::new(store)), Arc::default(), true)
    }

    /// A server for one cluster's keys of a shared store.
    pub fn in_space(store: Keyspace, shared: Arc<Shared>, root: bool) -> Arc<ApiServer> {
        let server = Arc::new(ApiServer {
            store,
            resources: std::sync::RwLock::default(),
            shared,
            schemas: std::sync::RwLock::default(),
            crds: std::sync::Mutex::default(),
            crd_writes: std::sync::Mutex::default(),
            root,
            watches: std::sync::atomic::AtomicUsize::new(0),
            watch_limit: std::sync::atomic::AtomicUsize::new(MAX_WATCHES),
        });
        server.sync_crds();
        // A store that cannot be written shows on the first request.
        let _ = crate::namespaces::ensure_built_in(&server.store);
        server
    }

    /// Owns the work requests leave running after they answer.
    pub fn tasks(&self) -> &modelplane_supervisor::Supervisor {
        &self.shared.tasks
    }

    /// What the server answered, counted.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.shared.metrics
    }

    /// What this server shares with the other clusters of its store.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Caps the watches open at once; more get 429.
    pub fn limit_watches(&self, limit: usize) {
        self.watch_limit
            .store(limit, std::sync::atomic::Ordering::Relaxed);
    }

    /// This cluster's keys of the store (for tests and compaction).
    pub fn store(&self) -> &Keyspace {
        &self.store
    }

    /// Every resource served now: the table itself, not a copy. Read for
    /// discovery, so a CRD write on its way is waited for.
    pub fn resources(&self) -> Arc<Vec<Resource>> {
        if !lock(&self.crd_writes).is_empty() {
            self.sync_crds();
        }
        self.table()
    }

    pub(crate) fn table(&self) -> Arc<Vec<Resource>> {
        self.resources.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// The resource `group/version` serves as `plural` (every request
    /// looks its own up here); while a CRD of `group` is being written, as
    /// stored now.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Resource> {
        if lock(&self.crd_writes).iter().any(|g| g == group) {
            self.sync_crds();
        }
        self.table()
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// Marks a write of a CRD of `group` on its way, until dropped (after
    /// the write).
    pub(crate) fn crd_write(&self, group: &str) -> CrdWrite<'_> {
        lock(&self.crd_writes).push(group.to_string());
        CrdWrite {
            server: self,
            group: group.to_string(),
        }
    }

    /// Rebuilds the resource table from the built-ins and the stored CRDs.
    pub(crate) fn sync_crds(&self) {
        let mut crds = lock(&self.crds);
        if let Ok((at, stored)) = self.store.list(CRD_PREFIX, None, None) {
            crds.listed(at, stored.iter().filter_map(|s| self.crd_entry(s)));
        }
        self.publish(&crds);
    }

    /// Keeps the table in step with a write to the store at `stored.key`
    /// (by any path: requests, collection, a CRD's cleanup), if a CRD's.
    pub(crate) fn crd_written(&self, stored: &Stored, deleted: bool) {
        let Some(name) = stored.key.strip_prefix(CRD_PREFIX) else {
            return;
        };
        if deleted {
            let mut crds = lock(&self.crds);
            if crds.deleted(name, stored.revision) {
                self.publish(&crds);
            }
        } else if let Some((name, revision, kinds)) = self.crd_entry(stored) {
            let mut crds = lock(&self.crds);
            if crds.stored(name, revision, kinds) {
                self.publish(&crds);
            }
        }
    }

    /// A stored CRD's name and kinds, their schemas shared store-wide.
    pub(crate) fn crd_entry(&self, stored: &Stored) -> Option<(String, Revision, Vec<Resource>)> {
        let crd: Value = serde_json::from_slice(&stored.value).ok()?;
        let name = crd["metadata"]["name"].as_str()?.to_string();
        let mut resources = crate::crd::resources(&crd);
        for resource in &mut resources {
            if let Some(schema) = &resource.schema {
                resource.schema = Some(self.shared.intern(schema));
            }
        }
        Some((name, stored.revision, resources))
    }

    /// Serves the built-ins and the kinds of `crds`.
    pub(crate) fn publish(&self, crds: &served::CrdKinds) {
        let mut table = builtins();
        if self.root {
            table.push(crate::resources::logical_clusters());
        }
        table.extend(crds.kinds().cloned());
        self.compile_schemas(&table);
        if let Ok(mut resources) = self.resources.write() {
            *resources = Arc::new(table);
        }
    }

    /// Compiles the schema of every custom kind not Modelplane's own,
    /// reusing what was compiled before for a schema that did not change.
    pub(crate) fn compile_schemas(&self, table: &[Resource]) {
        let Ok(mut schemas) = self.schemas.write() else {
            return;
        };
        let mut compiled = CompiledSchemas::new();
        for resource in table {
            let Some(schema) = &resource.schema else {
                continue;
            };
            let api_version = resource.api_version();
            if modelplane_api::crds::is_modelplane_group(&api_version) {
                continue;
            }
            let key = (api_version, resource.plural.clone());
            let admission = match schemas.get(&key) {
                Some((old, admission)) if old == schema => admission.clone(),
                _ => self.shared.compile(schema),
            };
            compiled.insert(key, (schema.clone(), admission));
        }
        *schemas = compiled;
    }

    /// The compiled schema of a custom kind that is not Modelplane's.
    pub(crate) fn schema_of(
        &self,
        resource: &Resource,
    ) -> Option<Arc<modelplane_cel::SchemaAdmission>> {
        let schemas = self.schemas.read().ok()?;
        schemas
            .get(&(resource.api_version(), resource.plural.clone()))
            .map(|(_, admission)| admission.clone())
    }
}
