//! The store on a real SQLite file: revisions, conditional writes, lists,
//! history and compaction, concurrent writers, reopening, and a writer
//! process killed with SIGKILL mid-burst.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use modelplane_apiserver::{Error, EventKind, Store, Write};

fn create(store: &Store, key: &str, value: &str) -> Result<modelplane_apiserver::Stored, Error> {
    store.write(Write::Create {
        key: key.into(),
        value: value.as_bytes().to_vec(),
    })
}

fn text(value: &[u8]) -> &str {
    std::str::from_utf8(value).expect("utf-8")
}

#[test]
fn writes_get_strictly_increasing_revisions_and_conditions_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state.db")).expect("open");
    let a = create(&store, "/cm/ns/a", "1").expect("create a");
    let b = create(&store, "/cm/ns/b", "1").expect("create b");
    assert!(b.revision > a.revision);
    assert_eq!(a.create_revision, a.revision);
    assert!(
        matches!(create(&store, "/cm/ns/a", "2"), Err(Error::AlreadyExists(k)) if k == "/cm/ns/a")
    );

    let stale = store.write(Write::Update {
        key: "/cm/ns/a".into(),
        expected: Some(a.revision - 1),
        value: b"2".to_vec(),
    });
    assert!(
        matches!(stale, Err(Error::Conflict { expected, actual, .. }) if actual == a.revision && expected == a.revision - 1)
    );
    let updated = store
        .write(Write::Update {
            key: "/cm/ns/a".into(),
            expected: Some(a.revision),
            value: b"2".to_vec(),
        })
        .expect("update");
    assert!(updated.revision > b.revision);
    assert_eq!(updated.create_revision, a.revision);
    let got = store.get("/cm/ns/a").expect("get").expect("present");
    assert_eq!((got.revision, text(&got.value)), (updated.revision, "2"));

    assert!(matches!(
        store.write(Write::Update {
            key: "/cm/ns/zz".into(),
            expected: None,
            value: vec![]
        }),
        Err(Error::NotFound(_))
    ));
    let deleted = store
        .write(Write::Delete {
            key: "/cm/ns/a".into(),
            expected: None,
        })
        .expect("delete");
    assert_eq!(
        text(&deleted.value),
        "2",
        "a deletion returns the last state"
    );
    assert!(store.get("/cm/ns/a").expect("get").is_none());
    assert_eq!(store.revision().expect("revision"), deleted.revision);
}

#[test]
fn lists_are_prefix_scoped_paged_and_carry_their_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state.db")).expect("open");
    for key in [
        "/cm/a/1",
        "/cm/a/2",
        "/cm/a/3",
        "/cm/b/1",
        "/cmx/a/1",
        "/secrets/a/1",
    ] {
        create(&store, key, key).expect("create");
    }
    let (revision, all) = store.list("/cm/", None, None).expect("list");
    let keys: Vec<&str> = all.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["/cm/a/1", "/cm/a/2", "/cm/a/3", "/cm/b/1"]);
    assert_eq!(revision, store.revision().expect("revision"));

    let (_, page) = store.list("/cm/a/", None, Some(2)).expect("page 1");
    assert_eq!(page.len(), 2);
    let (_, rest) = store
        .list("/cm/a/", Some(&page[1].key), Some(2))
        .expect("page 2");
    let keys: Vec<&str> = rest.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["/cm/a/3"]);
}

#[test]
fn history_replays_in_order_until_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state.db")).expect("open");
    let first = create(&store, "/cm/ns/a", "1").expect("create");
    create(&store, "/other/ns/x", "1").expect("create other");
    store
        .write(Write::Update {
            key: "/cm/ns/a".into(),
            expected: None,
            value: b"2".to_vec(),
        })
        .expect("update");
    store
        .write(Write::Delete {
            key: "/cm/ns/a".into(),
            expected: None,
        })
        .expect("delete");

    let events = store
        .events_since("/cm/", first.revision - 1)
        .expect("history");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::Added, EventKind::Modified, EventKind::Deleted]
    );
    assert!(events.windows(2).all(|w| w[0].revision < w[1].revision));
    assert_eq!(text(&events[2].value), "2");

    let compacted = store.compact(first.revision + 1).expect("compact");
    assert!(matches!(
        store.events_since("/cm/", first.revision),
        Err(Error::Compacted { compacted: c, .. }) if c == compacted
    ));
    let after = store
        .events_since("/cm/", compacted)
        .expect("after compaction");
    assert_eq!(after.len(), 2);
    // Compaction never moves the revision back.
    let next = create(&store, "/cm/ns/b", "1").expect("create");
    assert!(next.revision > events[2].revision);
}

#[test]
fn subscribers_see_every_committed_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state.db")).expect("open");
    let mut events = store.subscribe("");
    let written = create(&store, "/cm/ns/a", "1").expect("create");
    assert!(create(&store, "/cm/ns/a", "again").is_err());
    store
        .write(Write::Delete {
            key: "/cm/ns/a".into(),
            expected: None,
        })
        .expect("delete");
    let added = events.try_recv().expect("added");
    assert_eq!(
        (added.kind, added.revision),
        (EventKind::Added, written.revision)
    );
    assert_eq!(events.try_recv().expect("deleted").kind, EventKind::Deleted);
    assert!(
        events.try_recv().is_err(),
        "a failed write publishes nothing"
    );
}

#[test]
fn concurrent_writers_get_distinct_revisions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("state.db")).expect("open"));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                (0..200)
                    .map(|i| {
                        create(&store, &format!("/cm/ns/{t}-{i}"), "v")
                            .expect("create")
                            .revision
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let revisions: BTreeSet<i64> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(revisions.len(), 1600);
    assert_eq!(store.list("/cm/", None, None).expect("list").1.len(), 1600);
}

#[test]
fn a_reopened_store_has_everything_and_keeps_counting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let last = {
        let store = Store::open(&path).expect("open");
        create(&store, "/cm/ns/a", "1").expect("create");
        create(&store, "/cm/ns/b", "1").expect("create").revision
    };
    let store = Store::open(&path).expect("reopen");
    assert_eq!(store.revision().expect("revision"), last);
    assert_eq!(store.list("/cm/", None, None).expect("list").1.len(), 2);
    assert!(create(&store, "/cm/ns/c", "1").expect("create").revision > last);
}

/// The child side of the crash test: writes keys until killed, printing each
/// one after its write is acknowledged.
#[test]
#[ignore = "the child process of every_acknowledged_write_survives_sigkill"]
fn crash_child_writer() {
    let Ok(path) = std::env::var("MODELPLANE_STORE_CRASH_DB") else {
        return;
    };
    let store = Store::open(Path::new(&path)).expect("open");
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        let stored = create(&store, &format!("/cm/ns/{i:06}"), &"x".repeat(2048)).expect("create");
        writeln!(out, "{i} {}", stored.revision).expect("stdout");
        out.flush().expect("flush");
    }
}

#[test]
fn every_acknowledged_write_survives_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crash_child_writer",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MODELPLANE_STORE_CRASH_DB", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("stdout");
    let mut acknowledged = Vec::new();
    let mut seen = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if seen.len() < 5 {
            seen.push(line.clone());
        }
        let mut parts = line.split_whitespace();
        let (Some(i), Some(rev)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(i), Ok(rev)) = (i.parse::<u64>(), rev.parse::<i64>()) else {
            continue;
        };
        acknowledged.push((i, rev));
        if acknowledged.len() == 300 {
            child.kill().expect("SIGKILL");
            break;
        }
    }
    let status = child.wait();
    assert_eq!(
        acknowledged.len(),
        300,
        "the writer ended early: {status:?}: {seen:?}"
    );

    let store = Store::open(&path).expect("reopen after the crash");
    let (revision, all) = store.list("/cm/", None, None).expect("list");
    for (i, rev) in &acknowledged {
        let got = store
            .get(&format!("/cm/ns/{i:06}"))
            .expect("get")
            .expect("acknowledged write is present");
        assert_eq!(got.revision, *rev);
        assert_eq!(got.value.len(), 2048, "no half-written value");
    }
    // Writes after the last acknowledgement may or may not have landed, but
    // only whole: keys are contiguous and every value is complete.
    assert!(all.len() >= acknowledged.len());
    assert!(all.iter().all(|s| s.value.len() == 2048));
    let expected: Vec<String> = (0..all.len()).map(|i| format!("/cm/ns/{i:06}")).collect();
    let keys: Vec<&String> = all.iter().map(|s| &s.key).collect();
    assert!(
        keys.iter().zip(&expected).all(|(k, e)| *k == e),
        "no gap in the writes that landed"
    );
    assert_eq!(revision, all.iter().map(|s| s.revision).max().unwrap_or(0));
    let next = create(&store, "/cm/ns/after", "x").expect("create");
    assert!(next.revision > revision);
}

#[test]
fn the_store_runs_in_wal_mode_and_syncs_every_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = modelplane_apiserver::Store::open(&dir.path().join("state.db")).expect("store");
    let (journal, synchronous) = store.durability().expect("pragmas");
    assert_eq!(journal, "wal");
    assert_eq!(
        synchronous, 2,
        "synchronous=FULL: a commit returns once its WAL frames are on disk"
    );
    // Checkpoints: past 1,000 WAL pages (8 MB) the frames move into the
    // database file and the WAL starts over, so it stays near that size
    // however much is written.
    assert_eq!(store.checkpoint_pages().expect("pragma"), 1000);
    let value = vec![b'x'; 4096];
    for batch in 0..80 {
        let writes = (0..50)
            .map(|i| modelplane_apiserver::Write::Create {
                key: format!("/big/{batch}-{i}"),
                value: value.clone(),
            })
            .collect();
        for result in store.write_all(writes) {
            result.expect("write");
        }
    }
    let size = |name: &str| {
        std::fs::metadata(dir.path().join(name))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let written = 4000 * 4096;
    assert!(
        size("state.db") >= written / 2,
        "checkpointed into the database: {} bytes",
        size("state.db")
    );
    assert!(
        size("state.db-wal") < written,
        "the WAL started over: {} bytes",
        size("state.db-wal")
    );
}

/// The database's size once its WAL is folded in, in bytes.
fn database_bytes(path: &Path) -> u64 {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .expect("page_count");
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page_size");
    u64::try_from(pages * page).expect("a size")
}

#[test]
fn a_value_is_stored_once_and_densely() {
    // Fails on the store that kept each value in `current` as well as the
    // log: 4.3 times the values' size (the copy in `current` spilled into a
    // nearly empty overflow page of its own).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = Store::open(&path).expect("open");
    let value = vec![b'x'; 2048];
    for batch in 0..20 {
        let writes = (0..100)
            .map(|i| Write::Create {
                key: format!("/cm/ns/{i:03}-{batch:02}"),
                value: value.clone(),
            })
            .collect();
        for result in store.write_all(writes) {
            result.expect("write");
        }
    }
    drop(store);
    let values = 2000 * 2048;
    let size = database_bytes(&path);
    assert!(
        size < values * 3 / 2,
        "{size} bytes hold {values} bytes of values"
    );
}

fn log_entries(path: &Path) -> Vec<(i64, String)> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let mut stmt = conn
        .prepare("SELECT rev, key FROM log ORDER BY rev")
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
}

#[test]
fn compaction_keeps_the_live_values_and_drops_every_superseded_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = Store::open(&path).expect("open");
    let update = |key: &str, value: &str| {
        store
            .write(Write::Update {
                key: key.into(),
                expected: None,
                value: value.as_bytes().to_vec(),
            })
            .expect("update")
    };
    create(&store, "/cm/ns/a", "a1").expect("create");
    let b = create(&store, "/cm/ns/b", "b1").expect("create");
    let a = update("/cm/ns/a", "a2");
    create(&store, "/cm/ns/c", "c1").expect("create");
    store
        .write(Write::Delete {
            key: "/cm/ns/c".into(),
            expected: None,
        })
        .expect("delete");

    let compacted = store
        .compact(store.revision().expect("revision"))
        .expect("compact");
    let live: Vec<(String, String)> = store
        .list("/cm/", None, None)
        .expect("list")
        .1
        .iter()
        .map(|s| (s.key.clone(), text(&s.value).to_string()))
        .collect();
    assert_eq!(
        live,
        [
            ("/cm/ns/a".to_string(), "a2".to_string()),
            ("/cm/ns/b".to_string(), "b1".to_string())
        ]
    );
    assert_eq!(
        log_entries(&path),
        [
            (b.revision, "/cm/ns/b".into()),
            (a.revision, "/cm/ns/a".into())
        ],
        "only the live objects' entries outlive compaction"
    );

    // b's entry was spared as live; its next change supersedes it.
    let b2 = update("/cm/ns/b", "b2");
    assert_eq!(
        text(&store.get("/cm/ns/b").expect("get").expect("b").value),
        "b2"
    );
    assert_eq!(
        log_entries(&path),
        [
            (a.revision, "/cm/ns/a".into()),
            (b2.revision, "/cm/ns/b".into())
        ]
    );
    let history = store.events_since("/cm/", compacted).expect("history");
    assert_eq!(history.len(), 1, "the change after the compacted revision");
    assert_eq!(text(&history[0].value), "b2");
}

#[test]
fn a_sweep_cut_short_leaves_each_change_its_true_previous_value() {
    // Compaction moves its mark first and sweeps after, a range per
    // transaction; between them (writes go on meanwhile), or after a crash
    // there, entries under the mark are still there. The change
    // of `a` after that must not drop its previous entry alone: a watch
    // reading the value `a` had before it would find `a1`, two changes
    // old (and a label-selector watch could miss a DELETED).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let update = |store: &Store, value: &str| {
        store
            .write(Write::Update {
                key: "/cm/ns/a".into(),
                expected: None,
                value: value.as_bytes().to_vec(),
            })
            .expect("update")
    };
    let marked = {
        let store = Store::open(&path).expect("open");
        create(&store, "/cm/ns/a", "a1").expect("create");
        update(&store, "a2");
        create(&store, "/cm/ns/b", "b1").expect("create").revision
    };
    // The mark, without the sweep (as a crash right after it leaves it).
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute(
        "UPDATE meta SET value = ?1 WHERE name = 'compacted'",
        [marked],
    )
    .expect("mark");
    drop(conn);

    let store = Store::open(&path).expect("reopen");
    let a3 = update(&store, "a3");
    let before = store
        .value_before("/cm/ns/a", a3.revision)
        .expect("read")
        .map(|v| text(&v).to_string());
    assert_eq!(before.as_deref(), Some("a2"), "not a1, two changes old");
    store.compact(marked).expect("the sweep goes on");
    assert_eq!(
        log_entries(&path)
            .into_iter()
            .filter(|(_, key)| key == "/cm/ns/a")
            .map(|(rev, _)| rev)
            .collect::<Vec<_>>(),
        [a3.revision],
        "the sweep, resumed, drops a's superseded entries"
    );
}

/// A file in the layout before values lived in the log alone, with a
/// compacted log: `b`'s value survives only in `current`.
fn write_old_layout(path: &Path) {
    let old = rusqlite::Connection::open(path).expect("open");
    old.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE current (key TEXT PRIMARY KEY, rev INTEGER NOT NULL,
             create_rev INTEGER NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;
         CREATE TABLE log (rev INTEGER PRIMARY KEY, key TEXT NOT NULL,
             kind INTEGER NOT NULL, value BLOB NOT NULL);
         CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO meta VALUES ('revision', 4), ('compacted', 2);
         INSERT INTO current VALUES ('/cm/ns/a', 4, 3, CAST('a2' AS BLOB)),
             ('/cm/ns/b', 2, 1, CAST('b1' AS BLOB));
         INSERT INTO log VALUES (3, '/cm/ns/a', 0, CAST('a1' AS BLOB)),
             (4, '/cm/ns/a', 1, CAST('a2' AS BLOB));",
    )
    .expect("old layout");
}

#[test]
fn a_conversion_cut_short_leaves_the_old_file_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    write_old_layout(&path);
    // In the way of the conversion's second step, after its first has
    // copied the live values into the log.
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch("CREATE TABLE current_keys (x)")
        .expect("an obstacle");
    assert!(Store::open(&path).is_err(), "the conversion fails");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(count("SELECT COUNT(*) FROM log"), 2, "the log as it was");
    assert_eq!(
        count("SELECT COUNT(*) FROM pragma_table_info('current') WHERE name = 'value'"),
        1,
        "current keeps its values"
    );
    conn.execute_batch("DROP TABLE current_keys")
        .expect("the obstacle gone");
    drop(conn);
    let store = Store::open(&path).expect("converted on the next start");
    let b = store.get("/cm/ns/b").expect("get").expect("b is kept");
    assert_eq!(text(&b.value), "b1");
}

#[test]
fn a_store_written_with_values_in_current_opens_with_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    write_old_layout(&path);
    let store = Store::open(&path).expect("open the old layout");
    let b = store.get("/cm/ns/b").expect("get").expect("b is kept");
    assert_eq!(
        (text(&b.value), b.revision, b.create_revision),
        ("b1", 2, 1)
    );
    let listed = store.list("/cm/", None, None).expect("list").1;
    assert_eq!(listed.len(), 2);
    assert_eq!(store.revision().expect("revision"), 4);
    let history = store.events_since("/cm/", 2).expect("history");
    let revisions: Vec<i64> = history.iter().map(|e| e.revision).collect();
    assert_eq!(revisions, [3, 4], "the retained history, unchanged");

    let updated = store
        .write(Write::Update {
            key: "/cm/ns/b".into(),
            expected: Some(2),
            value: b"b2".to_vec(),
        })
        .expect("update");
    assert_eq!(updated.revision, 5);
    drop(store);
    let store = Store::open(&path).expect("reopen");
    assert_eq!(
        text(&store.get("/cm/ns/b").expect("get").expect("b").value),
        "b2"
    );
}
