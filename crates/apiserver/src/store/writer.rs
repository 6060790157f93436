//! The writer thread: commits whatever writes are queued in one transaction
//! (group commit), indexes their owners, then answers and publishes them.

use std::sync::{Arc, Mutex, mpsc};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::fanout::Fanout;
use super::schema::meta;
use super::{Error, Event, EventKind, Job, Rendered, Revision, Stored, Write};
use crate::owners::OwnerIndex;

/// Writes committed in one transaction at most.
const MAX_BATCH: usize = 512;

/// A live key as stored: its revision, the revision that created it, and
/// its value (the log entry of that revision).
struct Live {
    rev: Revision,
    create_rev: Revision,
    value: Vec<u8>,
}

fn live(tx: &rusqlite::Transaction<'_>, key: &str) -> rusqlite::Result<Option<Live>> {
    tx.prepare_cached(
        "SELECT c.rev, c.create_rev, l.value FROM current c JOIN log l ON l.rev = c.rev
         WHERE c.key = ?1",
    )?
    .query_row([key], |r| {
        Ok(Live {
            rev: r.get(0)?,
            create_rev: r.get(1)?,
            value: r.get(2)?,
        })
    })
    .optional()
}

fn exists(tx: &rusqlite::Transaction<'_>, key: &str) -> rusqlite::Result<bool> {
    Ok(tx
        .prepare_cached("SELECT 1 FROM current WHERE key = ?1")?
        .query_row([key], |_| Ok(()))
        .optional()?
        .is_some())
}

/// The live version of `key` a conditional write is based on, if it is
/// still the stored one.
fn based_on(
    tx: &rusqlite::Transaction<'_>,
    key: &str,
    expected: Option<Revision>,
) -> Result<Live, Error> {
    let live = live(tx, key)?.ok_or_else(|| Error::NotFound(key.to_string()))?;
    match expected {
        Some(expected) if expected != live.rev => Err(Error::Conflict {
            key: key.to_string(),
            expected,
            actual: live.rev,
        }),
        _ => Ok(live),
    }
}

/// Drops a log entry the change at hand supersedes when compaction's sweep
/// has already passed it: the sweep spared it only because it was live.
/// (Not up to the compaction mark: below it, until the sweep gets there,
/// the key's older entries are still there, and the latest of them would
/// pass for its value before this change.)
fn drop_if_swept(
    tx: &rusqlite::Transaction<'_>,
    rev: Revision,
    swept: Revision,
) -> rusqlite::Result<()> {
    if rev <= swept {
        tx.prepare_cached("DELETE FROM log WHERE rev = ?1")?
            .execute([rev])?;
    }
    Ok(())
}

/// Applies one write inside the open transaction; `next` is its revision.
/// Returns the change and the key's creation revision.
fn apply(
    tx: &rusqlite::Transaction<'_>,
    write: &Write,
    next: Revision,
    swept: Revision,
) -> Result<(Event, Revision), Error> {
    let mut prev = None;
    let (kind, key, value, create_rev) = match write {
        Write::Create { key, value } => {
            if exists(tx, key)? {
                return Err(Error::AlreadyExists(key.clone()));
            }
            tx.prepare_cached("INSERT INTO current (key, rev, create_rev) VALUES (?1, ?2, ?2)")?
                .execute(params![key, next])?;
            (EventKind::Added, key, value.clone(), next)
        }
        Write::Update {
            key,
            expected,
            value,
        } => {
            let old = based_on(tx, key, *expected)?;
            tx.prepare_cached("UPDATE current SET rev = ?2 WHERE key = ?1")?
                .execute(params![key, next])?;
            drop_if_swept(tx, old.rev, swept)?;
            prev = Some(Arc::from(old.value));
            (EventKind::Modified, key, value.clone(), old.create_rev)
        }
        Write::Delete { key, expected } => {
            let last = based_on(tx, key, *expected)?;
            tx.prepare_cached("DELETE FROM current WHERE key = ?1")?
                .execute([key])?;
            drop_if_swept(tx, last.rev, swept)?;
            (EventKind::Deleted, key, last.value, last.create_rev)
        }
    };
    tx.prepare_cached("INSERT INTO log (rev, key, kind, value) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![next, key, kind.code(), value])?;
    let event = Event {
        kind,
        key: key.clone(),
        revision: next,
        value: Arc::from(value),
        prev,
        rendered: Rendered::default(),
    };
    Ok((event, create_rev))
}

/// Commits one batch; returns each job's outcome (events for the ones that
/// changed something), or the SQLite error that rolled the batch back.
fn commit_batch(
    conn: &mut Connection,
    batch: &[Job],
) -> rusqlite::Result<Vec<Result<(Event, Revision), Error>>> {
    // Immediate: the write lock is taken before the first read, so a
    // compaction committed in between cannot turn this transaction's
    // snapshot stale (SQLite would refuse its first write, not wait).
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut revision = meta(&tx, "revision")?;
    let swept = meta(&tx, "swept")?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for job in batch {
        match apply(&tx, &job.write, revision + 1, swept) {
            Ok((event, create_rev)) => {
                revision = event.revision;
                outcomes.push(Ok((event, create_rev)));
            }
            Err(Error::Sqlite(e)) => return Err(e),
            Err(e) => outcomes.push(Err(e)),
        }
    }
    tx.prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'revision'")?
        .execute([revision])?;
    tx.commit()?;
    Ok(outcomes)
}

pub(super) fn write_loop(
    mut conn: Connection,
    queue: mpsc::Receiver<Job>,
    events: Arc<Fanout>,
    owners: &Mutex<OwnerIndex>,
) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        match commit_batch(&mut conn, &batch) {
            Ok(outcomes) => {
                // Indexed before anyone hears of the writes.
                if let Ok(mut index) = owners.lock() {
                    for (event, _) in outcomes.iter().flatten() {
                        let value = (event.kind != EventKind::Deleted).then_some(&*event.value);
                        index.set(&event.key, value);
                    }
                }
                for (job, outcome) in batch.into_iter().zip(outcomes) {
                    let reply = outcome.map(|(event, create_revision)| {
                        let stored = Stored {
                            key: event.key.clone(),
                            revision: event.revision,
                            create_revision,
                            value: event.value.clone(),
                        };
                        events.send(event);
                        stored
                    });
                    job.reply.send(reply);
                }
            }
            Err(e) => {
                let message = e.to_string();
                for job in batch {
                    job.reply.send(Err(Error::RolledBack(message.clone())));
                }
            }
        }
    }
}
