//! Session workloads and the prefix cache on the real engine (vLLM CPU, the
//! bundled model, prefix caching on as vLLM defaults it):
//!
//! * an AgentX-shaped trace (tests/fixtures/traces/agentx_e2e.jsonl: four
//!   sessions with growing contexts, a joined and a background subagent,
//!   think times) replayed at two concurrencies with caching on and off;
//! * the reset of the prefix cache between two identical points, against a
//!   run that keeps the cache (contamination made visible), on the
//!   `chat_random` workload whose templated prompts have exactly the ISL;
//! * ShareGPT-shaped conversations with ngram speculative decoding;
//! * a Mooncake-shaped timed trace from `--trace-file` (ms arrivals, a
//!   shared partial block);
//! * parallel agent chains (tests/fixtures/traces/agentx_chains.jsonl): a
//!   top-level worker in flight beside the main agent's long turn.

use std::collections::BTreeMap;
use std::path::Path;

use enginebench::metrics::stats::median;
use serde_json::Value;

use crate::util::{engine_lock, enginebench, f, read_json, text, write_recipe};

fn requests(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn recipe_head(name: &str) -> String {
    crate::util::bundled_recipe_head(name, 2048, "")
}

#[test]
fn trace_replay_prefix_cache_figures_against_caching_off() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::util::repo().join("tests/fixtures/traces/agentx_e2e.jsonl");
    let body = format!(
        "{}[sweep]\nworkload = \"trace\"\nconc = [1, 2]\nnum_prompts = 6\n[sweep.trace]\nfile = {:?}\nwarmup_requests_per_lane = 2\n\
         [variants.nocache]\nargs_add = [\"--no-enable-prefix-caching\"]\nsweep = {{ conc = [1] }}\n",
        recipe_head("trace-e2e"),
        trace.to_str().unwrap()
    );
    let recipe = write_recipe(dir.path(), "trace", &body);
    let out = dir.path().join("out");
    let o = enginebench(&["run", &recipe, "--variants", "base,nocache", "--no-eval", "-o", out.to_str().unwrap()]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("trace conc 1") && log.contains("prefix-cache hit"), "{log}");

    let r = read_json(&out.join("result.json"));
    let job = |label: &str| r["jobs"].as_array().unwrap().iter().find(|j| j["label"] == label).unwrap().clone();
    let (base, nocache) = (job("base"), job("nocache"));
    assert_eq!(base["engine"]["enable_prefix_caching"], true);
    assert_eq!(nocache["engine"]["enable_prefix_caching"], false);
    for p in base["points"].as_array().unwrap() {
        let c = &p["prefix_cache"];
        let conc = &p["conc"];
        assert_eq!(p["workload"]["kind"], "trace", "{p}");
        assert_eq!(c["reset_before_point"], true, "conc {conc}: {c}");
        let (hit, theoretical) = (f(&c["hit_rate"]), f(&c["theoretical_token_hit_rate"]));
        assert!(f(&c["theoretical_hit_rate"]) > 0.0, "hit blocks over blocks: {c}");
        eprintln!("conc {conc}: hit rate {hit:.3}, theoretical {theoretical:.3}, scheduler {}", c["scheduler"]);
        assert!(hit > 0.0, "conc {conc}: the growing contexts hit the cache: {c}");
        assert!(theoretical >= hit, "conc {conc}: an infinite cache holds at least what vLLM's did: {c}");
        // Our per-request sum of num_cached_tokens is vLLM's scheduler count.
        let x = &c["crosscheck"];
        assert_eq!(x["agree"], true, "conc {conc}: {x}");
        assert!(f(&x["requests_cached_tokens"]) > 0.0 && x["requests_cached_tokens"] == x["scheduler_hits"], "{x}");
        let s = &p["sessions"];
        assert_eq!(s["measured_requests"], 6, "the request budget: {s}");
        assert!(s["warmup_requests"].as_u64().unwrap() > 0, "primers and warm-ups ran first: {s}");
        assert_eq!(p["completed"], 6, "{p}");
    }
    for p in nocache["points"].as_array().unwrap() {
        assert_eq!(p["prefix_cache"]["cached_tokens"], 0, "caching off: {}", p["prefix_cache"]);
    }

    // worker.log says what every replay send paid on the driver's thread
    // (issue 46): one line per replay point, its sends counted once each.
    let lines = requests(&out);
    let worker_log: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("worker") && p.extension().is_some_and(|e| e == "log"))
        .flat_map(|p| std::fs::read_to_string(p).unwrap().lines().map(String::from).collect::<Vec<_>>())
        .collect();
    let noted: u64 = worker_log
        .iter()
        .filter_map(|l| l.split("replay sends: ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(noted, lines.len() as u64, "sends in worker.log against requests.jsonl");
    // The trace's one prompt over 1,024 tokens (s1-growing's fourth turn,
    // 1,162) is staged: its list filled off the GIL from the pinned ints
    // (crate::engine::token_lists) and taken by its send, at least at conc 1.
    // Its tokens must be the trace's: the cache figures above count on them.
    let taken: u64 = worker_log
        .iter()
        .filter_map(|l| l.split("taken by their send: ").nth(1)?.trim().parse::<u64>().ok())
        .sum();
    assert!(taken > 0, "no staged prompt was taken by its send");

    // The same turn (trace, stream, turn, at conc 1) with and without the
    // cache: turns that hit it start faster.
    let key = |l: &Value| (l["trace_name"].as_str().unwrap().to_string(), l["stream"].as_u64().unwrap(), l["turn"].as_u64().unwrap());
    let nocache_ttft: BTreeMap<_, f64> = lines
        .iter()
        .filter(|l| l["label"] == "nocache" && l["conc"] == 1 && l["error"].is_null())
        .map(|l| (key(l), f(&l["ttft_ms"])))
        .collect();
    let pairs: Vec<(f64, f64, u64)> = lines
        .iter()
        .filter(|l| l["label"] == "base" && l["conc"] == 1 && l["phase"] == "measured" && l["error"].is_null())
        .filter(|l| l["cached_tokens"].as_u64().unwrap_or(0) >= 256)
        .filter_map(|l| Some((f(&l["ttft_ms"]), *nocache_ttft.get(&key(l))?, l["cached_tokens"].as_u64()?)))
        .collect();
    eprintln!("cache-hitting turns at conc 1 (TTFT ms cached, uncached, cached tokens): {pairs:?}");
    assert!(!pairs.is_empty(), "no cache-hitting measured turn was also replayed without the cache: {lines:?}");
    let (cached, uncached) = (median(&pairs.iter().map(|p| p.0).collect::<Vec<_>>()), median(&pairs.iter().map(|p| p.1).collect::<Vec<_>>()));
    eprintln!("median TTFT of those turns: {cached:.1} ms with the cache, {uncached:.1} ms without");
    assert!(cached < uncached, "cached {cached:.1} ms vs uncached {uncached:.1} ms over {pairs:?}");

    // InferenceX's agentic aggregate, from this real run.
    let exported = dir.path().join("export");
    let e = enginebench(&["export", "--format", "inferencex", out.join("result.json").to_str().unwrap(), "-o", exported.to_str().unwrap()]);
    assert_eq!(e.status.code(), Some(0), "{}", text(&e));
    let agg: Vec<Value> = std::fs::read_dir(&exported).unwrap().map(|f| read_json(&f.unwrap().path())).collect();
    let one = agg.iter().find(|a| a["conc"] == 2 && a["server_metrics"]["cache"]["prefix_cache_hits"].as_u64() > Some(0)).unwrap();
    assert_eq!(one["scenario_type"], "agentic-coding");
    assert_eq!(one["request_accounting"]["records_profiled"], 6, "{one}");
    assert!(f(&one["request_metrics"]["latency"]["ttft"]["p90"]) > 0.0, "{one}");
    assert!(f(&one["request_metrics"]["cache"]["theoretical_cache_hit_rate"]) > 0.0, "{one}");
    // The KV pool the engine reported at start, InferenceX's gpu_total_tokens:
    // vLLM's own figure (1 GiB of CPU KV cache for this model: whole blocks).
    let pool = base["engine"]["kv_cache_tokens"].as_u64().expect("the engine's KV pool in result.json");
    let block = base["engine"]["block_size"].as_u64().unwrap();
    assert!(pool > 0 && pool % block == 0, "pool {pool} tokens, block {block}");
    assert_eq!(one["server_metrics"]["kv_cache"]["gpu_total_tokens"].as_u64(), Some(pool), "{one}");
    assert_eq!(one["kv_cache_pool_tokens"].as_u64(), Some(pool));
}

/// A Mooncake-shaped trace (tests/fixtures/traces/mooncake_shaped.jsonl:
/// timestamps in ms, 512-token blocks, a row that repeats a prompt whose last
/// block is partial) straight from `--trace-file`, its format and unit read
/// off the file: arrivals as recorded, and the repeated row finds its
/// partial block cached. Two rows added here are long prompts (1,024 tokens
/// or more) with another output length than the first, due together: the
/// shim makes them from the first one's request and share one processed
/// SamplingParams (steppath `_token_request`), and the tests'
/// ENGINEBENCH_CHECK_SWAP compares each with vLLM's input processor's own
/// (the second while the first, whose params it shares, is in flight).
#[test]
fn a_mooncake_trace_from_the_command_line() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let fixture = crate::util::repo().join("tests/fixtures/traces/mooncake_shaped.jsonl");
    let trace = dir.path().join("mooncake_shaped.jsonl");
    let mut rows = std::fs::read_to_string(&fixture).unwrap();
    for isl in [1200, 1300] {
        rows.push_str(&format!("{{\"timestamp\": 2400, \"input_length\": {isl}, \"output_length\": 2, \"hash_ids\": [9001, 9002, 9003]}}\n"));
    }
    std::fs::write(&trace, rows).unwrap();
    // A random-workload recipe (its ISL/OSL unused); the trace, its format and
    // unit come from the command line, as with the default recipe.
    let body = format!("{}[sweep]\nisl = 64\nosl = 4\nconc = [4]\nnum_prompts = 4\n", recipe_head("mooncake-e2e"));
    let recipe = write_recipe(dir.path(), "mooncake", &body);
    let out = dir.path().join("out");
    let o = enginebench(&["run", &recipe, "--trace-file", trace.to_str().unwrap(), "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let lines = requests(&out);
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(lines.iter().map(|l| l["output_tokens"].as_u64().unwrap()).collect::<Vec<_>>(), [3, 3, 3, 3, 2, 2], "{lines:?}");
    let sends: Vec<f64> = lines.iter().map(|l| f(&l["send_s"])).collect();
    for (i, recorded) in [0.0, 0.6, 1.2, 1.8].iter().enumerate() {
        let late = sends[i] - sends[0] - recorded;
        // Never early; late by at most a few engine steps: the first is a
        // fresh engine's first forward (no warm-up here), 3.4-6.4 s on the
        // 2-core VM under load. Units misread as seconds would be 600 s off.
        assert!((-0.01..30.0).contains(&late), "request {i} sent {late:.3} s off its recorded {recorded} s (ms timestamps): {sends:?}");
    }
    let cached: Vec<u64> = lines.iter().map(|l| l["cached_tokens"].as_u64().unwrap()).collect();
    eprintln!("mooncake-shaped: sends {sends:?}, cached tokens {cached:?}");
    // Marker (8) + the full block (512) is all an unnamed tail would give;
    // the repeated row also finds its 188-token partial block.
    assert!(cached[2] > 8 + 512, "the repeated partial block is hit: {cached:?}");
    let r = read_json(&out.join("result.json"));
    let c = &r["jobs"][0]["points"][0]["prefix_cache"];
    assert_eq!(f(&c["theoretical_hit_rate"]), 10.0 / 14.0, "10 hit blocks of 14, by InferenceX's rule: {c}");
}

#[test]
fn parallel_agent_chains_run_beside_the_main_agent_on_the_engine() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::util::repo().join("tests/fixtures/traces/agentx_chains.jsonl");
    // From turn 0, no warm-up, the trace played once; its block size (16)
    // comes from the file.
    let body = format!(
        "{}[sweep]\nworkload = \"trace\"\nconc = [1]\n[sweep.trace]\nfile = {:?}\nstart_ratio = [0.0, 0.0]\n\
         warmup_requests_per_lane = 0\nrequest_budget = false\n",
        recipe_head("chains-e2e"),
        trace
    );
    let recipe = write_recipe(dir.path(), "chains", &body);
    let out = dir.path().join("out");
    let o = enginebench(&["run", &recipe, "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let lines = requests(&out);
    assert_eq!(lines.len(), 10, "every request once");
    let find = |stream: u64, turn: u64| {
        lines.iter().find(|l| l["stream"].as_u64() == Some(stream) && l["turn"].as_u64() == Some(turn)).unwrap()
    };
    let end = |l: &Value| f(&l["send_s"]) + f(&l["e2el_ms"]) / 1000.0;
    // Root turn 1 generates 300 tokens (seconds on the CPU engine); the
    // worker chain (stream 3) starts 2 s after root turn 0 ends.
    let (r1, w0) = (find(0, 1), find(3, 0));
    assert_eq!(r1["output_tokens"].as_u64(), Some(300));
    assert!(f(&w0["send_s"]) < end(r1), "the worker runs beside root turn 1: {w0} / {r1}");
    assert!(f(&w0["send_s"]) >= end(find(0, 0)) + 2.0 - 0.01, "not before its recorded offset");
}

#[test]
fn each_point_starts_cold_and_chat_prompts_have_the_asked_length() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    // Two identical points (same concurrency, so the same seed and prompts):
    // with the reset the second starts cold; keeping the cache, the second
    // point's requests find the first's prompts already cached.
    let body = format!(
        "{}[sweep]\nworkload = \"chat_random\"\nisl = 64\nosl = 4\nprefix_len = 256\nconc = [2, 2]\nnum_prompts = 4\nwarmups = 0\n\
         [variants.keep]\nsweep = {{ reset_prefix_cache = false }}\n",
        recipe_head("reset-e2e")
    );
    let recipe = write_recipe(dir.path(), "reset", &body);
    let out = dir.path().join("out");
    let o = enginebench(&["run", &recipe, "--variants", "base,keep", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let lines = requests(&out);
    let point = |label: &str, p: u64| -> Vec<&Value> { lines.iter().filter(|l| l["label"] == label && l["point"] == p).collect() };
    // chat_random: the template's tokens are inside the ISL, exactly.
    assert!(lines.iter().all(|l| l["input_tokens"] == 256 + 64), "prefix + ISL tokens after templating: {lines:?}");
    let cached = |ls: &[&Value]| -> Vec<u64> { ls.iter().map(|l| l["cached_tokens"].as_u64().unwrap()).collect() };
    let (b0, b1, k1) = (cached(&point("base", 0)), cached(&point("base", 1)), cached(&point("keep", 1)));
    eprintln!("cached tokens per request: base point 0 {b0:?}, point 1 {b1:?}; keep point 1 {k1:?}");
    // A point's first request finds nothing cached after the reset; the
    // ones after it find the shared prefix the first one computed.
    assert_eq!(b1[0], 0, "the reset: point 1 starts cold");
    assert!(b1[1..].iter().all(|&c| c >= 256) && b0[1..].iter().all(|&c| c >= 256), "the prefix is cached within a point");
    assert!(k1[0] >= 256, "without the reset point 1's first request hits point 0's entries: {k1:?}");
    let r = read_json(&out.join("result.json"));
    let keep = r["jobs"].as_array().unwrap().iter().find(|j| j["label"] == "keep").unwrap();
    assert_eq!(keep["points"][1]["prefix_cache"]["reset_before_point"], false);
}

#[test]
fn conversations_with_ngram_speculation() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let file = crate::util::repo().join("tests/fixtures/traces/sharegpt.json");
    let body = format!(
        "{}[sweep]\nworkload = \"conversation\"\nconc = [2]\nnum_prompts = 8\n[sweep.conversation]\nfile = {:?}\n\
         [variants.ngram]\nargs_add = [\"--speculative-config\", '{{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 3}}']\n",
        recipe_head("conv-e2e"),
        file.to_str().unwrap()
    );
    let recipe = write_recipe(dir.path(), "conv", &body);
    let out = dir.path().join("out");
    let o = enginebench(&["run", &recipe, "--variant", "ngram", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = read_json(&out.join("result.json"));
    let p = &r["jobs"][0]["points"][0];
    assert_eq!(p["completed"], 8, "{p}");
    let s = &p["spec_decode"];
    eprintln!("ngram on conversations: acceptance rate {}, length {}, drafts {}", s["acceptance_rate"], s["acceptance_length"], s["drafts"]);
    assert!(s["drafts"].as_u64().unwrap() > 0, "{s}");
    assert!(s["acceptance_rate"].is_number(), "{s}");
    // Turns resend the conversation so far: later turns find it cached.
    assert!(f(&p["prefix_cache"]["cached_tokens"]) >= 0.0 && p["sessions"]["sessions"].as_u64().unwrap() >= 2, "{p}");
    let lines = requests(&out);
    assert!(lines.iter().any(|l| l["turn"].as_u64() > Some(0)), "multi-turn conversations: {lines:?}");
}
