//! Dynamic Resource Allocation: the DRA drivers (NVIDIA's for GPUs, DRANET
//! for EFA) publishing their DeviceClasses and one ResourceSlice per node
//! (the devices of the node's pool, as its InferenceClass describes them),
//! and the scheduler's
//! allocator, which matches a claim's requests against free devices with the
//! same CEL evaluation as Modelplane's scheduler (`modelplane-cel`). Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use modelplane_api::types::Device;
use modelplane_cel::dra::{DeviceActivation, DeviceSelector, context};
use serde_json::{Value, json};

use super::world::{ClusterKind, World, Write, name, short_hash};

/// The devices of one node pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hardware {
    /// The InferenceClass devices of the pool (`spec.devices`).
    pub devices: Vec<Value>,
    /// The pool's fabric (`EFA`, `InfiniBand`), if any.
    pub fabric: Option<String>,
}

/// A DRA driver the simulated fleet runs: what it publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Driver {
    /// The driver name its devices and slices carry (also the field manager).
    pub name: &'static str,
    /// The DeviceClasses it installs: (name, selector).
    classes: &'static [(&'static str, &'static str)],
    /// Whether its devices carry the NVIDIA driver's `type` and `uuid`.
    nvidia: bool,
}

/// The NVIDIA DRA driver: GPUs (and MIG slices) of `gpu.nvidia.com`.
pub const NVIDIA: Driver = Driver {
    name: "gpu.nvidia.com",
    classes: &[
        (
            "gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        ),
        (
            "mig.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
        ),
    ],
    nvidia: true,
};

/// The EFA DRA driver (DRANET, chart `aws-dranet`): a node's EFA
/// interfaces as `dra.net` devices of the class `efa.networking.k8s.aws`.
pub const DRANET: Driver = Driver {
    name: "dra.net",
    classes: &[("efa.networking.k8s.aws", "device.driver == 'dra.net'")],
    nvidia: false,
};

/// What `driver` publishes: its classes, and a slice for each node whose
/// pool has devices of its driver.
pub fn driver_step(
    world: &World<'_>,
    driver: Driver,
    hardware: &BTreeMap<String, Hardware>,
) -> Vec<Write> {
    let mut out = Vec::new();
    for (class, expression) in driver.classes {
        if world.get(ClusterKind::DeviceClass, "", class).is_none() {
            out.push(Write::Apply {
                kind: ClusterKind::DeviceClass,
                object: json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": { "name": class },
                    "spec": { "selectors": [{ "cel": { "expression": expression } }] },
                }),
                manager: driver.name,
            });
        }
    }
    for node in world.all(ClusterKind::Node) {
        let pool = node["metadata"]["labels"][modelplane_api::labels::POOL]
            .as_str()
            .unwrap_or_default();
        let Some(hw) = hardware.get(pool) else {
            continue;
        };
        let Some(slice) = slice(node, driver, hw) else {
            continue;
        };
        let current = world.get(ClusterKind::Slice, "", name(&slice));
        if current.is_none_or(|c| c["spec"] != slice["spec"]) {
            out.push(Write::Apply {
                kind: ClusterKind::Slice,
                object: slice,
                manager: driver.name,
            });
        }
    }
    out
}

/// The ResourceSlice of `node`'s devices of `driver`.
fn slice(node: &Value, driver: Driver, hw: &Hardware) -> Option<Value> {
    let node_name = name(node);
    let mut devices = Vec::new();
    for device in hw.devices.iter().filter(|d| d["driver"] == driver.name) {
        let count = device["count"].as_u64().unwrap_or(1);
        for i in 0..count {
            let mut attributes = device["attributes"].clone();
            if !attributes.is_object() {
                attributes = json!({});
            }
            if driver.nvidia {
                attributes["type"] = json!({ "string": "gpu" });
                attributes["uuid"] = json!({ "string": format!("GPU-{}", short_hash(&format!("{node_name}/{i}"), 12)) });
            }
            devices.push(json!({
                "name": format!("{}-{i}", device["name"].as_str().unwrap_or("gpu")),
                "attributes": attributes,
                "capacity": device["capacity"].clone(),
            }));
        }
    }
    if devices.is_empty() {
        return None;
    }
    Some(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": { "name": format!("{node_name}-{}-{}", driver.name, short_hash(node_name, 5)) },
        "spec": {
            "driver": driver.name,
            "nodeName": node_name,
            "pool": { "name": node_name, "generation": 1, "resourceSliceCount": 1 },
            "devices": devices,
        },
    }))
}

/// One published device of a node.
struct Published {
    driver: String,
    pool: String,
    device: String,
    activation: DeviceActivation,
}

/// Every device of every node, and which are taken.
pub struct Inventory {
    by_node: BTreeMap<String, Vec<Published>>,
    taken: BTreeSet<(String, String, String)>,
    selectors: HashMap<String, Result<DeviceSelector, String>>,
    classes: HashMap<String, Vec<String>>,
}

/// One allocated device, as a claim's `status.allocation` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocated {
    /// The claim's request.
    pub request: String,
    /// Driver.
    pub driver: String,
    /// Pool (the node, for per-node slices).
    pub pool: String,
    /// Device.
    pub device: String,
}

impl Inventory {
    /// The devices the cluster's slices publish, minus those already
    /// allocated to a claim.
    pub fn new(world: &World<'_>) -> Inventory {
        let mut by_node: BTreeMap<String, Vec<Published>> = BTreeMap::new();
        for slice in world.all(ClusterKind::Slice) {
            let spec = &slice["spec"];
            let node = spec["nodeName"].as_str().unwrap_or_default().to_string();
            let driver = spec["driver"].as_str().unwrap_or_default().to_string();
            let pool = spec["pool"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for device in spec["devices"].as_array().into_iter().flatten() {
                let mut as_class: Value = device.clone();
                as_class["driver"] = json!(driver);
                let Ok(parsed) = serde_json::from_value::<Device>(as_class) else {
                    continue;
                };
                by_node.entry(node.clone()).or_default().push(Published {
                    driver: driver.clone(),
                    pool: pool.clone(),
                    device: parsed.name.clone(),
                    activation: DeviceActivation::new(&parsed),
                });
            }
        }
        let mut taken = BTreeSet::new();
        for claim in world.all(ClusterKind::Claim) {
            for r in claim["status"]["allocation"]["devices"]["results"]
                .as_array()
                .into_iter()
                .flatten()
            {
                taken.insert(key(
                    r["driver"].as_str(),
                    r["pool"].as_str(),
                    r["device"].as_str(),
                ));
            }
        }
        let classes = world
            .all(ClusterKind::DeviceClass)
            .map(|c| {
                let selectors = c["spec"]["selectors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s["cel"]["expression"].as_str().map(str::to_string))
                    .collect();
                (name(c).to_string(), selectors)
            })
            .collect();
        Inventory {
            by_node,
            taken,
            selectors: HashMap::new(),
            classes,
        }
    }

    /// Whether the node publishes any device.
    pub fn has_devices(&self, node: &str) -> bool {
        self.by_node.get(node).is_some_and(|d| !d.is_empty())
    }

    /// Free GPUs on `node` (what the schedulers pack by; a node's other
    /// devices, such as EFA interfaces, follow its GPUs).
    pub fn free_gpus(&self, node: &str) -> usize {
        self.by_node.get(node).map_or(0, |d| {
            d.iter()
                .filter(|p| p.driver == NVIDIA.name)
                .filter(|p| {
                    !self
                        .taken
                        .contains(&key(Some(&p.driver), Some(&p.pool), Some(&p.device)))
                })
                .count()
        })
    }

    fn selector(&mut self, text: &str) -> Result<DeviceSelector, String> {
        self.selectors
            .entry(text.to_string())
            .or_insert_with(|| DeviceSelector::compile(text).map_err(|e| e.to_string()))
            .clone()
    }

    /// Allocates every request of `claim` on `node`, or says why it cannot.
    /// Nothing is taken unless everything fits.
    pub fn allocate(&mut self, claim: &Value, node: &str) -> Result<Vec<Allocated>, String> {
        let ctx = context();
        let mut chosen: Vec<Allocated> = Vec::new();
        let mut held: BTreeSet<(String, String, String)> = BTreeSet::new();
        for request in claim["spec"]["devices"]["requests"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let request_name = request["name"].as_str().unwrap_or_default();
            let exactly = &request["exactly"];
            let class = exactly["deviceClassName"].as_str().unwrap_or_default();
            let Some(class_selectors) = self.classes.get(class).cloned() else {
                return Err(format!(
                    "resource claim {}: device class {class} does not exist",
                    name(claim)
                ));
            };
            let mut selectors = Vec::new();
            for text in class_selectors.iter().cloned().chain(
                exactly["selectors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s["cel"]["expression"].as_str().map(str::to_string)),
            ) {
                selectors.push(
                    self.selector(&text)
                        .map_err(|e| format!("selector {text:?}: {e}"))?,
                );
            }
            let count = exactly["count"].as_u64().unwrap_or(1) as usize;
            let mut found = 0;
            for device in self.by_node.get(node).into_iter().flatten() {
                if found == count {
                    break;
                }
                let k = key(
                    Some(&device.driver),
                    Some(&device.pool),
                    Some(&device.device),
                );
                if self.taken.contains(&k) || held.contains(&k) {
                    continue;
                }
                let Ok(scope) = device.activation.bind(&ctx) else {
                    continue;
                };
                // A selector that fails to evaluate (a missing attribute)
                // aborts the allocation, as Kubernetes' allocator does.
                let mut all = true;
                for selector in &selectors {
                    match selector.matches(&scope) {
                        Ok(true) => {}
                        Ok(false) => {
                            all = false;
                            break;
                        }
                        Err(e) => {
                            return Err(format!(
                                "CEL selector {:?} on device {}: {e}",
                                selector.text(),
                                device.device
                            ));
                        }
                    }
                }
                if all {
                    held.insert(k);
                    chosen.push(Allocated {
                        request: request_name.to_string(),
                        driver: device.driver.clone(),
                        pool: device.pool.clone(),
                        device: device.device.clone(),
                    });
                    found += 1;
                }
            }
            if found < count {
                return Err("cannot allocate all claims".into());
            }
        }
        self.taken.extend(held);
        Ok(chosen)
    }

    /// Marks devices allocated elsewhere (bound, not yet observed) as taken.
    pub fn take(&mut self, allocated: &[Allocated]) {
        for a in allocated {
            self.taken
                .insert(key(Some(&a.driver), Some(&a.pool), Some(&a.device)));
        }
    }

    /// Returns devices taken by a trial allocation that was abandoned.
    pub fn release(&mut self, allocated: &[Allocated]) {
        for a in allocated {
            self.taken
                .remove(&key(Some(&a.driver), Some(&a.pool), Some(&a.device)));
        }
    }
}

fn key(driver: Option<&str>, pool: Option<&str>, device: Option<&str>) -> (String, String, String) {
    (
        driver.unwrap_or_default().to_string(),
        pool.unwrap_or_default().to_string(),
        device.unwrap_or_default().to_string(),
    )
}

/// A claim's `status.allocation` for `allocated` devices on `node`.
pub fn allocation(allocated: &[Allocated], node: &str) -> Value {
    json!({
        "devices": { "results": allocated.iter().map(|a| json!({
            "request": a.request, "driver": a.driver, "pool": a.pool, "device": a.device,
        })).collect::<Vec<_>>() },
        "nodeSelector": { "nodeSelectorTerms": [{ "matchFields": [{ "key": "metadata.name", "operator": "In", "values": [node] }] }] },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    fn h200() -> Hardware {
        Hardware {
            devices: vec![
                json!({ "name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
                "attributes": { "architecture": { "string": "Hopper" } }, "capacity": { "memory": { "value": "143771Mi" } } }),
                json!({ "name": "efa", "driver": "dra.net", "deviceClassName": "efa.networking.k8s.aws", "count": 16 }),
            ],
            fabric: Some("EFA".into()),
        }
    }

    fn snapshot(objects: Vec<(ClusterKind, Value)>) -> Snapshot {
        let mut s = Snapshot::default();
        for (k, o) in objects {
            s.change(Change::Apply(k, o));
        }
        s
    }

    fn published() -> Snapshot {
        let node = json!({ "metadata": { "name": "h200-node-0", "labels": { "modelplane.ai/pool": "h200" } } });
        let hardware = BTreeMap::from([("h200".to_string(), h200())]);
        let s = snapshot(vec![(ClusterKind::Node, node.clone())]);
        let world = World {
            snapshot: &s,
            timestamp: "t",
        };
        let writes = [NVIDIA, DRANET]
            .into_iter()
            .flat_map(|driver| driver_step(&world, driver, &hardware));
        let mut objects = vec![(ClusterKind::Node, node)];
        for w in writes {
            if let Write::Apply { kind, object, .. } = w {
                objects.push((kind, object));
            }
        }
        snapshot(objects)
    }

    #[test]
    fn the_driver_publishes_its_classes_and_the_pools_devices_per_node() {
        let s = published();
        let world = World {
            snapshot: &s,
            timestamp: "t",
        };
        assert!(
            world
                .get(ClusterKind::DeviceClass, "", "gpu.nvidia.com")
                .is_some()
        );
        let slice = world
            .all(ClusterKind::Slice)
            .find(|s| s["spec"]["driver"] == "gpu.nvidia.com")
            .expect("a slice");
        assert_eq!(slice["spec"]["nodeName"], "h200-node-0");
        assert_eq!(slice["spec"]["devices"].as_array().map(Vec::len), Some(8));
        assert_eq!(
            slice["spec"]["devices"][0]["attributes"]["type"]["string"],
            "gpu"
        );
        // Published already: nothing to write again.
        let hardware = BTreeMap::from([("h200".to_string(), h200())]);
        assert!(driver_step(&world, NVIDIA, &hardware).is_empty());
        // DRANET publishes the node's EFA interfaces, in their own class.
        assert!(
            world
                .get(ClusterKind::DeviceClass, "", "efa.networking.k8s.aws")
                .is_some()
        );
        let efa = world
            .all(ClusterKind::Slice)
            .find(|s| s["spec"]["driver"] == "dra.net")
            .expect("an EFA slice");
        assert_eq!(efa["spec"]["devices"].as_array().map(Vec::len), Some(16));
        assert!(driver_step(&world, DRANET, &hardware).is_empty());
    }

    fn claim(count: u64, memory: &str) -> Value {
        json!({ "metadata": { "name": "c" }, "spec": { "devices": { "requests": [{ "name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": count,
            "selectors": [{ "cel": { "expression": format!("device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"{memory}\")) >= 0") } }] } }] } } })
    }

    #[test]
    fn claims_are_allocated_by_their_cel_selectors_and_devices_are_not_given_twice() {
        let s = published();
        let world = World {
            snapshot: &s,
            timestamp: "t",
        };
        let mut inventory = Inventory::new(&world);
        assert_eq!(inventory.free_gpus("h200-node-0"), 8);
        let first = inventory
            .allocate(&claim(8, "120Gi"), "h200-node-0")
            .expect("fits");
        assert_eq!(first.len(), 8);
        assert_eq!(inventory.free_gpus("h200-node-0"), 0);
        assert_eq!(
            inventory.allocate(&claim(1, "20Gi"), "h200-node-0"),
            Err("cannot allocate all claims".into())
        );
        inventory.release(&first);
        assert_eq!(
            inventory.allocate(&claim(1, "200Gi"), "h200-node-0"),
            Err("cannot allocate all claims".into()),
            "no device has 200Gi"
        );
        assert_eq!(
            inventory.free_gpus("h200-node-0"),
            8,
            "a failed allocation takes nothing"
        );
    }
}
