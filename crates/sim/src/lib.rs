//! The simulated fleet: stand-ins for what this machine does not have —
//! clouds, Crossplane and its providers, workload clusters with GPU nodes and
//! their in-cluster controllers, engines — so that all of Modelplane's own
//! logic runs for real against it. It talks to API servers only through
//! kubeconfigs, as the real parts do.
//!
//! - [`crossplane`]: the Crossplane kinds it installs on the control plane;
//! - [`cloud`]: the clouds' stage table for managed resources (pure);
//! - [`helm`]: what each chart installs into a workload cluster;
//! - [`fleet`]: the control-plane loop answering managed resources;
//! - [`cluster`]: workload clusters, their nodes and controllers;
//! - [`engine`]: a fake OpenAI-compatible engine.

pub mod client;
pub mod clock;
pub mod cloud;
pub mod cluster;
pub mod crossplane;
pub mod error;
pub mod faults;
pub mod fleet;
pub mod helm;
pub mod informer;
pub mod profile;

use std::sync::Arc;

use kube::config::Kubeconfig;
use modelplane_supervisor::Supervisor;

pub use faults::Faults;
pub use modelplane_engine as engine;
pub use profile::Profile;

/// A running simulated fleet.
pub struct Sim {
    /// Faults to inject while it runs.
    pub faults: Arc<Faults>,
    /// Its workload clusters.
    pub workloads: Arc<cluster::Workloads>,
}

/// Starts the simulated fleet against the control plane `kubeconfig`
/// reaches; every task belongs to `supervisor`.
pub async fn start(
    kubeconfig: Kubeconfig,
    profile: Profile,
    supervisor: &Supervisor,
) -> Result<Sim, kube::Error> {
    let control = client::connect(&kubeconfig).await?;
    let faults = Arc::new(Faults::default());
    let workloads = cluster::Workloads::new(supervisor.clone(), profile.clone(), faults.clone());
    let config = fleet::Config {
        control,
        kubeconfig,
        profile,
        faults: faults.clone(),
    };
    supervisor.spawn(
        "sim-fleet",
        fleet::run(config, supervisor.clone(), workloads.clone()),
    );
    Ok(Sim { faults, workloads })
}
