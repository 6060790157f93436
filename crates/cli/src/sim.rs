//! `modelplane sim`: the simulated fleet against a control plane — clouds
//! answering the managed resources Modelplane composes, workload clusters
//! as logical clusters of the API server, their nodes and controllers.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Arguments of `modelplane sim`.
#[derive(Args, Debug)]
#[command(after_help = "\
Stands in for Crossplane, its providers and the clouds: installs the CRDs of every \
Crossplane kind Modelplane composes, answers each managed resource as its provider would \
(Synced, then Ready after the profile's provisioning time, once everything it refers to is \
Ready, and only while its provider's DeploymentRuntimeConfig runs it), creates a workload \
cluster for each cloud cluster (a logical cluster of the control plane's API server, \
reached through the kubeconfig its connection Secret carries), registers the nodes of each \
node pool, and installs Helm releases into workload clusters: their CRDs and the \
simulated controller that comes with them. The control plane must be served by \
`modelplane apiserver` (workload clusters are its logical clusters).

Faults are Fault objects (sim.modelplane.ai/v1alpha1) on the control plane: `modelplane sim \
fault` writes one, `modelplane sim heal` deletes it, `kubectl get faults` lists them.

Examples:
  modelplane sim --kubeconfig ./mp-data/kubeconfig
  modelplane sim --kubeconfig ./mp-data/kubeconfig --profile realistic --time-scale 60
  modelplane sim fault node-taint --cluster us-east --node h200-node-0 --kubeconfig ./mp-data/kubeconfig
  modelplane sim heal node-taint-us-east-h200-node-0 --kubeconfig ./mp-data/kubeconfig")]
pub struct SimArgs {
    /// Kubeconfig of the control plane (the embedded API server's root cluster).
    #[arg(long, value_name = "PATH", global = true)]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    action: Option<Action>,
    /// How long provisioning, installs, image pulls and weight loads take.
    #[arg(long, value_name = "NAME", default_value = "fast", value_parser = ["fast", "realistic"])]
    profile: String,
    /// Divide every duration of the profile by this.
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
    time_scale: f64,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

/// Something to do to a running simulation.
#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Inject a fault (a Fault object the simulator acts on until healed).
    Fault(FaultArgs),
    /// Heal a fault: delete its Fault object.
    Heal {
        /// The Fault's name.
        name: String,
    },
}

/// What breaks, and where.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum FaultType {
    /// A node's kubelet stops posting status; its engines stop answering.
    NodeNotReady,
    /// A taint on a node (NoExecute by default: pods that do not tolerate it are evicted).
    NodeTaint,
    /// An engine process is killed once (its streams end at once; the kubelet restarts it).
    KillEngine,
    /// The cluster's API stops answering through its kubeconfig.
    Unreachable,
    /// Creating the cluster's cloud resources fails with the cloud's error.
    ProvisioningFailure,
    /// The cluster's storage reads slower.
    SlowStorage,
}

#[derive(Args, Debug)]
struct FaultArgs {
    /// What breaks.
    #[arg(value_enum)]
    type_: FaultType,
    /// The workload cluster (its InferenceCluster's name).
    #[arg(long)]
    cluster: String,
    /// The node (node-not-ready, node-taint).
    #[arg(long)]
    node: Option<String>,
    /// The pod, NAMESPACE/NAME (kill-engine).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pod: Option<String>,
    /// The taint's key (node-taint).
    #[arg(long, default_value = "sim.modelplane.ai/drain")]
    key: String,
    /// The taint's effect (node-taint).
    #[arg(long, default_value = "NoExecute", value_parser = ["NoExecute", "NoSchedule"])]
    effect: String,
    /// The managed resource kind that fails, or `*` (provisioning-failure).
    #[arg(long, default_value = "*")]
    kind: String,
    /// The cloud's error (provisioning-failure).
    #[arg(long)]
    message: Option<String>,
    /// How many times slower (slow-storage).
    #[arg(long, default_value_t = 10.0)]
    factor: f64,
    /// The Fault's name; derived from the type and target by default.
    #[arg(long)]
    name: Option<String>,
}

fn kubeconfig(args: &SimArgs) -> anyhow::Result<(PathBuf, kube::config::Kubeconfig)> {
    let path = args
        .kubeconfig
        .clone()
        .context("--kubeconfig is required: the control plane's kubeconfig (modelplane apiserver writes one in its data dir)")?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
        .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
    Ok((path, kubeconfig))
}

fn fault_object(f: &FaultArgs) -> anyhow::Result<serde_json::Value> {
    let type_ = format!("{:?}", f.type_);
    let need = |v: &Option<String>, flag: &str| {
        v.clone()
            .with_context(|| format!("{flag} is required for {}", kebab(&type_)))
    };
    let mut spec = serde_json::json!({ "cluster": f.cluster, "type": type_ });
    let target = match f.type_ {
        FaultType::NodeNotReady => {
            spec["node"] = need(&f.node, "--node")?.into();
            f.node.clone()
        }
        FaultType::NodeTaint => {
            spec["node"] = need(&f.node, "--node")?.into();
            spec["key"] = f.key.clone().into();
            spec["effect"] = f.effect.clone().into();
            f.node.clone()
        }
        FaultType::KillEngine => {
            let pod = need(&f.pod, "--pod")?;
            anyhow::ensure!(pod.contains('/'), "--pod is NAMESPACE/NAME, not {pod:?}");
            spec["pod"] = pod.clone().into();
            Some(pod.replace('/', "-"))
        }
        FaultType::ProvisioningFailure => {
            spec["kind"] = f.kind.clone().into();
            if let Some(m) = &f.message {
                spec["message"] = m.clone().into();
            }
            None
        }
        FaultType::SlowStorage => {
            anyhow::ensure!(f.factor >= 1.0, "--factor must be at least 1");
            spec["factor"] = f.factor.into();
            None
        }
        FaultType::Unreachable => None,
    };
    let name = f.name.clone().unwrap_or_else(|| {
        let mut n = format!("{}-{}", kebab(&type_), f.cluster);
        if let Some(t) = target {
            n.push('-');
            n.push_str(&t.to_lowercase());
        }
        n
    });
    Ok(
        serde_json::json!({ "apiVersion": "sim.modelplane.ai/v1alpha1", "kind": "Fault", "metadata": { "name": name }, "spec": spec }),
    )
}

fn kebab(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn act(action: &Action, kubeconfig: kube::config::Kubeconfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = modelplane_sim::client::connect(&kubeconfig).await.context("connecting to the control plane")?;
        let kind = modelplane_sim::fleet::fault_kind();
        match action {
            Action::Fault(f) => {
                let object = fault_object(f)?;
                modelplane_sim::client::apply(&client, &kind, &object, "modelplane-sim-cli")
                    .await
                    .context("writing the Fault (is `modelplane sim` running against this control plane? it installs the kind)")?;
                println!("fault/{} injected; heal it with: modelplane sim heal {}", object["metadata"]["name"].as_str().unwrap_or_default(), object["metadata"]["name"].as_str().unwrap_or_default());
            }
            Action::Heal { name } => {
                modelplane_sim::client::delete(&client, &kind, None, name).await.context("deleting the Fault")?;
                println!("fault/{name} healed");
            }
        }
        Ok(())
    })
}

/// Runs until Ctrl-C or SIGTERM (or carries out a fault command).
pub fn run(args: &SimArgs) -> anyhow::Result<()> {
    let (path, kubeconfig) = kubeconfig(args)?;
    if let Some(action) = &args.action {
        return act(action, kubeconfig);
    }
    let _ = path;
    crate::logging::init(args.log_json);
    anyhow::ensure!(
        args.time_scale > 0.0 && args.time_scale.is_finite(),
        "--time-scale must be a positive number, not {}",
        args.time_scale
    );
    let profile: modelplane_sim::Profile = args
        .profile
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let profile = profile.scaled(args.time_scale);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let supervisor = modelplane_supervisor::Supervisor::default();
        modelplane_sim::start(kubeconfig, profile.clone(), &supervisor)
            .await
            .context("connecting to the control plane")?;
        tracing::info!(profile = %profile, time_scale = profile.time_scale, "simulated fleet running");
        crate::logging::terminated().await;
        supervisor.shutdown().await;
        Ok(())
    })
}
