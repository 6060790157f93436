//! The gateway's pure parts, beside their baselines: reading `model` from a
//! 200 KB body with the scanner (model first, and last) against parsing the
//! body with serde_json; compiling a routing table for a large fleet; and
//! picking an endpoint. End-to-end figures come from `bench/gateway/run.py`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use modelplane_gateway::body::top_level_fields;
use modelplane_gateway::config::Objects;
use modelplane_gateway::select::{Rng, pick};
use serde_json::json;

fn body(model_first: bool) -> Vec<u8> {
    let messages = json!([{ "role": "user", "content": "word ".repeat(40_000) }]);
    let text = if model_first {
        json!({ "model": "qwen3-8b", "messages": messages, "stream": true }).to_string()
    } else {
        json!({ "messages": messages, "stream": true, "model": "qwen3-8b" }).to_string()
    };
    text.into_bytes()
}

fn fleet(services: usize, endpoints_per_service: usize) -> Objects {
    let mut objects = Objects::default();
    for s in 0..services {
        objects.services.push(
            serde_json::from_value(json!({
                "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                "metadata": { "name": format!("model-{s}"), "namespace": "ml" },
                "spec": { "endpoints": [
                    { "weight": 90, "selector": { "matchLabels": { "modelplane.ai/deployment": format!("model-{s}") } } },
                    { "weight": 10, "selector": { "matchLabels": { "modelplane.ai/deployment": format!("model-{s}-canary") } } },
                ] },
            }))
            .expect("service"),
        );
        for e in 0..endpoints_per_service {
            let deployment = if e == 0 {
                format!("model-{s}-canary")
            } else {
                format!("model-{s}")
            };
            objects.endpoints.push(
                serde_json::from_value(json!({
                    "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
                    "metadata": { "name": format!("model-{s}-{e}"), "namespace": "ml",
                                  "labels": { "modelplane.ai/deployment": deployment } },
                    "spec": { "url": format!("http://10.0.{}.{}/ml/model-{s}-{e}/v1", s % 250, e), "rewritePath": format!("/ml/model-{s}-{e}/") },
                }))
                .expect("endpoint"),
            );
        }
    }
    objects
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("model_of_200kb_body");
    let (first, last) = (body(true), body(false));
    group.throughput(Throughput::Bytes(first.len() as u64));
    group.bench_function("scanner_model_first", |b| {
        b.iter(|| top_level_fields(black_box(&first), ["model"]).expect("scan"))
    });
    group.bench_function("scanner_model_last", |b| {
        b.iter(|| top_level_fields(black_box(&last), ["model"]).expect("scan"))
    });
    group.bench_function("baseline_serde_json_value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&last)).expect("parse"))
    });
    group.finish();

    let objects = fleet(100, 8);
    let mut group = c.benchmark_group("table");
    group.sample_size(20);
    group.bench_function("compile_100_services_800_endpoints", |b| {
        b.iter(|| black_box(&objects).compile(None))
    });
    let table = objects.compile(None);
    let service = table.service("ml/model-7").expect("service").clone();
    let mut rng = Rng::new(7);
    group.bench_function("pick_among_8_endpoints", |b| {
        b.iter(|| pick(black_box(&service), &[], 0, &mut rng).expect("endpoint"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
