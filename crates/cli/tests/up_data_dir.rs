//! One owner per data dir, its secrets private at rest: a second `up` (or
//! `apiserver`) on a data dir in use is refused at once, naming the
//! process that holds it, and changes nothing there, while the first
//! keeps serving; under a umask of 022 the data dir is 0700 and every file
//! in it 0600 (the store with its WAL, the kubeconfig, the token, the
//! key, the log).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::up::{free_port, up};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

/// Every file in `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read the data dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().to_string();
            (name, std::fs::read(&p).unwrap_or_default())
        })
        .collect();
    files.sort();
    files
}

/// `command`'s output, killed if it runs past `limit` (on main the second
/// start served on, and the test waited for it).
fn run_for(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

#[test]
fn a_second_up_on_a_data_dir_in_use_is_refused_at_once_changes_nothing_and_the_first_keeps_serving()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let first = up(dir.path(), free_port(), false);
    first.wait_printed("API server up", Duration::from_secs(60));
    // The files a user's later commands read, as the first wrote them.
    let kept = ["kubeconfig", "token", "tls.crt", "tls.key"];
    let before: Vec<_> = contents(dir.path())
        .into_iter()
        .filter(|(n, _)| kept.contains(&n.as_str()))
        .collect();
    assert_eq!(before.len(), kept.len(), "the first wrote {kept:?}");
    let log_before = std::fs::metadata(dir.path().join("modelplane.log"))
        .expect("the first's log")
        .len();

    let started = Instant::now();
    let second = &mut Command::new(env!("CARGO_BIN_EXE_modelplane"));
    second
        .args(["up", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--gateway-listen"])
        .arg(format!("127.0.0.1:{}", free_port()));
    let second = run_for(second, Duration::from_secs(10));
    let took = started.elapsed();
    let said = String::from_utf8_lossy(&second.stderr).to_string();
    assert!(!second.status.success(), "the second up is refused: {said}");
    assert!(
        took < Duration::from_secs(1),
        "refused at once, not after {took:?}"
    );
    let pid = first.process.0.id().to_string();
    assert!(
        said.contains("in use") && said.contains(&pid),
        "the refusal names the process holding the data dir ({pid}): {said}"
    );

    let after: Vec<_> = contents(dir.path())
        .into_iter()
        .filter(|(n, _)| kept.contains(&n.as_str()))
        .collect();
    assert_eq!(before, after, "the second up changed the first's files");
    let log_after = std::fs::metadata(dir.path().join("modelplane.log"))
        .expect("the first's log")
        .len();
    // The first may log meanwhile; the second writes nothing there.
    let log = std::fs::read_to_string(dir.path().join("modelplane.log")).unwrap_or_default();
    assert!(
        log_after >= log_before && !log.contains("in use by process"),
        "the second up wrote into the first's log"
    );
    // The first still serves, with the kubeconfig it wrote.
    let namespaces = first.kubectl(&["get", "namespaces", "-o", "name"]);
    assert!(namespaces.contains("namespace/default"), "{namespaces}");
}

#[test]
fn a_second_apiserver_on_a_data_dir_in_use_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = up(dir.path(), free_port(), false);
    first.wait_printed("API server up", Duration::from_secs(60));
    let second = run_for(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path()),
        Duration::from_secs(10),
    );
    let said = String::from_utf8_lossy(&second.stderr).to_string();
    assert!(!second.status.success(), "refused: {said}");
    assert!(said.contains("in use"), "{said}");
}

#[test]
fn under_umask_022_the_data_dir_is_private_and_every_file_in_it_owner_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("mp");
    let first = up(&data, free_port(), false);
    first.wait_printed("API server up", Duration::from_secs(60));
    // A write, so the store has its WAL beside it.
    first.kubectl(&["create", "namespace", "modes"]);
    assert_eq!(mode(&data), 0o700, "the data dir");
    let files = contents(&data);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "state.db",
        "state.db-wal",
        "kubeconfig",
        "token",
        "tls.key",
        "modelplane.log",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    for (name, _) in &files {
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }
}
