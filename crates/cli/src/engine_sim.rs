//! `modelplane engine-sim`: a fake OpenAI-compatible engine.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use modelplane_sim::engine::{EngineConfig, run as serve};

/// Arguments of `modelplane engine-sim`.
#[derive(Args, Debug)]
#[command(after_help = "\
Answers /v1/chat/completions and /v1/completions (streamed as server-sent events or \
whole), /v1/models, /health and /metrics (vLLM's metric names) like a vLLM server, \
without a GPU: the first token comes after --ttft-ms, each next one --itl-ms later, \
--output-tokens of them unless the request sets max_tokens. The text depends only on the \
prompt; usage counts one prompt token per 4 bytes of the prompt and one completion token \
per word. Beyond --max-concurrency requests wait in a queue (vllm:num_requests_waiting).

Examples:
  modelplane engine-sim --model qwen3-8b --listen 127.0.0.1:8001
  modelplane engine-sim --model qwen3-8b --ttft-ms 150 --itl-ms 20 --output-tokens 64")]
pub struct EngineSimArgs {
    /// The model name requests must ask for.
    #[arg(long)]
    model: String,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Time to the first token, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    ttft_ms: f64,
    /// Time between tokens, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    itl_ms: f64,
    /// Tokens per answer when the request sets no max_tokens.
    #[arg(long, value_name = "N", default_value_t = 16)]
    output_tokens: u32,
    /// Requests generated at once; more queue.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_concurrency: usize,
    /// Worker threads.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Require `Authorization: Bearer KEY` on /v1 requests, as vLLM's --api-key.
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
}

fn millis(ms: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| anyhow::anyhow!("{ms} is not a duration in milliseconds"))
}

/// Serves until Ctrl-C or SIGTERM.
pub fn run(args: &EngineSimArgs) -> anyhow::Result<()> {
    let config = EngineConfig {
        model: args.model.clone(),
        time_to_first_token: millis(args.ttft_ms)?,
        inter_token_latency: millis(args.itl_ms)?,
        output_tokens: args.output_tokens,
        max_concurrency: args.max_concurrency.max(1),
        api_key: args.api_key.clone(),
        stamp_chunks: false,
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?
        .block_on(serve(
            args.listen,
            config,
            |addr| println!("engine-sim serving {} on http://{addr}", args.model),
            crate::logging::terminated(),
        ))
        .map_err(|e| anyhow::anyhow!("engine-sim on {}: {e}", args.listen))
}
