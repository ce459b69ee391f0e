//! Comparison tests on hand-made runs: matching, verdicts, refusing
//! mismatched workloads, accuracy and token agreement, the gate, and loading
//! result files.

use super::compare::{Context, Metric, Options, compare};
use super::input::{Arm, Repeat, RequestRow, load_arm};
use super::stats::Verdict;
use crate::error::UsageError;
use crate::eval::score::Sample;
use crate::metrics::{FigureSpec, point_figures};
use crate::protocol::RequestRecord;
use crate::report::result::{Evals, Gsm8kResult, JobResult, PointResult, RecipeInfo, RunResult};
use crate::protocol::LengthConvention;

const SWEEP: &str = r#"{"space":[{"pairs":[[64,16]],"concs":[1,4]}],"inferencex":false,"length_convention":"vllm",
    "range_ratio":0.0,"prefix_len":0,"request_rate":null,"burstiness":1.0,"ignore_eos":true,"percentiles":[99.0],
    "goodput":null,"seed":0,"count":{"prompts_per_conc":null,"num_prompts":8,"warmups_per_conc":null,"warmups":2}}"#;

/// Requests of one point: `n` requests of 64 + 16 tokens, TTFT and TPOT
/// (ms) varying a little around the given values, closed loop at `conc`.
fn records(n: usize, conc: u32, ttft_ms: f64, tpot_ms: f64) -> (Vec<RequestRecord>, f64) {
    let mut out = Vec::new();
    let mut free = vec![0.0f64; conc as usize];
    for i in 0..n {
        let slot = i % conc as usize;
        let send = free[slot];
        let wiggle = 1.0 + 0.03 * ((i * 7 % 5) as f64 - 2.0);
        let mut r = RequestRecord { input_tokens: 64, send_s: send, ..Default::default() };
        let mut t = send + ttft_ms * wiggle / 1000.0;
        r.on_tokens(t, 1);
        for _ in 1..16 {
            t += tpot_ms * wiggle / 1000.0;
            r.on_tokens(t, 1);
        }
        free[slot] = t;
        out.push(r);
    }
    let duration = free.iter().copied().fold(0.0, f64::max);
    (out, duration)
}

/// A job at ISL/OSL 64/16 with points at `concs`, each of `n` requests; the
/// candidate is `speed` times as fast (TTFT and TPOT divided by it).
fn repeat(label: &str, concs: &[u32], n: usize, speed: f64, correct: &[bool]) -> Repeat {
    let mut job: JobResult = serde_json::from_value(serde_json::json!({
        "label": label, "status": "ok", "engine_args": ["--dtype", "float32"], "env": {},
        "sweep": serde_json::from_str::<serde_json::Value>(SWEEP).unwrap(), "points": []
    }))
    .unwrap();
    let mut requests = Vec::new();
    for (pi, &conc) in concs.iter().enumerate() {
        let (recs, duration) = records(n, conc, 100.0 / speed, 50.0 * (1.0 + 0.1 * f64::from(conc)) / speed);
        let figures = point_figures(&recs, duration, FigureSpec { percentiles: &[99.0], gpus: 1, goodput: None });
        job.points.push(PointResult { warmups: 2, ..PointResult::fixture(conc, n as u32, figures) });
        for r in &recs {
            requests.push(RequestRow {
                job: 0,
                point: pi,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                ttft_ms: r.ttft_s().map(|s| s * 1000.0),
                tpot_ms: r.tpot_s().map(|s| s * 1000.0),
                e2el_ms: r.e2el_s().map(|s| s * 1000.0),
                error: None,
                request: requests.len(),
                token_ids: Vec::new(),
            });
        }
    }
    let samples: Vec<Sample> = correct
        .iter()
        .enumerate()
        .map(|(i, &ok)| Sample {
            doc_id: i + 5,
            prompt_sha256: format!("{i:064x}"),
            completion: String::new(),
            output_tokens: 4,
            strict: String::new(),
            flexible: String::new(),
            gold: String::new(),
            strict_correct: ok,
            flexible_correct: ok,
            token_ids: if ok { vec![1, 2, 3, 4] } else { vec![1, 2, 9, 9] },
        })
        .collect();
    if !samples.is_empty() {
        let a = crate::eval::score::aggregate(&samples);
        job.eval = Some(Evals {
            gsm8k: Gsm8kResult {
                n: a.n,
                exact_match_strict: a.exact_match_strict,
                exact_match_strict_stderr: a.exact_match_strict_stderr,
                exact_match_flexible: a.exact_match_flexible,
                exact_match_flexible_stderr: a.exact_match_flexible_stderr,
                task: "gsm8k".into(),
                task_origin: "builtin:gsm8k".into(),
                chat: false,
                num_fewshot: 5,
                fewshot_mode: "first-k-test-excluded".into(),
                data_kind: "given-path".into(),
                data_source: "test".into(),
                train_size: None,
                test_size: 1319,
                max_tokens: 256,
                duration_s: 1.0,
                output_tokens: 4 * a.n as u64,
            },
            gate: None,
        });
    }
    Repeat { job, requests, samples }
}

fn arm(label: &str, repeats: Vec<Repeat>) -> Arm {
    Arm { label: label.into(), repeats }
}

fn context() -> Context {
    Context {
        recipe: RecipeInfo {
            name: "test".into(),
            file: "t.toml".into(),
            model: "m".into(),
            hardware: Some("cpu".into()),
            precision: None,
            model_path: "m".into(),
        },
        config_key: None,
    }
}

fn answers(right: usize, total: usize) -> Vec<bool> {
    (0..total).map(|i| i < right).collect()
}

fn usage_message(r: anyhow::Result<super::Comparison>) -> String {
    let e = r.expect_err("should refuse");
    assert!(e.downcast_ref::<UsageError>().is_some(), "not a usage error (exit 2): {e}");
    e.to_string()
}

#[test]
fn identical_runs_show_no_significant_change_and_pass() {
    let b = arm("base", vec![repeat("base", &[1, 4], 16, 1.0, &answers(30, 40))]);
    let c = arm("knob", vec![repeat("knob", &[1, 4], 16, 1.0, &answers(30, 40))]);
    let cmp = compare(&b, &c, context(), Options::default()).unwrap();
    assert_eq!(cmp.rows.len(), 2);
    for r in &cmp.rows {
        for f in &r.figures {
            assert!(f.delta.abs() < 1e-12, "{:?}", f);
            let (lo, hi) = f.ci.unwrap();
            assert!(lo <= 0.0 && hi >= 0.0);
            assert_eq!(f.verdict, Verdict::NoSignificantChange, "{:?}", f);
        }
        assert_eq!(r.verdict, Verdict::NoSignificantChange);
    }
    let a = cmp.accuracy.as_ref().unwrap();
    assert!(a.held);
    assert_eq!(a.paired, 40);
    assert_eq!(a.strict.mcnemar.unwrap().p_value, 1.0);
    let g = a.agreement.unwrap();
    assert_eq!((g.compared, g.identical, g.fraction, g.mean_first_divergence), (40, 40, 1.0, None));
    assert!(cmp.gate.passed);
    assert_eq!(cmp.exit_status().code(), 0);
    assert!(cmp.changes.is_empty());
}

#[test]
fn a_clear_speedup_is_faster_and_a_clear_slowdown_fails_the_gate() {
    let base = || arm("base", vec![repeat("base", &[1, 4], 16, 1.0, &[])]);
    let fast = arm("fast", vec![repeat("fast", &[1, 4], 16, 1.25, &[])]);
    let cmp = compare(&base(), &fast, context(), Options::default()).unwrap();
    for r in &cmp.rows {
        let t = r.figure(Metric::TputPerGpu);
        assert!((t.delta - 0.25).abs() < 0.01, "{t:?}");
        assert_eq!(t.verdict, Verdict::Faster);
        let tpot = r.figure(Metric::MedianTpot);
        assert!((tpot.delta + 0.2).abs() < 1e-9, "{tpot:?}");
        assert_eq!(tpot.verdict, Verdict::Faster);
        assert_eq!(r.verdict, Verdict::Faster);
    }
    assert!(cmp.gate.passed);
    assert!(cmp.accuracy.is_none());
    assert!(cmp.notes.iter().any(|n| n.contains("no eval")));

    // The gate judges performance on repeats (three ABBA pairs here).
    let reps = |label: &str, speeds: [f64; 3]| arm(label, speeds.iter().map(|&s| repeat(label, &[1, 4], 16, s, &[])).collect());
    let slow = || reps("slow", [0.9, 0.91, 0.89]);
    let base3 = || reps("base", [1.0, 1.01, 0.99]);
    let cmp = compare(&base3(), &slow(), context(), Options::default()).unwrap();
    assert!(!cmp.gate.passed);
    assert_eq!(cmp.gate.perf_not_gated, None);
    assert_eq!(cmp.exit_status().code(), 1);
    assert!(cmp.gate.failures.iter().any(|f| f.contains("conc 4") && f.contains("Median TPOT")), "{:?}", cmp.gate.failures);
    // A tolerance above the slowdown (about 10%) lets it pass.
    let lenient = Options { max_regression: 0.2, ..Options::default() };
    assert!(compare(&base3(), &slow(), context(), lenient).unwrap().gate.passed);
}

#[test]
fn one_repeat_is_not_gated_on_performance_but_accuracy_still_is() {
    // The same 10% slowdown, one repeat a side: its interval holds only
    // request-to-request spread, so the gate makes no performance claim,
    // says so, and passes.
    let b = || arm("base", vec![repeat("base", &[1, 4], 16, 1.0, &answers(60, 100))]);
    let slow = arm("slow", vec![repeat("slow", &[1, 4], 16, 0.9, &answers(60, 100))]);
    let cmp = compare(&b(), &slow, context(), Options::default()).unwrap();
    assert_eq!(cmp.rows[1].figure(Metric::MedianTpot).verdict, Verdict::Slower, "the row still reads slower");
    assert!(cmp.gate.passed, "{:?}", cmp.gate);
    assert_eq!(cmp.exit_status().code(), 0);
    let why = cmp.gate.perf_not_gated.as_deref().unwrap();
    assert!(why.starts_with("performance not gated at any point: one repeat"), "{why}");
    for text in [super::markdown::render(&cmp), super::markdown::terminal(&cmp)] {
        assert!(text.contains("PASS (accuracy only)\nNote: performance not gated at any point"), "{text}");
    }
    // Accuracy does not need repeats: a significant drop still fails.
    let worse = arm("worse", vec![repeat("worse", &[1, 4], 16, 0.9, &answers(45, 100))]);
    let cmp = compare(&b(), &worse, context(), Options::default()).unwrap();
    assert!(!cmp.gate.passed);
    assert_eq!(cmp.gate.failures.len(), 2, "strict and flexible, no perf: {:?}", cmp.gate.failures);
    assert!(cmp.gate.failures.iter().all(|f| f.starts_with("accuracy did not hold")), "{:?}", cmp.gate.failures);
}

#[test]
fn repeats_pair_up_and_average() {
    let b = arm("base", vec![repeat("base", &[4], 8, 1.0, &[]), repeat("base", &[4], 8, 1.02, &[])]);
    let c = arm("cand", vec![repeat("cand", &[4], 8, 1.1, &[]), repeat("cand", &[4], 8, 1.12, &[])]);
    let cmp = compare(&b, &c, context(), Options::default()).unwrap();
    let r = &cmp.rows[0];
    assert_eq!(r.repeats, (2, 2));
    let t = r.figure(Metric::TputPerGpu);
    let mean = |a: &Arm| (a.repeats[0].job.points[0].figures.tput_per_gpu + a.repeats[1].job.points[0].figures.tput_per_gpu) / 2.0;
    assert!((t.baseline - mean(&b)).abs() < 1e-9);
    assert!((t.candidate - mean(&c)).abs() < 1e-9);
    assert_eq!(t.verdict, Verdict::Faster);
    assert!(!cmp.notes.iter().any(|n| n.contains("one repeat")));
}

#[test]
fn refuses_mismatched_workloads() {
    let b = || arm("base", vec![repeat("base", &[1, 4], 16, 1.0, &answers(3, 8))]);
    // Another number of prompts.
    let c = arm("c", vec![repeat("c", &[1, 4], 8, 1.0, &answers(3, 8))]);
    let m = usage_message(compare(&b(), &c, context(), Options::default()));
    assert!(m.contains("num_prompts 16 (baseline) vs 8 (candidate)"), "{m}");
    // Another ISL/OSL.
    let mut c = repeat("c", &[1, 4], 16, 1.0, &answers(3, 8));
    c.job.points.iter_mut().for_each(|p| p.isl = 128);
    let m = usage_message(compare(&b(), &arm("c", vec![c]), context(), Options::default()));
    assert!(m.contains("ISL/OSL 64/16 and the candidate 128/16"), "{m}");
    // Another length convention / range ratio / ignore_eos.
    for change in [
        (|p: &mut PointResult| p.length_convention = LengthConvention::Inferencex) as fn(&mut PointResult),
        |p| p.range_ratio = 0.5,
        |p| p.ignore_eos = false,
    ] {
        let mut c = repeat("c", &[1, 4], 16, 1.0, &answers(3, 8));
        c.job.points.iter_mut().for_each(change);
        let m = usage_message(compare(&b(), &arm("c", vec![c]), context(), Options::default()));
        assert!(m.starts_with("workloads differ at ISL/OSL 64/16 TP 1 conc 1:"), "{m}");
    }
    // Another seed.
    let mut c = repeat("c", &[1, 4], 16, 1.0, &answers(3, 8));
    c.job.sweep.seed = 1;
    let m = usage_message(compare(&b(), &arm("c", vec![c]), context(), Options::default()));
    assert!(m.contains("seed 0 (baseline) vs 1 (candidate)"), "{m}");
    // Another eval: question count, few-shot mode, task.
    let c = arm("c", vec![repeat("c", &[1, 4], 16, 1.0, &answers(3, 9))]);
    let m = usage_message(compare(&b(), &c, context(), Options::default()));
    assert!(m.contains("evals differ: questions (n) 8 (baseline) vs 9 (candidate)"), "{m}");
    let mut c = repeat("c", &[1, 4], 16, 1.0, &answers(3, 8));
    c.job.eval.as_mut().unwrap().gsm8k.fewshot_mode = "train-random-seed-1234".into();
    let m = usage_message(compare(&b(), &arm("c", vec![c]), context(), Options::default()));
    assert!(m.contains("few-shot mode first-k-test-excluded (baseline) vs train-random-seed-1234"), "{m}");
    let mut c = repeat("c", &[1, 4], 16, 1.0, &answers(3, 8));
    c.job.eval.as_mut().unwrap().gsm8k.task = "gsm8k_cot".into();
    let m = usage_message(compare(&b(), &arm("c", vec![c]), context(), Options::default()));
    assert!(m.contains("task gsm8k (baseline) vs gsm8k_cot"), "{m}");
    // Other concurrencies only: compared where they meet, the rest noted.
    let c = arm("c", vec![repeat("c", &[4, 8], 16, 1.0, &answers(3, 8))]);
    let cmp = compare(&b(), &c, context(), Options::default()).unwrap();
    assert_eq!(cmp.rows.iter().map(|r| r.conc).collect::<Vec<_>>(), [4]);
    assert!(cmp.notes.iter().any(|n| n.contains("conc 1 ran only in the baseline")));
    assert!(cmp.notes.iter().any(|n| n.contains("conc 8 ran only in the candidate")));
}

#[test]
fn a_significant_accuracy_drop_fails_and_agreement_finds_divergence() {
    // 100 questions: baseline right on 60, candidate on 45 (15 lost, none gained).
    let b = arm("base", vec![repeat("base", &[1], 8, 1.0, &answers(60, 100))]);
    let c = arm("cand", vec![repeat("cand", &[1], 8, 1.0, &answers(45, 100))]);
    let cmp = compare(&b, &c, context(), Options::default()).unwrap();
    let a = cmp.accuracy.as_ref().unwrap();
    assert!((a.strict.diff + 0.15).abs() < 1e-12);
    let m = a.strict.mcnemar.unwrap();
    assert_eq!((m.b, m.c), (15, 0));
    // Exact: 2 * 0.5^15.
    assert!((m.p_value - 2.0 * 0.5f64.powi(15)).abs() < 1e-15);
    assert!(!a.held);
    assert!(!cmp.gate.passed);
    assert!(cmp.gate.failures.iter().any(|f| f.starts_with("accuracy did not hold: strict-match 60.00% -> 45.00%")));
    // The 15 changed answers differ from token 2 on.
    let g = a.agreement.unwrap();
    assert_eq!((g.compared, g.identical), (100, 85));
    assert_eq!(g.mean_first_divergence, Some(2.0));
    // A drop of one question in 100 (1 point) is within the default tolerance
    // and not significant.
    let c = arm("cand", vec![repeat("cand", &[1], 8, 1.0, &answers(59, 100))]);
    let cmp = compare(&b, &c, context(), Options::default()).unwrap();
    assert!(cmp.accuracy.as_ref().unwrap().held);
    assert!(cmp.gate.passed);
    // With a tolerance of half a point it is not.
    let strict = Options { max_accuracy_drop: 0.005, ..Options::default() };
    assert!(!compare(&b, &c, context(), strict).unwrap().gate.passed);
}

#[test]
fn loads_two_labels_from_one_result_folder() {
    let dir = tempfile::tempdir().unwrap();
    let b = repeat("base", &[1, 4], 4, 1.0, &answers(2, 4));
    let c = repeat("knob", &[1, 4], 4, 1.1, &answers(2, 4));
    let result = RunResult {
        schema_version: 1,
        status: crate::report::result::Status::Ok,
        recipe: context().recipe,
        versions: Default::default(),
        host: crate::report::result::Host { hostname: "h".into(), cpu: "c".into(), logical_cpus: 2, gpus: vec![] },
        started_at: "2026-11-30T00:00:00Z".into(),
        finished_at: None,
        timing: String::new(),
        jobs: vec![b.job.clone(), c.job.clone()],
        resumes: 0,
        execution: None,
    };
    let path = dir.path().join("result.json");
    std::fs::write(&path, serde_json::to_string(&result).unwrap()).unwrap();
    let mut lines = String::new();
    for (ji, r) in [&b, &c].iter().enumerate() {
        for q in &r.requests {
            lines.push_str(&format!(
                "{{\"job\":{ji},\"label\":\"{}\",\"point\":{},\"isl\":64,\"osl\":16,\"conc\":1,\"input_tokens\":{},\"output_tokens\":{},\"ttft_ms\":{},\"tpot_ms\":{},\"e2el_ms\":{},\"itl_ms\":[],\"error\":null}}\n",
                r.job.label,
                q.point,
                q.input_tokens,
                q.output_tokens,
                q.ttft_ms.unwrap(),
                q.tpot_ms.unwrap(),
                q.e2el_ms.unwrap()
            ));
        }
    }
    std::fs::write(dir.path().join("requests.jsonl"), lines).unwrap();
    let mut samples = String::new();
    for r in [&b, &c] {
        for s in &r.samples {
            let mut v = serde_json::to_value(s).unwrap();
            v["label"] = r.job.label.clone().into();
            samples.push_str(&format!("{v}\n"));
        }
    }
    std::fs::write(dir.path().join("gsm8k_samples.jsonl"), samples).unwrap();

    let (_, base) = load_arm(&path, Some("base"), "baseline", "--baseline-label").unwrap();
    let (_, knob) = load_arm(&path, Some("knob"), "candidate", "--candidate-label").unwrap();
    assert_eq!(base.repeats.len(), 1);
    // Each job gets its own requests (JSON text round-trips floats to within an ulp or so).
    let same = |got: &[RequestRow], want: &[RequestRow], job: usize| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.job, g.point, g.output_tokens), (job, w.point, w.output_tokens));
            assert!((g.e2el_ms.unwrap() - w.e2el_ms.unwrap()).abs() < 1e-9);
        }
    };
    same(&base.repeats[0].requests, &b.requests, 0);
    same(&knob.repeats[0].requests, &c.requests, 1);
    assert_eq!(knob.samples(), &c.samples[..]);
    // No label on a two-label file: a usage error naming the labels.
    let e = load_arm(&path, None, "baseline", "--baseline-label").unwrap_err();
    assert!(e.downcast_ref::<UsageError>().is_some());
    assert!(e.to_string().contains("\"base\", \"knob\": pick the baseline with --baseline-label"), "{e}");
    let e = load_arm(&path, Some("nope"), "candidate", "--candidate-label").unwrap_err();
    assert!(e.to_string().contains("no job labelled \"nope\""), "{e}");
    // And the whole command writes its files and passes its gate.
    let out = dir.path().join("out");
    let req = super::CompareRequest {
        baseline: path.clone(),
        candidate: path.clone(),
        baseline_label: Some("base".into()),
        candidate_label: Some("knob".into()),
        options: Options::default(),
        config_key: None,
        output: Some(out.clone()),
    };
    assert_eq!(super::run_compare(&req).unwrap().code(), 0);
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), 9, "{names:?}");
    assert!(names.contains(&"ab.md".to_string()) && names.contains(&"changelog.yaml".to_string()));
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("| conc | before | after | delta |"));
    // `plot` on the same file draws both labels.
    let files = crate::report::plot::run_plot(&path, Some(&dir.path().join("plots"))).unwrap();
    assert_eq!(files.len(), 6);
    let svg = std::fs::read_to_string(files.iter().find(|f| f.extension().unwrap() == "svg").unwrap()).unwrap();
    let texts = crate::report::plot::tests::svg_texts(&svg);
    assert!(texts.contains(&"base".to_string()) && texts.contains(&"knob".to_string()), "{texts:?}");
}

#[test]
fn noise_floor_decides_small_significant_changes_and_the_gate_follows() {
    use super::compare::{NoiseFloor, NoiseSource, apply_noise};
    use super::stats::IntervalMethod;
    // About 10% slower in each of three ABBA pairs: significant, beyond 5%.
    let reps = |label: &str, speeds: [f64; 3]| arm(label, speeds.iter().map(|&s| repeat(label, &[4], 16, s, &[])).collect());
    let b = reps("base", [1.0, 1.01, 0.99]);
    let c = reps("slow", [0.9, 0.915, 0.89]);
    let cmp = compare(&b, &c, context(), Options::default()).unwrap();
    let t = cmp.rows[0].figure(Metric::MedianTpot);
    assert_eq!(t.method, IntervalMethod::PairedT);
    assert_eq!(t.verdict, Verdict::Slower, "{t:?}");
    assert_eq!(t.repeat_deltas.len(), 3);
    assert!(t.mde.unwrap() > 0.0 && t.bootstrap_ci.is_some());
    assert!(!cmp.gate.passed);
    assert!(cmp.rows[0].half_width().unwrap() > 0.0);

    // An A/A that allowed ±12% at this point: the change is within noise,
    // the row reads so, and the gate passes by the same rule.
    let floors = |x: f64| NoiseFloor {
        source: NoiseSource { file: "aa/ab.json".into(), repeats: 3 },
        floors: super::compare::METRICS.iter().map(|&m| (((64, 16, 1, 4), m), x)).collect(),
    };
    let mut within = cmp.clone();
    apply_noise(&mut within, &floors(0.12));
    let t = within.rows[0].figure(Metric::MedianTpot);
    assert_eq!(t.verdict, Verdict::WithinNoise);
    assert_eq!(t.noise_floor, Some(0.12));
    assert_eq!(within.rows[0].verdict, Verdict::WithinNoise);
    assert!(within.gate.passed, "{:?}", within.gate);
    let md = super::markdown::render(&within);
    assert!(md.contains("within this machine's noise of ±12.0%"), "{md}");
    assert!(md.contains("noise floor, from the A/A `aa/ab.json` (3 repeats"), "{md}");
    assert!(super::markdown::terminal(&within).contains("noise floor: A/A aa/ab.json"));

    // A floor below the change keeps the verdict and the gate failure.
    let mut beyond = cmp.clone();
    apply_noise(&mut beyond, &floors(0.02));
    assert_eq!(beyond.rows[0].figure(Metric::MedianTpot).verdict, Verdict::Slower);
    assert!(!beyond.gate.passed);
}

#[test]
fn an_aa_result_reads_back_as_its_noise_floor() {
    use super::compare::NoiseFloor;
    let reps = |label: &str, speeds: [f64; 3]| arm(label, speeds.iter().map(|&s| repeat(label, &[1, 4], 16, s, &[])).collect());
    let mut aa = compare(&reps("base", [1.0, 1.03, 0.98]), &reps("base-aa", [1.02, 0.99, 1.0]), context(), Options::default()).unwrap();
    aa.aa = true;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ab.json");
    std::fs::write(&path, serde_json::to_string_pretty(&aa).unwrap()).unwrap();
    let loaded = NoiseFloor::load(&path).unwrap();
    let direct = NoiseFloor::from_comparison(&aa, &path.display().to_string());
    assert_eq!(loaded, direct);
    assert_eq!(loaded.source.repeats, 3);
    assert_eq!(loaded.floors.len(), 2 * 4, "two points, four figures");
    let f = aa.rows[1].figure(Metric::TputPerGpu);
    let (lo, hi) = f.ci.unwrap();
    assert_eq!(loaded.floors[&((64, 16, 1, 4), Metric::TputPerGpu)], lo.abs().max(hi.abs()).max(f.delta.abs()));
    // The A/A's Markdown has the noise table with the MDE at its repeats.
    let md = super::markdown::render(&aa);
    assert!(md.contains("### Noise floor (A/A)") && md.contains("at 3 repeats"), "{md}");
    // Not an ab.json: a usage error naming the file.
    std::fs::write(&path, "{\"jobs\": []}").unwrap();
    let e = NoiseFloor::load(&path).unwrap_err();
    assert!(e.downcast_ref::<UsageError>().is_some() && e.to_string().contains("not an ab.json"), "{e}");
}

#[test]
fn builds_on_either_side_of_034_get_the_prefill_count_note() {
    // vLLM 0.34 sends resumed requests back as new ones: the prefill/decode
    // split changes there, and the comparison says so only across that line.
    let built = |label: &str, vllm: &str, preempted: u64| {
        let mut r = repeat(label, &[4], 8, 1.0, &[]);
        r.job.engine = Some(crate::protocol::EngineInfo { vllm: Some(vllm.into()), ..Default::default() });
        r.job.points[0].step_stats.preemptions = preempted;
        arm(label, vec![r])
    };
    let note = |b: &Arm, c: &Arm| {
        let cmp = compare(b, c, context(), Options::default()).unwrap();
        cmp.notes.into_iter().find(|n| n.starts_with("prefill/decode tokens:"))
    };
    let across = note(&built("base", "0.32.0+cpu", 3), &built("pr", "0.34.0", 0)).expect("a note across 0.34");
    assert!(across.contains("vLLM 0.32.0+cpu -> 0.34.0; preemptions: 3 baseline, 0 candidate"), "{across}");
    assert_eq!(note(&built("base", "0.33.0", 0), &built("pr", "0.33.1", 0)), None);
    assert_eq!(note(&built("base", "0.34.0", 0), &built("pr", "0.35.0.dev1", 0)), None);
    assert!(note(&built("base", "0.34.0", 0), &built("pr", "0.23.0", 0)).is_some(), "either direction");
}
