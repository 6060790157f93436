//! The store: every object's current state and a revision log in one SQLite
//! file, with one global revision counter (etcd's model, as kine keeps it).
//!
//! - `log(rev, key, kind, value)` holds every change, in revision order;
//!   watches resume from it. Compaction drops old entries but the live
//!   objects' own; a watch from before the compacted revision gets
//!   [`Error::Compacted`] (HTTP 410).
//! - `current(key, rev, create_rev)` names the live objects: each key's last
//!   change, whose log entry holds its value; lists and gets read it.
//! - `meta` keeps the last revision (so it never goes back, even when the
//!   newest entries are compacted), the compacted revision, and how far
//!   compaction has swept.
//!
//! Writes go through one writer thread that commits whatever is queued in a
//! single transaction (group commit): one fsync for many writes, and a write
//! is acknowledged only after its transaction is durable (`synchronous=FULL`).
//! Reads use connections of their own (two, whichever is free); WAL mode
//! lets them run beside the writer, each in a consistent snapshot that holds
//! every write acknowledged before it began.
//!
//! Values are opaque bytes: the API layer decides what an object is.

pub(crate) mod fanout;
mod schema;
mod writer;

use crate::owners::OwnerIndex;
use fanout::Fanout;
use schema::{configure, meta};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, TryLockError, mpsc};
use std::thread::JoinHandle;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{broadcast, oneshot};

/// A global, strictly increasing revision (an object's `resourceVersion`).
pub type Revision = i64;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A create found the key taken.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The key does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A conditional write found another revision.
    #[error("{key} has been modified: expected revision {expected}, stored {actual}")]
    Conflict {
        /// The key.
        key: String,
        /// The revision the writer based its change on.
        expected: Revision,
        /// The stored revision.
        actual: Revision,
    },
    /// The history asked for has been compacted.
    #[error("revision {requested} is compacted; the oldest retained change is after {compacted}")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// Changes up to and including this revision are gone.
        compacted: Revision,
    },
    /// SQLite failed.
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The transaction holding this write failed and was rolled back; no
    /// write of its batch took effect.
    #[error("store: the write was rolled back: {0}")]
    RolledBack(String),
    /// The writer thread is gone (the store is shutting down or crashed).
    #[error("the store's writer has stopped")]
    Closed,
}

/// The kind of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created.
    Added,
    /// The key's value changed.
    Modified,
    /// The key was deleted; the value is its last state.
    Deleted,
}

impl EventKind {
    fn code(self) -> i64 {
        match self {
            EventKind::Added => 0,
            EventKind::Modified => 1,
            EventKind::Deleted => 2,
        }
    }

    fn from_code(code: i64) -> EventKind {
        match code {
            0 => EventKind::Added,
            1 => EventKind::Modified,
            _ => EventKind::Deleted,
        }
    }
}

/// One committed change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The key.
    pub key: String,
    /// The change's revision.
    pub revision: Revision,
    /// The new value (the last one for a deletion).
    pub value: Arc<[u8]>,
    /// The value it replaced, for a modification as it was committed (live
    /// events); `None` otherwise, and for events read back from the log
    /// (see [`Store::value_before`]).
    pub prev: Option<Arc<[u8]>>,
    /// The event as the API layer sends it to a plain watch, made by the
    /// first watcher that sends it and shared by every other.
    pub rendered: Rendered,
}

/// A rendering of an event, shared by its clones (each watcher receives
/// one). A cache: events are equal whether or not it is filled.
#[derive(Clone, Debug, Default)]
pub struct Rendered(Arc<std::sync::OnceLock<bytes::Bytes>>);

impl Rendered {
    /// The rendering, made by `render` if no clone made it yet.
    pub fn get_or_init(&self, render: impl FnOnce() -> bytes::Bytes) -> bytes::Bytes {
        self.0.get_or_init(render).clone()
    }
}

impl PartialEq for Rendered {
    fn eq(&self, _: &Rendered) -> bool {
        true
    }
}

impl Eq for Rendered {}

/// A live object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The key.
    pub key: String,
    /// Revision of its last change.
    pub revision: Revision,
    /// Revision that created it.
    pub create_revision: Revision,
    /// The value.
    pub value: Arc<[u8]>,
}

/// A change to make.
#[derive(Clone, Debug)]
pub enum Write {
    /// Creates `key`; fails if it exists.
    Create {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// Replaces `key`'s value; with `expected`, only if that is its revision.
    Update {
        /// The key.
        key: String,
        /// The revision the change is based on.
        expected: Option<Revision>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes `key`; with `expected`, only if that is its revision.
    Delete {
        /// The key.
        key: String,
        /// The revision the deletion is based on.
        expected: Option<Revision>,
    },
}

/// Where a write's outcome goes.
enum Reply {
    Async(oneshot::Sender<Result<Stored, Error>>),
    Blocking(mpsc::Sender<Result<Stored, Error>>),
}

impl Reply {
    fn send(self, outcome: Result<Stored, Error>) {
        // A caller that stopped waiting is fine.
        let _ = match self {
            Reply::Async(tx) => tx.send(outcome).map_err(|_| ()),
            Reply::Blocking(tx) => tx.send(outcome).map_err(|_| ()),
        };
    }
}

struct Job {
    write: Write,
    reply: Reply,
}

/// The store. Cheap to share behind an `Arc`; dropping it stops the writer
/// after the queued writes are committed.
pub struct Store {
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
    /// Read connections: a read takes whichever is free, so a long list
    /// does not hold up every get behind it.
    readers: Vec<Mutex<Connection>>,
    /// Rotates the reader a read waits for when none is free.
    next_reader: std::sync::atomic::AtomicUsize,
    /// Compaction's own connection: it never holds up readers, and takes
    /// the write lock as the writer does.
    compactor: Mutex<Connection>,
    events: Arc<Fanout>,
    /// Uids and owner references of the live objects, kept by the writer.
    owners: Arc<Mutex<OwnerIndex>>,
}

/// How many read connections the store keeps.
const READERS: usize = 2;

/// How much of the file a read connection maps. In WAL mode a connection
/// drops its page cache whenever the file changed since its last read (under
/// load, before nearly every read); mapped, the pages not in the WAL are read
/// in place instead of copied in by a system call each. The price: an I/O
/// error on the file (or its truncation by another program) is a SIGBUS that
/// stops the server where it was an error answered 500; the database is
/// this server's own file, and the writer still sees I/O errors as errors.
const READ_MAP_BYTES: i64 = 1 << 30;

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let reader = Connection::open(path)?;
    configure(&reader)?;
    reader.pragma_update(None, "mmap_size", READ_MAP_BYTES)?;
    Ok(reader)
}

/// The first key after every key starting with `prefix`.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0x7f {
            bytes.push(last + 1);
            return String::from_utf8(bytes).ok();
        }
    }
    None
}

/// Revisions compaction sweeps per transaction.
const COMPACT_BATCH: i64 = 5_000;

impl Store {
    /// Opens (or creates) the store in the SQLite file at `path`.
    pub fn open(path: &Path) -> Result<Store, Error> {
        let writer = Connection::open(path)?;
        configure(&writer)?;
        schema::create_or_migrate(&writer)?;
        let readers = (0..READERS)
            .map(|_| open_reader(path))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let reader = &readers[0];
        let compactor = Connection::open(path)?;
        configure(&compactor)?;
        let mut owners = OwnerIndex::default();
        {
            let mut stmt = reader
                .prepare("SELECT c.key, l.value FROM current c JOIN log l ON l.rev = c.rev")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let key: String = row.get(0)?;
                let value: Vec<u8> = row.get(1)?;
                owners.set(&key, Some(&value));
            }
        }
        Ok(Store::start(writer, readers, compactor, owners))
    }

    fn start(
        writer: Connection,
        readers: Vec<Connection>,
        compactor: Connection,
        owners: OwnerIndex,
    ) -> Store {
        let (jobs, queue) = mpsc::channel::<Job>();
        let events = Arc::new(Fanout::default());
        let publish = events.clone();
        let owners = Arc::new(Mutex::new(owners));
        let index = owners.clone();
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer::write_loop(writer, queue, publish, &index))
            .ok();
        Store {
            jobs: Some(jobs),
            writer: handle,
            readers: readers.into_iter().map(Mutex::new).collect(),
            next_reader: Default::default(),
            compactor: Mutex::new(compactor),
            events,
            owners,
        }
    }

    /// Runs `f` on a free read connection, or waits for one in turn. A
    /// connection whose last read panicked is still sound (its statements
    /// were dropped), so a poisoned lock is taken as it is.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, Error> {
        let free = self.readers.iter().find_map(|r| match r.try_lock() {
            Ok(conn) => Some(conn),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        });
        let conn = free.unwrap_or_else(|| {
            let turn = self
                .next_reader
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.readers[turn % self.readers.len()]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        });
        Ok(f(&conn)?)
    }

    fn queue(&self, write: Write, reply: Reply) {
        if let Some(jobs) = &self.jobs
            && let Err(mpsc::SendError(job)) = jobs.send(Job { write, reply })
        {
            job.reply.send(Err(Error::Closed));
        }
    }

    /// Queues a write; the receiver gets its result once it is durable.
    pub fn submit(&self, write: Write) -> oneshot::Receiver<Result<Stored, Error>> {
        let (reply, result) = oneshot::channel();
        self.queue(write, Reply::Async(reply));
        result
    }

    /// Writes and waits until it is durable. Blocks the calling thread, so
    /// async code uses `submit().await`; usable inside a runtime at startup.
    pub fn write(&self, write: Write) -> Result<Stored, Error> {
        let (reply, result) = mpsc::channel();
        self.queue(write, Reply::Blocking(reply));
        result.recv().map_err(|_| Error::Closed)?
    }

    /// Writes several and waits until all are durable; queued together, they
    /// commit together (one sync) when the writer is idle.
    pub fn write_all(&self, writes: Vec<Write>) -> Vec<Result<Stored, Error>> {
        let replies: Vec<_> = writes
            .into_iter()
            .map(|write| {
                let (reply, result) = mpsc::channel();
                self.queue(write, Reply::Blocking(reply));
                result
            })
            .collect();
        replies
            .into_iter()
            .map(|result| result.recv().map_err(|_| Error::Closed)?)
            .collect()
    }

    /// The first key at or after `from`, if any (to step through the
    /// logical clusters' key ranges without reading their objects).
    pub fn first_key_from(&self, from: &str) -> Result<Option<String>, Error> {
        self.read(|c| {
            c.prepare_cached("SELECT key FROM current WHERE key >= ?1 ORDER BY key LIMIT 1")?
                .query_row([from], |r| r.get(0))
                .optional()
        })
    }

    /// The live object at `key`.
    pub fn get(&self, key: &str) -> Result<Option<Stored>, Error> {
        self.read(|c| {
            // Cached: most requests read their object first.
            c.prepare_cached(
                "SELECT c.rev, c.create_rev, l.value FROM current c JOIN log l ON l.rev = c.rev
                 WHERE c.key = ?1",
            )?
            .query_row([key], |r| {
                Ok(Stored {
                    key: key.to_string(),
                    revision: r.get(0)?,
                    create_revision: r.get(1)?,
                    value: Arc::from(r.get::<_, Vec<u8>>(2)?),
                })
            })
            .optional()
        })
    }

    /// The live objects whose keys start with `prefix`, in key order, after
    /// `start_after` (for paging), at most `limit`; and the revision the
    /// answer is consistent with.
    pub fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<(Revision, Vec<Stored>), Error> {
        let end = prefix_end(prefix);
        self.read(|c| {
            let tx = c.unchecked_transaction()?;
            let revision = meta(&tx, "revision")?;
            let from = start_after.unwrap_or("");
            let mut stmt = tx.prepare_cached(
                "SELECT c.key, c.rev, c.create_rev, l.value FROM current c JOIN log l ON l.rev = c.rev
                 WHERE c.key >= ?1 AND (?2 IS NULL OR c.key < ?2) AND c.key > ?3
                 ORDER BY c.key LIMIT ?4",
            )?;
            let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let rows = stmt
                .query_map(params![prefix, end, from, limit], |r| {
                    Ok(Stored {
                        key: r.get(0)?,
                        revision: r.get(1)?,
                        create_revision: r.get(2)?,
                        value: Arc::from(r.get::<_, Vec<u8>>(3)?),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            drop(stmt);
            tx.finish()?;
            Ok((revision, rows))
        })
    }

    /// The last committed revision.
    pub fn revision(&self) -> Result<Revision, Error> {
        self.read(|c| meta(c, "revision"))
    }

    /// The value `key` had just before `revision`, a change of `key` (a
    /// watch's MODIFIED), from the log: `None` when it did not exist then or
    /// that history is compacted. Only entries past
    /// the sweep can be it (at or under it, a key keeps its live entry
    /// alone, and `revision` superseded that): the walk back stops there
    /// instead of passing every live object's entry.
    pub fn value_before(&self, key: &str, revision: Revision) -> Result<Option<Arc<[u8]>>, Error> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT kind, value FROM log WHERE key = ?1 AND rev < ?2
                 AND rev > (SELECT value FROM meta WHERE name = 'swept')
                 ORDER BY rev DESC LIMIT 1",
            )?
            .query_row(params![key, revision], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .optional()
            .map(|found| {
                found
                    .filter(|(kind, _)| EventKind::from_code(*kind) != EventKind::Deleted)
                    .map(|(_, value)| Arc::from(value))
            })
        })
    }

    /// How the store keeps its data, as SQLite reports it (on a read
    /// connection, configured as the writer's is): the journal mode (`wal`)
    /// and the sync level (2 is FULL: a commit returns once the WAL is on
    /// disk).
    pub fn durability(&self) -> Result<(String, i64), Error> {
        self.read(|c| {
            let journal: String = c.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
            let synchronous: i64 = c.pragma_query_value(None, "synchronous", |r| r.get(0))?;
            Ok((journal, synchronous))
        })
    }

    /// How many WAL pages trigger a checkpoint (SQLite's automatic
    /// checkpoint copies the WAL's frames into the database file, fsyncs it,
    /// and starts the WAL over).
    pub fn checkpoint_pages(&self) -> Result<i64, Error> {
        self.read(|c| c.pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0)))
    }

    /// The revision up to which history is compacted.
    pub fn compacted(&self) -> Result<Revision, Error> {
        self.read(|c| meta(c, "compacted"))
    }

    /// Changes after `after` under `prefix`, in revision order.
    pub fn events_since(&self, prefix: &str, after: Revision) -> Result<Vec<Event>, Error> {
        // Past every key (they are UTF-8) when the prefix has no end.
        let end = prefix_end(prefix).unwrap_or_else(|| char::MAX.to_string());
        self.read(|c| {
            let tx = c.unchecked_transaction()?;
            let compacted = meta(&tx, "compacted")?;
            if after < compacted {
                return Ok(Err(Error::Compacted {
                    requested: after,
                    compacted,
                }));
            }
            let mut stmt = tx.prepare_cached(schema::EVENTS_SINCE)?;
            let events = stmt
                .query_map(params![after, prefix, end], |r| {
                    Ok(Event {
                        revision: r.get(0)?,
                        key: r.get(1)?,
                        kind: EventKind::from_code(r.get(2)?),
                        value: Arc::from(r.get::<_, Vec<u8>>(3)?),
                        prev: None,
                        rendered: Rendered::default(),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            drop(stmt);
            tx.finish()?;
            Ok(Ok(events))
        })?
    }

    /// How many changes of RBAC objects and ServiceAccounts, in any
    /// keyspace, have been committed: what an authorization policy is
    /// built from changed when this did.
    pub fn access_generation(&self) -> u64 {
        self.events.access_generation()
    }

    /// Every change committed from now on in keyspace `space` (`""` for
    /// the root, `~name` for a logical cluster). Subscribe before reading
    /// history (`events_since`) and skip revisions already seen, so nothing
    /// falls in between. A receiver that lags gets `RecvError::Lagged` and
    /// must resume from the log.
    pub fn subscribe(&self, space: &str) -> broadcast::Receiver<Event> {
        self.events.subscribe(space)
    }

    /// The keys of the live objects that name `owner` in `ownerReferences`.
    pub fn dependents(&self, owner: &str) -> Vec<String> {
        self.owners
            .lock()
            .map(|i| i.dependents(owner))
            .unwrap_or_default()
    }

    /// The key of the live object whose uid is `uid`.
    pub fn key_of_uid(&self, uid: &str) -> Option<String> {
        self.owners.lock().ok()?.key_of(uid)
    }

    /// Every owner uid some live object names, with the keys naming it.
    pub fn owners(&self) -> Vec<(String, Vec<String>)> {
        self.owners.lock().map(|i| i.owners()).unwrap_or_default()
    }

    /// Drops the log up to and including `revision` (kept: the entries of
    /// live objects, which hold their values, and every later change).
    /// Returns the compacted revision. The mark moves first (reads from
    /// before it are expired from then on), then the old entries go, a
    /// range of revisions per transaction, each taking the write lock as the
    /// writer does: neither readers nor writes wait long. `swept` records
    /// the ranges done, so a sweep cut short by a crash goes on where it
    /// stopped; a live entry spared here is dropped by the writer when a
    /// later change supersedes it.
    pub fn compact(&self, revision: Revision) -> Result<Revision, Error> {
        let mut conn = self.compactor.lock().map_err(|_| Error::Closed)?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current = meta(&tx, "revision")?;
        let target = revision.min(current).max(meta(&tx, "compacted")?);
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE name = 'compacted'",
            [target],
        )?;
        tx.commit()?;
        loop {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let swept = meta(&tx, "swept")?;
            if swept >= target {
                return Ok(target);
            }
            let to = (swept + COMPACT_BATCH).min(target);
            tx.execute(
                "DELETE FROM log WHERE rev > ?1 AND rev <= ?2 AND NOT EXISTS
                 (SELECT 1 FROM current c WHERE c.key = log.key AND c.rev = log.rev)",
                [swept, to],
            )?;
            tx.execute("UPDATE meta SET value = ?1 WHERE name = 'swept'", [to])?;
            tx.commit()?;
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what is queued and exit.
        self.jobs.take();
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
    }
}
