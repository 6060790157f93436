//! `modelplane gateway` and `modelplane engine-sim` as processes: a request
//! through both, `--check` on the example routes, and a SIGTERM that lets a
//! stream in flight finish before the gateway exits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `modelplane ARGS` and returns it with the address it printed
/// after `http://`.
fn start(args: &[&str]) -> (Process, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.trim_end_matches(':').parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (Process(child), addr)
}

fn post(addr: SocketAddr, path: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    stream
}

fn engine(args: &[&str]) -> (Process, SocketAddr) {
    let mut all = vec![
        "engine-sim",
        "--model",
        "qwen3-8b",
        "--listen",
        "127.0.0.1:0",
    ];
    all.extend_from_slice(args);
    start(&all)
}

fn routes(dir: &std::path::Path, engine: SocketAddr) -> std::path::PathBuf {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/gateway/routes.yaml"
    ))
    .expect("example")
    .replace("127.0.0.1:8001", &engine.to_string())
    .replace("127.0.0.1:8002", &engine.to_string());
    let path = dir.join("routes.yaml");
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn a_request_goes_through_the_gateway_to_the_engine_and_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_engine, engine_addr) = engine(&[]);
    let config = routes(dir.path(), engine_addr);
    let (_gateway, addr) = start(&[
        "gateway",
        "--config",
        config.to_str().expect("path"),
        "--listen",
        "127.0.0.1:0",
    ]);
    let mut answer = String::new();
    post(
        addr,
        "/v1/chat/completions",
        r#"{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .read_to_string(&mut answer)
    .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""object":"chat.completion""#), "{answer}");
    assert!(answer.contains(r#""completion_tokens":16"#), "{answer}");
}

#[test]
fn check_prints_the_example_routing_table() {
    let output = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args([
            "gateway",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/gateway"),
            "--check",
        ])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("service: demo/qwen3-8b"), "{text}");
    assert!(text.contains("upstream: http://127.0.0.1:8002"), "{text}");
    assert!(text.contains("skipped: []"), "{text}");
}

#[test]
fn sigterm_lets_a_stream_in_flight_finish_then_the_gateway_exits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_engine, engine_addr) = engine(&["--itl-ms", "50", "--output-tokens", "20"]);
    let config = routes(dir.path(), engine_addr);
    let (mut gateway, addr) = start(&[
        "gateway",
        "--config",
        config.to_str().expect("path"),
        "--listen",
        "127.0.0.1:0",
    ]);
    let mut stream = post(
        addr,
        "/v1/chat/completions",
        r#"{"model":"qwen3-8b","messages":[],"stream":true}"#,
    );
    let mut first = [0u8; 512];
    let n = stream.read(&mut first).expect("first bytes");
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let started = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &gateway.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // The stream still runs to its end (about a second of tokens).
    let mut rest = String::new();
    stream
        .read_to_string(&mut rest)
        .expect("rest of the stream");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the stream was cut short"
    );
    // Then the gateway exits cleanly, and takes no new connections.
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = gateway.0.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "the gateway did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(TcpStream::connect(addr).is_err());
}

/// Beyond loopback the gateway says so, as the API server does (on main it
/// bound 0.0.0.0 without a word).
#[test]
fn listening_beyond_this_machine_is_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    let routes = routes(dir.path(), "127.0.0.1:9".parse().expect("addr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args(["gateway", "--listen", "0.0.0.0:0", "--config"])
        .arg(&routes)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let _running = Process(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = Vec::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let warned =
            line.starts_with("warning: the gateway listens on 0.0.0.0:0, beyond this machine");
        said.push(line);
        if warned {
            return;
        }
    }
    panic!("no warning in {said:?}");
}
