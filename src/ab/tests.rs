//! Comparison tests on hand-made runs: matching, verdicts, refusing
//! mismatched workloads, accuracy and token agreement, the gate (each of
//! PASS, FAIL and INCONCLUSIVE with its exit code and text), and loading
//! result files.

use super::compare::{Context, Metric, Options, compare};
use super::gate::{Needed, Outcome};
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
pub(super) fn repeat(label: &str, concs: &[u32], n: usize, speed: f64, correct: &[bool]) -> Repeat {
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
                attempt: 0,
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
            gsm8k: Some(Gsm8kResult {
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
            }),
            ..Evals::default()
        });
    }
    Repeat { job, requests, samples, task_samples: Vec::new() }
}

pub(super) fn arm(label: &str, repeats: Vec<Repeat>) -> Arm {
    Arm { label: label.into(), repeats, source: None }
}

pub(super) fn context() -> Context {
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
fn identical_runs_show_no_significant_change_and_40_questions_cannot_resolve_a_point() {
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
    assert_eq!(a.paired, 40);
    assert_eq!(a.strict.mcnemar.unwrap().p_value, 1.0);
    let g = a.agreement.unwrap();
    assert_eq!((g.compared, g.identical, g.fraction, g.mean_first_divergence), (40, 40, 1.0, None));
    // No answer changed, but 40 questions give a paired CI of ±4.7 points
    // (1.96 / 42): they cannot show that no 1-point drop happened.
    let (lo, hi) = a.strict.gate.ci.unwrap();
    assert!((hi - 1.959964 / 42.0).abs() < 1e-5 && (lo + hi).abs() < 1e-12, "{lo} {hi}");
    assert_eq!(a.outcome, Outcome::Inconclusive);
    assert_eq!(cmp.gate.outcome, Outcome::Inconclusive);
    assert_eq!(cmp.gate.questions_needed, Some(Needed::About(194)));
    assert_eq!(cmp.exit_status().code(), 3);
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
    // One repeat a side and no eval: nothing is gated, which decides nothing.
    assert_eq!(cmp.gate.outcome, Outcome::Inconclusive);
    assert!(cmp.gate.inconclusive.iter().any(|l| l.starts_with("nothing gated")), "{:?}", cmp.gate);
    assert!(super::markdown::terminal(&cmp).contains("INCONCLUSIVE (nothing gated)"));
    assert!(cmp.accuracy.is_none());
    assert!(cmp.notes.iter().any(|n| n.contains("no eval")));

    // The gate judges performance on repeats (three ABBA pairs here).
    let reps = |label: &str, speeds: [f64; 3]| arm(label, speeds.iter().map(|&s| repeat(label, &[1, 4], 16, s, &[])).collect());
    let slow = || reps("slow", [0.9, 0.91, 0.89]);
    let base3 = || reps("base", [1.0, 1.01, 0.99]);
    let cmp = compare(&base3(), &slow(), context(), Options::default()).unwrap();
    assert_eq!(cmp.gate.outcome, Outcome::Fail);
    assert_eq!(cmp.gate.perf_not_gated, None);
    assert_eq!(cmp.exit_status().code(), 1);
    assert!(cmp.gate.failures.iter().any(|f| f.contains("conc 4") && f.contains("Median TPOT")), "{:?}", cmp.gate.failures);
    // A tolerance above the slowdown (about 10%) lets it pass.
    let lenient = Options { max_regression: 0.2, ..Options::default() };
    assert_eq!(compare(&base3(), &slow(), context(), lenient).unwrap().gate.outcome, Outcome::Pass);
}

#[test]
fn one_repeat_is_not_gated_on_performance_but_accuracy_still_is() {
    // The same 10% slowdown, one repeat a side: its interval holds only
    // request-to-request spread, so the gate makes no performance claim and
    // says so; 1319 questions with the same answers decide accuracy: PASS.
    let b = || arm("base", vec![repeat("base", &[1, 4], 16, 1.0, &answers(800, 1319))]);
    let slow = arm("slow", vec![repeat("slow", &[1, 4], 16, 0.9, &answers(800, 1319))]);
    let cmp = compare(&b(), &slow, context(), Options::default()).unwrap();
    assert_eq!(cmp.rows[1].figure(Metric::MedianTpot).verdict, Verdict::Slower, "the row still reads slower");
    assert!(cmp.rows.iter().flat_map(|r| &r.figures).all(|f| f.gate.is_none()), "no performance figure is gated");
    assert_eq!(cmp.gate.outcome, Outcome::Pass, "{:?}", cmp.gate);
    assert_eq!(cmp.exit_status().code(), 0);
    let why = cmp.gate.perf_not_gated.as_deref().unwrap();
    assert!(why.starts_with("performance not gated at any point: one repeat"), "{why}");
    for text in [super::markdown::render(&cmp), super::markdown::terminal(&cmp)] {
        assert!(text.contains("PASS (accuracy only)\nNote: performance not gated at any point"), "{text}");
    }
    // Accuracy does not need repeats: a clear drop still fails.
    let b = || arm("base", vec![repeat("base", &[1, 4], 16, 1.0, &answers(60, 100))]);
    let worse = arm("worse", vec![repeat("worse", &[1, 4], 16, 0.9, &answers(45, 100))]);
    let cmp = compare(&b(), &worse, context(), Options::default()).unwrap();
    assert_eq!(cmp.gate.outcome, Outcome::Fail);
    assert_eq!(cmp.gate.failures.len(), 2, "strict and flexible, no perf: {:?}", cmp.gate.failures);
    assert!(cmp.gate.failures.iter().all(|f| f.starts_with("accuracy did not hold")), "{:?}", cmp.gate.failures);
}

/// An arm whose one repeat ran an lm-eval task with these answers (right
/// or wrong per question, doc_id = index), and whose run's accuracy gate
/// checked its score against `threshold`.
fn lm_eval_arm(label: &str, answers: &[bool], threshold: f64) -> Arm {
    use crate::ab::input::TaskSample;
    use crate::report::result::{Evals, Gate, GateCheck, LmEvalResult, Metric as TaskMetric, TaskScore};
    let mut r = repeat(label, &[4], 8, 1.0, &[]);
    let metric = "exact_match,last_letter".to_string();
    let score = answers.iter().filter(|&&a| a).count() as f64 / answers.len() as f64;
    r.job.eval = Some(Evals {
        lm_eval: Some(LmEvalResult {
            lm_eval_version: Some("0.4.10".into()),
            files: vec![],
            chat: true,
            max_tokens: None,
            duration_s: 1.0,
            wall_s: 2.0,
            requests: answers.len() as u64,
            output_tokens: 1000,
            tasks: vec![TaskScore {
                task: "gpqa_mini".into(),
                n: Some(answers.len() as u64),
                num_fewshot: Some(0),
                metrics: vec![TaskMetric { name: metric.clone(), value: score, stderr: Some(0.05), higher_is_better: Some(true) }],
                requests: answers.len() as u64,
                output_tokens: 1000,
            }],
        }),
        gate: Some(Gate {
            passed: score >= threshold,
            checks: vec![GateCheck { task: "gpqa_mini".into(), metric: metric.clone(), value: score, stderr: Some(0.05), threshold, source: "default".into(), passed: score >= threshold }],
            ungated: vec![],
        }),
        ..Evals::default()
    });
    r.task_samples = answers
        .iter()
        .enumerate()
        .map(|(i, &a)| TaskSample { task: "gpqa_mini".into(), metric: metric.clone(), doc_id: i as u64, prompt_hash: format!("h{i}"), value: if a { 1.0 } else { 0.0 } })
        .collect();
    arm(label, vec![r])
}

#[test]
fn lm_eval_tasks_are_gated_per_task() {
    use crate::ab::gate::{Needed, Outcome};
    // 200 questions answered alike, 40% right, above its 0.30 threshold:
    // the paired interval is within a point and the threshold met: PASS.
    let same: Vec<bool> = (0..200).map(|i| i % 5 < 2).collect();
    let cmp = compare(&lm_eval_arm("base", &same, 0.30), &lm_eval_arm("cand", &same, 0.30), context(), Options::default()).unwrap();
    assert_eq!(cmp.gate.outcome, Outcome::Pass, "{:?}", cmp.gate);
    let [t] = cmp.tasks.as_slice() else { panic!("{:?}", cmp.tasks) };
    assert_eq!((t.task.as_str(), t.baseline, t.candidate, t.paired, t.meets_threshold), ("gpqa_mini", Some(0.40), Some(0.40), 200, Some(true)));
    let text = super::markdown::terminal(&cmp);
    assert!(text.contains("gpqa_mini exact_match,last_letter: 40.00% → 40.00% (+0.00 points [-0.97, +0.97], 200 paired); threshold 0.30 (default): met: PASS"), "{text}");
    assert!(super::markdown::render(&cmp).contains("| gpqa_mini | exact_match,last_letter | +0.00 pts [-0.97, +0.97] | -1.00 pts; ≥ 0.30 | PASS |"));
    // The candidate loses 30 of its 80 right answers (25%): a drop beyond
    // the point (FAIL) and below the threshold (FAIL), both named.
    let mut worse = same.clone();
    for w in worse.iter_mut().filter(|w| **w).take(30) {
        *w = false;
    }
    let cmp = compare(&lm_eval_arm("base", &same, 0.30), &lm_eval_arm("cand", &worse, 0.30), context(), Options::default()).unwrap();
    assert_eq!(cmp.gate.outcome, Outcome::Fail);
    let f = &cmp.gate.failures;
    assert!(f.iter().any(|x| x.starts_with("accuracy did not hold: gpqa_mini exact_match,last_letter 40.00% -> 25.00% (-15.00 points [-19.85, -9.85])")), "{f:?}");
    assert!(f.iter().any(|x| x == "accuracy below threshold: gpqa_mini exact_match,last_letter = 0.2500 < 0.30 (default)"), "{f:?}");
    // 20 questions alike cannot resolve a 1-point limit: INCONCLUSIVE (exit
    // 3), with the paired questions that would decide it.
    let cmp = compare(&lm_eval_arm("base", &same[..20], 0.30), &lm_eval_arm("cand", &same[..20], 0.30), context(), Options::default()).unwrap();
    assert_eq!(cmp.gate.outcome, Outcome::Inconclusive, "{:?}", cmp.gate);
    assert_eq!(cmp.gate.questions_needed, Some(Needed::About(194)));
    assert!(cmp.gate.inconclusive.iter().any(|x| x.starts_with("accuracy not resolved: gpqa_mini exact_match,last_letter 40.00% -> 40.00%")), "{:?}", cmp.gate);
    // Without per-question samples on a side: nothing to pair, INCONCLUSIVE.
    let mut bare = lm_eval_arm("cand", &same, 0.30);
    bare.repeats[0].task_samples.clear();
    let cmp = compare(&lm_eval_arm("base", &same, 0.30), &bare, context(), Options::default()).unwrap();
    assert_eq!(cmp.tasks[0].outcome, Outcome::Inconclusive);
    assert!(cmp.gate.inconclusive.iter().any(|x| x.ends_with("no per-question samples (lm-eval's samples_*.jsonl) to pair")), "{:?}", cmp.gate);
}

/// lm-eval's per-question lines (its samples file's shape: doc_id,
/// prompt_hash, filter, the metric names and each one's value) become one
/// score per question and metric, the task named by the file; other files
/// of the run (results JSON) and a missing file give none.
#[test]
fn lm_eval_samples_files_are_read_per_question() {
    use crate::report::result::{Evals, LmEvalResult};
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("lm_eval/base")).unwrap();
    let lines = [
        r#"{"doc_id": 0, "doc": {"q": "one"}, "filter": "last_letter", "metrics": ["exact_match"], "prompt_hash": "p0", "exact_match": 1.0}"#,
        r#"{"doc_id": 1, "doc": {"q": "two"}, "filter": "last_letter", "metrics": ["exact_match"], "prompt_hash": "p1", "exact_match": 0.0}"#,
    ];
    std::fs::write(dir.path().join("lm_eval/base/samples_gpqa_mini_2026-12-02T19-59-26.034179.jsonl"), lines.join("\n")).unwrap();
    let mut r = repeat("base", &[4], 8, 1.0, &[]);
    r.job.eval = Some(Evals {
        lm_eval: Some(LmEvalResult {
            lm_eval_version: None,
            files: vec![
                "lm_eval/base/results_2026-12-02T19-59-26.034179.json".into(),
                "lm_eval/base/samples_gpqa_mini_2026-12-02T19-59-26.034179.jsonl".into(),
                "lm_eval/base/samples_gone_2026-12-02T19-59-26.034179.jsonl".into(),
            ],
            chat: false,
            max_tokens: None,
            duration_s: 1.0,
            wall_s: 1.0,
            requests: 2,
            output_tokens: 2,
            tasks: vec![],
        }),
        ..Evals::default()
    });
    let got = super::input::read_task_samples(dir.path(), &r.job).unwrap();
    let want: Vec<(&str, &str, u64, &str, f64)> = vec![("gpqa_mini", "exact_match,last_letter", 0, "p0", 1.0), ("gpqa_mini", "exact_match,last_letter", 1, "p1", 0.0)];
    assert_eq!(got.iter().map(|s| (s.task.as_str(), s.metric.as_str(), s.doc_id, s.prompt_hash.as_str(), s.value)).collect::<Vec<_>>(), want);
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
    c.job.eval.as_mut().unwrap().gsm8k.as_mut().unwrap().fewshot_mode = "train-random-seed-1234".into();
    let m = usage_message(compare(&b(), &arm("c", vec![c]), context(), Options::default()));
    assert!(m.contains("few-shot mode first-k-test-excluded (baseline) vs train-random-seed-1234"), "{m}");
    let mut c = repeat("c", &[1, 4], 16, 1.0, &answers(3, 8));
    c.job.eval.as_mut().unwrap().gsm8k.as_mut().unwrap().task = "gsm8k_cot".into();
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
    assert_eq!(a.outcome, Outcome::Fail);
    assert_eq!(cmp.gate.outcome, Outcome::Fail);
    assert!(cmp.gate.failures.iter().any(|f| f.starts_with("accuracy did not hold: strict-match 60.00% -> 45.00%")));
    // The 15 changed answers differ from token 2 on.
    let g = a.agreement.unwrap();
    assert_eq!((g.compared, g.identical), (100, 85));
    assert_eq!(g.mean_first_divergence, Some(2.0));
    // A drop of one question in 100 (1 point) sits on the default 1-point
    // limit: its CI straddles it, and at that rate no number of questions
    // would move it off (more than all 1319 of the task).
    let c = arm("cand", vec![repeat("cand", &[1], 8, 1.0, &answers(59, 100))]);
    let cmp = compare(&b, &c, context(), Options::default()).unwrap();
    let a = cmp.accuracy.as_ref().unwrap();
    assert_eq!(a.outcome, Outcome::Inconclusive);
    assert_eq!(a.strict.gate.questions_needed, Some(Needed::MoreThan(1319)));
    assert_eq!(cmp.gate.outcome, Outcome::Inconclusive);
    assert!(cmp.gate.inconclusive[0].contains("more than 1319 paired questions") && cmp.gate.inconclusive[0].contains("more than the task has"), "{:?}", cmp.gate);
    // A 5-point tolerance holds it.
    let lenient = Options { max_accuracy_drop: 0.05, ..Options::default() };
    assert_eq!(compare(&b, &c, context(), lenient).unwrap().gate.outcome, Outcome::Pass);
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
        error: None,
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
        noise: None,
        output: Some(out.clone()),
        hints: Default::default(),
    };
    // One repeat a side and 4 questions: nothing can be decided.
    assert_eq!(super::run_compare(&req).unwrap().code(), 3);
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), 9, "{names:?}");
    assert!(names.contains(&"ab.md".to_string()) && names.contains(&"changelog.yaml".to_string()));
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("| conc | before | after | delta |"));
    assert!(md.contains("INCONCLUSIVE (accuracy only)") && md.contains("To decide: about 194 paired eval questions (`--eval-limit 194`)"), "{md}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("ab.json")).unwrap()).unwrap();
    assert_eq!(json["gate"]["outcome"], "inconclusive");
    assert_eq!(json["gate"]["questions_needed"], serde_json::json!({"about": 194}));
    let yaml = std::fs::read_to_string(out.join("changelog.yaml")).unwrap();
    assert!(yaml.starts_with("# enginebench: no perf-changelog entry for knob vs base") && !yaml.contains("config-keys"), "{yaml}");
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
    // TPOT +10.9% [+9.8%, +12.1%]: the whole CI beyond 5%.
    assert_eq!(t.gate.unwrap().outcome, Outcome::Fail, "{t:?}");
    assert_eq!(cmp.gate.outcome, Outcome::Fail);
    assert!(cmp.rows[0].half_width().unwrap() > 0.0);

    // An A/A that allowed ±12% at this point: the change is within noise
    // and the row reads so; the gate's limit is raised to the floor, which
    // the TPOT CI straddles (INCONCLUSIVE), while the throughput CI
    // [-10.8%, -8.9%] clears it (PASS).
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
    assert_eq!(t.gate.unwrap().margin, 0.12);
    assert_eq!(t.gate.unwrap().outcome, Outcome::Inconclusive);
    assert_eq!(within.rows[0].figure(Metric::TputPerGpu).gate.unwrap().outcome, Outcome::Pass);
    assert_eq!(within.gate.outcome, Outcome::Inconclusive);
    assert!(within.gate.inconclusive[0].contains("straddles the 12.0% (A/A noise floor) regression limit"), "{:?}", within.gate);
    assert!(super::markdown::render(&within).contains("| +12.0% (A/A floor) | INCONCLUSIVE |"));
    let md = super::markdown::render(&within);
    assert!(md.contains("within this machine's noise of ±12.0%"), "{md}");
    assert!(md.contains("noise floor, from the A/A `aa/ab.json` (3 repeats"), "{md}");
    assert!(super::markdown::terminal(&within).contains("noise floor: A/A aa/ab.json"));

    // A floor of ±15% holds the whole CI: PASS.
    let mut wider = cmp.clone();
    apply_noise(&mut wider, &floors(0.15));
    assert_eq!(wider.gate.outcome, Outcome::Pass, "{:?}", wider.gate);

    // A floor below the change keeps the verdict and the gate failure.
    let mut beyond = cmp.clone();
    apply_noise(&mut beyond, &floors(0.02));
    assert_eq!(beyond.rows[0].figure(Metric::MedianTpot).verdict, Verdict::Slower);
    assert_eq!(beyond.gate.outcome, Outcome::Fail);
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

/// One repeat at conc 4 per entry of `speeds`, with `correct` answers on
/// the first repeat's eval.
fn repeats_of(label: &str, speeds: &[f64], correct: &[bool]) -> Arm {
    let reps = speeds.iter().enumerate().map(|(i, &s)| repeat(label, &[4], 16, s, if i == 0 { correct } else { &[] })).collect();
    arm(label, reps)
}

#[test]
fn the_gate_passes_fails_or_is_inconclusive_with_its_exit_code_and_text() {
    let all = answers(1000, 1319);
    let base = || repeats_of("base", &[1.0, 1.01, 0.99], &all);

    // PASS: within ±1% in each of three pairs, the same 1319 answers: every
    // CI excludes a regression beyond 5% (and a 1-point drop).
    let cmp = compare(&base(), &repeats_of("same", &[1.005, 1.0, 0.995], &all), context(), Options::default()).unwrap();
    for f in &cmp.rows[0].figures {
        let g = f.gate.unwrap();
        assert_eq!((g.outcome, g.margin, g.repeats_needed), (Outcome::Pass, 0.05, None), "{f:?}");
    }
    assert_eq!(cmp.accuracy.as_ref().unwrap().outcome, Outcome::Pass);
    assert_eq!((cmp.gate.outcome, cmp.exit_status().code()), (Outcome::Pass, 0));
    assert!(cmp.gate.failures.is_empty() && cmp.gate.inconclusive.is_empty());
    let md = super::markdown::render(&cmp);
    assert!(md.contains("### Gate per figure") && md.contains("| ISL/OSL 64/16 TP 1 conc 4 | tok/s/gpu |"), "{md}");
    assert!(md.contains("| -5.0% | PASS |") && md.contains("| +5.0% | PASS |") && md.contains("| -1.00 pts | PASS |"), "{md}");
    assert!(md.trim_end().ends_with("max accuracy drop 1.00 points): PASS"), "{md}");
    let yaml = super::changelog::render(&cmp);
    assert!(yaml.contains("\"enginebench gate PASS (max regression 5%, max accuracy drop 1.00 points, 95% CIs)\""), "{yaml}");
    assert!(yaml.contains("accuracy held"), "{yaml}");

    // FAIL: 10% slower in each pair: the whole CI lies beyond 5%.
    let cmp = compare(&base(), &repeats_of("slow", &[0.9, 0.91, 0.89], &all), context(), Options::default()).unwrap();
    let tpot = cmp.rows[0].figure(Metric::MedianTpot);
    assert_eq!(tpot.gate.unwrap().outcome, Outcome::Fail, "{tpot:?}");
    assert!(tpot.ci.unwrap().0 > 0.05);
    assert_eq!((cmp.gate.outcome, cmp.exit_status().code()), (Outcome::Fail, 1));
    assert!(cmp.gate.failures.iter().all(|f| f.contains(": the whole CI is a regression beyond 5%")), "{:?}", cmp.gate);
    let yaml = super::changelog::render(&cmp);
    assert!(yaml.contains("enginebench gate FAIL (max regression 5%") && yaml.contains("Median TPOT (ms) +"), "{yaml}");
    assert!(super::markdown::terminal(&cmp).contains("points): FAIL\n- ISL/OSL 64/16 TP 1 conc 4: "));

    // INCONCLUSIVE: two pairs, -3% and +3%: at t(0.975, 1) = 12.7 the CI is
    // about ±50%, straddling 5%; at the observed spread about 7 repeats a
    // side would clear it, and the line says so.
    let b2 = repeats_of("base", &[1.0, 1.0], &all);
    let cmp = compare(&b2, &repeats_of("noisy", &[0.97, 1.03], &all), context(), Options::default()).unwrap();
    let t = cmp.rows[0].figure(Metric::TputPerGpu);
    let g = t.gate.unwrap();
    assert_eq!(g.outcome, Outcome::Inconclusive, "{t:?}");
    let Some(Needed::About(n)) = g.repeats_needed else { panic!("{g:?}") };
    assert!((4..=12).contains(&n), "{n}");
    assert_eq!((cmp.gate.outcome, cmp.exit_status().code()), (Outcome::Inconclusive, 3));
    assert!(cmp.gate.failures.is_empty());
    let Some(Needed::About(most)) = cmp.gate.repeats_needed else { panic!("{:?}", cmp.gate) };
    assert!(most >= n);
    let line = cmp.gate.inconclusive.iter().find(|l| l.contains("Total throughput per GPU")).unwrap();
    assert!(line.contains("straddles the 5% regression limit") && line.contains(&format!("about {n} repeats a side would decide it")), "{line}");
    let to_decide = format!("To decide: about {most} repeats a side at the observed spread (`--until-ci gate --max-repeats {most}`).");
    for text in [super::markdown::render(&cmp), super::markdown::terminal(&cmp)] {
        assert!(text.contains("points): INCONCLUSIVE\n- ISL/OSL 64/16 TP 1 conc 4: "), "{text}");
        assert!(text.contains(&to_decide), "{text}");
    }
    // No changelog entry: neither an uplift nor a regression can be claimed.
    let yaml = super::changelog::render(&cmp);
    assert!(!yaml.contains("config-keys") && yaml.lines().all(|l| l.starts_with('#')), "{yaml}");
    assert!(yaml.contains(&to_decide.replace('`', "")), "{yaml}");
    assert!(yaml_rust2::YamlLoader::load_from_str(&yaml).unwrap().is_empty(), "comments only: {yaml}");
    let json = serde_json::to_value(&cmp).unwrap();
    assert_eq!(json["gate"]["outcome"], "inconclusive");
    assert_eq!(json["rows"][0]["figures"][0]["gate"]["outcome"], "inconclusive");
    assert_eq!(json["rows"][0]["figures"][0]["gate"]["repeats_needed"], serde_json::json!({"about": n}));
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
