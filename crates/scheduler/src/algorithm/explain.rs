//! Why a replica is not on a given cluster or pool: the scheduler's
//! explanations, computed after the pass from its final state.
//!
//! For every cluster that received no replica (every cluster, when the
//! deployment is short of replicas), the first blocking reasons
//! are reported in the order the scheduler checks them: cluster selector,
//! taints, readiness, gateway, then per engine and pool the device match and
//! the devices free on its nodes. A cluster where the deployment would fit but was not
//! needed says so.

use modelplane_api::types::{Role, TaintEffect};
use serde::Serialize;

use super::{Ledger, Pass};
use crate::capacity::{self, Room};
use crate::matching::{CompiledRequest, DeviceMiss};
use crate::model::{Cluster, Deployment, PoolDevice};
use crate::{Placement, taints};

/// Why a cluster, or one of its pools, was not chosen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The cluster.
    pub cluster: String,
    /// The pool, when the reason is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The engine, when the reason is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The reason.
    #[serde(flatten)]
    pub reason: Reason,
}

/// A reason, with what the user needs to act on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(
    tag = "reason",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Reason {
    /// The cluster lacks a label the cluster selector requires.
    SelectorMismatch {
        /// Label key.
        label: String,
        /// Value the selector wants.
        want: String,
        /// Value the cluster has, if any.
        have: Option<String>,
    },
    /// An untolerated taint keeps new replicas off (NoExecute also evicts).
    Taint {
        /// Taint key.
        key: String,
        /// Taint value.
        value: String,
        /// Taint effect.
        effect: TaintEffect,
    },
    /// The cluster is not Ready.
    NotReady,
    /// The cluster has no gateway address yet.
    NoGateway,
    /// The cluster publishes no GPU pools.
    NoPools,
    /// No member of the engine claims a DRA device on any pool here (only
    /// Synthetic devices match, so no ResourceClaim is possible).
    NoClaimableDevice,
    /// A member's device request matches no device of the pool.
    DeviceUnmatched {
        /// Member position.
        member: usize,
        /// Member role.
        role: Role,
        /// Request name.
        request: String,
        /// The device that came closest, and why it failed.
        closest: Option<ClosestDevice>,
    },
    /// A member that claims DRA devices elsewhere matches only Synthetic
    /// devices on this pool, so it would run without its devices.
    ClaimStranded {
        /// Member position.
        member: usize,
        /// Member role.
        role: Role,
    },
    /// The pool's devices fit the engine, but its nodes have too little
    /// of them free: counted by device per node (docs/decisions.md).
    InsufficientDevices {
        /// The device counted (the one the engine's pods take most of).
        device: String,
        /// What each of the engine's pods takes of it, on one node each.
        needed: Vec<i64>,
        /// What its nodes have free, most first (nodes with none left out).
        free: Vec<FreeOnNodes>,
        /// Who occupies the pool, by devices taken.
        used_by: Vec<Usage>,
    },
    /// The deployment fits here, but every requested replica is placed.
    NotNeeded,
}

impl std::fmt::Display for DeviceMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceMiss::Count {
                available,
                requested,
            } => write!(f, "only {available} free of the {requested} requested"),
            DeviceMiss::SelectorFalse {
                selector,
                expression,
            } => write!(f, "selector {selector} is false: {}", one_line(expression)),
            DeviceMiss::SelectorError {
                selector,
                expression,
                error,
            } => write!(
                f,
                "selector {selector} fails ({error}): {}",
                one_line(expression)
            ),
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A reason in words: what `modelplane schedule --explain` prints and a
/// deployment's FailedScheduling event says.
impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::SelectorMismatch { label, want, have } => match have {
                Some(have) => write!(
                    f,
                    "cluster selector wants {label}={want}, cluster has {label}={have}"
                ),
                None => write!(
                    f,
                    "cluster selector wants {label}={want}, cluster has no {label} label"
                ),
            },
            Reason::Taint { key, value, effect } => {
                if value.is_empty() {
                    write!(f, "untolerated taint {key}:{effect:?}")
                } else {
                    write!(f, "untolerated taint {key}={value}:{effect:?}")
                }
            }
            Reason::NotReady => f.write_str("cluster is not Ready"),
            Reason::NoGateway => f.write_str("cluster has no gateway address yet"),
            Reason::NoPools => f.write_str("cluster publishes no GPU pools"),
            Reason::NoClaimableDevice => {
                f.write_str("only Synthetic devices match: no DRA device to claim")
            }
            Reason::DeviceUnmatched {
                member,
                role,
                request,
                closest,
            } => {
                write!(
                    f,
                    "member {member} ({role:?}) request {request} matches no device"
                )?;
                match closest {
                    Some(c) => write!(f, "; closest {}: {}", c.device, c.why),
                    None => Ok(()),
                }
            }
            Reason::ClaimStranded { member, role } => write!(
                f,
                "member {member} ({role:?}) would get only Synthetic devices here though it claims DRA devices elsewhere"
            ),
            Reason::InsufficientDevices {
                device,
                needed,
                free,
                used_by,
            } => {
                let list: Vec<String> = needed.iter().map(i64::to_string).collect();
                match needed.as_slice() {
                    [one] => write!(f, "no room for {one} {device} on one node")?,
                    _ => write!(
                        f,
                        "no room for pods of {} {device}, each on one node",
                        list.join(", ")
                    )?,
                }
                if free.is_empty() {
                    f.write_str("; every node is full")?;
                } else {
                    let free: Vec<String> = free
                        .iter()
                        .map(|n| {
                            let nodes = if n.nodes == 1 { "node" } else { "nodes" };
                            format!("{} on {} {nodes}", n.devices, n.nodes)
                        })
                        .collect();
                    write!(f, "; {device} free: {}", free.join(", "))?;
                }
                if !used_by.is_empty() {
                    let users: Vec<String> = used_by
                        .iter()
                        .map(|u| format!("{} ({})", u.deployment, u.devices))
                        .collect();
                    write!(f, "; used by {}", users.join(", "))?;
                }
                Ok(())
            }
            Reason::NotNeeded => f.write_str("fits, but every requested replica is placed"),
        }
    }
}

/// Where an explanation applies and why, in words: `cluster[/pool]
/// [engine]: reason`.
impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cluster)?;
        if let Some(pool) = &self.pool {
            write!(f, "/{pool}")?;
        }
        if let Some(engine) = &self.engine {
            write!(f, " ({engine})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The closest device to a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClosestDevice {
    /// Device name.
    pub device: String,
    /// Why it does not satisfy the request.
    pub why: DeviceMiss,
}

/// Devices of a pool one deployment occupies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// `namespace/deployment`.
    pub deployment: String,
    /// Devices (of the kind counted), as charged.
    pub devices: i64,
}

/// Nodes of a pool with as many devices free.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FreeOnNodes {
    /// Devices free on each.
    pub devices: i64,
    /// How many nodes.
    pub nodes: i64,
}

fn at(cluster: &Cluster, reason: Reason) -> Explanation {
    Explanation {
        cluster: cluster.name.clone(),
        pool: None,
        engine: None,
        reason,
    }
}

/// Selector mismatches of every cluster (when no cluster is a candidate).
pub(crate) fn selector_mismatches(
    deployment: &Deployment,
    clusters: &[Cluster],
) -> Vec<Explanation> {
    clusters
        .iter()
        .flat_map(|c| selector_reasons(deployment, c))
        .collect()
}

fn selector_reasons(deployment: &Deployment, cluster: &Cluster) -> Vec<Explanation> {
    deployment
        .cluster_selector
        .iter()
        .filter(|(k, v)| cluster.labels.get(*k) != Some(*v))
        .map(|(k, v)| {
            at(
                cluster,
                Reason::SelectorMismatch {
                    label: k.clone(),
                    want: v.clone(),
                    have: cluster.labels.get(k).cloned(),
                },
            )
        })
        .collect()
}

/// Explains every cluster that holds none of `placements`.
pub(crate) fn explain(
    pass: &mut Pass<'_>,
    ledger: &Ledger,
    placements: &[Placement],
) -> Vec<Explanation> {
    let mut out = Vec::new();
    let deployment = pass.deployment;
    // A deployment short of replicas explains every cluster, those that
    // took some and are now full included; one placed whole explains only
    // the clusters it is not on.
    let short = placements.len() < deployment.replicas as usize;
    for ci in 0..pass.clusters.len() {
        let cluster = &pass.clusters[ci];
        if !short && placements.iter().any(|p| p.cluster == cluster.name) {
            continue;
        }
        if !pass.candidates[ci] {
            out.extend(selector_reasons(deployment, cluster));
            continue;
        }
        let before = out.len();
        for taint in taints::untolerated(&cluster.taints, &deployment.tolerations) {
            out.push(at(
                cluster,
                Reason::Taint {
                    key: taint.key.clone(),
                    value: taint.value.clone(),
                    effect: taint.effect,
                },
            ));
        }
        if !cluster.ready {
            out.push(at(cluster, Reason::NotReady));
        }
        if cluster.gateway_address.is_empty() {
            out.push(at(cluster, Reason::NoGateway));
        }
        if cluster.pools.is_empty() {
            out.push(at(cluster, Reason::NoPools));
            continue;
        }
        let fits_reasons = engine_reasons(pass, ledger, ci);
        let fits_everywhere = fits_reasons.is_empty();
        out.extend(fits_reasons);
        if fits_everywhere && out.len() == before {
            out.push(at(&pass.clusters[ci], Reason::NotNeeded));
        }
    }
    out
}

/// Walks the engines as `place_engines` does, against the final free room,
/// and says what stops each one on each pool.
fn engine_reasons(pass: &mut Pass<'_>, ledger: &Ledger, ci: usize) -> Vec<Explanation> {
    let mut out = Vec::new();
    let mut trial: Vec<Room> = ledger.free[ci].clone().unwrap_or_default();
    pass.fits(ci);
    let n_engines = pass.engines.len();
    for ei in 0..n_engines {
        let cluster = &pass.clusters[ci];
        let engine_name = pass.engines[ei].name.clone();
        let (claimable, fits): (bool, Vec<Option<super::PoolFit>>) = {
            let fit = &pass.fits_of(ci)[ei];
            (fit.claimable, fit.pools.clone())
        };
        if !claimable {
            // Pools where every member matches only Synthetic devices, and
            // pools where some member matches nothing at all.
            for (pi, fit) in fits.iter().enumerate() {
                let reason = match fit {
                    Some(_) => Reason::NoClaimableDevice,
                    None => member_reason(pass, ci, ei, pi),
                };
                out.push(Explanation {
                    cluster: cluster.name.clone(),
                    pool: Some(cluster.pools[pi].name.clone()),
                    engine: Some(engine_name.clone()),
                    reason,
                });
            }
            return out;
        }
        let placed = fits.iter().enumerate().find_map(|(pi, f)| {
            let after = trial[pi].take_all(&f.as_ref()?.pods)?;
            Some((pi, after))
        });
        if let Some((pi, after)) = placed {
            trial[pi] = after;
            continue;
        }
        for (pi, fit) in fits.iter().enumerate() {
            let reason = match fit {
                Some(fit) => insufficient(cluster, pi, fit, &trial[pi], ledger, ci),
                None => member_reason(pass, ci, ei, pi),
            };
            out.push(Explanation {
                cluster: cluster.name.clone(),
                pool: Some(cluster.pools[pi].name.clone()),
                engine: Some(engine_name.clone()),
                reason,
            });
        }
        return out;
    }
    out
}

/// Why `fit` does not find room on pool `pi`, in devices of the kind its
/// pods take most of.
fn insufficient(
    cluster: &Cluster,
    pi: usize,
    fit: &super::PoolFit,
    room: &Room,
    ledger: &Ledger,
    ci: usize,
) -> Reason {
    let pool = &cluster.pools[pi];
    let device = fit
        .members
        .iter()
        .flatten()
        .max_by_key(|r| {
            let per_node = pool.devices.get(r.device).map_or(1, |d| d.count.max(1));
            (r.count * 1000) / per_node
        })
        .map(|r| r.device)
        .unwrap_or(0);
    let per_node = pool.devices.get(device).map_or(0, |d| d.count);
    let in_devices = |units: u32| capacity::devices_of(units, per_node);
    let mut needed: Vec<i64> = fit.pods.iter().map(|u| in_devices(*u)).collect();
    needed.sort_unstable_by(|a, b| b.cmp(a));
    Reason::InsufficientDevices {
        device: pool
            .devices
            .get(device)
            .map(|d| d.name.clone())
            .unwrap_or_default(),
        needed,
        free: room
            .nodes_by_free()
            .into_iter()
            .map(|(units, nodes)| FreeOnNodes {
                devices: in_devices(units),
                nodes,
            })
            .collect(),
        used_by: usage(ledger, ci, pi, per_node),
    }
}

fn usage(ledger: &Ledger, ci: usize, pi: usize, per_node: i64) -> Vec<Usage> {
    let mut used: Vec<Usage> = ledger.used_by[ci][pi]
        .iter()
        .map(|(deployment, units)| Usage {
            deployment: deployment.clone(),
            devices: capacity::devices_of(u32::try_from(*units).unwrap_or(u32::MAX), per_node),
        })
        .collect();
    used.sort_by(|a, b| {
        b.devices
            .cmp(&a.devices)
            .then_with(|| a.deployment.cmp(&b.deployment))
    });
    used
}

/// Why engine `ei` does not fit pool `pi` regardless of capacity.
fn member_reason(pass: &mut Pass<'_>, ci: usize, ei: usize, pi: usize) -> Reason {
    let devices = pass.clusters[ci].pools[pi].devices.clone();
    let members = pass.engines[ei].members.len();
    for mi in 0..members {
        if pass
            .matcher
            .match_member(&pass.engines, ei, mi, &devices)
            .is_none()
        {
            let member = &pass.engines[ei].members[mi];
            let (request, closest) = closest_device(pass, &member.requests, &devices);
            return Reason::DeviceUnmatched {
                member: mi,
                role: member.role,
                request,
                closest,
            };
        }
    }
    // Every member matches, so a claim-capable member resolves nothing here.
    let fit = pass.fits_of(ci)[ei].clone();
    let stranded = (0..members)
        .find(|&mi| {
            let here = pass.matcher.match_member(&pass.engines, ei, mi, &devices);
            here.is_some_and(|r| r.is_empty()) && fit.member_claimable[mi]
        })
        .unwrap_or(0);
    Reason::ClaimStranded {
        member: stranded,
        role: pass.engines[ei].members[stranded].role,
    }
}

/// Replays the greedy match of a member's requests and, for the first that
/// fails, finds the device that came closest.
fn closest_device(
    pass: &Pass<'_>,
    requests: &[CompiledRequest],
    devices: &[std::sync::Arc<PoolDevice>],
) -> (String, Option<ClosestDevice>) {
    let mut remaining: Vec<i64> = devices.iter().map(|d| d.count).collect();
    for request in requests {
        let outcomes: Vec<Result<(), DeviceMiss>> = devices
            .iter()
            .map(|d| pass.matcher.evaluate(request, d))
            .collect();
        let found =
            (0..devices.len()).find(|&i| remaining[i] >= request.count && outcomes[i].is_ok());
        if let Some(i) = found {
            remaining[i] -= request.count;
            continue;
        }
        // Score: all selectors pass (only the count is short) beats failing
        // a later selector, which beats failing an earlier one.
        let scored = devices.iter().enumerate().map(|(i, d)| {
            let (score, why) = match &outcomes[i] {
                Ok(()) => (
                    usize::MAX,
                    DeviceMiss::Count {
                        available: remaining[i],
                        requested: request.count,
                    },
                ),
                Err(
                    miss @ (DeviceMiss::SelectorFalse { selector, .. }
                    | DeviceMiss::SelectorError { selector, .. }),
                ) => (*selector, miss.clone()),
                Err(miss) => (0, miss.clone()),
            };
            (
                score,
                i,
                ClosestDevice {
                    device: d.name.clone(),
                    why,
                },
            )
        });
        let closest = scored
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
            .map(|(_, _, c)| c);
        return (request.name.clone(), closest);
    }
    (String::new(), None)
}
