//! `modelplane rbac`: the ServiceAccount, ClusterRole and binding the
//! controller needs on the control plane, or on a workload cluster, ready
//! for `kubectl apply -f -`.

use std::io::Write;

use anyhow::Context;
use clap::{Args, ValueEnum};
use modelplane_compose::Target;

/// Where the rights are for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum For {
    /// The control cluster the controller runs against: Modelplane's kinds,
    /// Crossplane's, events and its election Lease.
    #[default]
    ControlPlane,
    /// Each workload cluster, for the identity in its kubeconfig Secret:
    /// the kinds compositions apply there.
    WorkloadCluster,
}

/// Arguments of `modelplane rbac`.
#[derive(Args, Debug)]
pub struct RbacArgs {
    /// Which cluster the manifests are for.
    #[arg(long = "for", value_enum, default_value_t = For::ControlPlane)]
    for_: For,
    /// Namespace of the ServiceAccount.
    #[arg(long, default_value = modelplane_api::labels::SYSTEM_NAMESPACE)]
    namespace: String,
    /// Name of the ServiceAccount, ClusterRole and ClusterRoleBinding.
    #[arg(long, default_value = "modelplane-controller")]
    name: String,
}

/// Prints the manifests as multi-document YAML.
pub fn run(args: &RbacArgs) -> anyhow::Result<()> {
    let target = match args.for_ {
        For::ControlPlane => Target::ControlPlane,
        For::WorkloadCluster => Target::Cluster(String::new()),
    };
    let mut text = String::new();
    for object in modelplane_controller::rbac::manifests(&args.namespace, &args.name, &target) {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(&object).context("serializing to YAML")?);
    }
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("writing to stdout")
}
