//! A closed-loop streaming client for an OpenAI-compatible `/v1/completions`
//! endpoint that times every request as `vllm bench serve` does
//! (vllm/benchmarks/serve.py `benchmark`, and `async_request_openai_completions`
//! in vllm/benchmarks/lib/endpoint_request_func.py, vLLM 0.32.0).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;
use tokio::sync::Semaphore;

use super::sse::{SseParser, StreamMessage, Usage, clip, error_text};
use crate::protocol::RequestRecord;

/// Where and how to send requests.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server root, e.g. `http://127.0.0.1:8000` (requests go to `/v1/completions`).
    pub base_url: String,
    /// The `model` field (the server's model id, see `VllmServer::model_id`).
    pub model: String,
    /// Requests in flight at most (bench serve's `--max-concurrency`: a
    /// semaphore around each request); at least 1.
    pub max_concurrency: usize,
    /// Sent as `ignore_eos` (bench serve's `--ignore-eos`).
    pub ignore_eos: bool,
    /// Whole-request timeout (bench serve's aiohttp timeout: 6 h).
    pub timeout: Duration,
}

impl ClientConfig {
    /// `ignore_eos` on, 6 h timeout.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>, max_concurrency: usize) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            model: model.into(),
            max_concurrency,
            ignore_eos: true,
            timeout: Duration::from_secs(6 * 3600),
        }
    }
}

/// What one benchmark run measured.
#[derive(Debug, Clone, Default)]
pub struct ServeOutcome {
    /// One record per request, in the order given. Times are seconds since
    /// the benchmark start; see [`run_benchmark`] for each field's source.
    pub records: Vec<RequestRecord>,
    /// Benchmark duration, s: from the benchmark start (before the first
    /// request is released) until every request has finished, as bench
    /// serve's `benchmark_duration`.
    pub duration_s: f64,
}

/// Sends `prompts[i]` (token ids, as the `prompt` array of /v1/completions)
/// with `max_tokens[i]`, greedy (`temperature: 0`), streaming with
/// `stream_options.include_usage`, at most `cfg.max_concurrency` at a time,
/// and times each request as vLLM's `async_request_openai_completions`:
///
/// - `send_s`: the clock read just before the POST (after the concurrency
///   semaphore is acquired), bench serve's `start_time`.
/// - `first_token_s`: when the first SSE chunk with non-empty `choices` is
///   processed (its text may be empty): TTFT = `first_token_s - send_s`.
/// - `itl_s`: the gap between each later chunk with non-empty `choices` and
///   the previous one (one entry per chunk, not per token, as bench serve).
/// - `last_token_s`: the last such chunk (bench serve's `latency` is
///   measured to it, not to `[DONE]`): E2EL = `last_token_s - send_s`.
/// - `output_tokens`: `usage.completion_tokens` of the final usage chunk
///   (if the server sends none: the number of token chunks);
///   `input_tokens`: `usage.prompt_tokens`, else the prompt's length.
///
/// A request fails (its `error` is set, never dropped) on a connection
/// error, an HTTP status other than 200 (status and error message), an error
/// event in the stream, a broken or truncated body, no token chunk ("never
/// received a valid chunk", as bench serve), or a stream that ends without
/// `data: [DONE]` (stricter than bench serve, which cannot tell a cut
/// stream from a finished one).
///
/// `arrivals`, if given, are request-rate release times (s after the start,
/// one per request, non-decreasing), as `workload::arrivals` makes them;
/// released requests still wait for the semaphore. Without them all requests
/// are released at once (closed loop at `max_concurrency`).
///
/// Runs on a current-thread tokio runtime created here (bench serve runs one
/// asyncio loop). Errors only for bad arguments or if no runtime or HTTP
/// client can be built.
pub fn run_benchmark(
    cfg: &ClientConfig,
    prompts: &[Vec<u32>],
    max_tokens: &[u32],
    arrivals: Option<&[f64]>,
) -> Result<ServeOutcome> {
    ensure!(prompts.len() == max_tokens.len(), "{} prompts but {} max_tokens", prompts.len(), max_tokens.len());
    if let Some(a) = arrivals {
        ensure!(a.len() == prompts.len(), "{} prompts but {} arrival times", prompts.len(), a.len());
        ensure!(a.iter().all(|t| t.is_finite() && *t >= 0.0), "arrival times must be finite and >= 0");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    rt.block_on(bench(cfg, prompts, max_tokens, arrivals))
}

async fn bench(cfg: &ClientConfig, prompts: &[Vec<u32>], max_tokens: &[u32], arrivals: Option<&[f64]>) -> Result<ServeOutcome> {
    let conc = cfg.max_concurrency.max(1);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(cfg.timeout)
        .pool_max_idle_per_host(conc)
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")?;
    let url: Arc<str> = format!("{}/v1/completions", cfg.base_url.trim_end_matches('/')).into();
    // Bodies are serialised before the clock starts.
    let bodies: Vec<Vec<u8>> = prompts
        .iter()
        .zip(max_tokens)
        .map(|(p, &n)| serde_json::to_vec(&payload(cfg, p, n)))
        .collect::<Result<_, _>>()?;
    let semaphore = Arc::new(Semaphore::new(conc));
    let origin = Instant::now();
    let mut tasks = Vec::with_capacity(prompts.len());
    for (i, body) in bodies.into_iter().enumerate() {
        if let Some(a) = arrivals {
            tokio::time::sleep_until((origin + Duration::from_secs_f64(a[i])).into()).await;
        }
        let (http, url, semaphore) = (http.clone(), url.clone(), semaphore.clone());
        let prompt_len = prompts[i].len() as u32;
        tasks.push(tokio::spawn(async move {
            let _permit = semaphore.acquire_owned().await.expect("semaphore never closed");
            one_request(&http, &url, body, prompt_len, origin).await
        }));
    }
    let mut records = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok(r) => records.push(r),
            Err(e) => bail!("request task failed: {e}"),
        }
    }
    Ok(ServeOutcome { records, duration_s: origin.elapsed().as_secs_f64() })
}

/// The request body bench serve sends for the `vllm`/`openai` backend, plus
/// `temperature: 0` (greedy, what `--temperature 0` adds).
fn payload(cfg: &ClientConfig, prompt: &[u32], max_tokens: u32) -> serde_json::Value {
    let mut p = json!({
        "model": cfg.model,
        "prompt": prompt,
        "repetition_penalty": 1.0,
        "max_tokens": max_tokens,
        "logprobs": null,
        "stream": true,
        "stream_options": { "include_usage": true },
        "temperature": 0.0,
    });
    if cfg.ignore_eos {
        p["ignore_eos"] = json!(true);
    }
    p
}

/// What a stream has shown so far.
struct Timeline {
    origin: Instant,
    most_recent: Instant,
    chunks: u32,
    usage: Option<Usage>,
    done: bool,
}

impl Timeline {
    /// Applies one message to `rec`; returns an error message for error events.
    fn on_message(&mut self, msg: StreamMessage, rec: &mut RequestRecord) -> Option<String> {
        match msg {
            StreamMessage::Token { .. } => {
                let now = Instant::now();
                if self.chunks == 0 {
                    rec.first_token_s = Some(secs(now - self.origin));
                } else {
                    rec.itl_s.push(secs(now - self.most_recent));
                }
                self.most_recent = now;
                self.chunks += 1;
                rec.last_token_s = Some(secs(now - self.origin));
                None
            }
            StreamMessage::Usage(u) => {
                self.usage = Some(u);
                None
            }
            StreamMessage::Done => {
                self.done = true;
                None
            }
            StreamMessage::Error(e) => Some(format!("error event: {e}")),
            StreamMessage::Other => None,
        }
    }
}

async fn one_request(http: &reqwest::Client, url: &str, body: Vec<u8>, prompt_len: u32, origin: Instant) -> RequestRecord {
    let st = Instant::now();
    let mut rec = RequestRecord { input_tokens: prompt_len, send_s: secs(st - origin), ..Default::default() };
    let error = stream_request(http, url, body, st, origin, &mut rec).await.err();
    rec.error = error;
    rec
}

async fn stream_request(
    http: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    st: Instant,
    origin: Instant,
    rec: &mut RequestRecord,
) -> Result<(), String> {
    let mut resp = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {}", chain(&e)))?;
    let status = resp.status();
    if status != reqwest::StatusCode::OK {
        let text = resp.text().await.unwrap_or_default();
        let detail = match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) => error_text(&v),
            Err(_) => clip(text.trim(), 500),
        };
        return Err(format!("HTTP {status}: {detail}"));
    }
    let mut parser = SseParser::new();
    let mut tl = Timeline { origin, most_recent: st, chunks: 0, usage: None, done: false };
    let mut first_error: Option<String> = None;
    loop {
        let bytes = match resp.chunk().await {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => {
                first_error.get_or_insert(format!("stream broken after {} chunks: {}", tl.chunks, chain(&e)));
                break;
            }
        };
        let events = parser.feed(&bytes)?;
        for ev in events {
            if let Some(e) = tl.on_message(StreamMessage::parse(&ev), rec) {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(ev) = parser.finish() {
        if let Some(e) = tl.on_message(StreamMessage::parse(&ev), rec) {
            first_error.get_or_insert(e);
        }
    }
    rec.output_tokens = tl.usage.and_then(|u| u.completion_tokens).unwrap_or(tl.chunks);
    if let Some(pt) = tl.usage.and_then(|u| u.prompt_tokens) {
        rec.input_tokens = pt;
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if tl.chunks == 0 {
        return Err("Never received a valid chunk to calculate TTFT.".to_string());
    }
    if !tl.done {
        return Err(format!("stream ended without data: [DONE] after {} chunks", tl.chunks));
    }
    Ok(())
}

/// An error and its sources, `: `-joined (reqwest's own message is terse).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
