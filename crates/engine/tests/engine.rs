//! The fake engine over loopback HTTP: OpenAI shapes whole and streamed,
//! deterministic answers and usage, queueing beyond `max_concurrency`,
//! vLLM's metric names, vLLM's errors.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use modelplane_engine::{EngineConfig, EngineHandle};
use serde_json::{Value, json};

async fn call(
    engine: &EngineHandle,
    method: &str,
    path: &str,
    body: Value,
    auth: Option<&str>,
) -> (u16, String) {
    let (status, _, body) = exchange(engine, method, path, body, auth).await;
    (status, body)
}

/// [`call`] with the response's headers.
async fn exchange(
    engine: &EngineHandle,
    method: &str,
    path: &str,
    body: Value,
    auth: Option<&str>,
) -> (u16, http::HeaderMap, String) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", engine.addr))
        .header("content-type", "application/json");
    if let Some(key) = auth {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let response = client
        .request(request.body(Full::new(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn engine(config: EngineConfig) -> EngineHandle {
    EngineHandle::start(config).expect("engine")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_are_deterministic_with_correct_usage() {
    let e = engine(EngineConfig {
        model: "m".into(),
        output_tokens: 5,
        ..EngineConfig::default()
    });
    let ask = json!({ "model": "m", "messages": [{ "role": "user", "content": "hello there" }] });
    let (status, first) = call(&e, "POST", "/v1/chat/completions", ask.clone(), None).await;
    assert_eq!(status, 200, "{first}");
    let first: Value = serde_json::from_str(&first).expect("json");
    let (_, second) = call(&e, "POST", "/v1/chat/completions", ask.clone(), None).await;
    let second: Value = serde_json::from_str(&second).expect("json");
    assert_eq!(first["object"], "chat.completion");
    let text = first["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    assert_eq!(
        text,
        second["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
    );
    assert_eq!(text.split(' ').count(), 5);
    assert_eq!(first["choices"][0]["finish_reason"], "stop");
    // One prompt token per 4 bytes of `messages` as sent.
    let messages_len = ask["messages"].to_string().len() as u64;
    assert_eq!(
        first["usage"],
        json!({ "prompt_tokens": messages_len.div_ceil(4), "completion_tokens": 5, "total_tokens": messages_len.div_ceil(4) + 5 })
    );
    let (_, completion) = call(
        &e,
        "POST",
        "/v1/completions",
        json!({ "model": "m", "prompt": "hi", "max_tokens": 3 }),
        None,
    )
    .await;
    let completion: Value = serde_json::from_str(&completion).expect("json");
    assert_eq!(completion["object"], "text_completion");
    assert_eq!(completion["choices"][0]["finish_reason"], "length");
    assert_eq!(completion["usage"]["completion_tokens"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_follow_openai_chunk_shapes() {
    let e = engine(EngineConfig {
        model: "m".into(),
        ..EngineConfig::default()
    });
    let ask = json!({ "model": "m", "messages": [], "stream": true, "max_tokens": 3, "stream_options": { "include_usage": true } });
    let (status, body) = call(&e, "POST", "/v1/chat/completions", ask, None).await;
    assert_eq!(status, 200);
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("data")).expect("chunk"))
        .collect();
    // Three tokens, the finish, the usage.
    assert_eq!(chunks.len(), 5);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks[1]["choices"][0]["delta"].get("role").is_none());
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[4]["choices"], json!([]));
    assert_eq!(chunks[4]["usage"]["completion_tokens"], 3);
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"])
    );
}

/// vLLM answers a whole completion as one JSON response with its length
/// (FastAPI's JSONResponse) and streams with chunked transfer encoding; a
/// proxy in front sees exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_carry_their_length_and_streams_are_chunked() {
    let e = engine(EngineConfig {
        model: "m".into(),
        output_tokens: 3,
        ..EngineConfig::default()
    });
    for (stream, length, chunked) in [(false, true, false), (true, false, true)] {
        let ask = json!({ "model": "m", "messages": [], "stream": stream });
        let (_, headers, body) = exchange(&e, "POST", "/v1/chat/completions", ask, None).await;
        let declared = headers
            .get("content-length")
            .map(|v| v.to_str().expect("ascii").parse::<usize>().expect("number"));
        assert_eq!(declared.is_some(), length, "stream {stream}: {headers:?}");
        if let Some(declared) = declared {
            assert_eq!(declared, body.len());
        }
        assert_eq!(
            headers
                .get("transfer-encoding")
                .is_some_and(|v| v == "chunked"),
            chunked,
            "stream {stream}: {headers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_max_concurrency_wait_their_turn() {
    let e = engine(EngineConfig {
        model: "m".into(),
        output_tokens: 4,
        inter_token_latency: Duration::from_millis(50),
        max_concurrency: 1,
        ..EngineConfig::default()
    });
    let started = Instant::now();
    let ask = json!({ "model": "m", "prompt": "x" });
    let first = call(&e, "POST", "/v1/completions", ask.clone(), None);
    let second = call(&e, "POST", "/v1/completions", ask.clone(), None);
    let watcher = async {
        let mut saw_waiting = false;
        for _ in 0..40 {
            let (_, metrics) = call(&e, "GET", "/metrics", Value::Null, None).await;
            saw_waiting |= metrics.contains("vllm:num_requests_waiting{model_name=\"m\"} 1");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        saw_waiting
    };
    let ((a, _), (b, _), saw_waiting) = tokio::join!(first, second, watcher);
    assert_eq!((a, b), (200, 200));
    assert!(saw_waiting, "the second request was queued");
    // One after the other: two answers of 150 ms each.
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_models_health_and_errors_look_like_vllm() {
    let e = engine(EngineConfig {
        model: "m".into(),
        api_key: Some("k".into()),
        ..EngineConfig::default()
    });
    assert_eq!(call(&e, "GET", "/health", Value::Null, None).await.0, 200);
    let (status, error) = call(
        &e,
        "POST",
        "/v1/completions",
        json!({ "model": "m", "prompt": "x" }),
        None,
    )
    .await;
    assert_eq!(status, 401, "{error}");
    let (status, models) = call(&e, "GET", "/v1/models", Value::Null, Some("k")).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&models).expect("json")["data"][0]["id"],
        "m"
    );
    let (status, error) = call(
        &e,
        "POST",
        "/v1/completions",
        json!({ "model": "other", "prompt": "x" }),
        Some("k"),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&error).expect("json")["error"]["message"],
        "The model `other` does not exist."
    );
    let (status, _) = call(
        &e,
        "POST",
        "/v1/completions",
        json!({ "model": "m" }),
        Some("k"),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        call(
            &e,
            "POST",
            "/v1/completions",
            json!({ "model": "m", "prompt": "x" }),
            Some("k")
        )
        .await
        .0,
        200
    );
    let (_, metrics) = call(&e, "GET", "/metrics", Value::Null, None).await;
    for name in [
        "vllm:num_requests_running{model_name=\"m\"} 0",
        "vllm:num_requests_waiting{model_name=\"m\"} 0",
        "vllm:prompt_tokens_total{model_name=\"m\"} 1",
        "vllm:generation_tokens_total{model_name=\"m\"} 16",
        "vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} 1",
        "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 1",
    ] {
        assert!(metrics.contains(name), "{name} missing from\n{metrics}");
    }
}
