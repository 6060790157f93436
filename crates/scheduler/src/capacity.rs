//! Room on a pool, counted by device per node (a deliberate departure from
//! the original, which counts whole nodes: docs/decisions.md).
//!
//! Every node of a pool offers the same devices (its InferenceClass). A
//! pod takes, of each device kind it claims, a share of one node; its size
//! is the largest of those shares, in [`UNITS`] of a node, rounded up to a
//! power of two. Sizes that are powers of two divide one another and the
//! node, and for such sizes a packing exists exactly when placing the pods
//! one by one, in any order, on the fullest node that fits (best fit, as a
//! bin-packing in-cluster scheduler does) succeeds: so what the fleet
//! scheduler counts as room is room the cluster's scheduler finds, in
//! whatever order the pods arrive (the sim's property tests check it).
//! Rounding gives away a little (a 3-GPU pod counts as 4 of 8); it never
//! promises what cannot be placed.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::PoolDevice;

/// A node, in units: pods are sized in powers of two of them.
pub const UNITS: u32 = 1024;

/// What one pod takes of a pool's node: `count` devices of the pool's
/// device at each index.
pub type Demand = [(usize, i64)];

/// The size of a pod taking `demand` on a pool offering `devices` per
/// node, in units; `None` when it takes more than a node has (or a device
/// the pool does not offer).
pub fn pod_units(demand: &Demand, devices: &[Arc<PoolDevice>]) -> Option<u32> {
    let mut per_kind: BTreeMap<usize, i64> = BTreeMap::new();
    for (device, count) in demand {
        *per_kind.entry(*device).or_default() += count;
    }
    let mut largest: u64 = 0;
    for (device, count) in per_kind {
        let per_node = devices.get(device)?.count;
        if count > per_node || per_node <= 0 {
            return None;
        }
        let count = u64::try_from(count).ok()?;
        let per_node = u64::try_from(per_node).ok()?;
        largest = largest.max((count * u64::from(UNITS)).div_ceil(per_node));
    }
    if largest == 0 {
        return Some(0);
    }
    u32::try_from(largest.next_power_of_two())
        .ok()
        .map(|units| units.min(UNITS))
}

/// The free room of one pool: how many of its nodes have each amount of
/// free units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// Free units → nodes with that much free.
    free: BTreeMap<u32, i64>,
}

impl Room {
    /// `nodes` empty nodes (none when not positive).
    pub fn new(nodes: i64) -> Room {
        let mut free = BTreeMap::new();
        if nodes > 0 {
            free.insert(UNITS, nodes);
        }
        Room { free }
    }

    fn move_node(&mut self, from: u32, to: u32) {
        if let Some(n) = self.free.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                self.free.remove(&from);
            }
        }
        if to > 0 {
            *self.free.entry(to).or_default() += 1;
        }
    }

    /// Takes `size` units on the fullest node that has them (best fit);
    /// false, and nothing taken, when no node has.
    pub fn take(&mut self, size: u32) -> bool {
        if size == 0 {
            return true;
        }
        let Some((&free, _)) = self.free.range(size..).next() else {
            return false;
        };
        self.move_node(free, free - size);
        true
    }

    /// Takes every pod of `sizes`, largest first; `None` (and `self`
    /// unchanged) when they do not all fit.
    pub fn take_all(&self, sizes: &[u32]) -> Option<Room> {
        let mut sorted = sizes.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let mut trial = self.clone();
        sorted.into_iter().all(|s| trial.take(s)).then_some(trial)
    }

    /// Charges a pod that runs already: where it fits, else on the node
    /// with the most room, which is then full (a pool that shrank under
    /// its replicas has no room, never negative room).
    pub fn charge(&mut self, size: u32) {
        if !self.take(size)
            && let Some((&most, _)) = self.free.iter().next_back()
        {
            self.move_node(most, 0);
        }
    }

    /// Nodes with nothing taken.
    pub fn empty_nodes(&self) -> i64 {
        self.free.get(&UNITS).copied().unwrap_or(0)
    }

    /// The free room as `(free units, nodes)`, most free first.
    pub fn nodes_by_free(&self) -> Vec<(u32, i64)> {
        self.free.iter().rev().map(|(f, n)| (*f, *n)).collect()
    }
}

/// `units` of a node as devices of a kind a node has `per_node` of.
pub fn devices_of(units: u32, per_node: i64) -> i64 {
    (i64::from(units) * per_node) / i64::from(UNITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_its_largest_share_of_a_node_rounded_up_to_a_power_of_two() {
        let gpu = |count: i64| {
            let device = modelplane_api::types::Device {
                name: "gpu".into(),
                count: Some(count as i32),
                ..Default::default()
            };
            Arc::new(PoolDevice {
                name: "gpu".into(),
                claim: modelplane_api::types::Claim::Dra,
                device_class_name: String::new(),
                count,
                activation: modelplane_cel::dra::DeviceActivation::new(&device),
                source: device,
            })
        };
        let eight = [gpu(8), gpu(16)];
        assert_eq!(pod_units(&[(0, 8)], &eight), Some(UNITS));
        assert_eq!(pod_units(&[(0, 4)], &eight), Some(UNITS / 2));
        assert_eq!(
            pod_units(&[(0, 3)], &eight),
            Some(UNITS / 2),
            "3 of 8 counts as 4"
        );
        assert_eq!(pod_units(&[(0, 1)], &eight), Some(UNITS / 8));
        assert_eq!(
            pod_units(&[(0, 2), (1, 16)], &eight),
            Some(UNITS),
            "the largest share"
        );
        assert_eq!(pod_units(&[(0, 9)], &eight), None);
        assert_eq!(pod_units(&[], &eight), Some(0));
        let six = [gpu(6)];
        assert_eq!(
            pod_units(&[(0, 1)], &six),
            Some(UNITS / 4),
            "1 of 6 counts as a quarter"
        );
    }

    #[test]
    fn pods_go_to_the_fullest_node_that_fits() {
        let mut room = Room::new(2);
        assert!(room.take(UNITS / 2));
        assert!(room.take(UNITS / 4), "on the half-full node");
        assert_eq!(room.empty_nodes(), 1);
        assert!(room.take(UNITS));
        assert!(!room.take(UNITS / 2), "a quarter is left, on one node");
        assert!(room.take(UNITS / 4));
        assert_eq!(room.nodes_by_free(), Vec::<(u32, i64)>::new());
        let room = Room::new(4);
        let six_tp4 = [UNITS / 2; 6];
        assert!(
            room.take_all(&six_tp4).is_some(),
            "six TP4 on four 8-GPU nodes"
        );
        let mut shrunk = Room::new(1);
        shrunk.charge(UNITS);
        shrunk.charge(UNITS);
        assert_eq!(
            shrunk.nodes_by_free(),
            Vec::<(u32, i64)>::new(),
            "never negative"
        );
    }
}
