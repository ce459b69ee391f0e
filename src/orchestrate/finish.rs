//! Turning what a worker sent into results: point figures, eval scores, the
//! accuracy gate.

use anyhow::Result;
use serde::Serialize;

use super::outputs::OutputFiles;
use super::plan::EvalPlan;
use crate::protocol::{EvalCompletion, RawPoint, ReplayPhase, RequestRecord, StepRecord};
use crate::eval::tasks::TaskDef;
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
use crate::report::result::{Gate, GateCheck, Gsm8kResult, PointResult, PointStatus};

/// The accuracy gate over lm-eval's metric names (`exact_match,<filter>`).
pub fn gate(g: &Gsm8kResult, task: &TaskDef, min_accuracy: f64, metric: Option<GateMetric>) -> Gate {
    let strict = (format!("exact_match,{}", task.strict.name), g.exact_match_strict);
    let flexible = (format!("exact_match,{}", task.flexible.name), g.exact_match_flexible);
    let metrics = match metric.unwrap_or_default() {
        GateMetric::All => vec![strict, flexible],
        GateMetric::Strict => vec![strict],
        GateMetric::Flexible => vec![flexible],
    };
    let checks: Vec<GateCheck> = metrics
        .into_iter()
        .map(|(metric, value)| GateCheck { metric, value, passed: value >= min_accuracy })
        .collect();
    Gate { min_accuracy, passed: checks.iter().all(|c| c.passed), checks }
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
    let crosscheck = cross_check(&measured, &timings, step_stats.median_step_ms);
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
    let sessions = (!raw.turns.is_empty()).then(|| summarize_sessions(&raw.records, &raw.turns));
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
        telemetry: None,
        profile: None,
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

pub fn point_line(p: &PointResult) -> String {
    let mut line = format!(
        "{} conc {}: {:.1} output tok/s, median TPOT {:.2} ms",
        p.shape(),
        p.conc,
        p.figures.output_throughput,
        p.figures.ms("median_tpot_ms")
    );
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
    if p.figures.failed > 0 {
        line.push_str(&format!(", {} requests FAILED", p.figures.failed));
    }
    line
}

/// Scores the completions of an eval and logs every sample.
pub fn score_eval(
    eval: &EvalPlan,
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

