//! The store alone (issue 6 targets are end to end through kube-rs; these
//! are the floor under them): durable 2 KB creates one at a time versus from
//! 16 concurrent writers sharing group commits, and listing 10,000 objects.
//! Run on the project's disk (not tmpfs), so every commit is an fsync.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use modelplane_apiserver::{Store, Write};

const VALUE: usize = 2048;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let store = Arc::new(Store::open(&dir.path().join("bench.db")).expect("open"));
    let next = Arc::new(AtomicU64::new(0));
    let value = vec![b'x'; VALUE];
    let create = |store: &Store, next: &AtomicU64| {
        let i = next.fetch_add(1, Ordering::Relaxed);
        store
            .write(Write::Create {
                key: format!("/widgets/ns/w{i:09}"),
                value: value.clone(),
            })
            .expect("create");
    };

    let mut group = c.benchmark_group("store_creates_2kb");
    group.sample_size(10);
    group.throughput(Throughput::Elements(160));
    group.bench_function("one_writer_sequential", |b| {
        b.iter(|| (0..160).for_each(|_| create(&store, &next)))
    });
    group.bench_function("16_writers_group_commit", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for _ in 0..16 {
                    s.spawn(|| (0..10).for_each(|_| create(&store, &next)));
                }
            })
        })
    });
    group.finish();

    let listed = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let big = Store::open(&listed.path().join("list.db")).expect("open");
    std::thread::scope(|s| {
        for t in 0..16 {
            let big = &big;
            let value = &value;
            s.spawn(move || {
                for i in 0..625 {
                    big.write(Write::Create {
                        key: format!("/widgets/ns/{t:02}-{i:04}"),
                        value: value.clone(),
                    })
                    .expect("create");
                }
            });
        }
    });
    assert_eq!(
        big.list("/widgets/", None, None).expect("list").1.len(),
        10_000
    );
    let mut group = c.benchmark_group("store_list");
    group.sample_size(20);
    group.bench_function("10000_objects_2kb", |b| {
        b.iter(|| big.list("/widgets/", None, None).expect("list").1.len())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
