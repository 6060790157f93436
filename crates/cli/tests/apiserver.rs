//! `modelplane apiserver` over TCP with kubectl 1.33 as the client: the
//! kubeconfig it writes works with kubectl's own verbs (create, get,
//! label, patch, jsonpath, delete --cascade=foreground), requests
//! without the token get 401,
//! and objects survive a restart after SIGKILL.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// kubectl 1.33 from the Google Cloud SDK, else the one on the PATH.
fn kubectl() -> PathBuf {
    let sdk = PathBuf::from("/usr/lib/google-cloud-sdk/bin/kubectl.1.33");
    if sdk.exists() {
        sdk
    } else {
        PathBuf::from("kubectl")
    }
}

/// kubectl pointed at `kubeconfig`, with its own discovery cache.
fn kubectl_at(kubeconfig: &Path, cache: &Path) -> Command {
    let mut command = Command::new(kubectl());
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache);
    command
}

struct Server {
    child: Child,
    kubeconfig: PathBuf,
    /// The kubectl `kubectl()` runs.
    binary: PathBuf,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["apiserver", "--data-dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the apiserver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the ready line");
        assert!(line.starts_with("serving on https://127.0.0.1:"), "{line}");
        Server {
            child,
            kubeconfig: dir.join("kubeconfig"),
            binary: kubectl(),
        }
    }

    /// The same server, driven by the kubectl at `binary`.
    fn driven_by(mut self, binary: &Path) -> Server {
        self.binary = binary.to_path_buf();
        self
    }

    /// kubectl with the server's kubeconfig and `cache` as its cache.
    fn command(&self, cache: &Path) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(cache);
        command
    }

    fn kubectl(&self, cache: &Path, args: &[&str]) -> (bool, String, String) {
        let out = self
            .command(cache)
            .args(args)
            .output()
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn kubectl_reads_and_writes_through_the_written_kubeconfig_and_data_survives_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("kube-cache");
    let data = dir.path().join("data");
    let server = Server::start(&data);
    use std::os::unix::fs::PermissionsExt;
    for file in ["kubeconfig", "token", "tls.key"] {
        let mode = std::fs::metadata(data.join(file))
            .expect(file)
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file} is private");
    }

    // kubectl's own verbs, through discovery.
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  k: v\n",
    )
    .expect("manifest");
    let manifest = manifest.to_string_lossy().to_string();
    let (ok, out, err) = server.kubectl(&cache, &["create", "-f", &manifest]);
    assert!(
        ok && out.contains("configmap/settings created"),
        "{out}{err}"
    );
    let (ok, out, err) = server.kubectl(&cache, &["get", "configmaps"]);
    assert!(
        ok && out.starts_with("NAME") && out.contains("settings"),
        "{out}{err}"
    );
    // --sort-by asks the Table's rows to carry the whole object.
    let (ok, out, err) = server.kubectl(
        &cache,
        &["get", "configmaps", "--sort-by=.metadata.creationTimestamp"],
    );
    assert!(ok && out.contains("settings"), "{out}{err}");
    let (ok, _, err) = server.kubectl(&cache, &["label", "cm", "settings", "team=a"]);
    assert!(ok, "{err}");
    let (ok, _, err) = server.kubectl(
        &cache,
        &[
            "patch",
            "cm",
            "settings",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"k":"w"}}"#,
        ],
    );
    assert!(ok, "{err}");
    let (ok, out, err) = server.kubectl(
        &cache,
        &[
            "get",
            "cm",
            "-l",
            "team=a",
            "-o",
            "jsonpath={.items[0].data.k}",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "w");
    // JSON patch, and kubectl's default for built-ins, strategic merge patch.
    let json_patch = r#"[{"op":"add","path":"/data/j","value":"x"}]"#;
    let (ok, _, err) = server.kubectl(
        &cache,
        &[
            "patch", "cm", "settings", "--type", "json", "-p", json_patch,
        ],
    );
    assert!(ok, "{err}");
    let (ok, _, err) = server.kubectl(
        &cache,
        &["patch", "cm", "settings", "-p", r#"{"data":{"j":null}}"#],
    );
    assert!(ok, "{err}");
    let (_, out, _) = server.kubectl(&cache, &["get", "cm", "settings", "-o", "jsonpath={.data}"]);
    assert_eq!(out, r#"{"k":"w"}"#);
    let (ok, out, err) = server.kubectl(
        &cache,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps/settings",
        ],
    );
    assert!(ok, "{err}");
    let object: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(object["metadata"]["labels"]["team"], "a");

    // A wrong token is refused.
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig).expect("kubeconfig");
    let token = std::fs::read_to_string(data.join("token")).expect("token");
    let forged = dir.path().join("forged");
    std::fs::write(&forged, kubeconfig.replace(token.trim(), "not-the-token"))
        .expect("forged kubeconfig");
    let out = kubectl_at(&forged, &cache)
        .args(["get", "--raw", "/api/v1/namespaces/default/configmaps"])
        .output()
        .expect("kubectl runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // SIGKILL, restart on the same directory: the object is still there.
    drop(server);
    let server = Server::start(&data);
    let (ok, out, err) = server.kubectl(
        &cache,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps/settings",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("\"settings\""));

    // kubectl get -w receives the events as they happen.
    let watcher = kubectl_at(&server.kubeconfig, &cache)
        .args(["get", "cm", "-w", "-o", "name", "--request-timeout=3s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let late = dir.path().join("late.json");
    std::fs::write(
        &late,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"late"}}"#,
    )
    .expect("late");
    let (ok, _, err) = server.kubectl(&cache, &["apply", "-f", &late.to_string_lossy()]);
    assert!(ok, "{err}");
    let (ok, _, err) = server.kubectl(&cache, &["delete", "cm", "late"]);
    assert!(ok, "{err}");
    let watched = String::from_utf8_lossy(&watcher.wait_with_output().expect("watch ends").stdout)
        .to_string();
    // The initial state, then the creation and the deletion of `late`.
    assert_eq!(
        watched.lines().filter(|l| *l == "configmap/late").count(),
        2,
        "{watched}"
    );
    assert!(watched.starts_with("configmap/settings"), "{watched}");

    // Foreground cascade: a dependent goes first, then its owner.
    let (_, uid, _) = server.kubectl(
        &cache,
        &["get", "cm", "settings", "-o", "jsonpath={.metadata.uid}"],
    );
    let child = dir.path().join("child.json");
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "child", "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "settings", "uid": uid }] },
    });
    std::fs::write(&child, manifest.to_string()).expect("child");
    let (ok, _, err) = server.kubectl(&cache, &["apply", "-f", &child.to_string_lossy()]);
    assert!(ok, "{err}");
    let (ok, out, err) = server.kubectl(
        &cache,
        &["delete", "cm", "settings", "--cascade=foreground"],
    );
    assert!(
        ok && out.contains("configmap \"settings\" deleted"),
        "{out}{err}"
    );
    let (_, out, err) = server.kubectl(&cache, &["get", "cm"]);
    assert!(
        err.contains("No resources found"),
        "both are gone: {out}{err}"
    );
}

#[test]
fn kubectl_applies_the_crds_then_the_examples_and_gets_scales_explains_them() {
    for binary in common::kubectl_versions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Server::start(&dir.path().join("data")).driven_by(&binary);
        apply_get_scale_explain(&server, dir.path());
    }
}

fn apply_get_scale_explain(server: &Server, dir: &Path) {
    let cache = dir.join("kube-cache");
    let version = server.binary.display();
    let crds = dir.join("crds.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .arg("crds")
        .output()
        .expect("modelplane crds");
    std::fs::write(&crds, &out.stdout).expect("crds.yaml");
    let (ok, out, err) = server.kubectl(&cache, &["apply", "-f", &crds.to_string_lossy()]);
    assert!(ok, "{version}: {err}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with(" created")).count(),
        14,
        "{out}"
    );

    // As the README does, validated by kubectl against the server's OpenAPI.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fleet");
    let (ok, out, err) = server.kubectl(&cache, &["apply", "-f", &examples.to_string_lossy()]);
    assert!(ok, "{version}: {out}{err}");
    assert!(
        out.contains("modeldeployment.modelplane.ai/qwen3-8b created"),
        "{out}"
    );
    // Nothing differs from the files just applied.
    let (ok, out, err) = server.kubectl(&cache, &["diff", "-f", &examples.to_string_lossy()]);
    assert!(ok && out.is_empty(), "{version}: {out}{err}");
    // Moving the same file to server-side apply conflicts with nothing: a
    // class's devices are a list map, merged item by item, and the field
    // the server defaulted inside an item (`claim`) is claimed by no one.
    // (Lists a CRD leaves atomic conflict, as on Kubernetes, when the
    // server defaulted anything inside them.)
    let classes = examples.join("inference-classes.yaml");
    let (ok, out, err) = server.kubectl(
        &cache,
        &["apply", "--server-side", "-f", &classes.to_string_lossy()],
    );
    assert!(
        ok && out.contains("inferenceclass.modelplane.ai/l4-1x serverside-applied"),
        "{version}: {out}{err}"
    );
    // A kind nobody serves is named as Kubernetes names it.
    let typo = dir.join("typo.yaml");
    std::fs::write(
        &typo,
        "apiVersion: modelplane.ai/v1alpha1\nkind: ModelDeploymen\nmetadata:\n  name: x\n",
    )
    .expect("typo");
    let (ok, _, err) = server.kubectl(&cache, &["apply", "-f", &typo.to_string_lossy()]);
    assert!(
        !ok && err.contains(
            r#"no matches for kind "ModelDeploymen" in version "modelplane.ai/v1alpha1""#
        ),
        "{version}: {err}"
    );
    let (ok, out, err) = server.kubectl(&cache, &["get", "ic", "-o", "name"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "inferencecluster.modelplane.ai/us-east",
            "inferencecluster.modelplane.ai/us-west"
        ]
    );

    // Printer columns from the CRD, and the `modelplane` category.
    let (ok, out, err) = server.kubectl(&cache, &["get", "ic"]);
    assert!(ok, "{err}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SOURCE",
            "STACK",
            "GATEWAY",
            "READY",
            "REACHABLE",
            "AGE"
        ]
    );
    assert!(
        out.lines().any(|l| l
            .split_whitespace()
            .take(3)
            .eq(["us-west", "EKS", "Dynamo"])),
        "{out}"
    );
    let (ok, out, err) = server.kubectl(&cache, &["get", "modelplane", "-A", "-o", "name"]);
    assert!(ok, "{err}");
    for kind in [
        "inferenceclass",
        "inferencecluster",
        "modelcache",
        "modeldeployment",
        "modelservice",
    ] {
        assert!(
            out.contains(&format!("{kind}.modelplane.ai/")),
            "{kind} missing from: {out}"
        );
    }

    // kubectl scale through the scale subresource; the parent's rules still
    // hold. kubectl get -w prints each change with the kind's columns.
    let watcher = server
        .command(&cache)
        .args(["get", "md", "-n", "ml-team", "-w", "--request-timeout=3s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let (ok, _, err) = server.kubectl(
        &cache,
        &["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=3"],
    );
    assert!(ok, "{err}");
    let watched = String::from_utf8_lossy(&watcher.wait_with_output().expect("watch ends").stdout)
        .to_string();
    let rows: Vec<&str> = watched
        .lines()
        .filter(|l| l.starts_with("qwen3-8b "))
        .collect();
    assert!(
        watched.starts_with("NAME") && rows.len() >= 2,
        "{version}: {watched}"
    );
    // Every row, the change's too, ends with the AGE column.
    assert!(
        rows.iter().all(|row| row
            .split_whitespace()
            .last()
            .is_some_and(|age| age.ends_with('s') || age.ends_with('m'))),
        "{version}: {watched}"
    );
    let (_, out, _) = server.kubectl(
        &cache,
        &[
            "get",
            "md",
            "qwen3-8b",
            "-n",
            "ml-team",
            "-o",
            "jsonpath={.spec.replicas} {.metadata.generation}",
        ],
    );
    assert_eq!(out, "3 2");
    let (ok, _, err) = server.kubectl(
        &cache,
        &["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=0"],
    );
    assert!(
        !ok && err.contains("should be greater than or equal to 1"),
        "{err}"
    );

    // kubectl explain reads the CRD's schema from OpenAPI.
    let (ok, out, err) = server.kubectl(&cache, &["explain", "md.spec.replicas"]);
    assert!(
        ok && out.contains("KIND:       ModelDeployment") && out.contains("<integer>"),
        "{out}{err}"
    );
    // Applying a change configures the object.
    let changed = dir.join("qwen3-8b.yaml");
    let text = std::fs::read_to_string(examples.join("qwen3-8b.yaml")).expect("example");
    std::fs::write(&changed, text.replace("replicas: 2", "replicas: 4")).expect("changed");
    let (ok, out, err) = server.kubectl(&cache, &["apply", "-f", &changed.to_string_lossy()]);
    assert!(
        ok && out.contains("modeldeployment.modelplane.ai/qwen3-8b configured"),
        "{out}{err}"
    );

    let (ok, out, err) = server.kubectl(&cache, &["describe", "ic", "us-east"]);
    assert!(
        ok && out.starts_with("Name:         us-east")
            && out.contains("Kind:         InferenceCluster"),
        "{out}{err}"
    );

    // kubectl wait watches for a condition a controller sets through the status subresource.
    let waiter = server
        .command(&cache)
        .args([
            "wait",
            "--for=condition=Ready",
            "ic/us-east",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl wait");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let ready = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Test","message":"","lastTransitionTime":"2026-11-30T09:00:00Z"}]}}"#;
    let (ok, _, err) = server.kubectl(
        &cache,
        &[
            "patch",
            "ic",
            "us-east",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            ready,
        ],
    );
    assert!(ok, "{err}");
    let waited = waiter.wait_with_output().expect("kubectl wait ends");
    assert!(
        waited.status.success()
            && String::from_utf8_lossy(&waited.stdout).contains("condition met"),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );

    // Server-side apply: field managers own what they apply; a second
    // manager changing it conflicts unless it forces.
    let ssa = |replicas: &str, manager: &str, force: bool| {
        let file = dir.join(format!("ssa-{manager}-{replicas}.yaml"));
        std::fs::write(
            &file,
            text.replace("replicas: 2", &format!("replicas: {replicas}")),
        )
        .expect("ssa file");
        let path = file.to_string_lossy().to_string();
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager",
            manager,
            "-f",
            &path,
        ];
        if force {
            args.push("--force-conflicts");
        }
        server.kubectl(&cache, &args)
    };
    // The object was made by client-side apply: taking its fields over with
    // another manager needs --force-conflicts, as on Kubernetes.
    let (ok, _, err) = ssa("5", "team-a", false);
    assert!(
        !ok && err.contains("conflict with \"kubectl-client-side-apply\""),
        "{err}"
    );
    let (ok, out, err) = ssa("5", "team-a", true);
    assert!(
        ok && out.contains("modeldeployment.modelplane.ai/qwen3-8b serverside-applied"),
        "{out}{err}"
    );
    let (ok, _, err) = ssa("6", "team-b", false);
    assert!(!ok && err.contains("conflict with \"team-a\""), "{err}");
    let (ok, _, err) = ssa("6", "team-b", true);
    assert!(ok, "{err}");
    let (_, out, _) = server.kubectl(
        &cache,
        &[
            "get",
            "md",
            "qwen3-8b",
            "-n",
            "ml-team",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    assert_eq!(out, "6");

    // The immutable stack, enforced by the CRD's CEL rule.
    let (ok, _, err) = server.kubectl(
        &cache,
        &[
            "patch",
            "ic",
            "us-west",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"stack":"Standard"}}"#,
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("stack is immutable; create a new InferenceCluster to change stacks"),
        "{err}"
    );

    // Unknown fields: kubectl asks for strict field validation.
    let manifest = dir.join("unknown-field.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nmetadata:\n  name: typo\n  namespace: ml-team\nspec:\n  endpointz: []\n",
    )
    .expect("manifest");
    let (ok, _, err) = server.kubectl(&cache, &["apply", "-f", manifest.to_str().expect("path")]);
    assert!(!ok);
    assert!(
        err.contains(r#"strict decoding error: unknown field "spec.endpointz""#),
        "{err}"
    );

    // A server-side dry run admits the change and stores nothing.
    let (ok, out, err) = server.kubectl(
        &cache,
        &[
            "scale",
            "md/qwen3-8b",
            "-n",
            "ml-team",
            "--replicas=2",
            "--dry-run=server",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("(server dry run)"), "{out}");
    let (_, out, _) = server.kubectl(
        &cache,
        &[
            "get",
            "md",
            "qwen3-8b",
            "-n",
            "ml-team",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    assert_eq!(out, "6");
}

#[test]
fn kubectl_of_two_versions_works_in_two_logical_clusters_each_seeing_only_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start(&data);
    let cache = dir.path().join("kube-cache");
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig).expect("kubeconfig");
    let root_url = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server line")
        .to_string();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("manifest");
        path.to_string_lossy().to_string()
    };
    let clusters = write(
        "clusters.yaml",
        "apiVersion: tenancy.modelplane.ai/v1alpha1\nkind: LogicalCluster\nmetadata:\n  name: team-a\n---\napiVersion: tenancy.modelplane.ai/v1alpha1\nkind: LogicalCluster\nmetadata:\n  name: team-b\n",
    );
    let (ok, out, err) = server.kubectl(&cache, &["create", "-f", &clusters]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = server.kubectl(&cache, &["get", "logicalclusters", "-o", "name"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "logicalcluster.tenancy.modelplane.ai/team-a",
            "logicalcluster.tenancy.modelplane.ai/team-b"
        ]
    );

    let binaries = common::kubectl_versions();
    for (i, binary) in binaries.iter().enumerate() {
        let in_cluster = |cluster: &str, args: &[&str]| {
            let out = Command::new(binary)
                .arg("--kubeconfig")
                .arg(&server.kubeconfig)
                .arg("--cache-dir")
                .arg(dir.path().join(format!("cache-{i}")))
                .arg("--server")
                .arg(format!("{root_url}/clusters/{cluster}"))
                .args(args)
                .output()
                .expect("kubectl runs");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        };
        for cluster in ["team-a", "team-b"] {
            let manifest = write(
                &format!("{cluster}-{i}.yaml"),
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {cluster}-{i}\ndata:\n  owner: {cluster}\n"
                ),
            );
            let (ok, out, err) = in_cluster(cluster, &["create", "-f", &manifest]);
            assert!(ok, "{binary:?} {cluster}: {out}{err}");
        }
        for cluster in ["team-a", "team-b"] {
            let (ok, out, err) = in_cluster(cluster, &["get", "configmaps", "-o", "name"]);
            assert!(ok, "{binary:?}: {err}");
            let expected: Vec<String> = (0..=i)
                .map(|j| format!("configmap/{cluster}-{j}"))
                .collect();
            assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{binary:?}");
            let (ok, out, err) = in_cluster(cluster, &["get", "namespaces", "-o", "name"]);
            assert!(ok && out.contains("namespace/kube-system"), "{out}{err}");
            // LogicalCluster is the root's kind only.
            let (ok, _, err) = in_cluster(cluster, &["get", "logicalclusters"]);
            assert!(!ok && err.contains("logicalclusters"), "{binary:?}: {err}");
        }
    }
    // The root sees none of theirs.
    let (ok, out, err) = server.kubectl(&cache, &["get", "configmaps", "-o", "name"]);
    assert!(ok && out.is_empty(), "{out}{err}");
}

/// Each generator `kubectl create …`, `run` and `expose` use, with `NAME`
/// for the object's name.
const GENERATORS: &[&[&str]] = &[
    &["create", "namespace", "NAME"],
    &[
        "create",
        "secret",
        "generic",
        "NAME",
        "--from-file=kubeconfig=KUBECONFIG",
        "--from-literal=region=us-east",
    ],
    &[
        "create",
        "configmap",
        "NAME",
        "--from-literal=a=b",
        "--from-literal=empty=",
    ],
    &[
        "create",
        "deployment",
        "NAME",
        "--image=vllm/vllm-openai:v0.11.0",
        "--replicas=2",
        "--port=8000",
    ],
    &[
        "run",
        "NAME",
        "--image=busybox",
        "--env=A=B",
        "--labels=app=NAME",
        "--port=8080",
        "--command",
        "--",
        "sleep",
        "3600",
    ],
    &[
        "expose",
        "deployment",
        "gen-p-3",
        "--name=NAME",
        "--port=80",
        "--target-port=8000",
    ],
    &["create", "service", "nodeport", "NAME", "--tcp=80:8080"],
    &[
        "create",
        "job",
        "NAME",
        "--image=busybox",
        "--",
        "echo",
        "hi",
    ],
    &["create", "quota", "NAME", "--hard=cpu=1,memory=1Gi,pods=2"],
    &[
        "create",
        "priorityclass",
        "NAME",
        "--value=1000",
        "--description=serving",
    ],
    &["create", "serviceaccount", "NAME"],
    &[
        "create",
        "clusterrole",
        "NAME",
        "--verb=get,list",
        "--resource=pods",
    ],
    &[
        "create",
        "clusterrolebinding",
        "NAME",
        "--clusterrole=view",
        "--user=alice",
    ],
    &[
        "create",
        "deployment",
        "NAME",
        "--image=busybox",
        "--replicas=0",
    ],
    &["create", "role", "NAME", "--verb=get", "--resource=pods"],
    &[
        "create",
        "rolebinding",
        "NAME",
        "--clusterrole=view",
        "--serviceaccount=default:default",
    ],
    &["create", "service", "clusterip", "NAME", "--tcp=80:8080"],
    &[
        "create",
        "cronjob",
        "NAME",
        "--image=busybox",
        "--schedule=*/5 * * * *",
    ],
    &[
        "create",
        "ingress",
        "NAME",
        "--rule=models.example.com/v1*=svc:8080",
    ],
    &[
        "create",
        "poddisruptionbudget",
        "NAME",
        "--selector=app=engine",
        "--min-available=1",
    ],
];

/// A stored object with what differs between two creations of the same
/// thing left out: its name (wherever it appears), uid, version and times.
fn normalized(object: &str, name: &str) -> serde_json::Value {
    let mut object: serde_json::Value = serde_json::from_str(object).expect("JSON");
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ] {
            metadata.remove(field);
        }
    }
    serde_json::from_str(&object.to_string().replace(name, "NAME")).expect("JSON")
}

#[test]
fn kubectl_generators_of_both_versions_create_what_the_same_object_in_json_would() {
    for binary in common::kubectl_versions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Server::start(&dir.path().join("data")).driven_by(&binary);
        let cache = dir.path().join("kube-cache");
        let version = binary.display();
        let kubeconfig = server.kubeconfig.to_string_lossy().to_string();
        for (i, generator) in GENERATORS.iter().enumerate() {
            let (direct, via_json) = (format!("gen-p-{i}"), format!("gen-j-{i}"));
            let args = |name: &str| -> Vec<String> {
                generator
                    .iter()
                    .map(|a| a.replace("NAME", name).replace("KUBECONFIG", &kubeconfig))
                    .collect()
            };
            // Sent the generator's way: protobuf from kubectl 1.32 on.
            let direct_args = args(&direct);
            let direct_args: Vec<&str> = direct_args.iter().map(String::as_str).collect();
            let (ok, out, err) = server.kubectl(&cache, &direct_args);
            assert!(ok, "{version} {direct_args:?}: {out}{err}");
            // The same object printed as JSON, then created from the file.
            let mut dry = args(&via_json);
            dry.splice(
                1..1,
                ["--dry-run=client".into(), "-o".into(), "json".into()],
            );
            let dry: Vec<&str> = dry.iter().map(String::as_str).collect();
            let (ok, json, err) = server.kubectl(&cache, &dry);
            assert!(ok, "{version} {dry:?}: {err}");
            let file = dir.path().join(format!("{via_json}.json"));
            std::fs::write(&file, &json).expect("json file");
            let (ok, out, err) = server.kubectl(&cache, &["create", "-f", &file.to_string_lossy()]);
            assert!(ok, "{version} {dry:?}: {out}{err}");
            let object: serde_json::Value = serde_json::from_str(&json).expect("dry run JSON");
            let kind = object["kind"].as_str().expect("kind").to_lowercase();
            let stored = |name: &str| {
                let (ok, out, err) = server.kubectl(&cache, &["get", &kind, name, "-o", "json"]);
                assert!(ok, "{version}: {err}");
                normalized(&out, name)
            };
            assert_eq!(
                stored(&direct),
                stored(&via_json),
                "{version} {generator:?}"
            );
        }

        // label, annotate, edit (the editor scripted) and rollout status.
        let deployment = "gen-p-3";
        let (ok, _, err) =
            server.kubectl(&cache, &["label", "deployment", deployment, "tier=serving"]);
        assert!(ok, "{version}: {err}");
        let (ok, _, err) = server.kubectl(
            &cache,
            &["annotate", "deployment", deployment, "owner=ml-team"],
        );
        assert!(ok, "{version}: {err}");
        let editor = dir.path().join("editor.sh");
        std::fs::write(
            &editor,
            "#!/bin/sh\nsed -i 's/replicas: 2/replicas: 3/' \"$1\"\n",
        )
        .expect("editor");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let out = server
            .command(&cache)
            .args(["edit", "deployment", deployment])
            .env("KUBE_EDITOR", &editor)
            .output()
            .expect("kubectl edit");
        assert!(
            out.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (_, out, _) = server.kubectl(
            &cache,
            &[
                "get",
                "deployment",
                deployment,
                "-o",
                "jsonpath={.spec.replicas} {.metadata.labels.tier} {.metadata.annotations.owner} {.metadata.generation}",
            ],
        );
        let fields: Vec<&str> = out.split(' ').collect();
        assert_eq!(fields[..3], ["3", "serving", "ml-team"], "{version}: {out}");
        // The status a controller would write: every replica updated and available.
        let status = serde_json::json!({ "status": {
            "observedGeneration": fields[3].parse::<i64>().expect("generation"),
            "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [{ "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable" }],
        } });
        let (ok, _, err) = server.kubectl(
            &cache,
            &[
                "patch",
                "deployment",
                deployment,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
        );
        assert!(ok, "{version}: {err}");
        let (ok, out, err) = server.kubectl(
            &cache,
            &[
                "rollout",
                "status",
                "deployment",
                deployment,
                "--timeout=10s",
            ],
        );
        assert!(
            ok && out.contains("successfully rolled out"),
            "{version}: {out}{err}"
        );
    }
}

#[test]
fn an_oversized_body_gets_its_413_through_kubectl_every_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let cache = dir.path().join("kube-cache");
    let big = dir.path().join("big.json");
    let manifest = serde_json::json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "big" }, "data": { "blob": "x".repeat(4 * 1024 * 1024) } });
    std::fs::write(&big, manifest.to_string()).expect("big manifest");
    // The server reads what it refuses, so the client reads the answer
    // instead of a broken pipe, however the writes and the close interleave.
    let big = big.to_string_lossy().to_string();
    for binary in common::kubectl_versions() {
        for verb in ["create", "apply", "replace"] {
            for attempt in 0..4 {
                let out = Command::new(&binary)
                    .arg("--kubeconfig")
                    .arg(&server.kubeconfig)
                    .arg("--cache-dir")
                    .arg(&cache)
                    .args([verb, "-f", &big])
                    .output()
                    .expect("kubectl runs");
                let (ok, err) = (out.status.success(), String::from_utf8_lossy(&out.stderr));
                assert!(
                    !ok && err
                        .contains("the request body is larger than the limit of 3145728 bytes"),
                    "{} {verb}, attempt {attempt}: {err}",
                    binary.display()
                );
            }
        }
    }
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&dir.path().join("data"));
    let (ok, _, err) = server.kubectl(&dir.path().join("cache"), &["get", "namespaces"]);
    assert!(ok, "{err}");
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let status = server.child.wait().expect("the server exits");
    assert!(
        status.success(),
        "it drains and exits 0 on SIGTERM: {status}"
    );
}
