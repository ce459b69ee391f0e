//! The rules of a comparison against another tool's file, per matched
//! point and for the eval: which workload settings differ or are not
//! recorded (named, not refused: the file is what it is), which figures are
//! not compared and why, and why the gate cannot decide a point. The
//! comparison ([`crate::ab::compare`]) applies them to its rows.

use super::{EvalRecord, PointRecord, Source};
use crate::ab::metric::Metric;
use crate::protocol::LengthConvention;
use crate::report::result::{Gsm8kResult, PointResult};

/// A point of our own run as a [`PointRecord`]: everything recorded.
/// `per_request`: its requests are at hand (`requests.jsonl`).
pub fn record_of(p: &PointResult, per_request: bool) -> PointRecord {
    let r = p.range_ratio;
    let range = match p.length_convention {
        LengthConvention::Vllm => (1.0 - r, 1.0 + r),
        LengthConvention::Inferencex => (r, 1.0),
    };
    PointRecord {
        per_request,
        tp_known: true,
        gpus: Some(p.gpus),
        num_prompts: Some(p.num_prompts),
        length_range: Some(range),
        prefix_len: Some(p.prefix_len),
        ignore_eos: Some(p.ignore_eos),
        chat_template: Some(p.workload == crate::protocol::Workload::ChatRandom),
        request_rate: Some(p.request_rate.map_or("inf".to_string(), |x| x.to_string())),
        burstiness: Some(p.burstiness.unwrap_or(1.0)),
        missing: Vec::new(),
    }
}

fn range_text((lo, hi): (f64, f64)) -> String {
    if (lo - 1.0).abs() < 1e-9 && (hi - 1.0).abs() < 1e-9 { "lengths exactly ISL/OSL".into() } else { format!("lengths in [{lo}, {hi}] x ISL/OSL") }
}

fn yes_no(b: bool) -> String {
    if b { "yes".into() } else { "no".into() }
}

/// The workload settings of a matched point that differ between the
/// baseline `b` and the candidate `c`, one phrase each
/// (`num_prompts 320 (baseline) vs 40 (candidate)`), then those a side's
/// file does not record (`not recorded by the baseline file: ignore_eos`).
/// Burstiness counts only when a side sends at a finite request rate.
pub fn workload_differences(b: &PointRecord, c: &PointRecord) -> Vec<String> {
    let finite_rate = [&b.request_rate, &c.request_rate].iter().any(|r| r.as_deref().is_some_and(|r| r != "inf"));
    let fields: [(&str, Option<String>, Option<String>, bool); 7] = [
        ("num_prompts", b.num_prompts.map(|x| x.to_string()), c.num_prompts.map(|x| x.to_string()), true),
        ("length range", b.length_range.map(range_text), c.length_range.map(range_text), true),
        ("prefix_len", b.prefix_len.map(|x| x.to_string()), c.prefix_len.map(|x| x.to_string()), true),
        ("ignore_eos", b.ignore_eos.map(yes_no), c.ignore_eos.map(yes_no), true),
        ("chat template", b.chat_template.map(yes_no), c.chat_template.map(yes_no), true),
        ("request rate", b.request_rate.clone(), c.request_rate.clone(), true),
        ("burstiness", b.burstiness.map(|x| x.to_string()), c.burstiness.map(|x| x.to_string()), finite_rate),
    ];
    differences(fields.into_iter().filter(|f| f.3).map(|(name, x, y, _)| (name, x, y)))
}

/// Why `metric` is not compared at a point whose sides hold `b` and `c`:
/// a side's file lacks it (or defines it otherwise), or, for tok/s/gpu, the
/// sides divide by different GPU counts. `None`: compared.
pub fn not_compared(metric: Metric, b: &PointRecord, c: &PointRecord) -> Option<String> {
    for (r, role) in [(b, "baseline"), (c, "candidate")] {
        if let Some((_, why)) = r.missing.iter().find(|(m, _)| *m == metric) {
            return Some(format!("{role}: {why}"));
        }
    }
    if metric == Metric::TputPerGpu {
        if let (Some(x), Some(y)) = (b.gpus, c.gpus) {
            if x != y {
                return Some(format!("per-GPU divisors differ: the baseline divides by {x} GPUs, the candidate by {y}"));
            }
        }
    }
    None
}

/// Why the gate cannot decide a point where a side is another tool's file
/// (`sources`: baseline, candidate; `None` for a run of ours), or `None`
/// when both are ours. One foreign run says nothing of its own run-to-run
/// noise: with summary figures the delta has no interval at all, with
/// per-request arrays its interval covers that run's requests only.
pub fn undecidable(sources: [Option<(&Source, &PointRecord)>; 2]) -> Option<String> {
    let parts: Vec<String> = sources
        .iter()
        .zip(["baseline", "candidate"])
        .filter_map(|(s, role)| {
            let (source, record) = (*s)?;
            let held = if record.per_request {
                "with per-request arrays: its interval is a bootstrap over that run's requests, not run-to-run noise"
            } else {
                "with summary figures only: one foreign run is not a measurement of its noise, so the delta has no interval"
            };
            Some(format!("the {role} is one run of another tool ({}) {held}", source.short()))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The eval settings a side states: ours all, an lm-eval file's where it
/// records them.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSettings {
    pub num_fewshot: Option<u64>,
    pub chat: Option<bool>,
    pub max_tokens: Option<u64>,
    pub n: Option<usize>,
}

impl EvalSettings {
    /// Our run's built-in eval.
    pub fn of_ours(g: &Gsm8kResult) -> EvalSettings {
        EvalSettings { num_fewshot: Some(g.num_fewshot as u64), chat: Some(g.chat), max_tokens: Some(u64::from(g.max_tokens)), n: Some(g.n) }
    }

    /// A foreign file's task `task` (the built-in result its reader made, `g`).
    pub fn of_file(g: &Gsm8kResult, record: Option<&EvalRecord>) -> EvalSettings {
        let of = |list: Option<&Vec<(String, u64)>>| list.and_then(|l| l.iter().find(|(t, _)| *t == g.task)).map(|(_, v)| *v);
        EvalSettings {
            num_fewshot: of(record.map(|r| &r.num_fewshot)),
            chat: record.and_then(|r| r.chat_template),
            max_tokens: of(record.map(|r| &r.max_tokens)),
            n: Some(g.n),
        }
    }
}

/// The eval settings that differ between the sides, or that a side's file
/// does not record, one phrase each.
pub fn eval_differences(b: &EvalSettings, c: &EvalSettings) -> Vec<String> {
    let fields: [(&str, Option<String>, Option<String>); 4] = [
        ("shots", b.num_fewshot.map(|x| x.to_string()), c.num_fewshot.map(|x| x.to_string())),
        ("chat template", b.chat.map(yes_no), c.chat.map(yes_no)),
        ("max tokens", b.max_tokens.map(|x| x.to_string()), c.max_tokens.map(|x| x.to_string())),
        ("questions (n)", b.n.map(|x| x.to_string()), c.n.map(|x| x.to_string())),
    ];
    differences(fields)
}

/// One phrase per field whose two sides (baseline, candidate) differ, then
/// one per side naming the fields its file does not record.
fn differences<'a>(fields: impl IntoIterator<Item = (&'a str, Option<String>, Option<String>)>) -> Vec<String> {
    let mut out = Vec::new();
    let mut unrecorded: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    for (name, x, y) in fields {
        match (&x, &y) {
            (Some(x), Some(y)) if x != y => out.push(format!("{name} {x} (baseline) vs {y} (candidate)")),
            _ => {
                if x.is_none() {
                    unrecorded[0].push(name);
                }
                if y.is_none() {
                    unrecorded[1].push(name);
                }
            }
        }
    }
    for (list, role) in unrecorded.iter().zip(["baseline", "candidate"]) {
        if !list.is_empty() {
            out.push(format!("not recorded by the {role} file: {}", list.join(", ")));
        }
    }
    out
}
