//! `kill -9` of `modelplane up` in the middle of applying 50 deployments
//! (onto a 50-node cluster beside the example fleet),
//! then `up` again on the same data dir, as a user would live through it:
//! every write kubectl saw acknowledged is there, applying the same
//! manifests again converges to what an uninterrupted run has (each
//! deployment once, with exactly its replicas), and what existed before
//! the crash keeps its identity.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::up::{Up, free_port, up};
use common::wait_for;

const DEPLOYMENTS: usize = 50;

/// A cluster with room for every load deployment: 50 one-GPU nodes,
/// tainted so that only they go there (the example's qwen3-8b, which
/// selects no cluster, would take one).
const LOAD_CLUSTER: &str = r#"apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: load
  labels:
    modelplane.ai/region: load
spec:
  stack: Standard
  taints:
  - key: modelplane.ai/load-test
    effect: NoSchedule
  cluster:
    source: EKS
    eks:
      region: us-east-2
  nodePools:
  - name: l4
    className: l4-1x
    nodeCount: 50
    zones: [us-east-2a]
"#;

/// A one-replica deployment of a small model on one L4 GPU of the load
/// cluster.
fn deployment(index: usize) -> String {
    format!(
        r#"apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: load-{index:02}
  namespace: load
spec:
  replicas: 1
  template:
    spec:
      clusterSelector:
        matchLabels:
          modelplane.ai/region: load
      tolerations:
      - key: modelplane.ai/load-test
        operator: Exists
        effect: NoSchedule
      engines:
      - name: engine
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--model=Qwen/Qwen3-0.6B", "--served-model-name=load-{index:02}"]
"#
    )
}

fn names(up: &Up, args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.extend(["-o", "name"]);
    let mut names: Vec<String> = up.kubectl(&all).lines().map(str::to_string).collect();
    names.sort();
    names
}

/// `deployment → how many replicas it has`, of the `load` namespace.
fn replicas_per_deployment(up: &Up) -> Vec<(String, usize)> {
    let listed = up.kubectl(&[
        "get",
        "mr",
        "-n",
        "load",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.labels.modelplane\.ai/deployment}{"\n"}{end}"#,
    ]);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for deployment in listed.lines().filter(|l| !l.is_empty()) {
        *counts.entry(deployment.to_string()).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// The uids of the example's ModelDeployments.
fn example_uids(up: &Up) -> String {
    up.kubectl(&[
        "get",
        "md",
        "-n",
        "ml-team",
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ])
}

#[test]
fn a_kill_9_while_applying_loses_no_acknowledged_write_and_duplicates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut first = up(dir.path(), port, true);
    first.wait_printed("example fleet applied", Duration::from_secs(60));
    first.apply(LOAD_CLUSTER);
    first.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: load\n");
    first.wait_printed("cluster load: ready", Duration::from_secs(180));
    let before = names(&first, &["get", "md,ms,ic,mc", "-A"]);
    let uids = example_uids(&first);

    // Apply one after another, recording each write kubectl saw succeed,
    // until the process is gone.
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let applier = {
        let acknowledged = acknowledged.clone();
        let kubeconfig = first.kubeconfig.clone();
        std::thread::spawn(move || {
            for index in 0..DEPLOYMENTS {
                let applied = common::up::kubectl_apply(&kubeconfig, &deployment(index));
                if !applied {
                    break;
                }
                acknowledged.lock().expect("acks").push(index);
            }
        })
    };
    let started = std::time::Instant::now();
    wait_for("10 deployments applied", Duration::from_secs(180), || {
        (acknowledged.lock().expect("acks").len() >= 10).then_some(())
    });
    println!("10 applied in {:?}; kill -9", started.elapsed());
    first.process.0.kill().expect("kill -9");
    first.process.0.wait().expect("reaped");
    applier.join().expect("the applier");
    let acked = acknowledged.lock().expect("acks").clone();
    assert!(
        acked.len() < DEPLOYMENTS,
        "killed while applying: {} of {DEPLOYMENTS} applied",
        acked.len()
    );
    drop(first);

    let second = up(dir.path(), port, false);
    second.wait_printed("cluster load: ready", Duration::from_secs(180));
    let present = names(&second, &["get", "md", "-n", "load"]);
    for index in &acked {
        let name = format!("modeldeployment.modelplane.ai/load-{index:02}");
        assert!(
            present.contains(&name),
            "acknowledged before the kill, present after: {name} in {present:?}"
        );
    }
    // The user applies the same manifests again.
    let all: Vec<String> = (0..DEPLOYMENTS).map(deployment).collect();
    second.apply(&all.join("---\n"));
    let expected: Vec<(String, usize)> = (0..DEPLOYMENTS)
        .map(|i| (format!("load-{i:02}"), 1))
        .collect();
    let polls = std::sync::atomic::AtomicUsize::new(0);
    wait_for(
        "every deployment to have its one replica",
        Duration::from_secs(180),
        || {
            let now = replicas_per_deployment(&second);
            if now != expected
                && polls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    .is_multiple_of(100)
            {
                let short: Vec<String> = expected
                    .iter()
                    .filter(|e| !now.contains(e))
                    .map(|(d, _)| d.clone())
                    .collect();
                let mut why = String::new();
                for deployment in &short {
                    why.push_str(&second.kubectl(&["describe", "md", deployment, "-n", "load"]));
                }
                println!("replicas per deployment: {now:?}\nshort: {short:?}\n{why}");
            }
            (now == expected).then_some(())
        },
    );
    // Settled, not passing through: still one each a moment later.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(replicas_per_deployment(&second), expected, "no duplicates");
    assert_eq!(
        names(&second, &["get", "md", "-n", "load"]).len(),
        DEPLOYMENTS,
        "each deployment once"
    );
    // What existed before the crash is there, the same objects.
    assert_eq!(names(&second, &["get", "md,ms,ic,mc", "-A"]).len(), {
        before.len() + DEPLOYMENTS
    });
    assert_eq!(example_uids(&second), uids);
}
