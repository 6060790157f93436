//! What goes wrong when the simulation acts on an API server: a request
//! refused, a cluster that does not answer or does not exist yet, a
//! kubeconfig it cannot use. Each is logged and the step retried; what a
//! simulated controller reports to users (a condition's message, an
//! Event) stays text, as the real ones write it.

use std::sync::PoisonError;

/// A failed step of the simulation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to an API server failed.
    #[error("cannot {doing}: {source}")]
    Api {
        /// What was asked (`create logical cluster gpu-1`).
        doing: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A request to an API server failed (what was asked is in the log's
    /// context).
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A listener could not be opened.
    #[error("cannot {doing}: {source}")]
    Io {
        /// What was asked (`open cluster gpu-1's API address`).
        doing: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A kubeconfig that cannot be used as it is.
    #[error("the kubeconfig {0}")]
    Kubeconfig(String),
    /// A cluster's API server did not answer in time.
    #[error("cluster {cluster} does not answer: {last}")]
    NotAnswering {
        /// The cluster.
        cluster: String,
        /// The last error.
        last: String,
    },
    /// A cluster that was asked for before it exists (its cloud resource
    /// is still being created).
    #[error("cluster {0} does not exist yet")]
    NoCluster(String),
    /// A kubeconfig naming an address the cluster no longer answers on.
    #[error("cluster {cluster} is not served at {server} (it is at {at})")]
    Moved {
        /// The cluster.
        cluster: String,
        /// Where the kubeconfig points.
        server: String,
        /// Where it is served.
        at: String,
    },
    /// A simulated controller panicked while it held shared state.
    #[error("the simulation's state was left poisoned by a panic")]
    Poisoned,
}

impl<T> From<PoisonError<T>> for Error {
    fn from(_: PoisonError<T>) -> Self {
        Error::Poisoned
    }
}

/// A request's error, saying what was asked.
pub fn api(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let doing = doing.into();
    move |source| Error::Api { doing, source }
}

/// An I/O error, saying what was asked.
pub fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let doing = doing.into();
    move |source| Error::Io { doing, source }
}
