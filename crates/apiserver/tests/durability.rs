//! Crash durability end to end: kube-rs writes 1,000 ConfigMaps over TLS to
//! the server running in another process, the process is killed with
//! SIGKILL in the middle of the burst, restarted on the same data directory,
//! and then every acknowledged write must be there, nothing may be
//! half-written, resourceVersions must keep increasing, and a watcher that
//! resumes from the last version it saw must receive every event it missed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const OBJECTS: usize = 1000;
const WRITERS: usize = 16;
/// Acknowledgements received before the server is killed.
const KILL_AFTER: usize = 400;

/// The child side: serves `MODELPLANE_DURABILITY_DIR` on a free loopback
/// port and prints `ready` once the kubeconfig is written (after the
/// harness's own `test … ` prefix on the same line).
#[test]
#[ignore = "the server process of acknowledged_writes_survive_kill_9_of_the_server"]
fn durability_server_child() {
    let Ok(dir) = std::env::var("MODELPLANE_DURABILITY_DIR") else {
        return;
    };
    let config = modelplane_apiserver::Config {
        data_dir: modelplane_apiserver::DataDir::lock(std::path::Path::new(&dir))
            .expect("lock the data dir"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        max_connections: modelplane_apiserver::MAX_CONNECTIONS,
    };
    modelplane_apiserver::run(config, |_, _| println!("ready")).expect("serve");
}

/// Starts the server process on `dir` and returns it with a client built
/// from the kubeconfig it wrote.
async fn start(dir: &Path) -> (Child, Client) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "durability_server_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MODELPLANE_DURABILITY_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the server");
    let stdout = child.stdout.take().expect("stdout");
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.ends_with("ready"))
    });
    assert!(ready.await.expect("join"), "the server did not start");
    let kubeconfig =
        kube::config::Kubeconfig::read_from(dir.join("kubeconfig")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    (child, Client::try_from(config).expect("client"))
}

fn config_map(i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": format!("cm-{i:04}") },
        "data": { "payload": payload(i) },
    }))
    .expect("config map")
}

/// 2 KB that differ per object, so a torn or mixed-up value shows.
fn payload(i: usize) -> String {
    format!("{i:04}").repeat(512)
}

fn revision(object: &ConfigMap) -> u64 {
    object
        .resource_version()
        .and_then(|v| v.parse().ok())
        .expect("numeric resourceVersion")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_of_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut server, client) = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);

    // A watcher from the start, recording what it saw until the crash.
    let start_version = api
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list revision");
    let watched: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let watcher = {
        let (api, watched) = (api.clone(), watched.clone());
        tokio::spawn(async move {
            let Ok(stream) = api.watch(&WatchParams::default(), &start_version).await else {
                return;
            };
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(cm) = event {
                    let rv = revision(&cm);
                    watched.lock().expect("lock").push((cm.name_any(), rv));
                }
            }
        })
    };

    // The burst: 16 writers share the 1,000 objects; the server dies after
    // 400 acknowledgements.
    let acknowledged: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let (kill, killed) = tokio::sync::watch::channel(false);
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (api, acknowledged, kill) = (api.clone(), acknowledged.clone(), kill.clone());
            tokio::spawn(async move {
                for i in (w..OBJECTS).step_by(WRITERS) {
                    let Ok(created) = api.create(&PostParams::default(), &config_map(i)).await
                    else {
                        return;
                    };
                    let mut acked = acknowledged.lock().expect("lock");
                    acked.insert(created.name_any(), revision(&created));
                    if acked.len() == KILL_AFTER {
                        let _ = kill.send(true);
                    }
                }
            })
        })
        .collect();
    let mut killed = killed;
    killed.wait_for(|k| *k).await.expect("kill signal");
    server.kill().expect("SIGKILL");
    server.wait().expect("reap");
    for writer in writers {
        writer.await.expect("writer");
    }
    watcher.await.expect("watcher");
    let acknowledged = acknowledged.lock().expect("lock").clone();
    let watched_before = watched.lock().expect("lock").clone();
    assert!(
        acknowledged.len() >= KILL_AFTER && acknowledged.len() < OBJECTS,
        "the kill landed mid-burst: {} acknowledged",
        acknowledged.len()
    );

    let (mut server, client) = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);

    // Every acknowledged write, at the version it was acknowledged with.
    for (name, rv) in &acknowledged {
        let got = api.get(name).await.expect("acknowledged object is present");
        assert_eq!(revision(&got), *rv, "{name} kept its resourceVersion");
    }
    // Whatever else landed is whole: its own 2 KB payload, nothing torn.
    let listed = api.list(&ListParams::default()).await.expect("list");
    for cm in &listed.items {
        let i: usize = cm.name_any()["cm-".len()..].parse().expect("index");
        assert_eq!(
            cm.data.as_ref().and_then(|d| d.get("payload")),
            Some(&payload(i)),
            "{} is whole",
            cm.name_any()
        );
    }
    let present: BTreeMap<String, u64> = listed
        .items
        .iter()
        .map(|cm| (cm.name_any(), revision(cm)))
        .collect();
    let last_before = present.values().copied().max().unwrap_or(0);

    // Versions keep increasing across the restart.
    let after = api
        .create(&PostParams::default(), &config_map(OBJECTS))
        .await
        .expect("create after restart");
    assert!(
        revision(&after) > last_before,
        "{} > {last_before}",
        revision(&after)
    );

    // The watcher resumes from the last version it saw and receives every
    // ADDED it missed, in order, then the write made after the restart.
    let resume_from = watched_before
        .iter()
        .map(|(_, rv)| *rv)
        .max()
        .map_or_else(|| "0".to_string(), |rv| rv.to_string());
    let seen_before: BTreeSet<&String> = watched_before.iter().map(|(n, _)| n).collect();
    let mut expected: BTreeSet<String> = present
        .keys()
        .filter(|n| !seen_before.contains(n))
        .cloned()
        .collect();
    expected.insert(after.name_any());
    let resumed = api
        .watch(&WatchParams::default().timeout(10), &resume_from)
        .await
        .expect("resume the watch");
    let mut resumed = std::pin::pin!(resumed);
    let mut received = Vec::new();
    while received.len() < expected.len() {
        match resumed.try_next().await.expect("watch event") {
            Some(WatchEvent::Added(cm)) => received.push((cm.name_any(), revision(&cm))),
            Some(WatchEvent::Error(e)) => panic!("watch error after restart: {e:?}"),
            Some(_) => {}
            None => break,
        }
    }
    let names: BTreeSet<String> = received.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        names, expected,
        "the resumed watch missed or repeated an event"
    );
    assert_eq!(names.len(), received.len(), "no event delivered twice");
    assert!(
        received.windows(2).all(|w| w[0].1 < w[1].1),
        "events arrive in version order"
    );
    server.kill().expect("stop");
    let _ = server.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_of_an_owner_deleted_just_before_kill_9_are_gone_after_restart() {
    use kube::api::DeleteParams;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let (mut server, client) = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let owner = api
        .create(&PostParams::default(), &config_map(9999))
        .await
        .expect("owner");
    let owner_ref = json!([{ "apiVersion": "v1", "kind": "ConfigMap",
        "name": owner.name_any(), "uid": owner.uid().expect("uid") }]);
    const DEPENDENTS: usize = 200;
    for i in 0..DEPENDENTS {
        let mut dependent = config_map(i);
        dependent.metadata.owner_references =
            Some(serde_json::from_value(owner_ref.clone()).expect("owner reference"));
        api.create(&PostParams::default(), &dependent)
            .await
            .expect("dependent");
    }
    // The owner goes (the delete is acknowledged), and the server with it
    // before its background collection can have finished.
    api.delete(&owner.name_any(), &DeleteParams::background())
        .await
        .expect("owner deleted");
    server.kill().expect("SIGKILL");
    server.wait().expect("reap");
    let (mut server, client) = start(dir.path()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let left_at_restart = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .len();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    assert!(
        left_at_restart > 0,
        "the kill landed before the collection finished"
    );
    let mut left = left_at_restart;
    while left > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = api
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len();
    }
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(
        left, 0,
        "every dependent collected after the restart ({left_at_restart} were left when it came back)"
    );
}
