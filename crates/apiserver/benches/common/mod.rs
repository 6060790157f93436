//! What the API server's end-to-end benches share: the server in a child
//! process (the bench binary re-run with `MODELPLANE_BENCH_SERVE_DIR`, so
//! its memory is its own), resident memory, percentiles, and watch latency.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use modelplane_apiserver::{Config as ServeConfig, run};
use serde_json::json;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_string)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// In the child: serves the directory until killed, saying `ready` once
/// the kubeconfig is written, and returns true. In the bench: false.
pub fn serve_if_child() -> bool {
    let Ok(dir) = std::env::var("MODELPLANE_BENCH_SERVE_DIR") else {
        return false;
    };
    let config = ServeConfig {
        data_dir: modelplane_apiserver::DataDir::lock(std::path::Path::new(&dir))
            .expect("lock the data dir"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        max_connections: modelplane_apiserver::MAX_CONNECTIONS,
    };
    run(config, |_, _| println!("ready")).expect("serve");
    true
}

/// Kills the server process when the bench ends, however it ends.
pub struct ServerProcess(pub std::process::Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn start_server(dir: &Path) -> ServerProcess {
    let mut child = Command::new(std::env::current_exe().expect("bench binary"))
        .env("MODELPLANE_BENCH_SERVE_DIR", dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let stdout = child.stdout.take().expect("stdout");
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "ready");
    assert!(ready, "the server did not start");
    ServerProcess(child)
}

/// Milliseconds from the start of a write to its delivery at each of
/// `watchers` kube-rs watchers of `configmaps`, over 30 changes.
pub async fn watch_latencies(configmaps: Api<ConfigMap>, watchers: usize) -> Vec<f64> {
    let seed: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "beacon" }, "data": { "n": "0" } }))
            .expect("cm");
    configmaps
        .create(&PostParams::default(), &seed)
        .await
        .expect("beacon");
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String, Instant)>();
    let mut tasks = Vec::new();
    for w in 0..watchers {
        let stream = watcher(configmaps.clone(), watcher::Config::default()).applied_objects();
        let seen_tx = seen_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(Ok(cm)) = stream.next().await {
                let n = cm
                    .data
                    .unwrap_or_default()
                    .get("n")
                    .cloned()
                    .unwrap_or_default();
                let _ = seen_tx.send((w, n, Instant::now()));
            }
        }));
    }
    // Let every watcher deliver the initial state.
    let mut initial = 0;
    while initial < watchers {
        if let Some((_, n, _)) = seen_rx.recv().await
            && n == "0"
        {
            initial += 1;
        }
    }
    let mut latencies = Vec::new();
    for round in 1..=30 {
        let n = round.to_string();
        let start = Instant::now();
        configmaps
            .patch(
                "beacon",
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": { "n": n } })),
            )
            .await
            .expect("change");
        let mut got = 0;
        while got < watchers {
            let Some((_, seen, at)) = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv())
                .await
                .expect("delivered")
            else {
                break;
            };
            if seen == n {
                latencies.push(at.duration_since(start).as_secs_f64() * 1000.0);
                got += 1;
            }
        }
    }
    for task in tasks {
        task.abort();
    }
    latencies
}
