//! Golden files for composed objects: every upstream ModelDeployment and the
//! cases under `tests/golden/model-deployment/<case>/input.yaml`, each on a
//! Standard and on a Dynamo cluster. Regenerate with
//! `INSTA_UPDATE=always cargo test -p modelplane-compose --test compose_golden`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use modelplane_api::types::Stack;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/model-deployment")
}

fn snapshot(case: &str, stack: Stack, text: &str, source: &str) {
    let dir = golden_dir().join(case);
    let name = match stack {
        Stack::Standard => "standard",
        Stack::Dynamo => "dynamo",
    };
    insta::with_settings!({
        snapshot_path => dir,
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => source.to_string(),
    }, {
        insta::assert_snapshot!(name, text);
    });
}

fn upstream_deployment_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if std::fs::read_to_string(&p).is_ok_and(|t| t.contains("kind: ModelDeployment"))
            {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&upstream(), &mut files);
    files.sort();
    files
}

/// Caches the upstream deployments reference, from the same example folder.
fn caches_near(file: &Path) -> Vec<modelplane_api::types::ModelCache> {
    let mut caches = Vec::new();
    let dir = file.parent().expect("a folder");
    for entry in std::fs::read_dir(dir).expect("readable").flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if text.contains("kind: ModelCache") {
            caches.extend(deployments(&text).1);
        }
    }
    caches
}

#[test]
fn every_upstream_deployment_composes_on_both_stacks() {
    let files = upstream_deployment_files();
    assert!(files.len() >= 16, "{} files", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        let (mds, mut caches) = deployments(&text);
        caches.extend(caches_near(&file));
        let rel = file
            .strip_prefix(upstream())
            .expect("under upstream")
            .display()
            .to_string();
        let case = format!(
            "upstream-{}",
            rel.trim_end_matches(".yaml").replace('/', "-")
        );
        for stack in [Stack::Standard, Stack::Dynamo] {
            let mut text = String::new();
            for md in &mds {
                text.push_str(&to_yaml(&compose_on(md, &caches, stack)));
            }
            snapshot(&case, stack, &text, &rel);
        }
    }
}

#[test]
fn project_cases_compose_on_both_stacks() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("golden folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    cases.sort();
    assert!(cases.len() >= 5);
    for case in cases {
        let text = std::fs::read_to_string(case.join("input.yaml")).expect("readable");
        let (mds, caches) = deployments(&text);
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for stack in [Stack::Standard, Stack::Dynamo] {
            let mut out = String::new();
            for md in &mds {
                out.push_str(&to_yaml(&compose_on(md, &caches, stack)));
            }
            snapshot(&name, stack, &out, &format!("{name}/input.yaml"));
        }
    }
}
