//! How long things take in the simulated fleet. `fast` brings the example
//! fleet up in seconds; `realistic` uses the clouds' and engines' published
//! figures (docs/sim.md says which). A time scale divides every duration.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::cloud::Role;

/// A named set of durations.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// `fast` or `realistic`.
    pub name: &'static str,
    /// A Kubernetes control plane (EKS cluster, GKE cluster…).
    pub cluster: Duration,
    /// A node pool, until its nodes have joined.
    pub pool: Duration,
    /// Any other cloud resource (network, role, addon…).
    pub resource: Duration,
    /// A Helm release, until its pods run.
    pub release: Duration,
    /// Pulling an engine image onto a node that does not have it.
    pub image_pull: Duration,
    /// An engine process from start to serving, weights aside.
    pub engine_start: Duration,
    /// Storage read bandwidth shared by every replica reading a cache, bytes/s.
    pub storage_bandwidth: f64,
    /// GPU-to-GPU fabric bandwidth per transfer (EFA, InfiniBand), bytes/s.
    pub fabric_bandwidth: f64,
    /// Every duration is divided by this.
    pub time_scale: f64,
}

impl Profile {
    /// The whole example fleet ready in seconds.
    pub fn fast() -> Profile {
        Profile {
            name: "fast",
            cluster: Duration::from_millis(300),
            pool: Duration::from_millis(300),
            resource: Duration::from_millis(50),
            release: Duration::from_millis(100),
            image_pull: Duration::from_millis(100),
            engine_start: Duration::from_millis(100),
            storage_bandwidth: 50e9,
            fabric_bandwidth: 400e9,
            time_scale: 1.0,
        }
    }

    /// The clouds' and engines' published figures (docs/sim.md).
    pub fn realistic() -> Profile {
        Profile {
            name: "realistic",
            // EKS: "cluster creation takes about 10 minutes"; managed node groups ~3–5.
            cluster: Duration::from_secs(600),
            pool: Duration::from_secs(240),
            resource: Duration::from_secs(5),
            release: Duration::from_secs(45),
            // A ~10 GB vLLM image at ~200 MB/s from a registry.
            image_pull: Duration::from_secs(50),
            engine_start: Duration::from_secs(30),
            // EFS elastic throughput: up to ~1.5 GB/s reads per file system (shared).
            storage_bandwidth: 1.5e9,
            // EFA on p5: 3,200 Gbps per node = 400 GB/s.
            fabric_bandwidth: 400e9,
            time_scale: 1.0,
        }
    }

    /// This profile with every duration divided by `scale`.
    pub fn scaled(mut self, scale: f64) -> Profile {
        self.time_scale = scale;
        self
    }

    /// How long creating a cloud resource of `role` takes.
    pub fn provisioning(&self, role: Role) -> Duration {
        self.scale(match role {
            Role::Cluster => self.cluster,
            Role::Pool => self.pool,
            Role::Other => self.resource,
        })
    }

    /// `duration` at this profile's time scale.
    pub fn scale(&self, duration: Duration) -> Duration {
        if self.time_scale > 0.0 {
            duration.div_f64(self.time_scale)
        } else {
            duration
        }
    }

    /// How long reading `bytes` at `bandwidth` bytes/s takes, scaled.
    pub fn transfer(&self, bytes: f64, bandwidth: f64) -> Duration {
        self.scale(Duration::from_secs_f64(bytes / bandwidth.max(1.0)))
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Profile, String> {
        match s {
            "fast" => Ok(Profile::fast()),
            "realistic" => Ok(Profile::realistic()),
            other => Err(format!(
                "unknown profile {other:?}: choose fast or realistic"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_scale_divides_every_duration() {
        let p = Profile::realistic().scaled(60.0);
        assert_eq!(p.provisioning(Role::Cluster), Duration::from_secs(10));
        assert_eq!(
            p.transfer(140e9, 1.4e9),
            Duration::from_secs_f64(100.0 / 60.0)
        );
        assert!("slow".parse::<Profile>().is_err());
    }
}
