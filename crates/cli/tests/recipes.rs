//! `modelplane recipes` end to end.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args(args)
        .output()
        .expect("spawn");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

/// The (recipe, component, stacks) columns of the table's rows.
fn rows(table: &str) -> Vec<(String, String, String)> {
    table
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (
                cells[0].to_string(),
                cells[2].to_string(),
                cells[5].to_string(),
            )
        })
        .collect()
}

#[test]
fn every_cloud_has_a_general_recipe() {
    let (code, table) = run(&["recipes"]);
    assert_eq!(code, 0);
    assert!(table.starts_with("RECIPE "), "{table}");
    let names: Vec<String> = rows(&table).into_iter().map(|r| r.0).collect();
    for general in [
        "eks-any-ubuntu",
        "gke-any-cos",
        "aks-any-ubuntu",
        "nebius-any-ubuntu",
        "vultr-any-ubuntu",
        "existing-any-any",
    ] {
        assert!(names.iter().any(|n| n == general), "{general} missing");
    }
}

#[test]
fn cloud_filter_keeps_only_that_clouds_recipes() {
    let (code, table) = run(&["recipes", "--cloud", "eks"]);
    assert_eq!(code, 0);
    let rows = rows(&table);
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.0.starts_with("eks-")), "{table}");
}

#[test]
fn stack_filter_drops_the_other_stacks_components() {
    let (_, standard) = run(&["recipes", "--cloud", "EKS", "--stack", "Standard"]);
    let (_, dynamo) = run(&["recipes", "--cloud", "EKS", "--stack", "Dynamo"]);
    assert!(rows(&standard).iter().all(|r| r.2 != "Dynamo"));
    assert!(rows(&dynamo).iter().all(|r| r.2 != "Standard"));
    assert!(
        rows(&standard).iter().any(|r| r.1 == "leader-worker-set"),
        "{standard}"
    );
    assert!(rows(&dynamo).iter().any(|r| r.1 == "grove"), "{dynamo}");
    assert!(
        !rows(&dynamo).iter().any(|r| r.1 == "leader-worker-set"),
        "{dynamo}"
    );
}

#[test]
fn unknown_cloud_is_a_usage_error() {
    let (code, _) = run(&["recipes", "--cloud", "Linode"]);
    assert_eq!(code, 2);
}
