//! The client against a tiny in-test HTTP/1.1 server that writes canned SSE
//! responses with controlled delays. The first prompt token id picks the
//! script (see `respond`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

const OK_STREAM: u32 = 0;
const HTTP_500: u32 = 1;
const DISCONNECT: u32 = 2;
const ERROR_EVENT: u32 = 3;
const NO_RESPONSE: u32 = 4;
const NO_DONE: u32 = 5;
const ONE_TOKEN_100MS: u32 = 6;

#[derive(Default)]
struct Seen {
    bodies: Mutex<Vec<serde_json::Value>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// Starts the canned server on its own thread; returns its base URL.
fn canned_server() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let n = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.max_in_flight.fetch_max(n, Ordering::SeqCst);
                    let _ = serve_one(sock, &seen).await;
                    seen.in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    });
    let port = rx.recv().unwrap();
    (format!("http://127.0.0.1:{port}"), seen)
}

async fn serve_one(mut sock: TcpStream, seen: &Seen) -> std::io::Result<()> {
    // read the head, then Content-Length bytes of body
    let mut buf = Vec::new();
    let head_end = loop {
        let mut tmp = [0u8; 4096];
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let mut tmp = [0u8; 4096];
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body: serde_json::Value = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap();
    let script = body["prompt"][0].as_u64().unwrap() as u32;
    let prompt_len = body["prompt"].as_array().unwrap().len();
    seen.bodies.lock().unwrap().push(body);
    respond(&mut sock, script, prompt_len).await
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    transfer-encoding: chunked\r\nconnection: close\r\n\r\n";

/// One HTTP/1.1 chunk.
async fn chunk(sock: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    sock.write_all(format!("{:x}\r\n", data.len()).as_bytes()).await?;
    sock.write_all(data).await?;
    sock.write_all(b"\r\n").await?;
    sock.flush().await
}

fn token(text: &str) -> String {
    format!("data: {}\n\n", serde_json::json!({"object": "text_completion", "choices": [{"index": 0, "text": text}]}))
}

fn usage(prompt: usize, completion: u32) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
    )
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn respond(sock: &mut TcpStream, script: u32, prompt_len: usize) -> std::io::Result<()> {
    match script {
        OK_STREAM => {
            sock.write_all(SSE_HEAD).await?;
            chunk(sock, b": ping\n\n").await?;
            sleep_ms(100).await;
            chunk(sock, token("a").as_bytes()).await?;
            sleep_ms(50).await;
            // an event split inside "data:" and inside the UTF-8 of "é",
            // completed 30 ms later
            let t = token("\u{e9}");
            let bytes = t.as_bytes();
            let cut = t.find('\u{e9}').unwrap() + 1;
            chunk(sock, &bytes[..3]).await?;
            chunk(sock, &bytes[3..cut]).await?;
            sleep_ms(30).await;
            chunk(sock, &bytes[cut..]).await?;
            sleep_ms(50).await;
            let tail = format!("{}{}data: [DONE]\n\n", token("c"), usage(prompt_len, 3));
            chunk(sock, tail.as_bytes()).await?;
            sock.write_all(b"0\r\n\r\n").await
        }
        HTTP_500 => {
            let body = r#"{"error":{"message":"engine is dead","type":"InternalServerError","param":null,"code":500}}"#;
            let resp = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            sock.write_all(resp.as_bytes()).await
        }
        DISCONNECT => {
            sock.write_all(SSE_HEAD).await?;
            chunk(sock, token("a").as_bytes()).await?;
            sleep_ms(20).await;
            Ok(()) // dropped: the chunked body never ends
        }
        ERROR_EVENT => {
            sock.write_all(SSE_HEAD).await?;
            chunk(sock, token("a").as_bytes()).await?;
            let err = r#"data: {"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}"#;
            chunk(sock, format!("{err}\n\ndata: [DONE]\n\n").as_bytes()).await?;
            sock.write_all(b"0\r\n\r\n").await
        }
        NO_RESPONSE => Ok(()),
        NO_DONE => {
            // body delimited by connection close: looks complete to HTTP
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n").await?;
            sock.write_all(token("a").as_bytes()).await?;
            sock.shutdown().await
        }
        ONE_TOKEN_100MS => {
            sock.write_all(SSE_HEAD).await?;
            sleep_ms(100).await;
            let all = format!("{}{}data: [DONE]\n\n", token("x"), usage(prompt_len, 1));
            chunk(sock, all.as_bytes()).await?;
            sock.write_all(b"0\r\n\r\n").await
        }
        _ => unreachable!(),
    }
}

/// How late a timestamp may be on a loaded machine: the canned delays give
/// exact lower bounds; the upper bound only keeps events from being merged
/// or attributed to the wrong chunk.
const SLACK: f64 = 0.5;

fn near(x: f64, want: f64, below: f64, above: f64) -> bool {
    x >= want - below && x <= want + above
}

#[test]
fn times_a_stream_as_bench_serve() {
    let (url, seen) = canned_server();
    let cfg = ClientConfig::new(url, "m", 1);
    let out = run_benchmark(&cfg, &[vec![OK_STREAM, 11, 12, 13]], &[3], None).unwrap();
    let r = &out.records[0];
    assert_eq!(r.error, None, "{r:?}");
    assert!(r.ok());
    assert_eq!((r.input_tokens, r.output_tokens), (4, 3));
    // TTFT at the first token chunk (the ": ping" comment does not count)
    let ttft = r.ttft_s().unwrap();
    assert!(near(ttft, 0.100, 0.0, SLACK), "ttft {ttft}");
    // one ITL per later token chunk; the split event counts when complete.
    // The canned sleeps bound each token's arrival from below (a late chunk
    // makes the next gap shorter than its sleep), so the bounds are on the
    // arrival times: 100, 180 and 230 ms after the send.
    assert_eq!(r.itl_s.len(), 2, "{r:?}");
    let second = ttft + r.itl_s[0];
    let third = second + r.itl_s[1];
    assert!(near(second, 0.180, 0.0, SLACK), "{:?}", r.itl_s);
    assert!(near(third, 0.230, 0.0, SLACK), "{:?}", r.itl_s);
    assert!(r.itl_s.iter().all(|&g| g > 0.0 && g < SLACK), "{:?}", r.itl_s);
    let e2el = r.e2el_s().unwrap();
    assert!((e2el - (ttft + r.itl_s.iter().sum::<f64>())).abs() < 1e-9);
    assert!(near(e2el, 0.230, 0.0, SLACK), "e2el {e2el}");
    assert!(r.send_s >= 0.0 && r.send_s < SLACK);
    assert!(out.duration_s >= e2el);
    // the payload is bench serve's, greedy
    let body = &seen.bodies.lock().unwrap()[0];
    assert_eq!(body["prompt"], serde_json::json!([0, 11, 12, 13]));
    assert_eq!(body["max_tokens"], 3);
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["ignore_eos"], true);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["model"], "m");
}

#[test]
fn failures_become_failed_records() {
    let (url, _) = canned_server();
    let cfg = ClientConfig::new(url, "m", 8);
    let scripts = [HTTP_500, DISCONNECT, ERROR_EVENT, NO_RESPONSE, NO_DONE, OK_STREAM];
    let prompts: Vec<Vec<u32>> = scripts.iter().map(|&s| vec![s, 7]).collect();
    let out = run_benchmark(&cfg, &prompts, &[3; 6], None).unwrap();
    assert_eq!(out.records.len(), 6, "no request is dropped");
    let err = |i: usize| out.records[i].error.clone().unwrap_or_default();
    assert!(err(0).contains("HTTP 500") && err(0).contains("engine is dead"), "{}", err(0));
    assert!(err(1).contains("stream broken after 1 chunks"), "{}", err(1));
    assert!(err(2).contains("error event") && err(2).contains("Internal server error"), "{}", err(2));
    assert!(err(3).contains("request failed"), "{}", err(3));
    assert!(err(4).contains("without data: [DONE]"), "{}", err(4));
    for r in &out.records[..5] {
        assert!(!r.ok(), "{r:?}");
    }
    assert!(out.records[5].ok(), "{:?}", out.records[5]);
}

#[test]
fn connection_refused_is_a_failed_record() {
    // a port nobody listens on
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = ClientConfig::new(format!("http://127.0.0.1:{port}"), "m", 1);
    let out = run_benchmark(&cfg, &[vec![1, 2]], &[1], None).unwrap();
    assert!(out.records[0].error.as_deref().unwrap().contains("request failed"), "{:?}", out.records[0]);
}

#[test]
fn concurrency_cap_holds_requests_back() {
    let (url, seen) = canned_server();
    let cfg = ClientConfig::new(url, "m", 2);
    let prompts = vec![vec![ONE_TOKEN_100MS]; 4];
    let out = run_benchmark(&cfg, &prompts, &[1; 4], None).unwrap();
    assert!(out.records.iter().all(|r| r.ok()), "{:?}", out.records);
    assert!(seen.max_in_flight.load(Ordering::SeqCst) <= 2);
    let mut sends: Vec<f64> = out.records.iter().map(|r| r.send_s).collect();
    sends.sort_by(f64::total_cmp);
    assert!(sends[1] < 0.05 && sends[2] >= 0.1, "{sends:?}");
    assert!(out.duration_s >= 0.2, "{}", out.duration_s);
    // send_s is after the semaphore: TTFT stays ~100 ms for every request
    assert!(out.records.iter().all(|r| near(r.ttft_s().unwrap(), 0.1, 0.0, SLACK)));
    assert!(out.records.iter().all(|r| r.itl_s.is_empty() && r.output_tokens == 1 && r.tpot_s().is_none()));
}

#[test]
fn arrivals_release_requests_on_schedule() {
    let (url, _) = canned_server();
    let cfg = ClientConfig::new(url, "m", 4);
    let prompts = vec![vec![ONE_TOKEN_100MS]; 2];
    let out = run_benchmark(&cfg, &prompts, &[1; 2], Some(&[0.0, 0.25])).unwrap();
    assert!(out.records[0].send_s < SLACK);
    assert!(near(out.records[1].send_s, 0.25, 0.0, SLACK), "{:?}", out.records[1]);
    assert!(out.duration_s >= 0.35);
}

#[test]
fn bad_arguments_are_errors() {
    let cfg = ClientConfig::new("http://127.0.0.1:9", "m", 1);
    assert!(run_benchmark(&cfg, &[vec![1]], &[1, 2], None).is_err());
    assert!(run_benchmark(&cfg, &[vec![1]], &[1], Some(&[])).is_err());
    assert!(run_benchmark(&cfg, &[vec![1]], &[1], Some(&[f64::NAN])).is_err());
}
