//! Admission cost: one ModelDeployment, and the whole upstream corpus.
//!
//! Baselines run side by side: `serde_typed` only deserializes the same
//! manifest into its Rust type (a floor no validator can beat), and
//! `kube_cel_uncompiled` runs kube-cel's CEL rules compiling them on every
//! call (what a validator without a compiled cache would pay), and
//! `kube_cel_compiled` runs them precompiled but converting each rule-bearing
//! subtree to CEL again (kube-cel's own walker; ours converts once).

use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use modelplane_api::crds;
use modelplane_api::types::ModelDeployment;
use modelplane_api::validation::yaml::parse_documents;
use modelplane_cel::Admission;
use serde_json::Value;

fn upstream() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/upstream-manifests")
}

fn corpus_files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&upstream(), &mut files);
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("readable"))
        .collect()
}

fn model_deployment() -> Value {
    let text = std::fs::read_to_string(upstream().join("concepts/model-deployment-multinode.yaml"))
        .expect("readable");
    parse_documents(&text).expect("YAML")[0].value.clone()
}

fn bench(c: &mut Criterion) {
    let admission = Admission::new();
    let md = model_deployment();
    let mut group = c.benchmark_group("model_deployment");
    group.bench_function("admission_review", |b| {
        b.iter(|| admission.review(md.clone(), None))
    });
    group.bench_function("serde_typed", |b| {
        b.iter(|| serde_json::from_value::<ModelDeployment>(md.clone()).expect("typed"))
    });
    let schema = crds::find("modelplane.ai/v1alpha1", "ModelDeployment")
        .expect("kind")
        .schema();
    let validator = kube_cel::Validator::new();
    group.bench_function("kube_cel_uncompiled", |b| {
        b.iter(|| validator.validate(&schema, &md, None))
    });
    let compiled = kube_cel::compile_schema(&schema);
    group.bench_function("kube_cel_compiled", |b| {
        b.iter(|| validator.validate_compiled(&compiled, &md, None))
    });
    group.finish();

    let files = corpus_files();
    c.bench_function("upstream_corpus/parse_and_review", |b| {
        b.iter(|| {
            let mut documents = 0;
            for text in &files {
                for doc in parse_documents(text).expect("YAML") {
                    admission.review(doc.value, None);
                    documents += 1;
                }
            }
            documents
        })
    });
    c.bench_function("admission_new", |b| b.iter(Admission::new));
}

criterion_group!(benches, bench);
criterion_main!(benches);
