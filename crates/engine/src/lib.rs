//! A fake OpenAI-compatible inference engine: the engine of every gateway
//! benchmark and, later, of every simulated pod.
//!
//! Data flow: a request's top-level fields are borrowed from its body as
//! raw JSON (no value is built of the prompt, so a 200 KB prompt costs
//! little); the
//! request waits for one of `max_concurrency` slots (counted as waiting),
//! then "generates" `max_tokens` (else `output_tokens`) tokens, the first
//! after `time_to_first_token` and each next one `inter_token_latency`
//! later, streamed as server-sent events or returned whole. The text is a
//! pure function of the prompt, and `usage` counts one prompt token per 4
//! bytes of the prompt (`messages` or `prompt` as sent, rounded up) and one
//! completion token per generated word. A client that goes away stops its
//! generation at the next token. `/metrics` uses vLLM's metric names.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

/// How the fake engine behaves.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The model it serves (`model` of requests must match).
    pub model: String,
    /// Delay before the first token.
    pub time_to_first_token: Duration,
    /// Delay between two tokens.
    pub inter_token_latency: Duration,
    /// Tokens generated when the request sets no `max_tokens`.
    pub output_tokens: u32,
    /// Requests generated at once; more wait in a queue.
    pub max_concurrency: usize,
    /// When set, requests must carry `Authorization: Bearer <key>` (as
    /// vLLM's `--api-key`).
    pub api_key: Option<String>,
    /// Adds `"sent_at_us"` (microseconds since the Unix epoch) to every
    /// streamed chunk, so tests can measure what delays them.
    pub stamp_chunks: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            model: "sim-model".into(),
            time_to_first_token: Duration::ZERO,
            inter_token_latency: Duration::ZERO,
            output_tokens: 16,
            max_concurrency: 256,
            api_key: None,
            stamp_chunks: false,
        }
    }
}

/// Counters behind `/metrics`.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Completion requests received (read whole), answered or not.
    pub received: AtomicU64,
    /// Requests generating now.
    pub running: AtomicI64,
    /// Requests queued for a slot.
    pub waiting: AtomicI64,
    /// Prompt tokens of every request served.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generation_tokens: AtomicU64,
    /// Requests finished because they reached their `max_tokens`.
    pub finished_length: AtomicU64,
    /// Requests finished at the engine's own output length.
    pub finished_stop: AtomicU64,
    /// Requests whose client went away before the end.
    pub aborted: AtomicU64,
    ttft_micros: AtomicU64,
    ttft_count: AtomicU64,
}

/// One fake engine.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    slots: Semaphore,
    metrics: EngineMetrics,
    ids: AtomicU64,
    /// The requests' generators: each ends with its request, or when the
    /// engine is dropped.
    generators: modelplane_supervisor::Supervisor,
}

impl Engine {
    /// An engine with `config`.
    pub fn new(config: EngineConfig) -> Arc<Engine> {
        Arc::new(Engine {
            slots: Semaphore::new(config.max_concurrency.max(1)),
            config,
            metrics: EngineMetrics::default(),
            ids: AtomicU64::new(0),
            generators: modelplane_supervisor::Supervisor::default(),
        })
    }

    /// Its counters.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }
}

/// Serves `engine` on `listener` until `shutdown` resolves; answers in
/// progress finish.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    modelplane_listener::http1::serve_http1(
        listener,
        move |req| handle(engine.clone(), req),
        shutdown,
        Duration::from_secs(30),
        modelplane_listener::http1::ListenerLimits::default(),
    )
    .await
}

/// Binds `addr` and serves until `shutdown`; `ready` gets the bound address.
pub async fn run(
    addr: SocketAddr,
    config: EngineConfig,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    ready(listener.local_addr()?);
    serve(listener, Engine::new(config), shutdown).await
}

/// An engine on its own runtime and thread, as a separate process would be:
/// [`EngineHandle::kill`] drops every connection at once.
#[derive(Debug)]
pub struct EngineHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state and counters.
    pub engine: Arc<Engine>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl EngineHandle {
    /// Starts an engine with `config` on a free loopback port.
    pub fn start(config: EngineConfig) -> io::Result<EngineHandle> {
        Self::start_on("127.0.0.1:0".parse().map_err(io::Error::other)?, config)
    }

    /// Starts an engine with `config` on `addr`.
    pub fn start_on(addr: SocketAddr, config: EngineConfig) -> io::Result<EngineHandle> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        // Bound here, not on the runtime: callers may be inside another one.
        let std_listener = std::net::TcpListener::bind(addr)?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let engine = Engine::new(config);
        runtime.spawn(serve(listener, engine.clone(), std::future::pending()));
        Ok(EngineHandle {
            addr,
            engine,
            runtime: Some(runtime),
        })
    }

    /// Stops it the way a crash does: every connection closes, nothing drains.
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn handle(
    engine: Arc<Engine>,
    req: Request<Incoming>,
) -> Result<Response<EngineBody>, Infallible> {
    let (parts, body) = req.into_parts();
    if let Some(key) = &engine.config.api_key
        && parts.uri.path().starts_with("/v1/")
    {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(key.as_str()) {
            return Ok(error(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "AuthenticationError",
            ));
        }
    }
    let response = match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/health") => Response::new(EngineBody::full("")),
        (&Method::GET, "/v1/models") => json_response(StatusCode::OK, &models(&engine.config)),
        (&Method::GET, "/metrics") => {
            let mut r = Response::new(EngineBody::full(metrics_text(&engine)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::POST, path @ ("/v1/chat/completions" | "/v1/completions")) => {
            let chat = path == "/v1/chat/completions";
            match body.collect().await {
                Ok(collected) => {
                    engine.metrics.received.fetch_add(1, Ordering::Relaxed);
                    complete(engine, chat, collected.to_bytes()).await
                }
                Err(_) => error(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                    "BadRequestError",
                ),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "Not Found", "NotFoundError"),
    };
    Ok(response)
}

/// What a completion request asks for.
struct Ask {
    chat: bool,
    stream: bool,
    include_usage: bool,
    prompt_tokens: u64,
    max_tokens: Option<u32>,
    seed: u64,
}

/// The top-level fields a completion request is read for, each as sent.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_completion_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
}

/// `include_usage` of a request's `stream_options`.
#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

fn parse(chat: bool, body: &[u8]) -> Result<(String, Ask), String> {
    let fields: Fields = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let model = fields
        .model
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .ok_or("the request needs a string `model`")?;
    let prompt = if chat { fields.messages } else { None }
        .or(fields.prompt)
        .ok_or(if chat {
            "the request needs `messages`"
        } else {
            "the request needs a `prompt`"
        })?
        .get()
        .as_bytes();
    let number = |raw: Option<&RawValue>| raw.and_then(|r| r.get().parse::<u32>().ok());
    Ok((
        model,
        Ask {
            chat,
            stream: fields.stream.is_some_and(|s| s.get() == "true"),
            include_usage: fields
                .stream_options
                .and_then(|o| serde_json::from_str::<StreamOptions>(o.get()).ok())
                .is_some_and(|o| o.include_usage),
            prompt_tokens: (prompt.len() as u64).div_ceil(4),
            max_tokens: number(fields.max_completion_tokens).or(number(fields.max_tokens)),
            seed: fnv1a(prompt),
        },
    ))
}

async fn complete(engine: Arc<Engine>, chat: bool, body: Bytes) -> Response<EngineBody> {
    let (model, ask) = match parse(chat, &body) {
        Ok(parsed) => parsed,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message, "BadRequestError"),
    };
    if model != engine.config.model {
        return error(
            StatusCode::NOT_FOUND,
            &format!("The model `{model}` does not exist."),
            "NotFoundError",
        );
    }
    let tokens = ask.max_tokens.unwrap_or(engine.config.output_tokens);
    let id = engine.ids.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    let stream = ask.stream;
    engine
        .generators
        .clone()
        .spawn("generation", generate(engine, ask, tokens, id, tx));
    if !stream {
        // Like a real engine, a whole answer's head comes with its body.
        // Dropping this future (the client left) closes `rx`: generation stops.
        return match rx.recv().await {
            Some(whole) => {
                let mut response = Response::new(EngineBody::full(whole));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                response
            }
            None => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "generation ended early",
                "InternalServerError",
            ),
        };
    }
    let mut response = Response::new(EngineBody::Stream(rx));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// Generates one request's tokens into `tx`, on the engine's clock; stops
/// when the client has gone.
async fn generate(engine: Arc<Engine>, ask: Ask, tokens: u32, id: u64, tx: mpsc::Sender<Bytes>) {
    let m = &engine.metrics;
    m.waiting.fetch_add(1, Ordering::Relaxed);
    let slot = engine.slots.acquire().await;
    m.waiting.fetch_sub(1, Ordering::Relaxed);
    let Ok(_slot) = slot else { return };
    m.running.fetch_add(1, Ordering::Relaxed);
    m.prompt_tokens
        .fetch_add(ask.prompt_tokens, Ordering::Relaxed);
    let start = Instant::now();
    let config = &engine.config;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let frame = Framing {
        id: if ask.chat {
            format!("chatcmpl-sim-{id}")
        } else {
            format!("cmpl-sim-{id}")
        },
        created,
        model: &config.model,
        chat: ask.chat,
        stamp: config.stamp_chunks,
    };
    let mut text = String::new();
    let mut sent_all = true;
    for i in 0..tokens {
        let due = start + config.time_to_first_token + config.inter_token_latency * i;
        // The timer has millisecond ticks: a zero delay must not wait for one.
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        let word = word(ask.seed, i);
        if i == 0 {
            m.ttft_micros
                .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            m.ttft_count.fetch_add(1, Ordering::Relaxed);
        }
        m.generation_tokens.fetch_add(1, Ordering::Relaxed);
        let piece = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        if ask.stream {
            if tx.send(frame.chunk(&piece, i == 0, None)).await.is_err() {
                sent_all = false;
                break;
            }
        } else if tx.is_closed() {
            sent_all = false;
            break;
        }
        text.push_str(&piece);
    }
    let finish = if ask.max_tokens.is_some() {
        "length"
    } else {
        "stop"
    };
    let usage = json!({
        "prompt_tokens": ask.prompt_tokens,
        "completion_tokens": tokens,
        "total_tokens": ask.prompt_tokens + u64::from(tokens),
    });
    if sent_all {
        let tail: Vec<Bytes> = if ask.stream {
            let mut tail = vec![frame.chunk("", false, Some(finish))];
            if ask.include_usage {
                tail.push(frame.usage_chunk(&usage));
            }
            tail.push(Bytes::from_static(b"data: [DONE]\n\n"));
            tail
        } else {
            vec![frame.whole(&text, finish, &usage)]
        };
        for bytes in tail {
            if tx.send(bytes).await.is_err() {
                sent_all = false;
                break;
            }
        }
    }
    if sent_all {
        let counter = if finish == "length" {
            &m.finished_length
        } else {
            &m.finished_stop
        };
        counter.fetch_add(1, Ordering::Relaxed);
    } else {
        m.aborted.fetch_add(1, Ordering::Relaxed);
    }
    m.running.fetch_sub(1, Ordering::Relaxed);
}

/// The OpenAI wire shapes of one response.
struct Framing<'a> {
    id: String,
    created: u64,
    model: &'a str,
    chat: bool,
    stamp: bool,
}

impl Framing<'_> {
    fn chunk(&self, piece: &str, first: bool, finish: Option<&str>) -> Bytes {
        let choice = if self.chat {
            let delta = match (first, finish) {
                (_, Some(_)) => json!({}),
                (true, None) => json!({ "role": "assistant", "content": piece }),
                (false, None) => json!({ "content": piece }),
            };
            json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish })
        } else {
            json!({ "index": 0, "text": piece, "logprobs": null, "finish_reason": finish })
        };
        self.event(json!({
            "id": self.id, "object": self.object(true), "created": self.created,
            "model": self.model, "choices": [choice],
        }))
    }

    fn usage_chunk(&self, usage: &serde_json::Value) -> Bytes {
        self.event(json!({
            "id": self.id, "object": self.object(true), "created": self.created,
            "model": self.model, "choices": [], "usage": usage,
        }))
    }

    fn whole(&self, text: &str, finish: &str, usage: &serde_json::Value) -> Bytes {
        let choice = if self.chat {
            json!({ "index": 0, "message": { "role": "assistant", "content": text }, "logprobs": null, "finish_reason": finish })
        } else {
            json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish })
        };
        Bytes::from(
            json!({
                "id": self.id, "object": self.object(false), "created": self.created,
                "model": self.model, "choices": [choice], "usage": usage,
            })
            .to_string(),
        )
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.chat, chunk) {
            (true, true) => "chat.completion.chunk",
            (true, false) => "chat.completion",
            (false, _) => "text_completion",
        }
    }

    fn event(&self, mut value: serde_json::Value) -> Bytes {
        if self.stamp {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            value["sent_at_us"] = json!(now);
        }
        Bytes::from(format!("data: {value}\n\n"))
    }
}

const WORDS: [&str; 16] = [
    "the", "fleet", "serves", "every", "model", "on", "hardware", "that", "fits", "and", "routes",
    "traffic", "across", "clusters", "with", "care",
];

/// Token `i` of the answer to a prompt with hash `seed`.
fn word(seed: u64, i: u32) -> &'static str {
    let mixed = seed.wrapping_add(u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    WORDS[((mixed >> 32) % WORDS.len() as u64) as usize]
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn models(config: &EngineConfig) -> serde_json::Value {
    json!({
        "object": "list",
        "data": [{ "id": config.model, "object": "model", "created": 0, "owned_by": "modelplane-sim", "root": config.model }],
    })
}

fn metrics_text(engine: &Engine) -> String {
    let m = &engine.metrics;
    let model = &engine.config.model;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let ttft_seconds = get(&m.ttft_micros) as f64 / 1e6;
    format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{model_name=\"{model}\"}} {}\n\
         # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{model_name=\"{model}\"}} {}\n\
         # HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE vllm:prompt_tokens_total counter\n\
         vllm:prompt_tokens_total{{model_name=\"{model}\"}} {}\n\
         # HELP vllm:generation_tokens_total Number of generation tokens processed.\n\
         # TYPE vllm:generation_tokens_total counter\n\
         vllm:generation_tokens_total{{model_name=\"{model}\"}} {}\n\
         # HELP vllm:request_success_total Count of successfully processed requests.\n\
         # TYPE vllm:request_success_total counter\n\
         vllm:request_success_total{{finished_reason=\"length\",model_name=\"{model}\"}} {}\n\
         vllm:request_success_total{{finished_reason=\"stop\",model_name=\"{model}\"}} {}\n\
         # HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n\
         # TYPE vllm:time_to_first_token_seconds histogram\n\
         vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\",model_name=\"{model}\"}} {}\n\
         vllm:time_to_first_token_seconds_sum{{model_name=\"{model}\"}} {ttft_seconds}\n\
         vllm:time_to_first_token_seconds_count{{model_name=\"{model}\"}} {}\n\
         # HELP modelplane_sim_requests_aborted_total Requests whose client went away before the end.\n\
         # TYPE modelplane_sim_requests_aborted_total counter\n\
         modelplane_sim_requests_aborted_total{{model_name=\"{model}\"}} {}\n",
        m.running.load(Ordering::Relaxed),
        m.waiting.load(Ordering::Relaxed),
        get(&m.prompt_tokens),
        get(&m.generation_tokens),
        get(&m.finished_length),
        get(&m.finished_stop),
        get(&m.ttft_count),
        get(&m.ttft_count),
        get(&m.aborted),
    )
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<EngineBody> {
    let mut response = Response::new(EngineBody::full(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// An error in vLLM's OpenAI-compatible shape.
fn error(status: StatusCode, message: &str, kind: &str) -> Response<EngineBody> {
    json_response(
        status,
        &json!({ "error": { "message": message, "type": kind, "param": null, "code": status.as_u16() } }),
    )
}

/// A whole body, or the frames of a generation as they are produced.
#[derive(Debug)]
pub enum EngineBody {
    /// Sent at once.
    Full(Option<Bytes>),
    /// Sent as generated; ends when the generator drops its sender.
    Stream(mpsc::Receiver<Bytes>),
}

impl EngineBody {
    fn full(bytes: impl Into<Bytes>) -> EngineBody {
        EngineBody::Full(Some(bytes.into()))
    }
}

impl http_body::Body for EngineBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            EngineBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            EngineBody::Stream(rx) => rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, EngineBody::Full(None))
    }

    /// A whole answer's length is known, so it goes out with
    /// `content-length` as vLLM's JSON responses do; a stream is chunked.
    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            EngineBody::Full(bytes) => {
                http_body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            EngineBody::Stream(_) => http_body::SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_a_function_of_the_prompt() {
        let a: Vec<&str> = (0..8).map(|i| word(fnv1a(b"hello"), i)).collect();
        let b: Vec<&str> = (0..8).map(|i| word(fnv1a(b"hello"), i)).collect();
        let c: Vec<&str> = (0..8).map(|i| word(fnv1a(b"other"), i)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn requests_are_read_without_parsing_the_prompt() {
        let (model, ask) = parse(
            true,
            br#"{"model":"m","messages":[{"role":"user","content":"12345678"}],"stream":true,"max_tokens":3,"stream_options":{"include_usage":true}}"#,
        )
        .expect("parse");
        assert_eq!(model, "m");
        assert!(ask.stream && ask.include_usage);
        assert_eq!(ask.max_tokens, Some(3));
        // `[{"role":"user","content":"12345678"}]` is 38 bytes: 10 tokens.
        assert_eq!(ask.prompt_tokens, 10);
        assert!(parse(true, br#"{"model":"m"}"#).is_err());
        assert!(parse(false, br#"{"prompt":"x"}"#).is_err());
    }
}
