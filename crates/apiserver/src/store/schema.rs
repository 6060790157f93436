//! The store's tables and how its connections are set up.
//!
//! A value is stored once, in the log: `current` maps each live key to the
//! revision of its last change, whose log entry holds the value. (A value in
//! both tables was written twice, and in `current`, a `WITHOUT ROWID`
//! b-tree, any value over about 1 KB spilled into an overflow page of its
//! own, nearly empty, rewritten whole on every change.)

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::Revision;

/// The page size of a new file (an existing one keeps its own). A page
/// holds whole values: at SQLite's default, 4 KB, one 2 KB object took a
/// page to itself; 8 KB pages hold three. Not larger: every commit writes
/// each page it touched whole to the WAL, `current`'s among them.
const PAGE_SIZE: i64 = 8192;

/// How every connection is configured. (`page_size` counts only on a new
/// file, before its first table; SQLite ignores it after.)
pub(super) fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS current (
    key TEXT PRIMARY KEY,
    rev INTEGER NOT NULL,
    create_rev INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
    rev INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    kind INTEGER NOT NULL,
    value BLOB NOT NULL
);
-- A watch resuming in one cluster reads that cluster's changes since its
-- revision, not every cluster's: without it, each resume scanned the whole
-- log after its revision (a thousand logical clusters' watches restarting
-- together held every reader for minutes).
CREATE INDEX IF NOT EXISTS log_by_key ON log (key, rev);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('revision', 0), ('compacted', 0), ('swept', 0);
";

/// A store written before values lived in the log alone kept them in
/// `current` too, and compaction dropped the log entries of live objects:
/// each live value goes back into the log at its revision (as the change
/// that made it), then `current` loses its copy. Run in one transaction:
/// an interrupted migration leaves the file as it was. `swept` starts at 0:
/// an old compaction cut short may have left entries under its mark, which
/// the next sweep must reach.
const MIGRATE_VALUES_TO_LOG: &str = "
INSERT OR IGNORE INTO log (rev, key, kind, value)
    SELECT rev, key, CASE WHEN rev = create_rev THEN 0 ELSE 1 END, value FROM current;
CREATE TABLE current_keys (
    key TEXT PRIMARY KEY,
    rev INTEGER NOT NULL,
    create_rev INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO current_keys (key, rev, create_rev) SELECT key, rev, create_rev FROM current;
DROP TABLE current;
ALTER TABLE current_keys RENAME TO current;
";

/// Creates the tables, or brings an older file's up to date.
pub(super) fn create_or_migrate(conn: &Connection) -> rusqlite::Result<()> {
    let values_in_current: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('current') WHERE name = 'value'",
        [],
        |r| r.get(0),
    )?;
    if values_in_current {
        // Rolled back when dropped uncommitted, on any error.
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        tx.execute_batch(MIGRATE_VALUES_TO_LOG)?;
        tx.commit()?;
    }
    conn.execute_batch(SCHEMA)
}

/// A counter kept in `meta`: `revision`, `compacted`, or `swept` (how far
/// compaction has dropped the entries it may).
pub(super) fn meta(conn: &Connection, name: &str) -> rusqlite::Result<Revision> {
    // Cached: the writer reads the revision on every batch.
    conn.prepare_cached("SELECT value FROM meta WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
}

/// The changes in a key range (`[?2, ?3)`) after a revision (`?1`), in
/// order: through `log_by_key`, so only that range's entries are read.
pub(super) const EVENTS_SINCE: &str = "SELECT rev, key, kind, value FROM log INDEXED BY log_by_key
     WHERE key >= ?2 AND key < ?3 AND rev > ?1
     ORDER BY rev";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resuming_watch_reads_its_own_range_of_the_log_not_all_of_it() {
        let conn = Connection::open_in_memory().expect("sqlite");
        create_or_migrate(&conn).expect("schema");
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {EVENTS_SINCE}"))
            .expect("plan")
            .query_map(rusqlite::params![0, "~c1/", "~c10"], |r| {
                r.get::<_, String>(3)
            })
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("plan rows");
        let plan = plan.join("; ");
        assert!(
            plan.contains("USING INDEX log_by_key (key>? AND key<?)"),
            "the log searched by key range: {plan}"
        );
    }
}
