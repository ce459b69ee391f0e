//! Comparing two variants: matching points, per-row deltas with 95%
//! intervals (paired t over repeats, [`super::stats`]), minimum detectable
//! effects and verdicts, the A/A noise floor ([`NoiseFloor`]), accuracy
//! (McNemar), greedy-token agreement, and the gate.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::input::{Arm, Repeat, RequestRow};
use super::distributions::{self, McNemar};
use super::stats::{self, BootstrapOptions, IntervalMethod, RepeatData, Verdict};
use crate::error::usage;
use crate::eval::score::{Sample, aggregate};
use crate::report::result::{PointResult, RecipeInfo};

/// Thresholds and bootstrap settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Options {
    /// Largest accepted accuracy drop, as a fraction (0.01 = 1 point), for
    /// strict-match and flexible-extract alike.
    pub max_accuracy_drop: f64,
    /// Largest accepted perf regression, as a fraction (0.05 = 5%): the gate
    /// fails on a row figure that is significantly worse (its interval
    /// excludes 0) and whose measured delta is worse than this.
    pub max_regression: f64,
    /// Significance level of McNemar's test for "accuracy held".
    pub alpha: f64,
    /// Bootstrap replicates.
    pub resamples: usize,
    /// Bootstrap seed.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_accuracy_drop: 0.01,
            max_regression: 0.05,
            alpha: 0.05,
            resamples: stats::DEFAULT_RESAMPLES,
            seed: stats::DEFAULT_SEED,
        }
    }
}

/// What is compared, for headers and the changelog.
#[derive(Debug, Clone, Serialize)]
pub struct Context {
    /// The recipe of the candidate run.
    pub recipe: RecipeInfo,
    /// The changelog's config key (default: the recipe name).
    pub config_key: Option<String>,
}

/// A figure of a point that is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Total (input + output) tokens per second per GPU, tok/s/gpu
    /// (InferenceX `tput_per_gpu`); higher is better.
    TputPerGpu,
    /// Output tokens per second of the engine, tok/s; higher is better.
    OutputTput,
    /// Median time per output token, ms; lower is better.
    MedianTpot,
    /// Median time to first token, ms; lower is better.
    MedianTtft,
}

/// Every compared figure, in table order.
pub const METRICS: [Metric; 4] = [Metric::TputPerGpu, Metric::OutputTput, Metric::MedianTpot, Metric::MedianTtft];

impl Metric {
    /// Long name with unit, for table captions.
    pub fn title(self) -> &'static str {
        match self {
            Metric::TputPerGpu => "Total throughput per GPU (tok/s/gpu)",
            Metric::OutputTput => "Output throughput (tok/s)",
            Metric::MedianTpot => "Median TPOT (ms)",
            Metric::MedianTtft => "Median TTFT (ms)",
        }
    }

    /// Short name with unit, for column heads.
    pub fn short(self) -> &'static str {
        match self {
            Metric::TputPerGpu => "tok/s/gpu",
            Metric::OutputTput => "out tok/s",
            Metric::MedianTpot => "TPOT ms (median)",
            Metric::MedianTtft => "TTFT ms (median)",
        }
    }

    /// Throughputs: higher is better; latencies: lower is better.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::TputPerGpu | Metric::OutputTput)
    }

    /// The figure as `result.json` reports it for the point.
    pub fn of_point(self, p: &PointResult) -> f64 {
        match self {
            Metric::TputPerGpu => p.figures.tput_per_gpu,
            Metric::OutputTput => p.figures.output_throughput,
            Metric::MedianTpot => p.figures.ms("median_tpot_ms"),
            Metric::MedianTtft => p.figures.ms("median_ttft_ms"),
        }
    }

    /// What one repeat contributes to the bootstrap (see [`stats`]):
    /// throughputs are the point's figure with the Little's-law request term
    /// (none in request-rate mode or without requests), latency medians the
    /// completed requests' values.
    fn repeat_data(self, p: &PointResult, requests: &[&RequestRow]) -> RepeatData {
        let ok: Vec<&&RequestRow> = requests.iter().filter(|r| r.ok()).collect();
        let observed = self.of_point(p);
        let ratio = |num: &dyn Fn(&RequestRow) -> f64| {
            if p.request_rate.is_some() || ok.is_empty() {
                RepeatData::Fixed(observed)
            } else {
                RepeatData::Ratio {
                    observed,
                    num: ok.iter().map(|r| num(r)).collect(),
                    den: ok.iter().map(|r| r.e2el_ms.unwrap_or(0.0) / 1000.0).collect(),
                }
            }
        };
        let median = |v: Vec<f64>| if v.is_empty() { RepeatData::Fixed(observed) } else { RepeatData::Median(v) };
        match self {
            Metric::TputPerGpu => ratio(&|r| f64::from(r.input_tokens) + f64::from(r.output_tokens)),
            Metric::OutputTput => ratio(&|r| f64::from(r.output_tokens)),
            Metric::MedianTpot => median(ok.iter().filter_map(|r| r.tpot_ms).collect()),
            Metric::MedianTtft => median(ok.iter().filter_map(|r| r.ttft_ms).collect()),
        }
    }
}

/// One compared figure of a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub metric: Metric,
    /// Mean over the baseline's repeats, in the metric's unit.
    pub baseline: f64,
    /// Mean over the candidate's repeats, in the metric's unit.
    pub candidate: f64,
    /// candidate / baseline - 1 (fraction).
    pub delta: f64,
    /// 95% interval of the change (fractions), by `method`.
    pub ci: Option<(f64, f64)>,
    /// How `ci` was computed: paired t over repeats, Welch t, or (one
    /// repeat a side) the request bootstrap.
    pub method: IntervalMethod,
    /// Minimum detectable effect at 80% power and these repeats (fraction):
    /// the resolution of a "no significant change".
    pub mde: Option<f64>,
    /// c_i / b_i - 1 of each repeat pair (fractions), in run order.
    pub repeat_deltas: Vec<f64>,
    /// The old method's interval (two-level percentile bootstrap over repeats
    /// and requests), kept beside `ci` for comparison; not used for verdicts.
    pub bootstrap_ci: Option<(f64, f64)>,
    /// The A/A noise floor applied to this figure (fraction), if any
    /// ([`NoiseFloor`]).
    pub noise_floor: Option<f64>,
    /// From `ci`, then the noise floor: faster/slower only when the interval
    /// excludes 0 and |delta| exceeds the floor.
    pub verdict: Verdict,
}

/// One matched point: (ISL, OSL, TP, conc).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub isl: u32,
    pub osl: u32,
    pub tp: u32,
    pub conc: u32,
    /// Repeats of the baseline and of the candidate at this point.
    pub repeats: (usize, usize),
    /// In [`METRICS`] order.
    pub figures: Vec<Figure>,
    /// Median interactivity (1000 / median TPOT ms, tok/s/user), mean over
    /// repeats: baseline, candidate (for the Pareto plot).
    pub intvty: (f64, f64),
    /// [`Verdict::combine`] of the figures' verdicts.
    pub verdict: Verdict,
}

impl Row {
    /// The figure of `metric`.
    pub fn figure(&self, metric: Metric) -> &Figure {
        self.figures.iter().find(|f| f.metric == metric).expect("every row has every metric")
    }

    /// The row's resolution: the largest minimum detectable effect of its
    /// figures (fraction) and the figure it is, `None` when no figure has one.
    pub fn mde(&self) -> Option<(Metric, f64)> {
        self.figures.iter().filter_map(|f| f.mde.map(|m| (f.metric, m))).reduce(|a, b| if b.1 > a.1 { b } else { a })
    }

    /// The widest interval half-width of the row's figures, (hi - lo) / 2 as
    /// a fraction; `None` when a figure has no interval.
    pub fn half_width(&self) -> Option<f64> {
        self.figures.iter().map(|f| f.ci.map(|(lo, hi)| (hi - lo) / 2.0)).try_fold(0.0f64, |m, h| Some(m.max(h?)))
    }

    /// `ISL/OSL 64/32 TP 1 conc 4`.
    pub fn key_text(&self) -> String {
        key_text(&(self.isl, self.osl, self.tp, self.conc))
    }
}

/// exact_match scores of one variant (fractions) over `n` questions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scores {
    pub n: usize,
    pub strict: f64,
    pub flexible: f64,
}

/// One exact_match metric compared on paired questions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairedMetric {
    pub baseline: f64,
    pub candidate: f64,
    /// candidate - baseline, fraction (-0.01 = one point lower).
    pub diff: f64,
    /// On the questions both answered; `None` without samples.
    pub mcnemar: Option<McNemar>,
    /// -diff <= max_accuracy_drop, and no significant drop (McNemar p < alpha with diff < 0).
    pub held: bool,
}

/// Greedy-token agreement on the eval prompts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenAgreement {
    /// Questions present in both (paired by doc_id and prompt SHA-256) with token ids on both sides.
    pub compared: usize,
    /// Of those, questions whose greedy token ids are identical.
    pub identical: usize,
    /// identical / compared.
    pub fraction: f64,
    /// Mean token index (0-based) of the first differing token over the
    /// questions that differ (the shorter length where one is a prefix of the other).
    pub mean_first_divergence: Option<f64>,
    /// Paired questions left out because a side has no token ids (older files).
    pub without_token_ids: usize,
}

/// The accuracy block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accuracy {
    /// Task, shots and few-shot mode (equal on both sides).
    pub task: String,
    pub num_fewshot: usize,
    pub fewshot_mode: String,
    pub baseline: Scores,
    pub candidate: Scores,
    /// Questions answered by both (paired by doc_id and prompt SHA-256).
    pub paired: usize,
    pub strict: PairedMetric,
    pub flexible: PairedMetric,
    pub max_accuracy_drop: f64,
    /// Both metrics held.
    pub held: bool,
    pub agreement: Option<TokenAgreement>,
}

/// The gate: what failed, if anything, and what it could not judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateResult {
    pub passed: bool,
    pub failures: Vec<String>,
    /// Why performance was not gated at some points, in words; `None` when
    /// every point was. A side with one repeat gives no run-to-run interval
    /// (only request-to-request spread within one run), so no regression
    /// claim is made there and such a point never fails the gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf_not_gated: Option<String>,
}

/// A whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub baseline_label: String,
    pub candidate_label: String,
    pub context: Context,
    pub options: Options,
    /// What differs between the two engine configurations (first repeats):
    /// env and `vllm serve` flags, one phrase each ([`super::config_diff::config_changes`]).
    pub changes: Vec<String>,
    /// Sorted by ISL, OSL, TP, conc.
    pub rows: Vec<Row>,
    pub accuracy: Option<Accuracy>,
    /// What was left out or could not be compared, in words.
    pub notes: Vec<String>,
    pub gate: GateResult,
    /// Acceptance deltas when either side speculated, and the perf
    /// requests' greedy-output comparison when both recorded token ids
    /// (speculating or not) ([`super::spec`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<super::spec::SpecComparison>,
    /// Prefix-cache hit rate and median TTFT per point where the cache
    /// mattered ([`super::prefix_cache`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefix_cache: Vec<super::prefix_cache::CacheRow>,
    /// The A/A noise floor the verdicts used, if any.
    pub noise: Option<NoiseSource>,
    /// True when this comparison is itself an A/A (a variant against itself):
    /// its rows are the noise floor of this machine and workload.
    pub aa: bool,
    /// The kernel diff of every point profiled on both sides (`--profile`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<crate::profile::diff::KernelDiff>,
}

/// Where a comparison's noise floor came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoiseSource {
    /// The A/A `ab.json` (from `--noise`, or the one `--calibrate` wrote).
    pub file: String,
    /// The A/A's repeats per variant.
    pub repeats: usize,
}

/// An A/A result as noise floors: per point (ISL, OSL, TP, conc) and metric,
/// the largest change the A/A's own 95% interval allowed,
/// max(|lo|, |hi|) (a fraction). Nothing changed between its two sides, so
/// any change of that size is what this machine and workload do on their
/// own (including a shift an inert change caused, e.g. memory layout).
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseFloor {
    pub source: NoiseSource,
    pub floors: BTreeMap<(Key, Metric), f64>,
}

impl NoiseFloor {
    /// The floors of an A/A comparison `aa` read from (or written to) `file`.
    pub fn from_comparison(aa: &Comparison, file: &str) -> NoiseFloor {
        let mut floors = BTreeMap::new();
        for r in &aa.rows {
            for f in &r.figures {
                if let Some((lo, hi)) = f.ci {
                    floors.insert(((r.isl, r.osl, r.tp, r.conc), f.metric), lo.abs().max(hi.abs()).max(f.delta.abs()));
                }
            }
        }
        let repeats = aa.rows.iter().map(|r| r.repeats.0.min(r.repeats.1)).max().unwrap_or(0);
        NoiseFloor { source: NoiseSource { file: file.to_string(), repeats }, floors }
    }

    /// Reads a saved A/A `ab.json` (written by `ab --aa`, `--calibrate` or
    /// any `ab`/`compare` of a variant against itself).
    ///
    /// Errors (usage): unreadable file, not an `ab.json`, or no row with an
    /// interval.
    pub fn load(path: &std::path::Path) -> Result<NoiseFloor> {
        let bad = |why: String| usage(format!("--noise {}: {why}; give the ab.json of an `enginebench ab --aa` run", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it ({e})")))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON ({e})")))?;
        let rows = v.get("rows").and_then(|r| r.as_array()).ok_or_else(|| bad("no \"rows\" array: not an ab.json".into()))?;
        let mut floors = BTreeMap::new();
        let mut repeats = 0usize;
        for r in rows {
            let n = |k: &str| r.get(k).and_then(serde_json::Value::as_u64).map(|x| x as u32);
            let (Some(isl), Some(osl), Some(tp), Some(conc)) = (n("isl"), n("osl"), n("tp"), n("conc")) else {
                return Err(bad("a row without isl/osl/tp/conc".into()));
            };
            if let Some(rp) = r.get("repeats").and_then(|x| x.as_array()) {
                repeats = repeats.max(rp.iter().filter_map(serde_json::Value::as_u64).min().unwrap_or(0) as usize);
            }
            for f in r.get("figures").and_then(|x| x.as_array()).into_iter().flatten() {
                let Ok(metric) = serde_json::from_value::<Metric>(f["metric"].clone()) else { continue };
                let (Some(lo), Some(hi)) = (f["ci"][0].as_f64(), f["ci"][1].as_f64()) else { continue };
                let delta = f["delta"].as_f64().unwrap_or(0.0).abs();
                floors.insert(((isl, osl, tp, conc), metric), lo.abs().max(hi.abs()).max(delta));
            }
        }
        if floors.is_empty() {
            return Err(bad("no row with a 95% interval (an A/A needs 2 or more repeats)".into()));
        }
        Ok(NoiseFloor { source: NoiseSource { file: path.display().to_string(), repeats }, floors })
    }
}

/// Applies an A/A noise floor to a comparison: each figure with a floor at
/// its point keeps "faster"/"slower" only when |delta| exceeds the floor
/// (else [`Verdict::WithinNoise`]); row verdicts and the gate are redone
/// with the same rule; points the A/A did not measure keep their verdicts,
/// with a note.
pub fn apply_noise(c: &mut Comparison, noise: &NoiseFloor) {
    for r in &mut c.rows {
        let key = (r.isl, r.osl, r.tp, r.conc);
        let mut missing = false;
        for f in &mut r.figures {
            f.noise_floor = noise.floors.get(&(key, f.metric)).copied();
            missing |= f.noise_floor.is_none();
            f.verdict = Verdict::of(f.ci, f.metric.higher_is_better()).within_noise(f.delta, f.noise_floor);
        }
        r.verdict = Verdict::combine(r.figures.iter().map(|f| f.verdict));
        if missing {
            c.notes.push(format!("{}: not in the noise floor {}; its verdicts use the interval alone", r.key_text(), noise.source.file));
        }
    }
    c.noise = Some(noise.source.clone());
    c.gate = gate(&c.rows, c.accuracy.as_ref(), &c.options);
}

impl Comparison {
    /// Ok when the gate passed, failed (exit code 1) when it did not.
    pub fn exit_status(&self) -> crate::error::ExitStatus {
        if self.gate.passed { crate::error::ExitStatus::Ok } else { crate::error::ExitStatus::Failed }
    }
}

/// A point: (ISL, OSL, TP, conc).
pub type Key = (u32, u32, u32, u32);

/// The workload of one point: everything that must be equal for a fair comparison.
fn workload(repeat: &Repeat, p: &PointResult) -> Vec<(&'static str, String)> {
    vec![
        ("num_prompts", p.num_prompts.to_string()),
        ("length convention", format!("{:?}", p.length_convention).to_lowercase()),
        ("range ratio", p.range_ratio.to_string()),
        ("prefix_len", p.prefix_len.to_string()),
        ("ignore_eos", p.ignore_eos.to_string()),
        ("request rate", format!("{:?}", p.request_rate)),
        ("burstiness", format!("{:?}", p.burstiness)),
        ("seed", repeat.job.sweep.seed.to_string()),
    ]
}

fn key_text(k: &Key) -> String {
    format!("ISL/OSL {}/{} TP {} conc {}", k.0, k.1, k.2, k.3)
}

/// Every (repeat, point) of an arm by key, checking that repeats agree.
fn points_by_key<'a>(arm: &'a Arm, role: &str) -> Result<BTreeMap<Key, Vec<(&'a Repeat, usize)>>> {
    let mut map: BTreeMap<Key, Vec<(&Repeat, usize)>> = BTreeMap::new();
    for r in &arm.repeats {
        for (pi, p) in r.job.points.iter().enumerate() {
            map.entry((p.isl, p.osl, r.tp(), p.conc)).or_default().push((r, pi));
        }
    }
    for (k, list) in &map {
        let (r0, p0) = list[0];
        let w0 = workload(r0, &r0.job.points[p0]);
        for &(r, pi) in &list[1..] {
            for ((name, a), (_, b)) in w0.iter().zip(workload(r, &r.job.points[pi])) {
                if *a != b {
                    return Err(usage(format!(
                        "the {role}'s repeats ran different workloads at {}: {name} {a} vs {b}",
                        key_text(k)
                    )));
                }
            }
        }
    }
    Ok(map)
}

/// The vLLM release whose `SchedulerOutput` sends a resumed (preempted)
/// request back among the new requests (`scheduled_new_reqs`; until 0.33 it
/// came back among the cached ones, `CachedRequestData.resumed_req_ids`).
pub const RESUMED_AS_NEW: (u32, u32, u32) = (0, 34, 0);

/// A note when the two arms ran vLLM builds on either side of
/// [`RESUMED_AS_NEW`]: vLLM's own prefill/decode count
/// (`compute_iteration_details`, vllm/v1/utils.py: a request is prefill
/// while it is new or has no output token), and so the step statistics'
/// prefill and decode tokens, call a resumed request's recomputed tokens
/// decode before 0.34 and prefill from 0.34 on. The split then differs
/// wherever requests were preempted; the throughput and latency figures do not.
fn prefill_count_note(baseline: &Arm, candidate: &Arm) -> Option<String> {
    let side = |arm: &Arm| {
        let job = &arm.repeats.first()?.job;
        let version = job.engine.as_ref().and_then(|e| e.vllm.clone()).or_else(|| job.python.as_ref()?.vllm.clone())?;
        let preempted: u64 = arm.repeats.iter().flat_map(|r| &r.job.points).map(|p| p.step_stats.preemptions).sum();
        Some((crate::python::releases::release_of(&version)? >= RESUMED_AS_NEW, version, preempted))
    };
    let ((b_new, b_version, b_pre), (c_new, c_version, c_pre)) = (side(baseline)?, side(candidate)?);
    (b_new != c_new).then(|| {
        format!(
            "prefill/decode tokens: vLLM 0.34 counts a resumed (preempted) request's recomputed tokens as prefill, earlier releases as decode \
             (vLLM {b_version} -> {c_version}; preemptions: {b_pre} baseline, {c_pre} candidate): the split differs where requests were preempted"
        )
    })
}

/// Compares a candidate with a baseline. Refuses (a usage error, exit code 2)
/// when their workloads differ: other ISL/OSL pairs, or at a common point
/// another num_prompts, length convention, range ratio, prefix, ignore_eos,
/// request rate, burstiness or seed, or evals with another task, few-shot
/// mode, shots, chat setting, generation limit or question count. Points that
/// only one side ran (other concurrencies or TP) are left out with a note.
pub fn compare(baseline: &Arm, candidate: &Arm, context: Context, options: Options) -> Result<Comparison> {
    for (arm, role) in [(baseline, "baseline"), (candidate, "candidate")] {
        if arm.repeats.is_empty() {
            return Err(usage(format!("the {role} {:?} has no job", arm.label)));
        }
    }
    let base = points_by_key(baseline, "baseline")?;
    let cand = points_by_key(candidate, "candidate")?;
    let pairs = |m: &BTreeMap<Key, _>| {
        let mut v: Vec<(u32, u32)> = m.keys().map(|k| (k.0, k.1)).collect();
        v.dedup();
        v
    };
    let (bp, cp) = (pairs(&base), pairs(&cand));
    if bp != cp {
        let show = |v: &[(u32, u32)]| v.iter().map(|(i, o)| format!("{i}/{o}")).collect::<Vec<_>>().join(", ");
        return Err(usage(format!(
            "workloads differ: the baseline ran ISL/OSL {} and the candidate {}",
            show(&bp),
            show(&cp)
        )));
    }
    let mut notes = Vec::new();
    for (k, _) in base.iter().filter(|(k, _)| !cand.contains_key(k)) {
        notes.push(format!("{} ran only in the baseline: not compared", key_text(k)));
    }
    for (k, _) in cand.iter().filter(|(k, _)| !base.contains_key(k)) {
        notes.push(format!("{} ran only in the candidate: not compared", key_text(k)));
    }
    let mut rows = Vec::new();
    for (k, b_list) in &base {
        let Some(c_list) = cand.get(k) else { continue };
        let (rb, pb) = b_list[0];
        let (rc, pc) = c_list[0];
        for ((name, a), (_, b)) in workload(rb, &rb.job.points[pb]).into_iter().zip(workload(rc, &rc.job.points[pc])) {
            if a != b {
                return Err(usage(format!(
                    "workloads differ at {}: {name} {a} (baseline) vs {b} (candidate)",
                    key_text(k)
                )));
            }
        }
        for (list, role) in [(b_list, "baseline"), (c_list, "candidate")] {
            let failed: u32 = list.iter().map(|(r, pi)| r.job.points[*pi].figures.failed).sum();
            if failed > 0 {
                notes.push(format!("{}: {failed} failed requests in the {role}; only completed ones count", key_text(k)));
            }
        }
        rows.push(compare_row(*k, b_list, c_list, &options));
    }
    if rows.is_empty() {
        return Err(usage("workloads differ: no (ISL/OSL, TP, conc) point in common".to_string()));
    }
    if rows.iter().any(|r| r.repeats.0 == 1 || r.repeats.1 == 1) {
        notes.push(
            "one repeat on a side: its intervals cover request-to-request variation within that run only, \
             not run-to-run drift; use 3 or more interleaved repeats before trusting a verdict"
                .into(),
        );
    }
    notes.extend(prefill_count_note(baseline, candidate));
    let accuracy = compare_accuracy(baseline, candidate, &options, &mut notes)?;
    let (b_tables, c_tables) = (baseline.kernel_tables(), candidate.kernel_tables());
    notes.extend(crate::profile::diff::one_sided(&b_tables, &c_tables));
    let gate = gate(&rows, accuracy.as_ref(), &options);
    Ok(Comparison {
        baseline_label: baseline.label.clone(),
        candidate_label: candidate.label.clone(),
        context,
        options,
        changes: super::config_diff::config_changes(&baseline.repeats[0].job, &candidate.repeats[0].job),
        rows,
        accuracy,
        notes,
        gate,
        spec: super::spec::compare_spec(baseline, candidate),
        prefix_cache: super::prefix_cache::compare_cache(baseline, candidate),
        noise: None,
        aa: false,
        kernels: crate::profile::diff::compare(&b_tables, &c_tables),
    })
}

fn compare_row(k: Key, b_list: &[(&Repeat, usize)], c_list: &[(&Repeat, usize)], o: &Options) -> Row {
    fn reqs(r: &Repeat, pi: usize) -> Vec<&RequestRow> {
        r.requests.iter().filter(|q| q.point == pi).collect()
    }
    let b_reqs: Vec<Vec<&RequestRow>> = b_list.iter().map(|&(r, pi)| reqs(r, pi)).collect();
    let c_reqs: Vec<Vec<&RequestRow>> = c_list.iter().map(|&(r, pi)| reqs(r, pi)).collect();
    let figures: Vec<Figure> = METRICS
        .iter()
        .enumerate()
        .map(|(mi, &m)| {
            let data = |list: &[(&Repeat, usize)], rq: &[Vec<&RequestRow>]| -> Vec<RepeatData> {
                list.iter().zip(rq).map(|(&(r, pi), q)| m.repeat_data(&r.job.points[pi], q)).collect()
            };
            let (bd, cd) = (data(b_list, &b_reqs), data(c_list, &c_reqs));
            let stream = (u64::from(k.0) << 44) ^ (u64::from(k.1) << 28) ^ (u64::from(k.2) << 20) ^ (u64::from(k.3) << 4) ^ mi as u64;
            let opts = BootstrapOptions { resamples: o.resamples, seed: o.seed, stream };
            let d = stats::delta_interval(&bd, &cd, opts);
            // The old method, for the comparison of methods only (it is the
            // interval itself when a side has one repeat).
            let bootstrap_ci = match &d {
                Some(i) if i.method == IntervalMethod::RequestBootstrap => i.ci,
                _ => stats::bootstrap_delta(&bd, &cd, opts).and_then(|b| b.ci),
            };
            let (delta, ci) = d.as_ref().map_or((f64::NAN, None), |d| (d.delta, d.ci));
            Figure {
                metric: m,
                baseline: stats::arm_figure(&bd),
                candidate: stats::arm_figure(&cd),
                delta,
                ci,
                method: d.as_ref().map_or(IntervalMethod::RequestBootstrap, |d| d.method),
                mde: d.as_ref().and_then(|d| d.mde),
                repeat_deltas: d.map(|d| d.repeat_deltas).unwrap_or_default(),
                bootstrap_ci,
                noise_floor: None,
                verdict: Verdict::of(ci, m.higher_is_better()),
            }
        })
        .collect();
    let intvty = |list: &[(&Repeat, usize)]| {
        crate::metrics::stats::mean(&list.iter().map(|&(r, pi)| r.job.points[pi].figures.ms("median_intvty")).collect::<Vec<_>>())
    };
    Row {
        isl: k.0,
        osl: k.1,
        tp: k.2,
        conc: k.3,
        repeats: (b_list.len(), c_list.len()),
        verdict: Verdict::combine(figures.iter().map(|f| f.verdict)),
        figures,
        intvty: (intvty(b_list), intvty(c_list)),
    }
}

fn compare_accuracy(baseline: &Arm, candidate: &Arm, o: &Options, notes: &mut Vec<String>) -> Result<Option<Accuracy>> {
    let eval_of = |arm: &Arm| arm.repeats.iter().find_map(|r| r.job.eval.as_ref().map(|e| e.gsm8k.clone()));
    let (be, ce) = match (eval_of(baseline), eval_of(candidate)) {
        (Some(b), Some(c)) => (b, c),
        (None, None) => {
            notes.push("no eval in either run: accuracy not compared".into());
            return Ok(None);
        }
        (b, _) => {
            let missing = if b.is_none() { "baseline" } else { "candidate" };
            notes.push(format!("the {missing} has no eval: accuracy not compared"));
            return Ok(None);
        }
    };
    let fields = [
        ("task", be.task.clone(), ce.task.clone()),
        ("few-shot mode", be.fewshot_mode.clone(), ce.fewshot_mode.clone()),
        ("shots", be.num_fewshot.to_string(), ce.num_fewshot.to_string()),
        ("chat", be.chat.to_string(), ce.chat.to_string()),
        ("max_tokens", be.max_tokens.to_string(), ce.max_tokens.to_string()),
        ("questions (n)", be.n.to_string(), ce.n.to_string()),
    ];
    for (name, a, b) in fields {
        if a != b {
            return Err(usage(format!("evals differ: {name} {a} (baseline) vs {b} (candidate)")));
        }
    }
    let (bs, cs) = (baseline.samples(), candidate.samples());
    let scores = |samples: &[Sample], e: &crate::report::result::Gsm8kResult| {
        if samples.is_empty() {
            Scores { n: e.n, strict: e.exact_match_strict, flexible: e.exact_match_flexible }
        } else {
            let a = aggregate(samples);
            Scores { n: a.n, strict: a.exact_match_strict, flexible: a.exact_match_flexible }
        }
    };
    let (b_scores, c_scores) = (scores(bs, &be), scores(cs, &ce));
    let by_id: BTreeMap<(usize, &str), &Sample> = bs.iter().map(|s| ((s.doc_id, s.prompt_sha256.as_str()), s)).collect();
    let pairs: Vec<(&Sample, &Sample)> =
        cs.iter().filter_map(|c| by_id.get(&(c.doc_id, c.prompt_sha256.as_str())).map(|&b| (b, c))).collect();
    if bs.is_empty() || cs.is_empty() {
        notes.push("eval samples (gsm8k_samples.jsonl) missing: no McNemar test and no token agreement".into());
    } else if pairs.len() < bs.len().max(cs.len()) {
        notes.push(format!(
            "{} of {} eval questions pair up (same doc_id and prompt); tests use the pairs",
            pairs.len(),
            bs.len().max(cs.len())
        ));
    }
    let have_pairs = !pairs.is_empty();
    let paired_metric = |b: f64, c: f64, right: fn(&Sample) -> bool| {
        let mcnemar = have_pairs.then(|| {
            let n01 = pairs.iter().filter(|(x, y)| right(x) && !right(y)).count() as u64;
            let n10 = pairs.iter().filter(|(x, y)| !right(x) && right(y)).count() as u64;
            distributions::mcnemar(n01, n10)
        });
        let diff = c - b;
        let significant_drop = mcnemar.is_some_and(|m| m.p_value < o.alpha) && diff < 0.0;
        PairedMetric { baseline: b, candidate: c, diff, mcnemar, held: -diff <= o.max_accuracy_drop + 1e-12 && !significant_drop }
    };
    let strict = paired_metric(b_scores.strict, c_scores.strict, |s| s.strict_correct);
    let flexible = paired_metric(b_scores.flexible, c_scores.flexible, |s| s.flexible_correct);
    Ok(Some(Accuracy {
        task: ce.task.clone(),
        num_fewshot: ce.num_fewshot,
        fewshot_mode: ce.fewshot_mode.clone(),
        baseline: b_scores,
        candidate: c_scores,
        paired: pairs.len(),
        held: strict.held && flexible.held,
        strict,
        flexible,
        max_accuracy_drop: o.max_accuracy_drop,
        agreement: token_agreement(&pairs),
    }))
}

/// Greedy-token agreement over paired samples; `None` when no pair has token ids on both sides.
pub fn token_agreement(pairs: &[(&Sample, &Sample)]) -> Option<TokenAgreement> {
    let with_ids: Vec<_> = pairs.iter().filter(|(a, b)| !a.token_ids.is_empty() && !b.token_ids.is_empty()).collect();
    if with_ids.is_empty() {
        return None;
    }
    let mut identical = 0;
    let mut divergences = Vec::new();
    for (a, b) in &with_ids {
        if a.token_ids == b.token_ids {
            identical += 1;
        } else {
            let first = a.token_ids.iter().zip(&b.token_ids).position(|(x, y)| x != y);
            divergences.push(first.unwrap_or(a.token_ids.len().min(b.token_ids.len())) as f64);
        }
    }
    Some(TokenAgreement {
        compared: with_ids.len(),
        identical,
        fraction: identical as f64 / with_ids.len() as f64,
        mean_first_divergence: (!divergences.is_empty()).then(|| crate::metrics::stats::mean(&divergences)),
        without_token_ids: pairs.len() - with_ids.len(),
    })
}

/// The gate: fails when accuracy did not hold, or when a row figure is
/// significantly worse (verdict slower) by more than `max_regression`. Rows
/// with one repeat on a side are not gated on performance (their interval
/// cannot support a run-to-run claim; see [`GateResult::perf_not_gated`]);
/// accuracy is gated whatever the repeats (the eval runs once, greedy).
pub fn gate(rows: &[Row], accuracy: Option<&Accuracy>, o: &Options) -> GateResult {
    let mut failures = Vec::new();
    let (judged, one_repeat): (Vec<&Row>, Vec<&Row>) = rows.iter().partition(|r| r.repeats.0 >= 2 && r.repeats.1 >= 2);
    let perf_not_gated = (!one_repeat.is_empty()).then(|| {
        let which = if judged.is_empty() {
            "at any point".to_string()
        } else {
            format!("at {}", one_repeat.iter().map(|r| r.key_text()).collect::<Vec<_>>().join(", "))
        };
        format!(
            "performance not gated {which}: one repeat on a side gives no run-to-run interval, so no regression \
             claim can be made there; run --repeats 3 or more for a performance gate"
        )
    });
    for r in judged {
        for f in &r.figures {
            let worse_by = if f.metric.higher_is_better() { -f.delta } else { f.delta };
            if f.verdict == Verdict::Slower && worse_by > o.max_regression {
                failures.push(format!(
                    "ISL/OSL {}/{} TP {} conc {}: {} {} {} is a significant regression beyond {}",
                    r.isl,
                    r.osl,
                    r.tp,
                    r.conc,
                    f.metric.title(),
                    super::numbers::pct(f.delta),
                    super::numbers::ci_text(f.ci),
                    super::numbers::pct_unsigned(o.max_regression)
                ));
            }
        }
    }
    if let Some(a) = accuracy.filter(|a| !a.held) {
        for (name, m) in [("strict-match", &a.strict), ("flexible-extract", &a.flexible)] {
            if !m.held {
                let p = m.mcnemar.map_or(String::new(), |t| format!(", McNemar p = {}", super::numbers::p_text(t.p_value)));
                failures.push(format!(
                    "accuracy did not hold: {name} {:.2}% -> {:.2}% ({:+.2} points{p}; allowed drop {:.2} points)",
                    m.baseline * 100.0,
                    m.candidate * 100.0,
                    m.diff * 100.0,
                    a.max_accuracy_drop * 100.0
                ));
            }
        }
    }
    GateResult { passed: failures.is_empty(), failures, perf_not_gated }
}
