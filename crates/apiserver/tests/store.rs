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
    // Checkpoints: past 1,000 WAL pages the frames move into the database
    // file and the WAL starts over, so it stays near that size however much
    // is written.
    assert_eq!(store.checkpoint_pages().expect("pragma"), 1000);
    let value = vec![b'x'; 4096];
    for batch in 0..40 {
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
    let written = 2000 * 4096;
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
