//! Turning what a worker sent into results: point figures, eval scores, the
//! accuracy gate.

use anyhow::Result;
use serde::Serialize;

use super::outputs::OutputFiles;
use super::plan::BuiltinEval;
use crate::protocol::{EvalCompletion, LmEvalLoad, RawPoint, ReplayPhase, RequestRecord, StepRecord};
use crate::eval::lmeval::{LmEvalResult, parse_results, version_of};
use crate::eval::tasks::TaskDef;
use crate::eval::thresholds::GateRules;
use crate::eval::{Sample, aggregate, score_sample};
use crate::metrics::crosscheck::cross_check;
use crate::metrics::prefix_cache::{CacheInput, summarize_prefix_cache};
use crate::metrics::sessions::summarize_sessions;
use crate::metrics::spec::summarize_spec;
use crate::metrics::steps::summarize_steps;
use crate::metrics::{FigureSpec, point_figures};
use crate::recipe::GateMetric;
use crate::recipe::sweep::ResolvedSweep;
use crate::report::files::JsonLines;
use crate::report::result::{Evals, Gate, GateCheck, Gsm8kResult, PointResult, PointStatus};

/// The accuracy gate: every task that has a threshold ([`GateRules::threshold`];
/// a built-in task is also found by the lm-eval task it reproduces) has each
/// of its gated metrics checked against it, as InferenceX's
/// validate_scores.py checks every `exact_match,<filter>`. `metric` narrows
/// to the strict-match or flexible-extract filter where a task has it. A
/// task with a threshold and no metric to gate fails. `None` without any
/// threshold.
pub fn gate(evals: &Evals, builtin: Option<&TaskDef>, rules: &GateRules, metric: GateMetric) -> Option<Gate> {
    if rules.is_empty() {
        return None;
    }
    let pick = |name: &str| match metric {
        GateMetric::All => true,
        GateMetric::Strict => name.ends_with(",strict-match"),
        GateMetric::Flexible => name.ends_with(",flexible-extract"),
    };
    // (task, threshold names, [(metric, value, stderr)])
    let mut tasks: Vec<(String, Vec<String>, Vec<(String, f64, Option<f64>)>)> = Vec::new();
    if let (Some(g), Some(t)) = (&evals.gsm8k, builtin) {
        let metrics = vec![
            (format!("exact_match,{}", t.strict.name), g.exact_match_strict, Some(g.exact_match_strict_stderr)),
            (format!("exact_match,{}", t.flexible.name), g.exact_match_flexible, Some(g.exact_match_flexible_stderr)),
        ];
        tasks.push((g.task.clone(), t.names().into_iter().map(str::to_string).collect(), metrics));
    }
    for t in evals.lm_eval.iter().flat_map(|l| &l.tasks) {
        let metrics = t.gated_metrics().into_iter().map(|m| (m.name.clone(), m.value, m.stderr)).collect();
        tasks.push((t.task.clone(), vec![t.task.clone()], metrics));
    }
    let mut checks = Vec::new();
    let mut ungated = Vec::new();
    for (task, names, metrics) in tasks {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let Some((threshold, source)) = rules.threshold(&names) else {
            ungated.push(task);
            continue;
        };
        let narrowed: Vec<_> = metrics.iter().filter(|(m, ..)| pick(m)).cloned().collect();
        let chosen = if narrowed.is_empty() { metrics } else { narrowed };
        if chosen.is_empty() {
            let none = "(no exact_match or higher-is-better metric)".to_string();
            checks.push(GateCheck { task, metric: none, value: 0.0, stderr: None, threshold, source, passed: false });
            continue;
        }
        for (metric, value, stderr) in chosen {
            let passed = value >= threshold;
            checks.push(GateCheck { task: task.clone(), metric, value, stderr, threshold, source: source.clone(), passed });
        }
    }
    Some(Gate { passed: !checks.is_empty() && checks.iter().all(|c| c.passed), checks, ungated })
}

/// The lm-eval tasks' result: lm-eval's results JSON read per task, with the
/// driver loop's figures; `files` are lm-eval's own, relative to the run folder.
///
/// Errors: lm-eval's results are not what lm-eval writes (see [`parse_results`]).
/// `(duration_s, wall_s)`: the generation in the driver loop, and lm-eval's
/// whole evaluation in the worker, s.
pub fn finish_lm_eval(
    results: &str,
    (duration_s, wall_s): (f64, f64),
    load: &[LmEvalLoad],
    max_tokens: Option<u32>,
    chat: bool,
    files: Vec<String>,
) -> Result<LmEvalResult> {
    Ok(LmEvalResult {
        lm_eval_version: version_of(results),
        files,
        chat,
        max_tokens,
        duration_s,
        wall_s,
        requests: load.iter().map(|l| l.requests).sum(),
        output_tokens: load.iter().map(|l| l.output_tokens).sum(),
        tasks: parse_results(results, load)?,
    })
}

/// Figures, step summary and cross-check of one measured point.
/// `in_process`: the engine ran in the worker's own process. With the engine
/// core in its own process (`overhead`'s tier 2) vLLM stamps tokens in the
/// core, before they cross the process boundary, so the harness is later by
/// the IPC time: the cross-check is recorded but a difference is no warning.
/// `num_speculative_tokens`: the engine's k (from its info), when it speculates.
pub fn finish_point(
    raw: &RawPoint,
    sweep: &ResolvedSweep,
    gpus: u32,
    in_process: bool,
    num_speculative_tokens: Option<u32>,
) -> PointResult {
    let p = &raw.spec.point;
    let spec = FigureSpec { percentiles: &sweep.percentiles, gpus, goodput: sweep.goodput };
    // Session workloads ran primers and warm-ups in the same loop: figures
    // are of the measured requests and the steps from the measured phase on.
    let measured_mask: Option<Vec<bool>> = (!raw.turns.is_empty())
        .then(|| raw.turns.iter().map(|t| t.phase == ReplayPhase::Measured).collect());
    let measured: Vec<RequestRecord> = match &measured_mask {
        Some(mask) => raw.records.iter().zip(mask).filter(|(_, m)| **m).map(|(r, _)| r.clone()).collect(),
        None => raw.records.clone(),
    };
    let measured_steps: &[StepRecord] = match raw.measure_start_s {
        Some(t0) => &raw.steps[raw.steps.partition_point(|s| s.t_s < t0)..],
        None => &raw.steps,
    };
    let figures = point_figures(&measured, measured_duration_s(raw, &measured), spec);
    let step_stats = summarize_steps(measured_steps);
    let spec_decode = summarize_spec(raw.steps.iter().map(|s| s.spec.as_ref()), num_speculative_tokens, raw.vllm_spec.clone());
    if let Some(s) = spec_decode.as_ref().filter(|s| s.vllm_counters_agree == Some(false)) {
        tracing::warn!(
            "{}/{} conc {}: speculative counters per step ({} drafts, {} accepted) differ from vLLM's own totals ({:?})",
            p.isl, p.osl, p.conc, s.counts.drafts, s.counts.accepted_tokens, s.vllm_counters
        );
    }
    let timings: Vec<_> = match &measured_mask {
        Some(mask) => raw.engine_timings.iter().zip(mask).filter(|(_, m)| **m).map(|(t, _)| *t).collect(),
        None => raw.engine_timings.clone(),
    };
    // P/D: vLLM's clock starts at the decode engine's add.
    let crosscheck = match &raw.pd {
        Some(pd) if measured_mask.is_none() => cross_check(&crate::metrics::pd::as_decode_saw(&measured, pd), &timings, step_stats.median_step_ms),
        _ => cross_check(&measured, &timings, step_stats.median_step_ms),
    };
    let pd = raw
        .pd
        .as_ref()
        .filter(|_| measured_mask.is_none())
        .map(|pd| crate::metrics::pd::summarize_pd(pd, &measured, &timings, &figures, &sweep.percentiles));
    if let Some(c) = crosscheck.as_ref().filter(|c| !c.agree && in_process) {
        tracing::warn!(
            "{}/{} conc {}: harness and vLLM disagree (TTFT median diff {:.2} ms, E2EL {:.2} ms, tolerance {:.2}/{:.2} ms)",
            p.isl, p.osl, p.conc, c.ttft.median_ms, c.e2el.median_ms, c.ttft.tolerance_ms, c.e2el.tolerance_ms
        );
    }
    // Without engine steps (the HTTP tier of `overhead`) there is nothing to say.
    let prefix_cache = (!raw.steps.is_empty()).then(|| {
        summarize_prefix_cache(&CacheInput {
            records: &raw.records,
            measured: measured_mask.as_deref(),
            steps: &raw.steps,
            measured_steps,
            turns: (!raw.turns.is_empty()).then_some(raw.turns.as_slice()),
            reset_before_point: raw.prefix_cache_reset == Some(true),
        })
    });
    let sessions = (!raw.turns.is_empty()).then(|| {
        let mut s = summarize_sessions(&raw.records, &raw.turns);
        (s.stopped_by, s.file_requests) = (raw.replay_stop, raw.file_requests);
        s
    });
    PointResult {
        conc: p.conc,
        isl: p.isl,
        osl: p.osl,
        num_prompts: p.num_prompts,
        warmups: p.warmups,
        length_convention: raw.spec.dataset.convention,
        range_ratio: raw.spec.dataset.range_ratio,
        prefix_len: raw.spec.dataset.prefix_len,
        request_rate: raw.spec.request_rate,
        burstiness: raw.spec.request_rate.map(|_| raw.spec.burstiness),
        ignore_eos: raw.spec.ignore_eos,
        gpus,
        workload: raw.spec.workload.clone(),
        status: if raw.partial {
            PointStatus::Partial
        } else if figures.failed == 0 {
            PointStatus::Ok
        } else {
            PointStatus::Failed
        },
        figures,
        step_stats,
        crosscheck,
        spec_decode,
        prefix_cache,
        sessions,
        pd,
        telemetry: None,
        profile: None,
        ranks: Vec::new(),
    }
}

/// The duration throughputs are divided by: for the random workloads, from
/// the loop's start (the first send) to the last token, as bench serve; for
/// session workloads, from the first measured send to the last measured
/// token, as AgentX's aggregation (max request end - min request start).
fn measured_duration_s(raw: &RawPoint, measured: &[RequestRecord]) -> f64 {
    if raw.turns.is_empty() {
        return raw.duration_s;
    }
    let first = measured.iter().map(|r| r.send_s).fold(f64::INFINITY, f64::min);
    let last = measured.iter().filter_map(|r| r.last_token_s).fold(f64::NEG_INFINITY, f64::max);
    if last > first { last - first } else { 0.0 }
}

/// The line printed when a point finishes: its throughput and TPOT (or
/// that no request completed), prefix-cache and speculation figures, and
/// the requests that failed or were never sent.
pub fn point_line(p: &PointResult) -> String {
    let mut line = if p.figures.completed == 0 {
        format!("{} conc {}: no request completed", p.shape(), p.conc)
    } else {
        format!("{} conc {}: {:.1} output tok/s, median TPOT {:.2} ms", p.shape(), p.conc, p.figures.output_throughput, p.figures.ms("median_tpot_ms"))
    };
    if let Some(c) = p.prefix_cache.as_ref().filter(|_| p.workload.is_sessions()) {
        if let Some(h) = c.hit_rate {
            line.push_str(&format!(", prefix-cache hit {:.1}%", h * 100.0));
        }
        if let (Some(tokens), Some(blocks)) = (c.theoretical_token_hit_rate, c.theoretical_hit_rate) {
            line.push_str(&format!(" (theoretical {:.1}% of tokens, {:.1}% of blocks)", tokens * 100.0, blocks * 100.0));
        }
    }
    if let Some(s) = p.spec_decode.as_ref() {
        match (s.acceptance_rate, s.acceptance_length) {
            (Some(r), Some(l)) => line.push_str(&format!(", spec acceptance {:.1}% (length {l:.2})", r * 100.0)),
            _ => line.push_str(", spec decode: no drafts"),
        }
    }
    if let Some(cut) = trace_cut(p) {
        line.push_str(&format!(", {cut}"));
    }
    if p.figures.failed > 0 {
        line.push_str(&format!(", {} requests FAILED", p.figures.failed));
    }
    if p.figures.not_sent > 0 {
        line.push_str(&format!(", {} requests not sent (interrupted first)", p.figures.not_sent));
    }
    if let Some(pd) = &p.pd {
        line.push('\n');
        line.push_str(&pd_line(pd));
    }
    line
}

/// A P/D point's second line: the TTFT split (medians), the transfers,
/// the tokens that arrived by transfer, the spread over prefill workers
/// and InferenceX's per-GPU throughput.
fn pd_line(pd: &crate::metrics::pd::PdSummary) -> String {
    let t = &pd.ttft_split;
    let mut line = format!(
        "    P/D TTFT median ms: prefill queue {:.1} + prefill {:.1} + hand-off {:.1} + KV wait {:.1} + first token {:.1}",
        t.prefill_queue_ms.median, t.prefill_compute_ms.median, t.handoff_ms.median, t.kv_wait_ms.median, t.first_token_ms.median
    );
    match &pd.transfers {
        Some(x) => line.push_str(&format!(
            "; KV {} transfers, {:.1} MB, {} MB/s, {} failed",
            x.stats.transfers,
            x.stats.bytes as f64 / 1e6,
            x.mb_per_s.map_or("-".into(), |v| format!("{v:.0}")),
            x.stats.failed_transfers
        )),
        None => line.push_str("; no KV transfer reported"),
    }
    line.push_str(&format!(
        "; {}/{} prompt tokens by transfer; prefill workers' requests {:?}",
        pd.transferred_tokens, pd.prompt_tokens, pd.requests_per_prefill_worker
    ));
    if pd.recomputed > 0 {
        line.push_str(&format!("; {} recomputed", pd.recomputed));
    }
    line
}

/// How much of its trace a trace point replayed when a rule cut it ("8 of
/// 40 trace requests: cut by the request budget, num_prompts 8"), or
/// `None` (the whole file, another workload, or Ctrl-C).
pub fn trace_cut(p: &PointResult) -> Option<String> {
    let crate::protocol::Workload::Trace(t) = &p.workload else { return None };
    let s = p.sessions.as_ref()?;
    let why = match s.stopped_by? {
        crate::protocol::StopReason::MaxRequests => format!("the request budget, num_prompts {} (--num-prompts, or the recipe's num_prompts / prompts_per_conc)", p.num_prompts),
        crate::protocol::StopReason::Duration => format!("the duration, {} s (--duration, or [sweep.trace] duration_s)", t.duration_s.unwrap_or(f64::NAN)),
        crate::protocol::StopReason::Exhausted => return None,
    };
    let (sent, file) = (s.measured_requests + s.warmup_requests, s.file_requests?);
    (sent < file).then(|| format!("{sent} of {file} trace requests: cut by {why}"))
}

/// Scores the completions of the built-in task and logs every sample.
pub fn score_eval(
    eval: &BuiltinEval,
    completions: &[EvalCompletion],
    duration_s: f64,
    max_tokens: u32,
    files: &mut OutputFiles,
    label: &str,
) -> Result<Gsm8kResult> {
    if files.samples.is_none() {
        files.samples = Some(JsonLines::create(files.lines_dir.join("gsm8k_samples.jsonl"))?);
    }
    let log = files.samples.as_mut().expect("just created");
    let mut samples: Vec<Sample> = Vec::with_capacity(completions.len());
    for (request, completion) in eval.plan.requests.iter().zip(completions) {
        let mut s = score_sample(
            &eval.task,
            request.doc_id,
            &request.prompt.hash_input(),
            &completion.text,
            completion.output_tokens,
            &request.gold,
        );
        s.token_ids = completion.token_ids.clone();
        #[derive(Serialize)]
        struct Line<'a> {
            label: &'a str,
            #[serde(flatten)]
            sample: &'a Sample,
        }
        log.append(&Line { label, sample: &s })?;
        samples.push(s);
    }
    let a = aggregate(&samples);
    let p = &eval.plan;
    Ok(Gsm8kResult {
        n: a.n,
        exact_match_strict: a.exact_match_strict,
        exact_match_strict_stderr: a.exact_match_strict_stderr,
        exact_match_flexible: a.exact_match_flexible,
        exact_match_flexible_stderr: a.exact_match_flexible_stderr,
        task: p.task.clone(),
        task_origin: p.task_origin.clone(),
        chat: p.chat,
        num_fewshot: p.num_fewshot,
        fewshot_mode: p.fewshot_mode.label(),
        data_kind: p.data_kind.as_str().to_string(),
        data_source: p.data_source.clone(),
        train_size: p.split_sizes.train,
        test_size: p.split_sizes.test,
        max_tokens,
        duration_s,
        output_tokens: completions.iter().map(|c| u64::from(c.output_tokens)).sum(),
    })
}

