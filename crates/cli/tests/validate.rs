//! `modelplane validate` end to end: the binary, real files, exit codes.
//!
//! Golden cases live in `tests/golden/validate/<case>/`: `input.yaml`, an
//! optional `old.yaml` (passed as `--old`), and `output.snap`, the expected
//! exit status and report. Add a case by adding a folder; regenerate with
//! `INSTA_UPDATE=always cargo test -p modelplane --test validate`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn modelplane(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the modelplane binary runs")
}

fn golden_cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/validate");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("golden folder exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    cases.sort();
    cases
}

fn upstream_manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/upstream-manifests")
}

#[test]
fn golden_cases_report_what_the_api_server_would() {
    let cases = golden_cases();
    assert!(cases.len() >= 20, "only {} golden cases", cases.len());
    for case in cases {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let mut args = vec!["validate", "-f", "input.yaml"];
        if case.join("old.yaml").exists() {
            args.extend(["--old", "old.yaml"]);
        }
        let out = modelplane(&case, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let code = out.status.code().unwrap_or(-1);
        if name.starts_with("accepted") {
            assert_eq!(code, 0, "{name}: {stdout}");
        } else {
            assert_ne!(code, 0, "{name} must be rejected: {stdout}");
        }
        insta::with_settings!({
            snapshot_path => case.clone(),
            prepend_module_to_snapshot => false,
            omit_expression => true,
            description => format!("modelplane {}", args.join(" ")),
        }, {
            insta::assert_snapshot!("output", format!("exit: {code}\n{stdout}"));
        });
    }
}

/// Every rejection names file, line, object and field path.
#[test]
fn rejections_name_file_line_object_and_field() {
    for case in golden_cases() {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if name.starts_with("accepted") || name == "yaml-syntax-error" || name == "no-documents" {
            continue;
        }
        let mut args = vec!["validate", "-f", "input.yaml"];
        if case.join("old.yaml").exists() {
            args.extend(["--old", "old.yaml"]);
        }
        let out = modelplane(&case, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let errors: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("input.yaml:") && !l.contains("warning:"))
            .collect();
        assert!(!errors.is_empty(), "{name}: no error line in {stdout}");
        for line in errors {
            let parts: Vec<&str> = line.splitn(4, ": ").collect();
            assert_eq!(parts.len(), 4, "{name}: {line}");
            let (file_line, object, path) = (parts[0], parts[1], parts[2]);
            let lineno: u32 = file_line
                .trim_start_matches("input.yaml:")
                .parse()
                .unwrap_or_else(|_| panic!("{name}: no line number in {line}"));
            assert!(lineno >= 1, "{name}: {line}");
            assert!(object.contains('/'), "{name}: no Kind/name in {line}");
            assert!(
                path.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".[]_-/".contains(c))
                    && !path.is_empty(),
                "{name}: no field path in {line}"
            );
        }
    }
}

#[test]
fn every_upstream_manifest_is_accepted_with_only_expected_warnings() {
    let dir = upstream_manifests();
    let out = modelplane(&dir, &["validate", "-f", ".", "--output", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let docs = report["documents"].as_array().expect("documents");
    let mut skipped_kinds = Vec::new();
    let mut accepted = 0;
    for doc in docs {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let modelplane = api_version.starts_with("modelplane.ai/")
            || api_version.starts_with("infrastructure.modelplane.ai/");
        match doc["status"].as_str() {
            Some("accepted") => {
                assert!(modelplane, "{doc}");
                accepted += 1;
            }
            Some("skipped") => {
                assert!(!modelplane, "a Modelplane kind was skipped: {doc}");
                skipped_kinds.push(doc["kind"].as_str().unwrap_or_default().to_string());
            }
            other => panic!("unexpected status {other:?}: {doc}"),
        }
        for w in doc["warnings"].as_array().expect("warnings") {
            let message = w["message"].as_str().unwrap_or_default();
            let removed_version = message == "ignored: versions come from the release's recipe";
            let uncached_gang = message.starts_with("multi-node engine without");
            assert!(
                removed_version || uncached_gang,
                "unexpected warning {w} in {doc}"
            );
        }
    }
    assert!(
        accepted >= 80,
        "only {accepted} Modelplane documents accepted"
    );
    skipped_kinds.sort();
    skipped_kinds.dedup();
    assert_eq!(
        skipped_kinds,
        [
            "ClusterProviderConfig",
            "ClusterRole",
            "ClusterRoleBinding",
            "Configuration",
            "DeploymentRuntimeConfig",
            "ImageConfig",
            "Namespace"
        ]
    );
    assert_eq!(report["summary"]["rejected"], 0);
}

#[test]
fn standard_input_and_directories_are_read() {
    let dir = upstream_manifests();
    let file = dir.join("concepts/model-deployment.yaml");
    let text = std::fs::read_to_string(&file).expect("upstream manifest");
    let mut child = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args(["validate", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("1 documents: 1 accepted"));

    let out = modelplane(&dir, &["validate", "-f", "concepts"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_missing_file_exits_2() {
    let out = modelplane(Path::new("."), &["validate", "-f", "does-not-exist.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("does-not-exist.yaml:0: cannot read"));
}

#[test]
fn the_readme_examples_are_accepted_without_warnings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = modelplane(&root, &["validate", "-f", "examples/"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.ends_with("0 errors, 0 warnings\n"), "{stdout}");
    assert!(!stdout.contains("0 documents"), "{stdout}");
}
