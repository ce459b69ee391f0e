//! The foreign readers on files written here, in our own words, with the
//! shapes of vLLM 0.32's `vllm bench serve` result (with and without
//! `--save-detailed`), ATOM's `benchmark_serving.py`, InferenceX's
//! aggregate rows and lm-eval 0.4.10's results and samples, each compared
//! with a hand-made run of ours; and the round trip: `export`, then
//! `compare` against the original, gives zero deltas.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::ab::compare::{Options, compare};
use crate::ab::gate::Outcome;
use crate::ab::metric::Metric;
use crate::ab::stats::IntervalMethod;
use crate::ab::tests::{arm, context, repeat};
use crate::error::UsageError;

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
    p
}

fn load_foreign(path: &Path, hints: Hints) -> Arm {
    match load(path, None, "baseline", "--baseline-label", hints).unwrap() {
        Side::Foreign(a) => a,
        Side::Ours(..) => panic!("{} read as ours", path.display()),
    }
}

fn is_usage(e: &anyhow::Error) -> bool {
    e.downcast_ref::<UsageError>().is_some()
}

/// Our run: ISL/OSL 64/16 at `concs`, 8 requests each (TTFT 100 ms, TPOT
/// 50 x (1 + conc/10) ms), `repeats` repeats, GSM8K answers `correct`.
fn ours(concs: &[u32], repeats: usize, correct: &[bool]) -> Arm {
    arm("mine", (0..repeats).map(|i| repeat("mine", concs, 8, 1.0 + 0.01 * i as f64, if i == 0 { correct } else { &[] })).collect())
}

fn median(v: &[f64]) -> f64 {
    crate::metrics::stats::median(v)
}

/// The figures every bench-serve writer puts in a result: `n` requests of
/// 64 + 16 tokens at `conc`, each with TTFT `ttft_ms` (+1% every third)
/// and TPOT `tpot_ms`, run in a closed loop.
struct Run {
    ttfts: Vec<f64>,
    itls: Vec<Vec<f64>>,
    latencies: Vec<f64>,
    doc: serde_json::Map<String, Value>,
}

fn run_of(conc: u32, n: usize, ttft_ms: f64, tpot_ms: f64) -> Run {
    let ttfts: Vec<f64> = (0..n).map(|i| ttft_ms / 1000.0 * (1.0 + 0.01 * (i % 3) as f64)).collect();
    let itls: Vec<Vec<f64>> = (0..n).map(|_| vec![tpot_ms / 1000.0; 15]).collect();
    let latencies: Vec<f64> = ttfts.iter().map(|t| t + 15.0 * tpot_ms / 1000.0).collect();
    let duration = latencies.iter().sum::<f64>() / f64::from(conc);
    let ms = |v: &[f64]| median(&v.iter().map(|x| x * 1000.0).collect::<Vec<_>>());
    let mut doc = serde_json::Map::new();
    for (k, v) in [
        ("duration", json!(duration)),
        ("completed", json!(n)),
        ("total_input_tokens", json!(64 * n)),
        ("total_output_tokens", json!(16 * n)),
        ("request_throughput", json!(n as f64 / duration)),
        ("output_throughput", json!(16.0 * n as f64 / duration)),
        ("total_token_throughput", json!(80.0 * n as f64 / duration)),
        ("mean_ttft_ms", json!(ms(&ttfts))),
        ("median_ttft_ms", json!(ms(&ttfts))),
        ("p99_ttft_ms", json!(ms(&ttfts))),
        ("median_tpot_ms", json!(tpot_ms)),
        ("mean_tpot_ms", json!(tpot_ms)),
        ("median_itl_ms", json!(tpot_ms)),
        ("median_e2el_ms", json!(ms(&latencies))),
    ] {
        doc.insert(k.into(), v);
    }
    Run { ttfts, itls, latencies, doc }
}

/// A `vllm bench serve --save-result` document as vLLM 0.32's
/// `vllm/benchmarks/serve.py` writes it (`detailed`: with
/// `--save-detailed`), with `metadata` added as `--metadata K=V` adds it.
fn vllm_doc(conc: u32, n: usize, ttft_ms: f64, tpot_ms: f64, detailed: bool, metadata: &[(&str, &str)]) -> Value {
    let r = run_of(conc, n, ttft_ms, tpot_ms);
    let mut d = r.doc;
    for (k, v) in [
        ("date", json!("20261204-120000")),
        ("endpoint_type", json!("openai")),
        ("backend", json!("openai")),
        ("label", Value::Null),
        ("model_id", json!("org/model")),
        ("tokenizer_id", json!("org/model")),
        ("num_prompts", json!(n)),
        ("request_rate", json!("inf")),
        ("burstiness", json!(1.0)),
        ("max_concurrency", json!(conc)),
        ("failed", json!(0)),
        ("request_goodput", Value::Null),
        ("latencies", json!(r.latencies)),
        ("queue_times", json!(vec![0.0; n])),
        ("max_output_tokens_per_s", json!(100.0)),
        ("max_concurrent_requests", json!(conc)),
        ("rtfx", json!(0.0)),
    ] {
        d.insert(k.into(), v);
    }
    if detailed {
        d.insert("input_lens".into(), json!(vec![64; n]));
        d.insert("output_lens".into(), json!(vec![16; n]));
        d.insert("ttfts".into(), json!(r.ttfts));
        d.insert("itls".into(), json!(r.itls));
        d.insert("start_times".into(), json!(vec![0.0; n]));
        d.insert("generated_texts".into(), json!(vec![""; n]));
        d.insert("errors".into(), json!(vec![""; n]));
    }
    for (k, v) in metadata {
        d.insert((*k).into(), json!(v));
    }
    Value::Object(d)
}

/// The same run as ATOM's `atom/benchmarks/benchmark_serving.py` saves it:
/// `best_of`, `request_goodput:` (the script's key), per-request lengths,
/// TTFTs and ITLs always, and no `failed` and no `latencies`.
fn atom_doc(conc: u32, n: usize, ttft_ms: f64, tpot_ms: f64, metadata: &[(&str, &str)]) -> Value {
    let r = run_of(conc, n, ttft_ms, tpot_ms);
    let mut d = r.doc;
    for (k, v) in [
        ("date", json!("20261204-120000")),
        ("backend", json!("vllm")),
        ("model_id", json!("org/model")),
        ("tokenizer_id", json!("org/model")),
        ("best_of", json!(1)),
        ("num_prompts", json!(n)),
        ("request_rate", json!("inf")),
        ("burstiness", json!(1.0)),
        ("max_concurrency", json!(conc)),
        ("request_goodput:", Value::Null),
        ("input_lens", json!(vec![64; n])),
        ("output_lens", json!(vec![16; n])),
        ("ttfts", json!(r.ttfts)),
        ("itls", json!(r.itls)),
        ("generated_texts", json!(vec![""; n])),
        ("errors", json!(vec![""; n])),
    ] {
        d.insert(k.into(), v);
    }
    for (k, v) in metadata {
        d.insert((*k).into(), json!(v));
    }
    Value::Object(d)
}

const ATOM_META: &[(&str, &str)] =
    &[("isl", "64"), ("osl", "16"), ("tp", "1"), ("engine", "ATOM"), ("version", "rocm/atom:v0.1.2"), ("random_range_ratio", "0.8")];

#[test]
fn atom_benchmark_serving_against_a_run_gives_a_table_per_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    // ATOM's reference: TPOT 68 ms at conc 4 (ours 70), 52 ms at conc 1 (ours 55).
    write(dir.path(), "atom_c1.json", &atom_doc(1, 8, 100.0, 52.0, ATOM_META));
    write(dir.path(), "atom_c4.json", &atom_doc(4, 8, 100.0, 68.0, ATOM_META));
    let atom = load_foreign(dir.path(), Hints::default());
    let s = atom.source.as_ref().unwrap();
    assert_eq!(atom.label, "ATOM");
    assert!(s.tool.starts_with("benchmark_serving.py (vLLM's script before"), "{}", s.tool);
    assert_eq!((s.engine.as_deref(), s.version.as_deref()), (Some("ATOM"), Some("rocm/atom:v0.1.2")));
    assert!(s.points.iter().all(|p| p.per_request && p.tp_known));
    assert!(s.definitions.iter().any(|d| d.contains("E2EL per request = TTFT + the sum of its ITLs")), "{:?}", s.definitions);
    // [rL, L] with r = 0.8, as the older script draws lengths.
    assert_eq!(s.points[0].length_range, Some((0.8, 1.0)));

    let c = compare(&atom, &ours(&[1, 4], 1, &[]), context(), Options::default()).unwrap();
    assert_eq!(c.rows.iter().map(|r| r.conc).collect::<Vec<_>>(), [1, 4]);
    for (row, (theirs, mine)) in c.rows.iter().zip([(52.0, 55.0), (68.0, 70.0)]) {
        let f = row.figure(Metric::MedianTpot);
        assert!((f.baseline - theirs).abs() < 1e-9 && (f.candidate - mine).abs() < 1e-6, "{f:?}");
        assert!((f.delta - (mine / theirs - 1.0)).abs() < 1e-6);
        // Per-request arrays: a bootstrap interval over requests, never a decision.
        assert_eq!(f.method, IntervalMethod::RequestBootstrap);
        assert!(f.ci.is_some());
        assert_eq!(f.gate.map(|g| g.outcome), Some(Outcome::Inconclusive));
        assert!(row.workload_notes.iter().any(|n| n == "length range lengths in [0.8, 1] x ISL/OSL (baseline) vs lengths exactly ISL/OSL (candidate)"), "{:?}", row.workload_notes);
        assert!(row.workload_notes.iter().any(|n| n == "not recorded by the baseline file: prefix_len, ignore_eos, chat template"), "{:?}", row.workload_notes);
        assert!(row.undecidable.as_deref().unwrap().contains("with per-request arrays: its interval is a bootstrap over that run's requests"));
    }
    assert_eq!(c.gate.outcome, Outcome::Inconclusive);
    assert_eq!(c.exit_status(), crate::error::ExitStatus::Inconclusive);
    let md = crate::ab::markdown::render(&c);
    assert!(md.contains("Before (`ATOM`) is another tool's file: benchmark_serving.py"), "{md}");
    assert!(md.contains("ATOM rocm/atom:v0.1.2, model org/model; per-request arrays"), "{md}");
    assert!(md.contains("Median TPOT (ms), lower is better:\n\n| conc | before | after | delta |\n|---:|---:|---:|:---|\n| 1 | 52.0 | 55.0 | +5.8% ["), "{md}");
    assert!(md.contains("\n| 4 | 68.0 | 70.0 | +2.9% ["), "{md}");
    assert!(md.contains("Workload (before vs after): length range lengths in [0.8, 1] x ISL/OSL (baseline) vs lengths exactly ISL/OSL (candidate)"), "{md}");
    let yaml = crate::ab::changelog::render(&c);
    assert!(yaml.contains("# before (ATOM): benchmark_serving.py") && yaml.contains("ATOM rocm/atom:v0.1.2, model org/model"), "{yaml}");
}

#[test]
fn a_summary_only_baseline_has_no_interval_and_ends_inconclusive_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let meta = [("isl", "64"), ("osl", "16"), ("tp", "1")];
    let path = write(dir.path(), "vllm_c4.json", &vllm_doc(4, 8, 100.0, 68.0, false, &meta));
    let base = load_foreign(&path, Hints::default());
    let s = base.source.as_ref().unwrap();
    assert_eq!(s.tool, "vllm bench serve");
    assert!(s.summary_only());
    assert_eq!(s.points[0].length_range, None, "no range ratio recorded");
    // Three repeats of ours: still no interval, as the other side is one number.
    let c = compare(&base, &ours(&[4], 3, &[]), context(), Options::default()).unwrap();
    let f = c.rows[0].figure(Metric::MedianTpot);
    assert_eq!((f.ci, f.method), (None, IntervalMethod::SummaryOnly));
    assert!((f.baseline - 68.0).abs() < 1e-9 && f.delta.is_finite());
    let tput = c.rows[0].figure(Metric::TputPerGpu);
    assert!(tput.not_compared.is_none() && tput.delta.is_finite(), "tp metadata gives tok/s/gpu: {tput:?}");
    assert_eq!(c.gate.outcome, Outcome::Inconclusive);
    let line = &c.gate.inconclusive[0];
    assert!(line.starts_with("ISL/OSL 64/16 TP 1 conc 4: tok/s/gpu "), "{line}");
    assert!(line.contains("[no CI]") && line.contains("the baseline is one run of another tool (vllm bench serve) with summary figures only: one foreign run is not a measurement of its noise"), "{line}");
    assert!(c.gate.perf_not_gated.is_none(), "{:?}", c.gate.perf_not_gated);
    let md = crate::ab::markdown::render(&c);
    assert!(md.contains("(no CI: summary figures only on a side)"), "{md}");
    assert!(md.contains("summary figures only (") && md.contains("one foreign run is not gated (INCONCLUSIVE)"), "{md}");
    assert!(md.contains("Gate (max regression 5%, max accuracy drop 1.00 points): INCONCLUSIVE\n"), "{md}");
    let t = crate::ab::markdown::terminal(&c);
    assert!(t.contains("[no CI]") && t.contains("INCONCLUSIVE"), "{t}");
}

#[test]
fn isl_osl_and_tp_come_from_the_file_or_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bare.json", &vllm_doc(4, 8, 100.0, 68.0, true, &[]));
    let e = load(&path, None, "baseline", "--baseline-label", Hints::default()).unwrap_err();
    assert!(is_usage(&e), "{e}");
    let m = e.to_string();
    assert!(m.contains("records no ISL/OSL") && m.contains("averaged 64.0 input and 16.0 output tokens") && m.contains("--foreign-isl-osl"), "{m}");
    let base = load_foreign(&path, Hints { isl_osl: Some((64, 16)), tp: None });
    assert!(!base.source.as_ref().unwrap().points[0].tp_known);
    let c = compare(&base, &ours(&[4], 1, &[]), context(), Options::default()).unwrap();
    assert_eq!((c.rows[0].isl, c.rows[0].osl, c.rows[0].tp), (64, 16, 1));
    let tput = c.rows[0].figure(Metric::TputPerGpu);
    assert!(tput.not_compared.as_deref().unwrap().contains("records no TP or GPU count"), "{tput:?}");
    assert!(tput.delta.is_nan() && tput.gate.is_none());
    assert!(c.notes.iter().any(|n| n.contains("matched to the other side's TP 1; tok/s/gpu is not compared")), "{:?}", c.notes);
    // The other figures are compared, with per-request intervals.
    assert!(c.rows[0].figure(Metric::OutputTput).ci.is_some());
    // --foreign-tp gives the divisor.
    let base = load_foreign(&path, Hints { isl_osl: Some((64, 16)), tp: Some(1) });
    let c = compare(&base, &ours(&[4], 1, &[]), context(), Options::default()).unwrap();
    assert!(c.rows[0].figure(Metric::TputPerGpu).not_compared.is_none());
    assert!(c.baseline_source.as_ref().unwrap().definitions.iter().any(|d| d == "tok/s/gpu = total_token_throughput / (tp x pp) with tp from --foreign-tp (tp x pp = 1)"));
}

#[test]
fn an_unreadable_file_names_the_keys_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "half.json", &json!({"duration": 1.0, "completed": 2, "max_concurrency": 4}));
    let e = load(&path, None, "baseline", "--baseline-label", Hints::default()).unwrap_err();
    assert!(is_usage(&e));
    let m = e.to_string();
    assert!(m.contains("closest is a `vllm bench serve` result") && m.contains("(missing: total_input_tokens, total_output_tokens, output_throughput, total_token_throughput)"), "{m}");
    let path = write(dir.path(), "other.json", &json!({"results": {}}));
    let m = load(&path, None, "baseline", "--baseline-label", Hints::default()).unwrap_err().to_string();
    assert!(m.contains("closest is an lm-eval results file") && m.contains("(missing: versions, n-shot)"), "{m}");
    std::fs::write(dir.path().join("broken.json"), "{not json").unwrap();
    let e = load(&dir.path().join("broken.json"), None, "baseline", "--baseline-label", Hints::default()).unwrap_err();
    assert!(is_usage(&e) && e.to_string().contains("is not JSON"), "{e}");
    // No concurrency limit: nothing to match a point by.
    let mut d = vllm_doc(4, 8, 100.0, 68.0, false, &[("isl", "64"), ("osl", "16")]);
    d["max_concurrency"] = Value::Null;
    let path = write(dir.path(), "unlimited.json", &d);
    let m = load(&path, None, "baseline", "--baseline-label", Hints::default()).unwrap_err().to_string();
    assert!(m.contains("max_concurrency is null"), "{m}");
}

/// A fixed-sequence InferenceX row as `utils/process_result.py` writes it.
fn ix_row(tp: u32, conc: u32, tput_per_gpu: f64, out_per_gpu: f64, ttft_s: f64, tpot_s: f64) -> Value {
    json!({"hw": "mi355x", "conc": conc, "image": "rocm/atom:v0.1.2", "model": "org/model", "infmax_model_prefix": "m",
           "framework": "atom", "precision": "fp8", "spec_decoding": "none", "disagg": false, "recipe_fingerprint": "",
           "isl": 64, "osl": 16, "is_multinode": false, "tp": tp, "pp": 1, "dcp_size": 1, "pcp_size": 1, "ep": 1,
           "dp_attention": "false", "tput_per_gpu": tput_per_gpu, "output_tput_per_gpu": out_per_gpu,
           "input_tput_per_gpu": tput_per_gpu - out_per_gpu, "median_ttft": ttft_s, "mean_ttft": ttft_s,
           "median_tpot": tpot_s, "median_intvty": 1.0 / tpot_s, "p99_e2el": 2.0})
}

#[test]
fn inferencex_rows_convert_with_the_rule_named_and_list_what_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let agentic = json!({"hw": "mi355x", "conc": 8, "image": "i", "model": "m", "infmax_model_prefix": "m", "framework": "vllm",
                         "precision": "fp8", "tp": 8, "scenario_type": "agentic-coding", "request_metrics": {}});
    let mut multinode = ix_row(8, 16, 1.0, 1.0, 0.1, 0.01);
    multinode["is_multinode"] = json!(true);
    let path = write(dir.path(), "rows.json", &json!([ix_row(1, 4, 300.0, 60.0, 0.12, 0.068), agentic, multinode]));
    let base = load_foreign(&path, Hints::default());
    let s = base.source.as_ref().unwrap();
    assert_eq!(s.format, Format::Inferencex);
    assert_eq!(base.repeats[0].job.points.len(), 1);
    assert_eq!(s.skipped.len(), 2, "{:?}", s.skipped);
    assert!(s.skipped[0].contains("agentic aggregate") && s.skipped[1].contains("multi-node row"), "{:?}", s.skipped);
    assert!(s.definitions.iter().any(|d| d == "out tok/s = output_tput_per_gpu x TP x PP x PCP (InferenceX's GPU count: 1)"));
    let p = &base.repeats[0].job.points[0];
    assert_eq!((p.figures.output_throughput, p.figures.tput_per_gpu), (60.0, 300.0));
    assert!((p.figures.ms("median_tpot_ms") - 68.0).abs() < 1e-9);
    let c = compare(&base, &ours(&[1, 4], 1, &[]), context(), Options::default()).unwrap();
    assert_eq!(c.rows.len(), 1);
    assert!(c.notes.iter().any(|n| n == "ISL/OSL 64/16 TP 1 conc 1 ran only in the candidate: not compared"), "{:?}", c.notes);
    let row = &c.rows[0];
    for f in &row.figures {
        assert_eq!((f.method, f.ci), (IntervalMethod::SummaryOnly, None), "{f:?}");
        assert!(f.not_compared.is_none() && f.delta.is_finite(), "{f:?}");
    }
    assert!(row.workload_notes.iter().any(|n| n.starts_with("not recorded by the baseline file: num_prompts, length range")), "{:?}", row.workload_notes);
    // A TP 8 row against a TP 1 run: no point in common, said so.
    let path = write(dir.path(), "tp8.json", &ix_row(8, 4, 300.0, 60.0, 0.12, 0.068));
    let e = compare(&load_foreign(&path, Hints::default()), &ours(&[4], 1, &[]), context(), Options::default()).unwrap_err();
    assert!(is_usage(&e) && e.to_string().contains("the baseline holds ISL/OSL 64/16 TP 8 conc 4; the candidate ISL/OSL 64/16 TP 1 conc 4"), "{e}");
}

const DATE: &str = "2026-12-04T10-00-00.000001";

/// lm-eval 0.4.10's results for gsm8k (keys of `evaluator.py` and
/// `EvaluationTracker`), 4 questions, 5 shots, no chat template.
fn lm_eval_results(strict: f64, flexible: f64) -> Value {
    json!({
        "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": strict, "exact_match_stderr,strict-match": 0.25,
                              "exact_match,flexible-extract": flexible, "exact_match_stderr,flexible-extract": 0.25}},
        "group_subtasks": {"gsm8k": []},
        "configs": {"gsm8k": {"task": "gsm8k", "num_fewshot": 5, "generation_kwargs": {"until": ["Question:"], "do_sample": false, "max_gen_toks": 256}}},
        "versions": {"gsm8k": 3.0},
        "n-shot": {"gsm8k": 5},
        "higher_is_better": {"gsm8k": {"exact_match": true}},
        "n-samples": {"gsm8k": {"original": 1319, "effective": 4}},
        "config": {"model": "local-completions", "model_args": "model=org/model,base_url=http://x/v1/completions", "limit": 4.0},
        "chat_template": null,
        "lm_eval_version": "0.4.10",
        "model_name": "org/model",
    })
}

/// A samples line of lm-eval for `doc_id`, one filter.
fn sample_line(doc_id: u64, filter: &str, right: bool, prompt_hash: &str) -> String {
    json!({"doc_id": doc_id, "doc": {}, "target": "x", "arguments": {}, "resps": [["#### 1"]], "filtered_resps": ["1"],
           "filter": filter, "metrics": ["exact_match"], "doc_hash": "d", "prompt_hash": prompt_hash, "target_hash": "t",
           "exact_match": if right { 1.0 } else { 0.0 }})
    .to_string()
}

#[test]
fn an_lm_eval_results_file_compares_with_our_gsm8k_paired_by_question() {
    let dir = tempfile::tempdir().unwrap();
    // Theirs: questions 5, 6 right (strict), 5, 6, 7 right (flexible); ours: 5, 6, 7 right.
    let path = write(dir.path(), &format!("results_{DATE}.json"), &lm_eval_results(0.5, 0.75));
    let mut lines = Vec::new();
    for (i, doc) in (5u64..9).enumerate() {
        // Our prompt hashes are format!("{i:064x}"); two of theirs are another prompt.
        let hash = if i < 2 { format!("{i:064x}") } else { "f".repeat(64) };
        lines.push(sample_line(doc, "strict-match", doc < 7, &hash));
        lines.push(sample_line(doc, "flexible-extract", doc < 8, &hash));
    }
    std::fs::write(dir.path().join(format!("samples_gsm8k_{DATE}.jsonl")), lines.join("\n") + "\n").unwrap();
    let theirs = load_foreign(&path, Hints::default());
    let s = theirs.source.as_ref().unwrap();
    assert_eq!((s.format, s.tool.as_str(), theirs.label.as_str()), (Format::LmEval, "lm-eval 0.4.10", "lm-eval"));
    assert_eq!(s.files.len(), 2, "results and samples: {:?}", s.files);
    let mine = ours(&[4], 1, &[true, true, true, false]);
    let c = compare(&theirs, &mine, context(), Options::default()).unwrap();
    assert!(c.rows.is_empty());
    assert!(c.notes.iter().any(|n| n == "the lm-eval side holds no performance figures: performance not compared"), "{:?}", c.notes);
    assert!(c.notes.iter().any(|n| n == "the lm-eval file's lm-eval task gsm8k is compared with this run's gsm8k"), "{:?}", c.notes);
    let a = c.accuracy.as_ref().unwrap();
    assert_eq!((a.paired, a.unpaired), (4, false));
    assert_eq!((a.baseline.strict, a.candidate.strict), (0.5, 0.75));
    // Strict: question 7 gained; flexible: all agree.
    let m = a.strict.mcnemar.unwrap();
    assert_eq!((m.b, m.c), (0, 1));
    assert!(a.differences.iter().any(|d| d == "prompts byte-identical (SHA-256) on 2 of 4 paired questions (another few-shot draw, template or chat format): paired by question (doc_id)"), "{:?}", a.differences);
    assert!(!a.differences.iter().any(|d| d.starts_with("shots") || d.starts_with("questions")), "{:?}", a.differences);
    // Four questions cannot resolve a 1-point drop.
    assert_eq!(c.gate.outcome, Outcome::Inconclusive);
    let md = crate::ab::markdown::render(&c);
    assert!(md.contains("Before (`lm-eval`) is another tool's file: lm-eval 0.4.10: engine and version not recorded, model org/model; no performance figures"), "{md}");
    assert!(md.contains("| 95% CI (paired) |"), "{md}");

    // Without its samples: the unpaired interval from the two scores and n.
    std::fs::remove_file(dir.path().join(format!("samples_gsm8k_{DATE}.jsonl"))).unwrap();
    let theirs = load_foreign(&path, Hints::default());
    let c = compare(&theirs, &mine, context(), Options::default()).unwrap();
    let a = c.accuracy.as_ref().unwrap();
    assert!(a.unpaired && a.strict.mcnemar.is_none());
    let want = crate::ab::gate::unpaired_diff_interval((0.5, 4.0), (0.75, 4.0));
    assert_eq!(a.strict.gate.ci, Some(want));
    assert!(c.notes.iter().any(|n| n.contains("accuracy intervals are unpaired (Agresti-Caffo")), "{:?}", c.notes);
    assert!(crate::ab::markdown::render(&c).contains("| 95% CI (unpaired) |"));
    // A file with another task: nothing matched, said so.
    let mut other = lm_eval_results(0.5, 0.75);
    other["results"] = json!({"mmlu": {"acc,none": 0.5}});
    let path = write(dir.path(), &format!("results_{DATE}x.json"), &other);
    let c = compare(&load_foreign(&path, Hints::default()), &mine, context(), Options::default());
    let e = c.unwrap_err();
    assert!(is_usage(&e) && e.to_string().contains("nothing to compare"), "{e}");
}

/// A result document around `arm`'s first repeat, and its requests as
/// `requests.jsonl` lines.
fn as_result(a: &Arm) -> (crate::report::result::RunResult, Vec<Value>) {
    let r = &a.repeats[0];
    let result = serde_json::from_value(json!({
        "schema_version": 1, "status": "ok",
        "recipe": {"name": "t", "file": "t.toml", "model": "m", "hardware": "cpu", "model_path": "m"},
        "versions": {"enginebench": "0.1.0"}, "host": {"hostname": "h", "cpu": "c", "logical_cpus": 2},
        "started_at": "2026-12-04T12:00:00Z", "timing": "t", "jobs": [serde_json::to_value(&r.job).unwrap()],
    }))
    .unwrap();
    let lines = r
        .requests
        .iter()
        .map(|q| {
            json!({"job": 0, "point": q.point, "input_tokens": q.input_tokens, "output_tokens": q.output_tokens, "ttft_ms": q.ttft_ms,
                   "tpot_ms": q.tpot_ms, "e2el_ms": q.e2el_ms, "itl_ms": [], "error": q.error})
        })
        .collect();
    (result, lines)
}

#[test]
fn export_then_compare_against_the_original_gives_zero_deltas() {
    use crate::report::export::{Format as Export, export};
    let mine = ours(&[1, 4], 1, &[]);
    let (result, requests) = as_result(&mine);
    for (format, per_request) in [(Export::VllmBench, true), (Export::Inferencex, false)] {
        let dir = tempfile::tempdir().unwrap();
        for (name, v) in export(&result, &requests, format) {
            write(dir.path(), &name, &v);
        }
        let theirs = load_foreign(dir.path(), Hints::default());
        let s = theirs.source.as_ref().unwrap();
        assert!(s.tool.starts_with("enginebench export"), "{}", s.tool);
        let c = compare(&theirs, &mine, context(), Options::default()).unwrap();
        assert_eq!(c.rows.len(), 2, "{format:?}");
        for row in &c.rows {
            for f in &row.figures {
                assert!(f.not_compared.is_none(), "{format:?} {f:?}");
                assert!(f.delta.abs() < 1e-9, "{format:?} conc {}: {:?} {} vs {}", row.conc, f.metric, f.baseline, f.candidate);
                assert_eq!(f.ci.is_some(), per_request, "{format:?} {f:?}");
            }
            if per_request {
                assert!(row.workload_notes.is_empty(), "the vllm-bench export records the workload: {:?}", row.workload_notes);
            }
        }
    }
}

#[test]
fn the_workload_differences_are_named_not_refused() {
    let mut theirs = PointRecord::bare();
    (theirs.num_prompts, theirs.length_range, theirs.ignore_eos, theirs.request_rate) = (Some(40), Some((0.8, 1.0)), Some(true), Some("inf".into()));
    let mut mine = theirs.clone();
    (mine.num_prompts, mine.length_range, mine.prefix_len, mine.chat_template, mine.burstiness) = (Some(8), Some((1.0, 1.0)), Some(0), Some(true), Some(1.0));
    let notes = matching::workload_differences(&theirs, &mine);
    assert_eq!(
        notes,
        [
            "num_prompts 40 (baseline) vs 8 (candidate)",
            "length range lengths in [0.8, 1] x ISL/OSL (baseline) vs lengths exactly ISL/OSL (candidate)",
            "not recorded by the baseline file: prefix_len, chat template",
        ]
    );
}
