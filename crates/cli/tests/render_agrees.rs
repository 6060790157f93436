//! `modelplane render` and the controller agree: the objects the
//! controllers of `modelplane up --example` apply, read back from the
//! control plane and from each simulated cluster's API server, are the
//! objects `modelplane render` prints for the same manifests, object for
//! object and field for field, status aside — first for the example fleet,
//! then for each deployment of ../shared/upstream-manifests that places on
//! it, applied in turn in place of the example's own.
//!
//! What render cannot know is named, not ignored: what the servers stamp
//! (uid, resourceVersion, managed fields) and what the controller stamps to
//! find what it applied (the owner label, owner references, finalizers), the EFS file system ID AWS assigns (render
//! prints `fs-from-aws`), and the ModelEndpoints that exist only once a
//! replica is Ready (render prints a first pass, before any is).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::up::{Up, free_port, up_at_time_scale};
use common::wait_for;
use serde_json::Value;

/// Long enough for the simulated clouds to provision both clusters.
const WAIT: Duration = Duration::from_secs(240);

/// Where an object is: `None` for the control plane, else its cluster.
type Target = Option<String>;

/// `(target, apiVersion, kind, namespace, name)`.
type Id = (Target, String, String, String, String);

fn id(target: &Target, object: &Value) -> Id {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        target.clone(),
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What `modelplane render -o json` prints for `paths`, by object.
fn render(paths: &[PathBuf]) -> (BTreeMap<Id, Value>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .arg("render")
        .arg("-f")
        .args(paths)
        .args(["-o", "json"])
        .output()
        .expect("modelplane render runs");
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "render -f {paths:?} prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut objects = BTreeMap::new();
    let mut add = |target: Target, list: &Value| {
        for object in list.as_array().into_iter().flatten() {
            objects.insert(id(&target, object), normalized(object));
        }
    };
    add(None, &printed["controlPlane"]);
    for (cluster, list) in printed["clusters"].as_object().into_iter().flatten() {
        add(Some(cluster.clone()), list);
    }
    (objects, printed["summaries"].clone())
}

/// An object without what only a server or a cloud knows.
fn normalized(object: &Value) -> Value {
    let mut object = object.clone();
    let Some(fields) = object.as_object_mut() else {
        return object;
    };
    fields.remove("status");
    if let Some(metadata) = fields.get_mut("metadata").and_then(Value::as_object_mut) {
        for stamped in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
            "ownerReferences",
            "finalizers",
        ] {
            metadata.remove(stamped);
        }
        if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("modelplane.ai/owner-uid");
        }
        // The simulator's own marks (a staged volume): no real cluster has them.
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|k, _| !k.starts_with("sim.modelplane.ai/"));
        }
        if metadata
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.is_empty())
        {
            metadata.remove("annotations");
        }
        if metadata
            .get("labels")
            .and_then(Value::as_object)
            .is_some_and(|l| l.is_empty())
        {
            metadata.remove("labels");
        }
    }
    if object["kind"] == "StorageClass" && object["parameters"]["fileSystemId"].is_string() {
        object["parameters"]["fileSystemId"] = "fs-from-aws".into();
    }
    object
}

/// kubectl against `kubeconfig`: its output, or `None` when it fails.
fn kubectl(kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Option<String> {
    let mut child = Command::new(common::kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(input) = input {
            stdin.write_all(input.as_bytes()).expect("kubectl reads");
        }
    }
    let out = child.wait_with_output().expect("kubectl runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// What one target holds of what the controllers applied.
struct Applied {
    /// Every object carrying the owner label, ModelEndpoints aside.
    objects: BTreeMap<Id, Value>,
    /// Those that exist only once a replica is Ready, which a first pass
    /// has not seen: what ModelEndpoints own, and a ModelService's route
    /// (composed once an endpoint it selects exists).
    once_ready: std::collections::BTreeSet<Id>,
}

/// Every object the controllers applied on `target` (they carry the owner
/// label), ModelEndpoints aside.
fn applied(
    kubeconfig: &Path,
    target: &Target,
    once_ready_owners: &std::collections::BTreeSet<String>,
) -> Applied {
    let kubectl = |args: &[&str]| -> String {
        kubectl(kubeconfig, args, None).unwrap_or_else(|| panic!("kubectl {args:?} fails"))
    };
    let resources = kubectl(&["api-resources", "--verbs=list", "-o", "name"]);
    let resources: Vec<&str> = resources
        .lines()
        .filter(|r| !r.starts_with("modelendpoints.") && !r.starts_with("events"))
        .collect();
    let list = kubectl(&[
        "get",
        &resources.join(","),
        "-A",
        "-l",
        "modelplane.ai/owner-uid",
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&list).expect("a List");
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let once_ready = items
        .iter()
        .filter(|o| {
            o["metadata"]["labels"]["modelplane.ai/owner-uid"]
                .as_str()
                .is_some_and(|uid| once_ready_owners.contains(uid))
        })
        .map(|o| id(target, o))
        .collect();
    Applied {
        objects: items
            .iter()
            .map(|o| (id(target, o), normalized(o)))
            .collect(),
        once_ready,
    }
}

/// `object` as its server stores it when created: with the server's
/// defaults (a CRD schema's, a Namespace's finalizer). Created under
/// another name in a dry run, so nothing changes.
fn defaulted(kubeconfig: &Path, object: &Value) -> Option<Value> {
    let name = object["metadata"]["name"].as_str()?;
    let mut copy = object.clone();
    copy["metadata"]["name"] = format!("{name}-dry-run").into();
    let created = kubectl(
        kubeconfig,
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        Some(&copy.to_string()),
    )?;
    let mut created: Value = serde_json::from_str(&created).ok()?;
    created["metadata"]["name"] = name.into();
    Some(normalized(&created))
}

/// Where what the controllers applied differs from what render printed,
/// one line per object: rendered and not applied, applied and not
/// rendered (what exists only once a replica is Ready aside), or its first
/// differing field once the server's defaults are taken into account.
fn disagreements(
    places: &[(Target, PathBuf)],
    rendered: &BTreeMap<Id, Value>,
    defaults: &mut BTreeMap<Id, Option<Value>>,
) -> Vec<String> {
    let owners: Value = kubectl(
        &places[0].1,
        &["get", "modelendpoints,modelservices", "-A", "-o", "json"],
        None,
    )
    .and_then(|t| serde_json::from_str(&t).ok())
    .unwrap_or_default();
    let once_ready_owners = owners["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    let mut live = BTreeMap::new();
    let mut once_ready = std::collections::BTreeSet::new();
    for (target, kubeconfig) in places {
        let applied = applied(kubeconfig, target, &once_ready_owners);
        live.extend(applied.objects);
        once_ready.extend(applied.once_ready);
    }
    let kubeconfig_of = |target: &Target| {
        places
            .iter()
            .find(|(t, _)| t == target)
            .map(|(_, k)| k.clone())
    };
    let mut out = Vec::new();
    for (id, object) in rendered {
        let Some(kubeconfig) = kubeconfig_of(&id.0) else {
            out.push(format!(
                "{id:?}: rendered for a cluster without a kubeconfig"
            ));
            continue;
        };
        // A shared object (a team's namespace) carries no owner label.
        let found = live.get(id).cloned().or_else(|| get(&kubeconfig, id));
        let Some(found) = found else {
            if !staged_and_pruned(&places[0].1, id, object) {
                out.push(format!("{id:?}: rendered, not applied"));
            }
            continue;
        };
        if first_difference(object, &found, "").is_none() {
            continue;
        }
        let with_defaults = defaults
            .entry(id.clone())
            .or_insert_with(|| defaulted(&kubeconfig, object))
            .clone()
            .unwrap_or_else(|| object.clone());
        if let Some(at) = first_difference(&with_defaults, &found, "") {
            out.push(format!("{id:?}: {at}"));
        }
    }
    for id in live.keys() {
        if !rendered.contains_key(id) && !once_ready.contains(id) {
            out.push(format!("{id:?}: applied, not rendered"));
        }
    }
    out
}

/// The object `id` on its target, normalized, if it exists.
fn get(kubeconfig: &Path, id: &Id) -> Option<Value> {
    let (_, api_version, kind, namespace, name) = id;
    let resource = match api_version.split_once('/') {
        Some((group, _)) => format!("{}.{group}", kind.to_lowercase()),
        None => kind.to_lowercase(),
    };
    let mut args = vec!["get", resource.as_str(), name.as_str(), "-o", "json"];
    if !namespace.is_empty() {
        args.extend(["-n", namespace.as_str()]);
    }
    let text = kubectl(kubeconfig, &args, None)?;
    serde_json::from_str(&text).ok().map(|o| normalized(&o))
}

/// Whether `object` is a ModelCache's hydration Job on a cluster where the
/// cache is staged: a first pass needs it; once the volume is hydrated the
/// cache composes it no more.
fn staged_and_pruned(control_plane: &Path, id: &Id, object: &Value) -> bool {
    let Some(cache) = object["metadata"]["labels"]["modelplane.ai/modelcache"].as_str() else {
        return false;
    };
    let Some(cluster) = &id.0 else {
        return false;
    };
    let Some(text) = kubectl(
        control_plane,
        &["get", "modelcache", cache, "-n", &id.3, "-o", "json"],
        None,
    ) else {
        return false;
    };
    let cache: Value = serde_json::from_str(&text).unwrap_or_default();
    id.2 == "Job"
        && cache["status"]["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == cluster.as_str() && c["phase"] == "Ready")
}

fn first_difference(rendered: &Value, live: &Value, at: &str) -> Option<String> {
    match (rendered, live) {
        (Value::Object(r), Value::Object(l)) => r
            .keys()
            .chain(l.keys().filter(|k| !r.contains_key(*k)))
            .find_map(|k| {
                first_difference(
                    r.get(k).unwrap_or(&Value::Null),
                    l.get(k).unwrap_or(&Value::Null),
                    &format!("{at}.{k}"),
                )
            }),
        (Value::Array(r), Value::Array(l)) if r.len() == l.len() => r
            .iter()
            .zip(l)
            .enumerate()
            .find_map(|(i, (r, l))| first_difference(r, l, &format!("{at}[{i}]"))),
        _ if rendered == live => None,
        _ => Some(format!("{at}: rendered {rendered}, applied {live}")),
    }
}

/// The clusters' kubeconfigs, as a user gets them from their Secrets.
fn kubeconfigs(up: &Up, rendered: &BTreeMap<Id, Value>) -> Vec<(Target, PathBuf)> {
    let mut clusters: Vec<String> = rendered.keys().filter_map(|id| id.0.clone()).collect();
    clusters.dedup();
    std::iter::once((None, up.kubeconfig.clone()))
        .chain(
            clusters
                .into_iter()
                .map(|c| (Some(c.clone()), up.cluster_kubeconfig(&c))),
        )
        .collect()
}

/// Waits until what the controllers applied is what render printed.
fn agree(up: &Up, what: &str, rendered: &BTreeMap<Id, Value>) {
    let places = wait_for(&format!("{what}: the clusters' kubeconfigs"), WAIT, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| kubeconfigs(up, rendered))).ok()
    });
    let mut last = Vec::new();
    let mut defaults = BTreeMap::new();
    let agreed = wait_for_quiet(WAIT, || {
        last = disagreements(&places, rendered, &mut defaults);
        last.is_empty()
    });
    assert!(
        agreed,
        "{what}: the controllers applied something else than render prints ({} objects differ):\n{}",
        last.len(),
        last.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    println!("{what}: {} objects applied as rendered", rendered.len());
}

/// Polls `check` every second until it holds or `timeout` passes.
fn wait_for_quiet(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The upstream deployments that place on the example fleet: each file and
/// what it places, by render's summaries.
fn upstream_deployments_that_place() -> Vec<PathBuf> {
    let fleet = repo().join("examples/fleet");
    let upstream = repo().join("../shared/upstream-manifests");
    let mut files = Vec::new();
    let mut dirs = vec![upstream];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("upstream manifests")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read_to_string(&path)
                .is_ok_and(|t| t.contains("kind: ModelDeployment"))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .filter(|file| {
            let (_, summaries) = render(&[fleet.clone(), file.clone()]);
            let deployments = deployment_keys(file);
            summaries.as_array().into_iter().flatten().any(|s| {
                let line = s["summary"].as_str().unwrap_or_default();
                deployments.iter().any(|d| {
                    line.starts_with(&format!("{d}: ")) && line.contains(" replicas placed on ")
                })
            })
        })
        .collect()
}

/// `namespace/name` of each ModelDeployment in `file`.
fn deployment_keys(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a manifest");
    text.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|d| d["kind"] == "ModelDeployment")
        .map(|d| {
            format!(
                "{}/{}",
                d["metadata"]["namespace"].as_str().unwrap_or("default"),
                d["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The ModelReplicas on the control plane now, as manifests render reads
/// (what a user passes to see what applying a change would do), written to
/// `path`; none of what the server stamps.
fn existing_replicas(up: &Up, path: &Path) -> PathBuf {
    let list: Value =
        serde_json::from_str(&up.kubectl(&["get", "modelreplicas", "-A", "-o", "json"]))
            .expect("a List");
    let docs: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| normalized(r).to_string())
        .collect();
    std::fs::write(path, docs.join("\n---\n")).expect("write the replicas");
    path.to_path_buf()
}

/// Waits until the controllers applied what render prints for `paths` plus
/// the replicas that exist now.
fn agree_given_replicas(up: &Up, what: &str, paths: &[PathBuf], scratch: &Path) {
    let mut inputs = paths.to_vec();
    inputs.push(existing_replicas(up, &scratch.join("replicas.json")));
    let (rendered, _) = render(&inputs);
    agree(up, what, &rendered);
}

#[test]
fn the_controllers_apply_what_render_prints_for_the_example_and_the_upstream_deployments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = up_at_time_scale(&dir.path().join("data"), free_port(), true, 20);
    let fleet = repo().join("examples/fleet");
    // A first pass: nothing placed before.
    let (rendered, _) = render(std::slice::from_ref(&fleet));
    agree(&up, "the example fleet", &rendered);

    let upstream = upstream_deployments_that_place();
    assert!(
        !upstream.is_empty(),
        "some upstream deployments place on the example fleet"
    );
    let example_deployments = ["ml-team/qwen3-8b", "ml-team/qwen3-coder"];
    for file in upstream {
        let what = file
            .strip_prefix(repo().join("../shared/upstream-manifests"))
            .unwrap_or(&file)
            .display()
            .to_string();
        // Render sees what runs now: the replicas placed so far stay where
        // they are, as the scheduler keeps them.
        let mut inputs = vec![fleet.clone(), file.clone()];
        inputs.push(existing_replicas(&up, &dir.path().join("replicas.json")));
        let (rendered, _) = render(&inputs);
        up.apply(&std::fs::read_to_string(&file).expect("a manifest"));
        agree(&up, &what, &rendered);
        // Back to the example alone: its deployments as they were, the
        // file's others deleted.
        for key in deployment_keys(&file) {
            if example_deployments.contains(&key.as_str()) {
                continue;
            }
            let (namespace, name) = key.split_once('/').expect("namespace/name");
            up.kubectl(&[
                "delete",
                "modeldeployment",
                name,
                "-n",
                namespace,
                "--timeout=120s",
            ]);
        }
        for example in ["qwen3-8b.yaml", "qwen3-coder.yaml"] {
            up.apply(&std::fs::read_to_string(fleet.join(example)).expect("the example"));
        }
        agree_given_replicas(
            &up,
            &format!("the example again after {what}"),
            std::slice::from_ref(&fleet),
            dir.path(),
        );
    }
}
