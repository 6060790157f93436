//! The load generator of `bench/gateway/run.py`: one HTTP/1.1 keep-alive
//! connection per concurrent client, OpenAI chat requests with `model`
//! first and a prompt padded to a given size, results as one JSON line.
//!
//! - `latency`: one client, sequential requests; percentiles of the whole
//!   request (send to last byte).
//! - `rate`: N clients for a fixed time; requests per second.
//! - `stream`: streamed answers; time to the first chunk and the gaps
//!   between chunks, as the client sees them.
//! - `hold`: N streams open at once, read slowly, for a while (the harness
//!   samples the gateway's memory meanwhile).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use serde_json::json;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Sequential requests from one client: latency percentiles.
    Latency {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 2000)]
        requests: usize,
    },
    /// Concurrent clients for a while: request rate.
    Rate {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Streamed answers: time to first chunk and gaps between chunks.
    Stream {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        #[arg(long, default_value_t = 24)]
        requests: usize,
        /// Tokens asked per answer (`max_tokens`).
        #[arg(long, default_value_t = 64)]
        tokens: u32,
    },
    /// Many streams held open at once.
    Hold {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 1000)]
        streams: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
}

#[derive(Args, Clone)]
struct Target {
    /// host:port of the gateway (or the engine, for the direct baseline).
    #[arg(long)]
    addr: String,
    #[arg(long, default_value = "/v1/chat/completions")]
    path: String,
    #[arg(long, default_value = "m")]
    model: String,
    /// Size of the request body.
    #[arg(long, default_value_t = 1024)]
    body_bytes: usize,
    /// Extra header, `Name: value`.
    #[arg(long)]
    header: Vec<String>,
}

impl Target {
    fn body(&self, stream: bool, tokens: u32) -> Bytes {
        let skeleton = json!({ "model": self.model, "messages": [{ "role": "user", "content": "" }], "max_tokens": tokens, "stream": stream });
        let pad = self.body_bytes.saturating_sub(skeleton.to_string().len());
        let body = json!({ "model": self.model, "messages": [{ "role": "user", "content": "x".repeat(pad) }], "max_tokens": tokens, "stream": stream });
        Bytes::from(body.to_string())
    }

    fn request(&self, body: &Bytes) -> anyhow::Result<http::Request<Full<Bytes>>> {
        let mut builder = http::Request::post(&self.path)
            .header("host", &self.addr)
            .header("content-type", "application/json");
        for header in &self.header {
            let (name, value) = header
                .split_once(':')
                .context("--header needs `Name: value`")?;
            builder = builder.header(name.trim(), value.trim());
        }
        Ok(builder.body(Full::new(body.clone()))?)
    }
}

async fn connect(addr: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One whole request on a kept-alive connection, reconnecting first when
/// the server closed it (nginx does after `keepalive_requests`); the status.
async fn exchange(
    addr: &str,
    sender: &mut SendRequest<Full<Bytes>>,
    request: http::Request<Full<Bytes>>,
) -> anyhow::Result<u16> {
    if sender.ready().await.is_err() {
        *sender = connect(addr).await?;
        sender.ready().await?;
    }
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn latency(target: Target, requests: usize) -> anyhow::Result<serde_json::Value> {
    let body = target.body(false, 1);
    let mut sender = connect(&target.addr).await?;
    for _ in 0..requests / 10 {
        exchange(&target.addr, &mut sender, target.request(&body)?).await?;
    }
    let mut micros = Vec::with_capacity(requests);
    for _ in 0..requests {
        let start = Instant::now();
        let status = exchange(&target.addr, &mut sender, target.request(&body)?).await?;
        if status != 200 {
            bail!("status {status}");
        }
        micros.push(start.elapsed().as_secs_f64() * 1e6);
    }
    micros.sort_by(f64::total_cmp);
    Ok(
        json!({ "p50_us": percentile(&micros, 0.5), "p99_us": percentile(&micros, 0.99), "requests": requests }),
    )
}

async fn rate(
    target: Target,
    concurrency: usize,
    seconds: f64,
) -> anyhow::Result<serde_json::Value> {
    let body = target.body(false, 1);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (target, body) = (target.clone(), body.clone());
        clients.spawn(async move {
            let mut sender = connect(&target.addr).await?;
            let (mut ok, mut failed) = (0u64, 0u64);
            while Instant::now() < deadline {
                match exchange(&target.addr, &mut sender, target.request(&body)?).await {
                    Ok(200) => ok += 1,
                    Ok(_) => failed += 1,
                    Err(_) => {
                        failed += 1;
                        sender = connect(&target.addr).await?;
                    }
                }
            }
            Ok::<_, anyhow::Error>((ok, failed))
        });
    }
    let start = Instant::now();
    let (mut ok, mut failed) = (0, 0);
    while let Some(result) = clients.join_next().await {
        let (o, f) = result??;
        ok += o;
        failed += f;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(json!({ "rps": ok as f64 / elapsed, "ok": ok, "failed": failed, "seconds": elapsed }))
}

/// Reads one streamed answer: time to the first data chunk and the gaps
/// between chunks (by arrival of `data:` events).
async fn one_stream(target: &Target, body: &Bytes) -> anyhow::Result<(f64, Vec<f64>)> {
    let mut sender = connect(&target.addr).await?;
    let start = Instant::now();
    sender.ready().await?;
    let response = sender.send_request(target.request(body)?).await?;
    if response.status() != 200 {
        bail!("status {}", response.status());
    }
    let mut body = response.into_body();
    let (mut first, mut last, mut gaps) = (None, None, Vec::new());
    let mut pending = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        pending.extend_from_slice(data);
        let now = Instant::now();
        // Complete JSON events in this read (`[DONE]` is not a chunk).
        let mut events = 0;
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            if event.starts_with(b"data: {") {
                events += 1;
            }
        }
        if events == 0 {
            continue;
        }
        if first.is_none() {
            first = Some(now.duration_since(start).as_secs_f64() * 1e6);
        }
        if let Some(previous) = last {
            gaps.push(now.duration_since(previous).as_secs_f64() * 1e6);
        }
        last = Some(now);
    }
    Ok((first.context("no chunk")?, gaps))
}

async fn stream(
    target: Target,
    concurrency: usize,
    requests: usize,
    tokens: u32,
) -> anyhow::Result<serde_json::Value> {
    let body = target.body(true, tokens);
    let mut ttft = Vec::new();
    let mut gaps = Vec::new();
    let mut done = 0;
    while done < requests {
        let batch = concurrency.min(requests - done);
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let (target, body) = (target.clone(), body.clone());
            streams.spawn(async move { one_stream(&target, &body).await });
        }
        while let Some(result) = streams.join_next().await {
            let (first, g) = result??;
            ttft.push(first);
            gaps.extend(g);
        }
        done += batch;
    }
    ttft.sort_by(f64::total_cmp);
    gaps.sort_by(f64::total_cmp);
    Ok(json!({
        "ttft_p50_us": percentile(&ttft, 0.5), "ttft_p99_us": percentile(&ttft, 0.99),
        "gap_p50_us": percentile(&gaps, 0.5), "gap_p99_us": percentile(&gaps, 0.99),
        "streams": ttft.len(), "gaps": gaps.len(),
    }))
}

async fn hold(target: Target, streams: usize, seconds: f64) -> anyhow::Result<serde_json::Value> {
    // Long answers, so every stream is still open while memory is read.
    let body = target.body(true, 100_000);
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::channel::<()>(streams);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let (target, body, opened) = (target.clone(), body.clone(), opened_tx.clone());
        tasks.spawn(async move {
            let mut sender = connect(&target.addr).await?;
            sender.ready().await?;
            let response = sender.send_request(target.request(&body)?).await?;
            let mut body = response.into_body();
            body.frame().await;
            let _ = opened.send(()).await;
            // Keep reading, slowly, until dropped.
            while body.frame().await.is_some() {}
            Ok::<_, anyhow::Error>(())
        });
    }
    drop(opened_tx);
    let mut open = 0;
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    while open < streams {
        tokio::select! {
            got = opened_rx.recv() => match got { Some(()) => open += 1, None => break },
            () = &mut deadline => break,
        }
    }
    println!("{}", json!({ "holding": open }));
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    tasks.abort_all();
    Ok(json!({ "open": open }))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        match cli.mode {
            Mode::Latency { target, requests } => latency(target, requests).await,
            Mode::Rate {
                target,
                concurrency,
                seconds,
            } => rate(target, concurrency, seconds).await,
            Mode::Stream {
                target,
                concurrency,
                requests,
                tokens,
            } => stream(target, concurrency, requests, tokens).await,
            Mode::Hold {
                target,
                streams,
                seconds,
            } => hold(target, streams, seconds).await,
        }
    })?;
    println!("{result}");
    Ok(())
}
