//! `modelplane providers` end to end.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn run(args: &[&str], stdin: &str) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn replicas(table: &str, provider: &str) -> String {
    table
        .lines()
        .find(|l| l.starts_with(&format!("{provider} ")))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_examples_run_aws_and_helm_only() {
    let (code, table) = run(&["providers", "-f", "examples/"], "");
    assert_eq!(code, 0);
    assert_eq!(replicas(&table, "provider-aws-eks"), "1");
    assert_eq!(replicas(&table, "provider-helm"), "1");
    assert_eq!(replicas(&table, "provider-gcp-container"), "0");
    assert!(table.contains("used by us-east, us-west"), "{table}");
}

#[test]
fn managed_resources_keep_their_provider_running_but_provider_configs_do_not() {
    let managed = "apiVersion: containerservice.azure.m.upbound.io/v1beta1\nkind: KubernetesCluster\nmetadata: {name: old, namespace: modelplane-system}\nspec: {}\n";
    let (_, table) = run(&["providers", "-f", "-"], managed);
    assert_eq!(replicas(&table, "provider-azure-containerservice"), "1");
    assert!(table.contains("Azure managed resources still exist"));
    let config = "apiVersion: azure.m.upbound.io/v1beta1\nkind: ClusterProviderConfig\nmetadata: {name: default}\nspec: {}\n";
    let (_, table) = run(&["providers", "-f", "-"], config);
    assert_eq!(replicas(&table, "provider-azure-containerservice"), "0");
}

#[test]
fn yaml_output_has_a_provider_and_a_runtime_config_per_package() {
    let (code, yaml) = run(&["providers", "-f", "examples/", "-o", "yaml"], "");
    assert_eq!(code, 0);
    let docs = modelplane_api::validation::yaml::parse_documents(&yaml).expect("valid YAML");
    let providers = docs
        .iter()
        .filter(|d| d.value["kind"] == "Provider")
        .count();
    let configs = docs
        .iter()
        .filter(|d| d.value["kind"] == "DeploymentRuntimeConfig")
        .count();
    assert_eq!(providers, configs);
    assert!(providers >= 16);
}
