//! What the simulated clouds watch on the control plane: Crossplane's
//! kinds (the table in [`crate::crossplane`]) and the few they read besides.

use crate::client::{Kind as ApiKind, builtin};
use crate::crossplane::{self, KINDS};

/// What the simulated clouds watch on the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FleetKind {
    /// Crossplane's kind `KINDS[i]`: managed resources, providers, their
    /// configs, Helm releases.
    Crossplane(usize),
    /// Secrets (kubeconfigs of Helm provider configs).
    Secret,
    /// InferenceClusters: which class (devices) and fabric each pool has.
    Cluster,
    /// InferenceClasses.
    Class,
    /// Faults injected into the simulation.
    Fault,
}

impl FleetKind {
    /// The Crossplane kind, if it is one.
    pub(super) fn crossplane(self) -> Option<&'static crossplane::Kind> {
        match self {
            FleetKind::Crossplane(i) => KINDS.get(i),
            _ => None,
        }
    }

    /// Crossplane's `group`'s `kind`, if it is one of [`KINDS`].
    pub(super) fn of(group: &str, kind: &str) -> Option<FleetKind> {
        KINDS
            .iter()
            .position(|k| k.group == group && k.kind == kind)
            .map(FleetKind::Crossplane)
    }

    /// The API kind.
    pub(super) fn api(self) -> ApiKind {
        match self {
            FleetKind::Crossplane(i) => {
                let k = &KINDS[i];
                ApiKind::new(&k.api_version(), k.kind, k.plural, k.namespaced)
            }
            FleetKind::Secret => builtin::secret(),
            FleetKind::Fault => fault_kind(),
            FleetKind::Cluster => ApiKind::new(
                "modelplane.ai/v1alpha1",
                "InferenceCluster",
                "inferenceclusters",
                false,
            ),
            FleetKind::Class => ApiKind::new(
                "modelplane.ai/v1alpha1",
                "InferenceClass",
                "inferenceclasses",
                false,
            ),
        }
    }
}

/// Watched besides Crossplane's kinds.
pub(super) const EXTRA: [FleetKind; 4] = [
    FleetKind::Secret,
    FleetKind::Cluster,
    FleetKind::Class,
    FleetKind::Fault,
];

/// The `Fault` kind (`sim.modelplane.ai/v1alpha1`), cluster-scoped.
pub fn fault_kind() -> ApiKind {
    ApiKind::new("sim.modelplane.ai/v1alpha1", "Fault", "faults", false)
}
