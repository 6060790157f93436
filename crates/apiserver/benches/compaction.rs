//! Compaction on its own keeps the database bounded (issue 11): 1,000,000
//! updates to 1,000 objects (1 KB each), at a steady rate in simulated time
//! (`RATE`, default 1,000 updates/s — the durable write rate the server is
//! held to), compacted by the server's own policy (`compaction::Retention`,
//! the default 5-minute window, looked at every minute). Prints the database
//! (and WAL) size at every look, the largest, and checks that a revision
//! compacted away answers as expired (410 to a client).
//!
//! `cargo bench -p modelplane-apiserver --bench compaction`
//! (`UPDATES`, `OBJECTS`, `RATE` change the run).

use std::time::Duration;

use modelplane_apiserver::{COMPACT_EVERY, RETENTION, Retention};
use modelplane_apiserver::{Error, Store, Write};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn size_mib(path: &std::path::Path) -> f64 {
    let file = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let wal = path.with_extension("db-wal");
    (file(path.to_path_buf()) + file(wal)) as f64 / (1024.0 * 1024.0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let updates = env("UPDATES", 1_000_000);
    let objects = env("OBJECTS", 1_000);
    let rate = env("RATE", 1_000);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let path = dir.path().join("state.db");
    let store = Store::open(&path).expect("open");
    let value = |i: u64, n: u64| {
        let mut v = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"o{i}"}},"data":{{"n":"{n}","pad":""#
        );
        v.push_str(&"x".repeat(1024 - v.len() - 3));
        v.push_str(r#""}}"#);
        v.into_bytes()
    };
    let key = |i: u64| format!("/configmaps/bench/o{i:05}");
    for batch in (0..objects).collect::<Vec<_>>().chunks(500) {
        let writes = batch
            .iter()
            .map(|&i| Write::Create {
                key: key(i),
                value: value(i, 0),
            })
            .collect();
        for result in store.write_all(writes) {
            result.expect("create");
        }
    }
    let first_revision = store.revision().expect("revision");
    let mut retention = Retention::new(RETENTION);
    let per_look = rate * COMPACT_EVERY.as_secs();
    let started = std::time::Instant::now();
    let (mut done, mut largest, mut compacted_to) = (0u64, 0f64, 0);
    println!(
        "{updates} updates to {objects} objects of 1 KB at {rate}/s simulated; a look every {per_look} updates"
    );
    println!("simulated_s\tupdates\trevision\tcompacted_to\tdb_mib");
    while done < updates {
        let n = per_look.min(updates - done);
        for chunk in (done..done + n).collect::<Vec<_>>().chunks(2_000) {
            let writes = chunk
                .iter()
                .map(|&u| Write::Update {
                    key: key(u % objects),
                    expected: None,
                    value: value(u % objects, u),
                })
                .collect();
            for result in store.write_all(writes) {
                result.expect("update");
            }
        }
        done += n;
        let now = Duration::from_secs(done / rate.max(1));
        let revision = store.revision().expect("revision");
        if let Some(rev) = retention.observe(now, revision) {
            compacted_to = store.compact(rev).expect("compact");
        }
        let mib = size_mib(&path);
        largest = largest.max(mib);
        println!(
            "{}\t{done}\t{revision}\t{compacted_to}\t{mib:.1}",
            now.as_secs()
        );
    }
    let expired = matches!(
        store.events_since("/configmaps/", first_revision),
        Err(Error::Compacted { .. })
    );
    let kept = (RETENTION + COMPACT_EVERY).as_secs() * rate;
    println!(
        "largest database {largest:.1} MiB (bound: live objects plus (retention + one look) × rate = {kept} changes of 1 KB ≈ {:.0} MiB of values), final {:.1} MiB; a compacted revision answers expired: {expired}; {:.1} s",
        kept as f64 / 1024.0,
        size_mib(&path),
        started.elapsed().as_secs_f64()
    );
    assert!(expired, "a revision compacted away must answer 410");
}
