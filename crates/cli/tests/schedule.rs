//! `modelplane schedule` end to end. Golden cases live in
//! `tests/golden/schedule/<case>/` (`input.yaml`, or the repository's
//! `examples/` for the case named `examples`); regenerate with
//! `INSTA_UPDATE=always cargo test -p modelplane --test schedule`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn modelplane(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the modelplane binary runs")
}

fn golden(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/schedule")
        .join(case)
}

fn snapshot(case: &str, args: &[&str], out: &Output) {
    let text = format!(
        "exit: {}\n{}{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    insta::with_settings!({
        snapshot_path => golden(case),
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => format!("modelplane {}", args.join(" ")),
    }, {
        insta::assert_snapshot!("output", text);
    });
}

#[test]
fn schedule_explain_on_the_examples_prints_a_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let args = ["schedule", "--explain", "-f", "examples/"];
    let out = modelplane(&root, &args);
    assert_eq!(out.status.code(), Some(0));
    snapshot("examples", &args, &out);
}

#[test]
fn observed_status_taints_and_capacity_are_explained() {
    let args = ["schedule", "--explain", "-f", "input.yaml"];
    let out = modelplane(&golden("status-and-taints"), &args);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "untolerated taint maintenance:NoExecute",
        "cluster is not Ready",
        "no room for 4 gpu on one node",
        "matches no device",
        "cluster selector wants tier=gold",
    ] {
        assert!(text.contains(expected), "{expected} missing from\n{text}");
    }
    snapshot("status-and-taints", &args, &out);
}

#[test]
fn a_selector_that_does_not_compile_is_refused_at_its_line_as_admission_refuses_it() {
    let args = ["schedule", "-f", "input.yaml"];
    let out = modelplane(&golden("invalid-selector"), &args);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("input.yaml:43: ModelDeployment/qwen: spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel: Invalid value"),
        "{text}"
    );
    assert!(
        text.contains("found no matching overload for '_>=_'"),
        "{text}"
    );
    snapshot("invalid-selector", &args, &out);
}

#[test]
fn json_output_follows_the_documented_contract() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = modelplane(
        &root,
        &[
            "schedule",
            "-f",
            "examples/",
            "--deployment",
            "ml-team/qwen3-coder",
            "-o",
            "json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["requested"], 1);
    let p = &v["placements"][0];
    for field in ["cluster", "index", "gatewayAddress", "engines"] {
        assert!(!p[field].is_null(), "{field} missing: {p}");
    }
    let member = &p["engines"][0]["members"][0];
    assert_eq!(member["role"], "Leader");
    assert!(member["pool"].is_string());
    let request = &member["deviceRequests"][0];
    assert_eq!(request["name"], "gpu");
    assert_eq!(request["deviceClassName"], "gpu.nvidia.com");
    assert_eq!(request["count"], 8);
    assert!(
        request["selectors"][0]
            .as_str()
            .is_some_and(|s| s.contains("120Gi"))
    );
    assert!(v["explanations"].is_array());
}

#[test]
fn json_with_several_deployments_asks_which_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = modelplane(&root, &["schedule", "-f", "examples/", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pick one with --deployment"));
}

#[test]
fn invalid_manifests_are_reported_as_validate_reports_them() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/validate/replicas-zero");
    let out = modelplane(&dir, &["schedule", "-f", "input.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("input.yaml:7: ModelDeployment/qwen: spec.replicas: Invalid value: 0")
    );
}

#[test]
fn a_cluster_with_status_but_no_gateway_gets_no_new_replica() {
    let args = ["schedule", "--explain", "-f", "input.yaml", "-o", "json"];
    let out = modelplane(&golden("status-without-gateway"), &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let placements = v["placements"].as_array().expect("placements");
    assert_eq!(placements.len(), 1, "{v}");
    assert_eq!(placements[0]["cluster"], "b-serving");
    assert_eq!(placements[0]["gatewayAddress"], "10.0.0.2");
    let text = v["explanations"].to_string();
    assert!(text.contains("a-no-gateway"), "{text}");
}
