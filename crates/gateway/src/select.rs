//! Choosing the endpoint of one request: a pure function of the service,
//! the endpoints' health and load, what this request already tried, and a
//! random generator passed in (so the weighted split is tested with a seed,
//! not with timing).
//!
//! Data flow: the composed endpoints' groups, or, when none of them has a
//! healthy endpoint, the external ones (and when nothing at all is healthy,
//! every endpoint not yet tried: panic mode) → a group drawn by weight among
//! the groups with a candidate → within it, power of two choices: two
//! candidates drawn at random, the one with fewer requests in flight wins.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::table::{Endpoint, Group, Service};

/// A small, fast generator (wyrand); not for secrets.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Picks the endpoint for a request at `now_ms`, skipping those in `tried`.
pub fn pick(
    service: &Service,
    tried: &[Arc<Endpoint>],
    now_ms: u64,
    rng: &mut Rng,
) -> Option<Arc<Endpoint>> {
    let untried = |e: &Arc<Endpoint>| !tried.iter().any(|t| Arc::ptr_eq(t, e));
    let usable = |e: &Arc<Endpoint>| e.state.healthy(now_ms) && untried(e);
    pick_in(&service.self_hosted, &usable, rng)
        .or_else(|| pick_in(&service.external, &usable, rng))
        // Panic mode: nothing is in rotation, so health is ignored — a request
        // tried (and retried elsewhere on a connect error) beats one refused.
        .or_else(|| pick_in(&service.self_hosted, &untried, rng))
        .or_else(|| pick_in(&service.external, &untried, rng))
}

fn pick_in(
    groups: &[Group],
    usable: &impl Fn(&Arc<Endpoint>) -> bool,
    rng: &mut Rng,
) -> Option<Arc<Endpoint>> {
    // Few groups and few endpoints per group: counting beats collecting.
    let total: u64 = groups
        .iter()
        .filter(|g| g.endpoints.iter().any(usable))
        .map(|g| g.weight)
        .sum();
    if total == 0 {
        return None;
    }
    let mut draw = rng.below(total);
    let group = groups
        .iter()
        .filter(|g| g.endpoints.iter().any(usable))
        .find(|g| {
            if draw < g.weight {
                true
            } else {
                draw -= g.weight;
                false
            }
        })?;
    two_choices(&group.endpoints, usable, rng)
}

/// Power of two choices by requests in flight.
fn two_choices(
    endpoints: &[Arc<Endpoint>],
    usable: &impl Fn(&Arc<Endpoint>) -> bool,
    rng: &mut Rng,
) -> Option<Arc<Endpoint>> {
    let count = endpoints.iter().filter(|e| usable(e)).count() as u64;
    let nth = |i: u64| endpoints.iter().filter(|e| usable(e)).nth(i as usize);
    let first = nth(rng.below(count))?;
    if count == 1 {
        return Some(first.clone());
    }
    // A second, distinct candidate.
    let mut j = rng.below(count - 1);
    let first_index = endpoints
        .iter()
        .filter(|e| usable(e))
        .position(|e| Arc::ptr_eq(e, first))
        .unwrap_or(0) as u64;
    if j >= first_index {
        j += 1;
    }
    let second = nth(j)?;
    let load = |e: &Endpoint| e.state.outstanding.load(Ordering::Relaxed);
    Some(
        if load(second) < load(first) {
            second
        } else {
            first
        }
        .clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::EndpointState;

    fn endpoint(id: &str, external: bool) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            id: id.into(),
            scheme: http::uri::Scheme::HTTP,
            authority: "127.0.0.1:1".parse().expect("authority"),
            rewrite: None,
            bearer: None,
            served_model: None,
            external,
            state: Arc::new(EndpointState::default()),
        })
    }

    fn service(groups: Vec<(u64, Vec<Arc<Endpoint>>)>, external: Vec<Arc<Endpoint>>) -> Service {
        Service {
            id: "ns/s".into(),
            prefix: "/ns/s/".into(),
            self_hosted: groups
                .into_iter()
                .map(|(weight, e)| Group {
                    weight,
                    endpoints: e.into(),
                })
                .collect(),
            external: if external.is_empty() {
                Vec::new()
            } else {
                vec![Group {
                    weight: 1,
                    endpoints: external.into(),
                }]
            },
            first_byte_timeout: None,
            metrics: std::sync::OnceLock::new(),
            created: 0,
        }
    }

    fn counts(service: &Service, n: usize, seed: u64) -> std::collections::BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let mut out = std::collections::BTreeMap::new();
        for _ in 0..n {
            let e = pick(service, &[], 0, &mut rng).expect("endpoint");
            *out.entry(e.id.clone()).or_insert(0) += 1;
        }
        out
    }

    #[test]
    fn groups_split_by_weight_within_three_percent() {
        let s = service(
            vec![
                (80, vec![endpoint("a", false), endpoint("b", false)]),
                (20, vec![endpoint("c", false)]),
            ],
            Vec::new(),
        );
        for seed in [1, 2, 3] {
            let c = counts(&s, 10_000, seed);
            // Shares within 3 percentage points of 80/20.
            let group_a = (c["a"] + c["b"]) as f64 / 10_000.0;
            assert!((group_a - 0.8).abs() <= 0.03, "{c:?}");
            let group_c = c["c"] as f64 / 10_000.0;
            assert!((group_c - 0.2).abs() <= 0.03, "{c:?}");
            // Within a group, the load spreads evenly.
            assert!(c["a"].abs_diff(c["b"]) < 400, "{c:?}");
        }
    }

    #[test]
    fn two_choices_prefers_the_less_loaded() {
        let (a, b) = (endpoint("a", false), endpoint("b", false));
        a.state.outstanding.store(10, Ordering::Relaxed);
        let s = service(vec![(1, vec![a, b])], Vec::new());
        // With two endpoints both are always drawn: the idle one always wins.
        assert_eq!(counts(&s, 1000, 7).get("b"), Some(&1000));
    }

    #[test]
    fn unhealthy_and_tried_endpoints_are_skipped_and_external_ones_wait() {
        let (a, b, x) = (
            endpoint("a", false),
            endpoint("b", false),
            endpoint("x", true),
        );
        let s = service(vec![(1, vec![a.clone(), b.clone()])], vec![x.clone()]);
        let mut rng = Rng::new(1);
        // Composed endpoints first: the external one takes nothing.
        assert!(!counts(&s, 1000, 3).contains_key("x"));
        a.state.ejected_until.store(1000, Ordering::Relaxed);
        for _ in 0..100 {
            assert_eq!(
                pick(&s, &[], 10, &mut rng).map(|e| e.id.clone()),
                Some("b".into())
            );
        }
        // Once every composed endpoint is out (ejected, tried), the external takes over.
        assert_eq!(
            pick(&s, std::slice::from_ref(&b), 10, &mut rng).map(|e| e.id.clone()),
            Some("x".into())
        );
        // The ejection ends with time.
        assert!(pick(&s, std::slice::from_ref(&b), 1000, &mut rng).is_some_and(|e| e.id == "a"));
        assert!(pick(&s, &[a, b, x], 1000, &mut rng).is_none());
    }

    #[test]
    fn with_nothing_in_rotation_health_is_ignored_rather_than_every_request_refused() {
        let (a, b) = (endpoint("a", false), endpoint("b", false));
        let s = service(vec![(1, vec![a.clone(), b.clone()])], Vec::new());
        a.state.ejected_until.store(1000, Ordering::Relaxed);
        b.state.probe_ok.store(false, Ordering::Relaxed);
        let mut rng = Rng::new(3);
        let picked = pick(&s, &[], 10, &mut rng).expect("panic mode picks one");
        assert!(picked.id == "a" || picked.id == "b");
        // What was tried is still skipped.
        assert_eq!(
            pick(&s, std::slice::from_ref(&a), 10, &mut rng).map(|e| e.id.clone()),
            Some("b".into())
        );
    }
}
