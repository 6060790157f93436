//! The placement algorithm of `behavior.md` §1: compile, retain, scale down,
//! ledger, fill — every determinism rule of §1.11 kept. Its [`explain`]
//! pass reads the same ledger to say why a replica is not placed.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

pub(crate) mod explain;

use crate::capacity::{self, Room};
use crate::matching::{self, CompiledEngine, Matcher, ResolvedRequest};
use crate::model::{Cluster, Deployment, Existing, ExistingReplica};
use crate::taints;
use crate::{
    DropReason, Dropped, EnginePlacement, Explain, Hold, MemberPlacement, Options, Placement,
    Schedule,
};

/// How one engine fits one pool, ignoring capacity.
#[derive(Clone, Debug)]
pub(crate) struct PoolFit {
    /// Resolved requests per member.
    pub members: Vec<Vec<ResolvedRequest>>,
    /// The size of each of the engine's pods that claims devices on the
    /// pool, in units of a node ([`capacity`]).
    pub pods: Vec<u32>,
}

/// How one engine fits one cluster, ignoring capacity.
#[derive(Clone, Debug)]
pub(crate) struct EngineFit {
    /// Some member claims a DRA device on some pool of the cluster.
    pub claimable: bool,
    /// Per member: it claims a DRA device on some pool of the cluster.
    pub member_claimable: Vec<bool>,
    /// Per pool, in published order: the fit, or `None`.
    pub pools: Vec<Option<PoolFit>>,
}

/// A replica that fits a cluster: its engines and the pods each pool takes.
pub(crate) struct Fit {
    pub engines: Vec<EnginePlacement>,
    /// (pool index, pod sizes) per engine.
    pub charges: Vec<(usize, Vec<u32>)>,
}

/// Free room per (candidate cluster, pool), and who uses it.
pub(crate) struct Ledger {
    /// Per cluster index: free room per pool, or `None` for non-candidates.
    pub free: Vec<Option<Vec<Room>>>,
    /// Per cluster index and pool: (deployment, units) charged.
    pub used_by: Vec<Vec<Vec<(String, i64)>>>,
}

/// Everything a pass computes, shared with the explanations.
pub(crate) struct Pass<'a> {
    pub deployment: &'a Deployment,
    pub clusters: &'a [Cluster],
    pub engines: Vec<CompiledEngine>,
    pub candidates: Vec<bool>,
    pub matcher: Matcher,
    fits: Vec<Option<Vec<EngineFit>>>,
}

impl<'a> Pass<'a> {
    /// The static fit of every engine on cluster `ci`, computed once.
    pub(crate) fn fits(&mut self, ci: usize) -> &[EngineFit] {
        if self.fits[ci].is_none() {
            let computed = self.compute_fits(ci);
            self.fits[ci] = Some(computed);
        }
        self.fits[ci].as_deref().unwrap_or_default()
    }

    /// The fits of cluster `ci`; [`Pass::fits`] must have run for it.
    pub(crate) fn fits_of(&self, ci: usize) -> &[EngineFit] {
        self.fits[ci].as_deref().unwrap_or_default()
    }

    fn compute_fits(&mut self, ci: usize) -> Vec<EngineFit> {
        let cluster = &self.clusters[ci];
        (0..self.engines.len())
            .map(|ei| {
                let n_members = self.engines[ei].members.len();
                // results[pool][member]
                let results: Vec<Vec<Option<Vec<ResolvedRequest>>>> = cluster
                    .pools
                    .iter()
                    .map(|pool| {
                        (0..n_members)
                            .map(|mi| {
                                self.matcher
                                    .match_member(&self.engines, ei, mi, &pool.devices)
                            })
                            .collect()
                    })
                    .collect();
                let claimable: Vec<bool> = (0..n_members)
                    .map(|mi| {
                        results
                            .iter()
                            .any(|r| r[mi].as_ref().is_some_and(|v| !v.is_empty()))
                    })
                    .collect();
                let pools = results
                    .into_iter()
                    .zip(&cluster.pools)
                    .map(|(per_member, pool)| {
                        let members: Option<Vec<Vec<ResolvedRequest>>> =
                            per_member.into_iter().collect();
                        let members = members?;
                        let stranded = members
                            .iter()
                            .zip(&claimable)
                            .any(|(resolved, claimable)| *claimable && resolved.is_empty());
                        if stranded {
                            return None;
                        }
                        let mut pods = Vec::new();
                        for (resolved, m) in members.iter().zip(&self.engines[ei].members) {
                            if resolved.is_empty() {
                                continue;
                            }
                            let demand: Vec<(usize, i64)> =
                                resolved.iter().map(|r| (r.device, r.count)).collect();
                            let size = capacity::pod_units(&demand, &pool.devices)?;
                            let count = usize::try_from(m.pods).unwrap_or(0);
                            pods.extend(std::iter::repeat_n(size, count));
                        }
                        Some(PoolFit { members, pods })
                    })
                    .collect();
                EngineFit {
                    claimable: claimable.iter().any(|c| *c),
                    member_claimable: claimable,
                    pools,
                }
            })
            .collect()
    }

    /// `place_engines`: every engine on one pool each, against a trial copy
    /// of the cluster's free room. Returns the placements and the charges.
    pub(crate) fn place_engines(&mut self, ci: usize, free: &[Room]) -> Option<Fit> {
        let mut trial = free.to_vec();
        let mut placed = Vec::new();
        let mut charges = Vec::new();
        self.fits(ci);
        let fits = self.fits[ci].as_deref().unwrap_or_default();
        for (ei, fit) in fits.iter().enumerate() {
            if !fit.claimable {
                return None;
            }
            let (pi, pool_fit, after) = fit.pools.iter().enumerate().find_map(|(pi, f)| {
                let f = f.as_ref()?;
                Some((pi, f, trial[pi].take_all(&f.pods)?))
            })?;
            trial[pi] = after;
            charges.push((pi, pool_fit.pods.clone()));
            placed.push(self.engine_placement(ci, ei, pi, &pool_fit.members));
        }
        Some(Fit {
            engines: placed,
            charges,
        })
    }

    fn engine_placement(
        &self,
        ci: usize,
        ei: usize,
        pi: usize,
        members: &[Vec<ResolvedRequest>],
    ) -> EnginePlacement {
        let engine = &self.engines[ei];
        EnginePlacement {
            name: engine.name.clone(),
            members: engine
                .members
                .iter()
                .zip(members)
                .map(|(m, resolved)| MemberPlacement {
                    role: m.role,
                    pool: self.clusters[ci].pools[pi].name.clone(),
                    device_requests: resolved.clone(),
                })
                .collect(),
        }
    }

    /// Re-resolves an existing replica of this deployment on its pinned pools
    /// (§1.6 step 4): `None` when it no longer fits and must be re-placed.
    fn reresolve(&mut self, replica: &ExistingReplica, ci: usize) -> Option<Vec<EnginePlacement>> {
        let deployment = self.deployment;
        if replica.engines.len() != deployment.engines.len() {
            return None;
        }
        let cluster = &self.clusters[ci];
        let mut placed = Vec::with_capacity(deployment.engines.len());
        for (ei, spec) in deployment.engines.iter().enumerate() {
            let observed = replica.engines.iter().find(|e| e.name == spec.name)?;
            if observed.members.len() != spec.members.len() {
                return None;
            }
            let mut members = Vec::with_capacity(spec.members.len());
            for (mi, (member, pinned)) in spec.members.iter().zip(&observed.members).enumerate() {
                if pinned.role != member.role || pinned.pool.is_empty() {
                    return None;
                }
                let pool = cluster.pools.iter().find(|p| p.name == pinned.pool)?;
                let resolved = self
                    .matcher
                    .match_member(&self.engines, ei, mi, &pool.devices)?;
                members.push(MemberPlacement {
                    role: member.role,
                    pool: pool.name.clone(),
                    device_requests: resolved,
                });
            }
            if members.iter().all(|m| m.device_requests.is_empty()) {
                return None;
            }
            placed.push(EnginePlacement {
                name: spec.name.clone(),
                members,
            });
        }
        Some(placed)
    }
}

fn selector_matches(deployment: &Deployment, cluster: &Cluster) -> bool {
    deployment
        .cluster_selector
        .iter()
        .all(|(k, v)| cluster.labels.get(k) == Some(v))
}

fn is_ours(deployment: &Deployment, replica: &ExistingReplica) -> bool {
    replica.deployment.as_deref() == Some(deployment.name.as_str())
        && replica.namespace == deployment.namespace
}

/// The whole pass.
pub(crate) fn run<R: Existing + ?Sized>(
    deployment: &Deployment,
    clusters: &[Cluster],
    replicas: &R,
    options: Options,
) -> Result<Schedule, Hold> {
    let engines = matching::compile(deployment)?;
    let candidates: Vec<bool> = clusters
        .iter()
        .map(|c| selector_matches(deployment, c))
        .collect();
    let mut pass = Pass {
        deployment,
        clusters,
        engines,
        candidates: candidates.clone(),
        matcher: Matcher::new(),
        fits: vec![None; clusters.len()],
    };
    if !candidates.iter().any(|c| *c) {
        let explanations = if options.explain != Explain::Never {
            explain::selector_mismatches(deployment, clusters)
        } else {
            Vec::new()
        };
        return Err(Hold::NoClusters { explanations });
    }
    let by_name: HashMap<&str, usize> = clusters
        .iter()
        .enumerate()
        .filter(|(i, _)| candidates[*i])
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();

    let mut sorted = replicas.of_deployment(&deployment.namespace, &deployment.name);
    sorted.sort_by(|a, b| a.name.cmp(&b.name));

    let mut dropped = Vec::new();
    let mut placements = retain(&mut pass, &sorted, &by_name, &mut dropped);
    scale_down(&mut placements, deployment.replicas as usize, &mut dropped);
    let shortfall = (deployment.replicas as usize).saturating_sub(placements.len());

    let mut ledger = if (options.fill && shortfall > 0) || options.explain == Explain::Always {
        Some(build_ledger(&pass, replicas.each(), &by_name, &placements))
    } else {
        None
    };
    if options.fill
        && shortfall > 0
        && let Some(ledger) = ledger.as_mut()
    {
        fill(&mut pass, ledger, &mut placements, shortfall);
    }
    placements.sort_by(|a, b| (&a.cluster, a.index).cmp(&(&b.cluster, b.index)));

    let explain = match options.explain {
        Explain::Never => false,
        Explain::WhenShort => placements.len() < deployment.replicas as usize,
        Explain::Always => true,
    };
    let explanations = match ledger {
        _ if !explain => Vec::new(),
        Some(ledger) => explain::explain(&mut pass, &ledger, &placements),
        None => {
            let ledger = build_ledger(&pass, replicas.each(), &by_name, &placements);
            explain::explain(&mut pass, &ledger, &placements)
        }
    };
    Ok(Schedule {
        requested: deployment.replicas,
        candidates: candidates.iter().filter(|c| **c).count(),
        placements,
        dropped,
        explanations,
    })
}

/// Phase 1 (§1.6): keep each existing replica that still fits where it is.
fn retain(
    pass: &mut Pass<'_>,
    sorted: &[&ExistingReplica],
    by_name: &HashMap<&str, usize>,
    dropped: &mut Vec<Dropped>,
) -> Vec<Placement> {
    let mut kept: Vec<Placement> = Vec::new();
    let mut identities: HashSet<(String, i64)> = HashSet::new();
    for replica in sorted.iter().filter(|r| is_ours(pass.deployment, r)) {
        let mut drop = |reason| {
            dropped.push(Dropped {
                replica: replica.name.clone(),
                cluster: replica.cluster.clone(),
                index: replica.index,
                reason,
            })
        };
        let Some(&ci) = by_name.get(replica.cluster.as_str()) else {
            drop(DropReason::ClusterNotCandidate);
            continue;
        };
        let identity = (replica.cluster.clone(), replica.index);
        if identities.contains(&identity) {
            drop(DropReason::Duplicate);
            continue;
        }
        let cluster = &pass.clusters[ci];
        if taints::evicts(&cluster.taints, &pass.deployment.tolerations) {
            drop(DropReason::Evicted);
            continue;
        }
        let Some(engines) = pass.reresolve(replica, ci) else {
            drop(DropReason::NoLongerFits);
            continue;
        };
        identities.insert(identity);
        kept.push(Placement {
            cluster: replica.cluster.clone(),
            index: replica.index,
            gateway_address: pass.clusters[ci].gateway_address.clone(),
            engines,
            retained: true,
        });
    }
    kept
}

/// §1.7: drop the highest index on the most-loaded cluster (ties: the later
/// cluster name) until the count fits.
fn scale_down(placements: &mut Vec<Placement>, replicas: usize, dropped: &mut Vec<Dropped>) {
    while placements.len() > replicas {
        let mut load: HashMap<&str, usize> = HashMap::new();
        for p in placements.iter() {
            *load.entry(p.cluster.as_str()).or_default() += 1;
        }
        let victim = placements
            .iter()
            .enumerate()
            .max_by(|(_, a), (_, b)| {
                (load[a.cluster.as_str()], &a.cluster, a.index).cmp(&(
                    load[b.cluster.as_str()],
                    &b.cluster,
                    b.index,
                ))
            })
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                let victim = placements.remove(i);
                dropped.push(Dropped {
                    replica: String::new(),
                    cluster: victim.cluster,
                    index: victim.index,
                    reason: DropReason::ScaledDown,
                });
            }
            None => break,
        }
    }
}

/// One pod charged on a pool: its size in units, and whose it is.
type Charge = (u32, Rc<str>);

/// §1.8, by device (docs/decisions.md): each pool's nodes, with every
/// other deployment's replica charged by what its pods take as stamped,
/// and our retained ones as they resolve now.
fn build_ledger<'r>(
    pass: &Pass<'_>,
    replicas: impl Iterator<Item = &'r ExistingReplica>,
    by_name: &HashMap<&str, usize>,
    kept: &[Placement],
) -> Ledger {
    let clusters = pass.clusters;
    let mut free: Vec<Option<Vec<Room>>> = clusters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            pass.candidates[i].then(|| c.pools.iter().map(|p| Room::new(p.nodes)).collect())
        })
        .collect();
    let mut used_by: Vec<Vec<Vec<(String, i64)>>> = clusters
        .iter()
        .map(|c| vec![Vec::new(); c.pools.len()])
        .collect();
    // Per cluster and pool, every pod running there: charged largest
    // first, as a packing that fits them is found.
    // Owners shared, not copied per pod: a fleet's ledger charges tens of
    // thousands of pods.
    let mut charges: Vec<Vec<Vec<Charge>>> =
        used_by.iter().map(|p| vec![Vec::new(); p.len()]).collect();
    // Ours kept, as they resolve now.
    let ours: Rc<str> = format!("{}/{}", pass.deployment.namespace, pass.deployment.name).into();
    for placement in kept {
        let Some(&ci) = by_name.get(placement.cluster.as_str()) else {
            continue;
        };
        for (engine, spec) in placement.engines.iter().zip(&pass.deployment.engines) {
            for (member, member_spec) in engine.members.iter().zip(&spec.members) {
                if member.device_requests.is_empty() {
                    continue;
                }
                let Some(pi) = clusters[ci]
                    .pools
                    .iter()
                    .position(|p| p.name == member.pool)
                else {
                    continue;
                };
                let demand: Vec<(usize, i64)> = member
                    .device_requests
                    .iter()
                    .map(|r| (r.device, r.count))
                    .collect();
                let size = capacity::pod_units(&demand, &clusters[ci].pools[pi].devices)
                    .unwrap_or(capacity::UNITS);
                let pods = u64::from(member_spec.pods) * u64::from(spec.copies);
                for _ in 0..pods {
                    charges[ci][pi].push((size, ours.clone()));
                }
            }
        }
    }
    for replica in replicas {
        if replica.engines.is_empty() || is_ours(pass.deployment, replica) {
            continue;
        }
        let Some(&ci) = by_name.get(replica.cluster.as_str()) else {
            continue;
        };
        if free[ci].is_none() {
            continue;
        }
        let owner: Rc<str> = format!(
            "{}/{}",
            replica.namespace,
            replica.deployment.as_deref().unwrap_or(&replica.name)
        )
        .into();
        for engine in &replica.engines {
            for member in engine.members.iter().filter(|m| m.claims) {
                let Some(pi) = clusters[ci]
                    .pools
                    .iter()
                    .position(|p| p.name == member.pool)
                else {
                    continue;
                };
                let pool = &clusters[ci].pools[pi];
                // What the pool cannot say the size of takes a whole node.
                let size = member
                    .demand(pool)
                    .and_then(|demand| capacity::pod_units(&demand, &pool.devices))
                    .unwrap_or(capacity::UNITS);
                let pods = u64::from(member.pods) * u64::from(engine.copies);
                for _ in 0..pods {
                    charges[ci][pi].push((size, owner.clone()));
                }
            }
        }
    }
    for (ci, pools) in charges.into_iter().enumerate() {
        let Some(rooms) = free[ci].as_mut() else {
            continue;
        };
        for (pi, mut pods) in pools.into_iter().enumerate() {
            pods.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            for (size, owner) in pods {
                rooms[pi].charge(size);
                record(&mut used_by[ci][pi], &owner, i64::from(size));
            }
        }
    }
    Ledger { free, used_by }
}

fn record(usage: &mut Vec<(String, i64)>, owner: &str, units: i64) {
    match usage.iter_mut().find(|(o, _)| o == owner) {
        Some((_, n)) => *n += units,
        None => usage.push((owner.to_string(), units)),
    }
}

/// §1.9: place the shortfall one replica at a time on the least-loaded
/// eligible cluster (ties: the smaller name), at its lowest free index.
fn fill(
    pass: &mut Pass<'_>,
    ledger: &mut Ledger,
    placements: &mut Vec<Placement>,
    shortfall: usize,
) {
    let deployment = pass.deployment;
    let clusters = pass.clusters;
    let schedulable: Vec<usize> = (0..clusters.len())
        .filter(|&ci| {
            pass.candidates[ci]
                && !taints::blocks_new(&clusters[ci].taints, &deployment.tolerations)
        })
        .collect();
    let mut load: HashMap<&str, usize> = HashMap::new();
    let mut used: HashMap<&str, BTreeSet<i64>> = HashMap::new();
    for p in placements.iter() {
        *load.entry(clusters_name(clusters, &p.cluster)).or_default() += 1;
        used.entry(clusters_name(clusters, &p.cluster))
            .or_default()
            .insert(p.index);
    }
    for _ in 0..shortfall {
        // (load, cluster index, fit) of the best cluster so far.
        let mut best: Option<(usize, usize, Fit)> = None;
        for &ci in &schedulable {
            let cluster = &clusters[ci];
            if !cluster.ready || cluster.gateway_address.is_empty() {
                continue;
            }
            let cluster_load = load.get(cluster.name.as_str()).copied().unwrap_or(0);
            if let Some((best_load, best_ci, _)) = &best
                && (cluster_load, &cluster.name) >= (*best_load, &clusters[*best_ci].name)
            {
                continue;
            }
            let Some(free) = ledger.free[ci].as_deref() else {
                continue;
            };
            if let Some(fit) = pass.place_engines(ci, free) {
                best = Some((cluster_load, ci, fit));
            }
        }
        let Some((_, ci, Fit { engines, charges })) = best else {
            break;
        };
        let name = clusters[ci].name.as_str();
        let indices = used.entry(name).or_default();
        let index = (0..).find(|i| !indices.contains(i)).unwrap_or(0);
        indices.insert(index);
        *load.entry(name).or_default() += 1;
        if let Some(free) = ledger.free[ci].as_mut() {
            for (pi, pods) in charges {
                if let Some(after) = free[pi].take_all(&pods) {
                    free[pi] = after;
                }
                let units: u32 = pods.iter().sum();
                record(
                    &mut ledger.used_by[ci][pi],
                    &format!("{}/{}", deployment.namespace, deployment.name),
                    i64::from(units),
                );
            }
        }
        placements.push(Placement {
            cluster: name.to_string(),
            index,
            gateway_address: clusters[ci].gateway_address.clone(),
            engines,
            retained: false,
        });
    }
}

/// The cluster's own name string (to key maps by a borrow of the input).
fn clusters_name<'c>(clusters: &'c [Cluster], name: &str) -> &'c str {
    clusters
        .iter()
        .find(|c| c.name == name)
        .map_or("", |c| c.name.as_str())
}
