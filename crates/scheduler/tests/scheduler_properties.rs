//! Invariants of the scheduler over random fleets (proptest).

mod common;

use std::collections::HashMap;

use common::*;
use modelplane_api::types::Role;
use modelplane_scheduler::{
    Cluster, Deployment, DropReason, ExistingReplica, Options, Schedule, schedule,
};
use proptest::prelude::*;

/// (nodes, GPUs per node, GiB per GPU).
type PoolShape = (i64, i32, u32);
/// (name, ready, pools).
type ClusterShape = (String, bool, Vec<PoolShape>);
/// (copies, gang, GPUs per member, minimum GiB).
type EngineShape = (u32, bool, i64, u32);

#[derive(Clone, Debug)]
struct World {
    clusters: Vec<ClusterShape>,
    deployment: (u32, Vec<EngineShape>),
    /// (ours, cluster, pool, index).
    replicas: Vec<(bool, usize, usize, i64)>,
}

fn world() -> impl Strategy<Value = World> {
    let pool = (0i64..5, 1i32..9, prop::sample::select(vec![16u32, 40, 80]));
    let cluster = (any::<bool>(), prop::collection::vec(pool, 1..4));
    let engine = (
        1u32..3,
        any::<bool>(),
        1i64..9,
        prop::sample::select(vec![20u32, 60]),
    );
    (
        prop::collection::vec(cluster, 1..5),
        (1u32..6, prop::collection::vec(engine, 1..3)),
        prop::collection::vec((any::<bool>(), 0usize..5, 0usize..4, 0i64..4), 0..8),
    )
        .prop_map(|(clusters, deployment, replicas)| World {
            clusters: clusters
                .into_iter()
                .enumerate()
                .map(|(i, (ready, pools))| (format!("c{i}"), ready, pools))
                .collect(),
            deployment,
            replicas,
        })
}

fn build(w: &World) -> (Deployment, Vec<Cluster>, Vec<ExistingReplica>) {
    let cs = clusters(
        w.clusters
            .iter()
            .map(|(name, ready, pools)| {
                let mut b = cluster(name);
                if !ready {
                    b = b.not_ready();
                }
                for (i, (nodes, count, mem)) in pools.iter().enumerate() {
                    b = b.pool(
                        &format!("p{i}"),
                        *nodes,
                        vec![gpu(*count, &format!("{mem}Gi"))],
                    );
                }
                b
            })
            .collect(),
    );
    let (replicas, engines) = &w.deployment;
    let d = deployment(
        "m",
        *replicas,
        engines
            .iter()
            .enumerate()
            .map(|(i, (copies, gang, count, mem))| {
                let mem = format!("{mem}Gi");
                let members = if *gang {
                    vec![
                        member(
                            Role::Leader,
                            1,
                            vec![request("gpu", *count, &[&mem_at_least(&mem)])],
                        ),
                        member(
                            Role::Worker,
                            1,
                            vec![request("gpu", *count, &[&mem_at_least(&mem)])],
                        ),
                    ]
                } else {
                    vec![standalone(*count, &mem)]
                };
                engine(&format!("e{i}"), *copies, members)
            })
            .collect(),
    );
    let existing = w
        .replicas
        .iter()
        .enumerate()
        .map(|(i, (ours, c, p, index))| {
            let cluster = format!("c{}", c % w.clusters.len());
            let pool = format!("p{p}");
            let engines: Vec<(String, String)> = if *ours {
                d.engines
                    .iter()
                    .map(|e| (e.name.clone(), pool.clone()))
                    .collect()
            } else {
                vec![("main".into(), pool.clone())]
            };
            let refs: Vec<(&str, &str)> = engines
                .iter()
                .map(|(e, p)| (e.as_str(), p.as_str()))
                .collect();
            replica(
                if *ours { "m" } else { "other" },
                &format!("r{i}"),
                &cluster,
                *index,
                &refs,
            )
        })
        .collect();
    (d, cs, existing)
}

/// The placements as existing replicas of the deployment.
fn as_replicas(d: &Deployment, s: &Schedule) -> Vec<ExistingReplica> {
    s.placements
        .iter()
        .map(|p| ExistingReplica::from_placement(d, p))
        .collect()
}

fn run_opts(d: &Deployment, c: &[Cluster], r: &[ExistingReplica]) -> Option<Schedule> {
    schedule(
        d,
        c,
        r,
        Options {
            fill: true,
            explain: modelplane_scheduler::Explain::Never,
        },
    )
    .ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn new_placements_never_take_more_than_a_pools_nodes_hold(w in world()) {
        let (d, c, r) = build(&w);
        let Some(s) = run_opts(&d, &c, &r) else { return Ok(()) };
        // Per (cluster, pool): GPUs per node, nodes, and every pod's GPUs
        // (a pod of a replica with no requests stamped takes a node).
        let mut pools: HashMap<(String, String), (i64, i64, Vec<i64>)> = HashMap::new();
        for cl in &c {
            for p in &cl.pools {
                let per_node = p.devices.first().map_or(0, |d| d.count);
                pools.insert((cl.name.clone(), p.name.clone()), (per_node, p.nodes, Vec::new()));
            }
        }
        for rep in &r {
            let ours = rep.deployment.as_deref() == Some("m") && rep.namespace == d.namespace;
            if ours {
                continue;
            }
            for e in &rep.engines {
                for m in e.members.iter().filter(|m| m.claims) {
                    if let Some((per_node, _, pods)) = pools.get_mut(&(rep.cluster.clone(), m.pool.clone())) {
                        let n = i64::from(m.pods) * i64::from(e.copies);
                        pods.extend(std::iter::repeat_n(*per_node, n as usize));
                    }
                }
            }
        }
        // Ours kept run as they resolve; the new ones come beside them.
        let mut placed_new = HashMap::<(String, String), Vec<i64>>::new();
        for p in s.placements.iter().filter(|p| p.retained) {
            for (e, spec) in p.engines.iter().zip(&d.engines) {
                for (m, ms) in e.members.iter().zip(&spec.members) {
                    if let Some(r) = m.device_requests.first()
                        && let Some((_, _, pods)) = pools.get_mut(&(p.cluster.clone(), m.pool.clone()))
                    {
                        let n = i64::from(ms.pods) * i64::from(spec.copies);
                        pods.extend(std::iter::repeat_n(r.count, n as usize));
                    }
                }
            }
        }
        for p in s.placements.iter().filter(|p| !p.retained) {
            for (e, spec) in p.engines.iter().zip(&d.engines) {
                for (m, ms) in e.members.iter().zip(&spec.members) {
                    if let Some(r) = m.device_requests.first() {
                        let n = i64::from(ms.pods) * i64::from(spec.copies);
                        placed_new.entry((p.cluster.clone(), m.pool.clone())).or_default()
                            .extend(std::iter::repeat_n(r.count, n as usize));
                    }
                }
            }
        }
        for (key, new) in placed_new {
            let (per_node, nodes, mut pods) = pools.get(&key).cloned().expect("a pool");
            // What ran there already may be over what the pool holds now
            // (it shrank): the new pods must fit beside it, so it is
            // counted only as far as the nodes hold it.
            pods.truncate(usize::try_from(nodes).unwrap_or(0));
            pods.extend(new.iter().copied());
            prop_assert!(
                fits(&pods, per_node, nodes),
                "{key:?}: pods {pods:?} do not fit {nodes} nodes of {per_node} GPUs"
            );
        }
    }

    #[test]
    fn placements_do_not_depend_on_input_order(w in world(), seed in any::<u64>()) {
        let (d, c, r) = build(&w);
        let baseline = run_opts(&d, &c, &r).map(|s| s.placements);
        let mut c2 = c.clone();
        let mut r2 = r.clone();
        // A deterministic shuffle from the seed.
        let n = c2.len();
        for i in 0..n { c2.swap(i, (seed as usize).wrapping_add(i * 7) % n); }
        r2.reverse();
        let m = r2.len();
        for i in 0..m { r2.swap(i, (seed as usize).wrapping_mul(31).wrapping_add(i) % m.max(1)); }
        prop_assert_eq!(run_opts(&d, &c2, &r2).map(|s| s.placements), baseline);
    }

    #[test]
    fn scheduling_again_with_the_result_changes_nothing(w in world()) {
        let (d, c, r) = build(&w);
        let Some(first) = run_opts(&d, &c, &r) else { return Ok(()) };
        let others: Vec<ExistingReplica> = r.iter().filter(|x| x.deployment.as_deref() != Some("m")).cloned().collect();
        let again = |s: &Schedule| {
            let mut existing = others.clone();
            existing.extend(as_replicas(&d, s));
            run_opts(&d, &c, &existing).expect("still schedulable")
        };
        let strip = |s: &Schedule| s.placements.iter().map(|p| (p.cluster.clone(), p.index, p.engines.clone())).collect::<Vec<_>>();
        let second = again(&first);
        // Nothing the first placed moves.
        let kept = strip(&second);
        prop_assert!(strip(&first).iter().all(|p| kept.contains(p)), "{:?} not all in {:?}", strip(&first), kept);
        // A duplicate of a kept replica, dropped by the first, still held its
        // nodes then, so the first may have left a replica unplaced that the
        // second, without it, places (one per duplicate at most); from there
        // on nothing changes.
        let duplicates = first.dropped.iter().filter(|d| d.reason == DropReason::Duplicate).count();
        let (settled, again) = if duplicates == 0 {
            (first, second)
        } else {
            prop_assert!(second.placements.len() <= first.placements.len() + duplicates);
            let third = again(&second);
            (second, third)
        };
        prop_assert_eq!(strip(&again), strip(&settled));
        prop_assert!(again.placements.iter().all(|p| p.retained));
    }

    #[test]
    fn a_retained_replica_never_changes_cluster(w in world()) {
        let (d, c, r) = build(&w);
        let Some(s) = run_opts(&d, &c, &r) else { return Ok(()) };
        for p in s.placements.iter().filter(|p| p.retained) {
            prop_assert!(r.iter().any(|x| x.deployment.as_deref() == Some("m") && x.cluster == p.cluster && x.index == p.index));
        }
        prop_assert!(s.placements.len() <= d.replicas as usize);
    }
}

/// Whether `pods` (GPUs each) can be put on `nodes` nodes of `per_node`
/// GPUs, one node per pod: an exhaustive search, for the small pools the
/// properties draw.
fn fits(pods: &[i64], per_node: i64, nodes: i64) -> bool {
    fn search(pods: &[i64], free: &mut Vec<i64>) -> bool {
        let Some((&pod, rest)) = pods.split_first() else {
            return true;
        };
        let mut tried = Vec::new();
        for i in 0..free.len() {
            if free[i] < pod || tried.contains(&free[i]) {
                continue;
            }
            tried.push(free[i]);
            free[i] -= pod;
            if search(rest, free) {
                return true;
            }
            free[i] += pod;
        }
        false
    }
    let mut sorted = pods.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut free = vec![per_node; usize::try_from(nodes).unwrap_or(0)];
    search(&sorted, &mut free)
}
