//! DRA selector cost: compile once, evaluate per device.
//!
//! Baseline side by side: `compile_and_evaluate_every_time` is what
//! evaluating without keeping compiled selectors would cost.

use criterion::{Criterion, criterion_group, criterion_main};
use modelplane_api::types::Device;
use modelplane_cel::dra::{DeviceActivation, DeviceSelector, context};

const SELECTOR: &str = r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 && device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))"#;

fn h100() -> Device {
    serde_json::from_value(serde_json::json!({
        "name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
        "attributes": {"architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"}},
        "capacity": {"memory": {"value": "81559Mi"}},
    }))
    .expect("device")
}

fn bench(c: &mut Criterion) {
    let ctx = context();
    let device = DeviceActivation::new(&h100());
    let selector = DeviceSelector::compile(SELECTOR).expect("compiles");
    let scope = device.bind(&ctx).expect("valid device");
    assert_eq!(selector.matches(&scope), Ok(true));
    c.bench_function("dra/compile_selector", |b| {
        b.iter(|| DeviceSelector::compile(SELECTOR))
    });
    c.bench_function("dra/evaluate_compiled_selector", |b| {
        b.iter(|| selector.matches(&scope))
    });
    for (name, text) in [
        ("true", "true"),
        ("driver_eq", r#"device.driver == "gpu.nvidia.com""#),
        (
            "quantity_literal_eq",
            r#"quantity("40Gi") == quantity("40Gi")"#,
        ),
        (
            "capacity_lookup",
            r#"device.capacity["gpu.nvidia.com"].memory == device.capacity["gpu.nvidia.com"].memory"#,
        ),
    ] {
        let s = DeviceSelector::compile(text).expect("compiles");
        c.bench_function(&format!("dra/probe/{name}"), |b| {
            b.iter(|| s.matches(&scope))
        });
    }
    c.bench_function("dra/device_activation", |b| {
        b.iter(|| DeviceActivation::new(&h100()))
    });
    c.bench_function("dra/bind_device", |b| {
        b.iter(|| device.bind(&ctx).map(|_| ()))
    });
    c.bench_function("dra/context", |b| b.iter(context));
    c.bench_function("dra/compile_and_evaluate_every_time", |b| {
        b.iter(|| DeviceSelector::compile(SELECTOR).map(|s| s.matches(&scope)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
