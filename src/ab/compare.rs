//! Comparing two variants: matching points, per-row deltas with 95%
//! intervals (paired t over repeats, [`super::stats`]), minimum detectable
//! effects and verdicts, the A/A noise floor ([`NoiseFloor`]), accuracy
//! (paired interval and McNemar), greedy-token agreement, and the gate
//! (PASS / FAIL / INCONCLUSIVE by the rule of [`super::gate`]).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::input::{Arm, Repeat, RequestRow, TaskSample};
use super::source::{PointRecord, Source};
use super::distributions::{self, McNemar};
use super::gate::{AccuracyGate, FigureGate, Needed, Outcome, PerfInput};
use super::stats::{self, BootstrapOptions, IntervalMethod, RepeatData, Verdict};
use crate::error::usage;
use crate::eval::score::{Sample, aggregate};
use crate::report::result::{PointResult, RecipeInfo};

/// Thresholds and bootstrap settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Options {
    /// Largest accepted accuracy drop, as a fraction (0.01 = 1 point), for
    /// strict-match and flexible-extract alike: the accuracy margin of the
    /// gate ([`super::gate`]).
    pub max_accuracy_drop: f64,
    /// Largest accepted perf regression, as a fraction (0.05 = 5%): the
    /// performance margin of the gate ([`super::gate`]), raised to a
    /// figure's A/A noise floor where that is larger.
    pub max_regression: f64,
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

pub use super::metric::{METRICS, Metric};

/// What one repeat contributes to the bootstrap (see [`stats`]) for
/// `metric`: throughputs are the point's figure with the Little's-law
/// request term (none in request-rate mode or without requests), latency
/// medians the completed requests' values.
fn repeat_data(metric: Metric, p: &PointResult, requests: &[&RequestRow]) -> RepeatData {
    let ok: Vec<&&RequestRow> = requests.iter().filter(|r| r.ok()).collect();
    let observed = metric.of_point(p);
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
    match metric {
        Metric::TputPerGpu => ratio(&|r| f64::from(r.input_tokens) + f64::from(r.output_tokens)),
        Metric::OutputTput => ratio(&|r| f64::from(r.output_tokens)),
        Metric::MedianTpot => median(ok.iter().filter_map(|r| r.tpot_ms).collect()),
        Metric::MedianTtft => median(ok.iter().filter_map(|r| r.ttft_ms).collect()),
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
    /// Standard error of the mean log ratio behind `ci` (natural log units)
    /// and the degrees of freedom of its t quantile (`None` for the request
    /// bootstrap).
    pub se_log: Option<f64>,
    pub df: Option<f64>,
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
    /// The gate's decision on this figure; `None` where performance is not
    /// gated (one repeat on a side).
    pub gate: Option<FigureGate>,
    /// Why this figure is not compared at this point (a foreign file lacks
    /// it or defines it otherwise); its delta is then not a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_compared: Option<String>,
}

impl Figure {
    /// What the gate's rule needs of this figure; `None` without an interval.
    pub fn perf_input(&self, repeats: (usize, usize)) -> Option<PerfInput> {
        Some(PerfInput {
            ci: self.ci?,
            higher_is_better: self.metric.higher_is_better(),
            se_log: self.se_log,
            df: self.df,
            repeats,
        })
    }
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
    /// Against another tool's file: the workload settings that differ
    /// between the sides, or that the file does not record (one phrase each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_notes: Vec<String>,
    /// Why the gate cannot decide this row's performance (a side is one run
    /// of another tool): each compared figure is INCONCLUSIVE with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecidable: Option<String>,
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
    /// The gate's decision: the paired interval of the difference against
    /// `max_accuracy_drop` ([`super::gate::judge_accuracy`]); "held" is PASS.
    pub gate: AccuracyGate,
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
    /// Both metrics' gate outcomes as one ([`Outcome::combine`]): PASS is
    /// "accuracy held".
    pub outcome: Outcome,
    /// Questions the task has (the eval's test split), where known: the
    /// most an INCONCLUSIVE accuracy could be given.
    pub questions_available: Option<usize>,
    pub agreement: Option<TokenAgreement>,
    /// The intervals are unpaired (Agresti–Caffo, from the two scores and n):
    /// a side, another tool's file, has no per-question samples.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpaired: bool,
    /// Against another tool's file: the eval settings that differ between
    /// the sides or that the file does not record, and how the prompts of
    /// the paired questions compare.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
}

/// One metric of one task in an A/B: the arms' scores and the gate's
/// decision on the paired questions (lm-eval tasks both arms ran), and the
/// candidate against its threshold (any task, from its run's accuracy gate).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskAccuracy {
    pub task: String,
    /// lm-eval's metric name, e.g. `exact_match,strict-match`.
    pub metric: String,
    /// Both arms' scores, when both ran the task through lm-eval.
    pub baseline: Option<f64>,
    pub candidate: Option<f64>,
    /// candidate - baseline, fraction.
    pub diff: Option<f64>,
    /// Questions both arms scored (paired by doc_id and prompt hash in
    /// lm-eval's `samples_*.jsonl`).
    pub paired: usize,
    /// The decision on the drop, as for the built-in task's metrics
    /// ([`super::gate::judge_accuracy`] on the paired questions); `None`
    /// when only the candidate ran the task.
    pub gate: Option<AccuracyGate>,
    /// The candidate's threshold, its source and whether it met it, when the run had one.
    pub threshold: Option<f64>,
    pub source: Option<String>,
    pub meets_threshold: Option<bool>,
    /// The drop's outcome and the threshold's (met: PASS, not met: FAIL)
    /// as one ([`Outcome::combine`]).
    pub outcome: Outcome,
}

/// The gate: its outcome, what failed, what it could not decide and what
/// would decide it, and what it did not judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateResult {
    /// FAIL when a gated figure fails, else INCONCLUSIVE when one is (or
    /// nothing was gated), else PASS ([`Outcome::combine`]).
    pub outcome: Outcome,
    /// One line per FAIL figure.
    pub failures: Vec<String>,
    /// One line per INCONCLUSIVE figure, with what would decide it.
    pub inconclusive: Vec<String>,
    /// The most repeats per variant an INCONCLUSIVE performance figure needs
    /// at its observed spread ([`super::gate`]); `None` when none is.
    pub repeats_needed: Option<Needed>,
    /// The most paired eval questions an INCONCLUSIVE accuracy metric needs;
    /// `None` when none is (or its samples are missing).
    pub questions_needed: Option<Needed>,
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
    /// What of it takes effect in vLLM, from both arms' knob reports
    /// ([`crate::knobs::differences`]); `None` when either arm's result
    /// has no knob report (the fake engine, an older result file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_effect: Option<Vec<crate::knobs::Difference>>,
    /// Sorted by ISL, OSL, TP, conc.
    pub rows: Vec<Row>,
    pub accuracy: Option<Accuracy>,
    /// Per task and metric: lm-eval tasks compared across the arms, and
    /// every task's threshold check on the candidate ([`compare_tasks`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskAccuracy>,
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
    /// What another tool's file on either side holds ([`super::foreign`]);
    /// `None` for a run of ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_source: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_source: Option<Source>,
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

/// The noise floor of one A/A figure (fraction): the largest change its
/// 95% interval allowed, max(|lo|, |hi|), and at least |delta|.
pub fn floor_of((lo, hi): (f64, f64), delta: f64) -> f64 {
    let d = if delta.is_finite() { delta.abs() } else { 0.0 };
    lo.abs().max(hi.abs()).max(d)
}

impl NoiseFloor {
    /// The floors of an A/A comparison `aa` read from (or written to) `file`.
    pub fn from_comparison(aa: &Comparison, file: &str) -> NoiseFloor {
        let mut floors = BTreeMap::new();
        for r in &aa.rows {
            for f in &r.figures {
                if let Some((lo, hi)) = f.ci {
                    floors.insert(((r.isl, r.osl, r.tp, r.conc), f.metric), floor_of((lo, hi), f.delta));
                }
            }
        }
        let repeats = aa.rows.iter().map(|r| r.repeats.0.min(r.repeats.1)).max().unwrap_or(0);
        NoiseFloor { source: NoiseSource { file: file.to_string(), repeats }, floors }
    }

    /// Reads a saved A/A `ab.json` (written by `ab --aa`, `--calibrate` or
    /// any `ab`/`compare` of a variant against itself) through
    /// [`SavedComparison`], the part of the file a noise floor needs.
    ///
    /// Errors (usage): unreadable file, not an `ab.json`, or no row with an
    /// interval.
    pub fn load(path: &std::path::Path) -> Result<NoiseFloor> {
        let bad = |why: String| usage(format!("--noise {}: {why}; give the ab.json of an `enginebench ab --aa` run", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it ({e})")))?;
        let saved: SavedComparison = serde_json::from_str(&text).map_err(|e| bad(format!("not an ab.json ({e})")))?;
        let mut floors = BTreeMap::new();
        let mut repeats = 0usize;
        for r in &saved.rows {
            repeats = repeats.max(r.repeats.0.min(r.repeats.1));
            for f in &r.figures {
                if let Some(ci) = f.ci {
                    floors.insert(((r.isl, r.osl, r.tp, r.conc), f.metric), floor_of(ci, f.delta.unwrap_or(0.0)));
                }
            }
        }
        if floors.is_empty() {
            return Err(bad("no row with a 95% interval (an A/A needs 2 or more repeats)".into()));
        }
        Ok(NoiseFloor { source: NoiseSource { file: path.display().to_string(), repeats }, floors })
    }
}

/// What a saved `ab.json` ([`Comparison`] serialized) is read back as: its
/// rows' points, repeats and figures' intervals, the part a noise floor
/// needs (other keys are ignored, so files written before or after this
/// build read alike).
#[derive(Debug, Deserialize)]
pub struct SavedComparison {
    pub rows: Vec<SavedRow>,
}

/// A [`Row`] as saved.
#[derive(Debug, Deserialize)]
pub struct SavedRow {
    pub isl: u32,
    pub osl: u32,
    pub tp: u32,
    pub conc: u32,
    /// Repeats of the baseline and of the candidate.
    pub repeats: (usize, usize),
    pub figures: Vec<SavedFigure>,
}

/// A [`Figure`] as saved: `delta` is null where it was not a number.
#[derive(Debug, Deserialize)]
pub struct SavedFigure {
    pub metric: Metric,
    pub delta: Option<f64>,
    pub ci: Option<(f64, f64)>,
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
    c.gate = gate(&mut c.rows, c.accuracy.as_ref(), &c.tasks, &c.options);
}

impl Comparison {
    /// The gate's exit status: PASS ok (0), FAIL failed (1), INCONCLUSIVE
    /// inconclusive (3).
    pub fn exit_status(&self) -> crate::error::ExitStatus {
        match self.gate.outcome {
            Outcome::Pass => crate::error::ExitStatus::Ok,
            Outcome::Fail => crate::error::ExitStatus::Failed,
            Outcome::Inconclusive => crate::error::ExitStatus::Inconclusive,
        }
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
///
/// Against another tool's file (an arm with a [`Source`]) nothing the file
/// records is refused: the differences, and what the file does not record,
/// are named per point ([`Row::workload_notes`]) and for the eval
/// ([`Accuracy::differences`]); figures the file lacks are not compared
/// ([`Figure::not_compared`]); with summary figures only a delta has no
/// interval; and the gate cannot decide its points ([`Row::undecidable`]).
pub fn compare(baseline: &Arm, candidate: &Arm, context: Context, options: Options) -> Result<Comparison> {
    for (arm, role) in [(baseline, "baseline"), (candidate, "candidate")] {
        if arm.repeats.is_empty() {
            return Err(usage(format!("the {role} {:?} has no job", arm.label)));
        }
    }
    let foreign = baseline.source.is_some() || candidate.source.is_some();
    let mut notes = Vec::new();
    let prepared;
    let (baseline, candidate) = if foreign {
        let (b, c, n) = super::foreign::prepare(baseline, candidate);
        notes.extend(n);
        prepared = (b, c);
        (&prepared.0, &prepared.1)
    } else {
        (baseline, candidate)
    };
    let base = points_by_key(baseline, "baseline")?;
    let cand = points_by_key(candidate, "candidate")?;
    let pairs = |m: &BTreeMap<Key, _>| {
        let mut v: Vec<(u32, u32)> = m.keys().map(|k| (k.0, k.1)).collect();
        v.dedup();
        v
    };
    let (bp, cp) = (pairs(&base), pairs(&cand));
    let show = |v: &[(u32, u32)]| v.iter().map(|(i, o)| format!("{i}/{o}")).collect::<Vec<_>>().join(", ");
    if bp != cp && !foreign {
        return Err(usage(format!(
            "workloads differ: the baseline ran ISL/OSL {} and the candidate {}",
            show(&bp),
            show(&cp)
        )));
    }
    let only = |k: &Key, side: &str, arm: &Arm| {
        let what = if arm.source.is_some() { format!("only in the {side} file") } else { format!("ran only in the {side}") };
        format!("{} {what}: not compared", key_text(k))
    };
    if !(foreign && (base.is_empty() || cand.is_empty())) {
        notes.extend(base.keys().filter(|k| !cand.contains_key(k)).map(|k| only(k, "baseline", baseline)));
        notes.extend(cand.keys().filter(|k| !base.contains_key(k)).map(|k| only(k, "candidate", candidate)));
    }
    let mut rows = Vec::new();
    for (k, b_list) in &base {
        let Some(c_list) = cand.get(k) else { continue };
        let (rb, pb) = b_list[0];
        let (rc, pc) = c_list[0];
        if !foreign {
            for ((name, a), (_, b)) in workload(rb, &rb.job.points[pb]).into_iter().zip(workload(rc, &rc.job.points[pc])) {
                if a != b {
                    return Err(usage(format!(
                        "workloads differ at {}: {name} {a} (baseline) vs {b} (candidate)",
                        key_text(k)
                    )));
                }
            }
        }
        for (list, role) in [(b_list, "baseline"), (c_list, "candidate")] {
            let failed: u32 = list.iter().map(|(r, pi)| r.job.points[*pi].figures.failed).sum();
            if failed > 0 {
                notes.push(format!("{}: {failed} failed requests in the {role}; only completed ones count", key_text(k)));
            }
        }
        let mut row = compare_row(*k, b_list, c_list, &options);
        if foreign {
            against_file(&mut row, [(baseline, rb, pb), (candidate, rc, pc)]);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        if !foreign {
            return Err(usage("workloads differ: no (ISL/OSL, TP, conc) point in common".to_string()));
        }
        if !base.is_empty() && !cand.is_empty() {
            let points = |m: &BTreeMap<Key, _>| m.keys().map(key_text).collect::<Vec<_>>().join(", ");
            return Err(usage(format!(
                "no (ISL/OSL, TP, conc) point in common: the baseline holds {}; the candidate {}",
                points(&base),
                points(&cand)
            )));
        }
        let empty = if base.is_empty() { baseline } else { candidate };
        notes.push(format!("the {} side holds no performance figures: performance not compared", empty.label));
    }
    if rows.iter().any(|r| (r.repeats.0 == 1 || r.repeats.1 == 1) && r.undecidable.is_none()) {
        notes.push(
            "one repeat on a side: its intervals cover request-to-request variation within that run only, \
             not run-to-run drift; use 3 or more interleaved repeats before trusting a verdict"
                .into(),
        );
    }
    notes.extend(prefill_count_note(baseline, candidate));
    let accuracy = compare_accuracy(baseline, candidate, &options, &mut notes)?;
    let tasks = compare_tasks(baseline, candidate, &options);
    if foreign && accuracy.is_none() && tasks.is_empty() && rows.is_empty() {
        return Err(usage(format!(
            "nothing to compare: {} holds no point and no eval that {} holds",
            baseline.label, candidate.label
        )));
    }
    let (b_tables, c_tables) = (baseline.kernel_tables(), candidate.kernel_tables());
    notes.extend(crate::profile::diff::one_sided(&b_tables, &c_tables));
    let gate = gate(&mut rows, accuracy.as_ref(), &tasks, &options);
    Ok(Comparison {
        baseline_label: baseline.label.clone(),
        candidate_label: candidate.label.clone(),
        context,
        options,
        changes: if foreign { Vec::new() } else { super::config_diff::config_changes(&baseline.repeats[0].job, &candidate.repeats[0].job) },
        took_effect: if foreign { None } else { took_effect(baseline, candidate, &mut notes) },
        rows,
        accuracy,
        tasks,
        notes,
        gate,
        spec: super::spec::compare_spec(baseline, candidate),
        prefix_cache: super::prefix_cache::compare_cache(baseline, candidate),
        noise: None,
        aa: false,
        kernels: crate::profile::diff::compare(&b_tables, &c_tables),
        baseline_source: baseline.source.clone(),
        candidate_source: candidate.source.clone(),
    })
}

/// The knob differences between the arms' first repeats, with a note when
/// every one is a no-op (the comparison then measures noise).
fn took_effect(baseline: &Arm, candidate: &Arm, notes: &mut Vec<String>) -> Option<Vec<crate::knobs::Difference>> {
    let (a, b) = (baseline.repeats[0].job.knobs.as_ref()?, candidate.repeats[0].job.knobs.as_ref()?);
    let diffs = crate::knobs::differences(a, b);
    if crate::knobs::overall(&diffs) == crate::knobs::Effect::NoOp && baseline.label != candidate.label && !diffs.is_empty() {
        notes.push("every difference between the arms is a no-op in this vLLM build (What took effect): this comparison measures noise".into());
    }
    if a.vllm_version != b.vllm_version {
        notes.push(format!(
            "the arms ran vLLM {} and {}: each knob is judged by its own build",
            a.vllm_version.as_deref().unwrap_or("?"),
            b.vllm_version.as_deref().unwrap_or("?")
        ));
    }
    Some(diffs)
}

/// The rules of a row where a side is another tool's file
/// ([`super::foreign::matching`]): its workload differences named, the
/// figures the file lacks marked not compared, no interval where a side has
/// summary figures only, and why the gate cannot decide the row. `sides`:
/// baseline, candidate, each with the repeat and point matched.
fn against_file(row: &mut Row, sides: [(&Arm, &Repeat, usize); 2]) {
    use super::foreign::matching;
    let record = |(arm, r, pi): (&Arm, &Repeat, usize)| match &arm.source {
        Some(s) => s.points[pi].clone(),
        None => matching::record_of(&r.job.points[pi], r.requests.iter().any(|q| q.point == pi)),
    };
    let (b, c) = (record(sides[0]), record(sides[1]));
    row.workload_notes = matching::workload_differences(&b, &c);
    for f in &mut row.figures {
        let why = matching::not_compared(f.metric, &b, &c);
        let summary_only = !(b.per_request && c.per_request);
        if why.is_some() || summary_only {
            (f.ci, f.bootstrap_ci, f.mde, f.se_log, f.df) = (None, None, None, None, None);
            f.method = IntervalMethod::SummaryOnly;
            f.verdict = Verdict::Unknown;
        }
        if let Some(why) = why {
            f.delta = f64::NAN;
            f.not_compared = Some(why);
        }
    }
    row.verdict = Verdict::combine(row.figures.iter().map(|f| f.verdict));
    fn source<'a>((arm, _, pi): (&'a Arm, &Repeat, usize)) -> Option<(&'a Source, &'a PointRecord)> {
        arm.source.as_ref().map(|s| (s, &s.points[pi]))
    }
    row.undecidable = matching::undecidable([source(sides[0]), source(sides[1])]);
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
                list.iter().zip(rq).map(|(&(r, pi), q)| repeat_data(m, &r.job.points[pi], q)).collect()
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
                se_log: d.as_ref().and_then(|d| d.se_log),
                df: d.as_ref().and_then(|d| d.df),
                repeat_deltas: d.map(|d| d.repeat_deltas).unwrap_or_default(),
                bootstrap_ci,
                noise_floor: None,
                verdict: Verdict::of(ci, m.higher_is_better()),
                gate: None,
                not_compared: None,
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
        workload_notes: Vec::new(),
        undecidable: None,
    }
}

fn compare_accuracy(baseline: &Arm, candidate: &Arm, o: &Options, notes: &mut Vec<String>) -> Result<Option<Accuracy>> {
    use super::foreign::matching::{EvalSettings, eval_differences};
    let eval_of = |arm: &Arm| arm.repeats.iter().find_map(|r| r.job.eval.as_ref().and_then(|e| e.gsm8k.clone()));
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
    let foreign = baseline.source.is_some() || candidate.source.is_some();
    let mut differences = Vec::new();
    if foreign {
        let settings = |arm: &Arm, g: &crate::report::result::Gsm8kResult| match &arm.source {
            Some(s) => EvalSettings::of_file(g, s.eval.as_ref()),
            None => EvalSettings::of_ours(g),
        };
        differences = eval_differences(&settings(baseline, &be), &settings(candidate, &ce));
    } else {
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
    // Another tool's prompts may differ byte for byte (its template, its
    // few-shot draw): questions pair by doc_id alone, and the prompts are counted.
    let key = |s: &'_ Sample| (s.doc_id, if foreign { "" } else { s.prompt_sha256.as_str() }.to_string());
    let by_id: BTreeMap<(usize, String), &Sample> = bs.iter().map(|s| (key(s), s)).collect();
    let pairs: Vec<(&Sample, &Sample)> = cs.iter().filter_map(|c| by_id.get(&key(c)).map(|&b| (b, c))).collect();
    let unpaired = foreign && (bs.is_empty() || cs.is_empty());
    if unpaired {
        notes.push(
            "per-question samples missing on a side: accuracy intervals are unpaired (Agresti-Caffo, from the two scores and n); no McNemar test".into(),
        );
    } else if bs.is_empty() || cs.is_empty() {
        notes.push("eval samples (gsm8k_samples.jsonl) missing: no McNemar test and no token agreement".into());
    } else if pairs.len() < bs.len().max(cs.len()) {
        notes.push(format!(
            "{} of {} eval questions pair up (same doc_id{}); tests use the pairs",
            pairs.len(),
            bs.len().max(cs.len()),
            if foreign { "" } else { " and prompt" }
        ));
    }
    if foreign && !pairs.is_empty() {
        let same = pairs.iter().filter(|(b, c)| b.prompt_sha256 == c.prompt_sha256).count();
        differences.push(if same == pairs.len() {
            format!("prompts byte-identical (SHA-256) on all {same} paired questions")
        } else {
            format!(
                "prompts byte-identical (SHA-256) on {same} of {} paired questions (another few-shot draw, template or chat format): paired by question (doc_id)",
                pairs.len()
            )
        });
    }
    let have_pairs = !pairs.is_empty();
    let available = [be.test_size, ce.test_size].into_iter().max().filter(|n| *n > 0);
    let paired_metric = |b: f64, c: f64, right: fn(&Sample) -> bool| {
        let n01 = pairs.iter().filter(|(x, y)| right(x) && !right(y)).count() as u64;
        let n10 = pairs.iter().filter(|(x, y)| !right(x) && right(y)).count() as u64;
        let gate = if unpaired {
            super::gate::judge_accuracy_unpaired((b, b_scores.n as u64), (c, c_scores.n as u64), o.max_accuracy_drop)
        } else {
            super::gate::judge_accuracy(n01, n10, pairs.len() as u64, o.max_accuracy_drop, available.map(|a| a as u64))
        };
        PairedMetric { baseline: b, candidate: c, diff: c - b, mcnemar: have_pairs.then(|| distributions::mcnemar(n01, n10)), gate }
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
        outcome: Outcome::combine([strict.gate.outcome, flexible.gate.outcome]).unwrap_or(Outcome::Inconclusive),
        strict,
        flexible,
        max_accuracy_drop: o.max_accuracy_drop,
        questions_available: available,
        agreement: token_agreement(&pairs),
        unpaired,
        differences,
    }))
}

/// Per task and metric: every gated metric of the lm-eval tasks both arms
/// ran, its drop decided on the questions both scored (lm-eval's
/// per-question scores paired by doc_id and prompt hash, the same rule as
/// the built-in task's: [`super::gate::judge_accuracy`]), and the
/// candidate's accuracy-gate checks (its run's thresholds, per task, the
/// built-in task's included).
///
/// Against another tool's file the questions pair by doc_id alone, and with
/// no per-question scores on a side the drop is decided on an unpaired
/// interval from the two scores and n ([`super::gate::judge_accuracy_unpaired`]).
pub fn compare_tasks(baseline: &Arm, candidate: &Arm, o: &Options) -> Vec<TaskAccuracy> {
    let foreign = baseline.source.is_some() || candidate.source.is_some();
    let evals = |arm: &Arm| arm.repeats.iter().find_map(|r| r.job.eval.clone());
    let (b, c) = (evals(baseline), evals(candidate));
    let mut out: Vec<TaskAccuracy> = Vec::new();
    if let (Some(bl), Some(cl)) = (b.as_ref().and_then(|e| e.lm_eval.as_ref()), c.as_ref().and_then(|e| e.lm_eval.as_ref())) {
        for ct in &cl.tasks {
            let Some(bt) = bl.tasks.iter().find(|t| t.task == ct.task) else { continue };
            for m in ct.gated_metrics() {
                let Some(bm) = bt.metrics.iter().find(|x| x.name == m.name) else { continue };
                let (paired, mut gate) = judge_task_metric(baseline.task_samples(), candidate.task_samples(), &ct.task, &m.name, o, foreign);
                let unpaired = foreign && paired == 0;
                if let (true, Some(bn), Some(cn)) = (unpaired, bt.n, ct.n) {
                    gate = super::gate::judge_accuracy_unpaired((bm.value, bn), (m.value, cn), o.max_accuracy_drop);
                }
                out.push(TaskAccuracy {
                    task: ct.task.clone(),
                    metric: m.name.clone(),
                    baseline: Some(bm.value),
                    candidate: Some(m.value),
                    diff: Some(m.value - bm.value),
                    paired,
                    outcome: gate.outcome,
                    gate: Some(gate),
                    threshold: None,
                    source: None,
                    meets_threshold: None,
                });
            }
        }
    }
    for check in c.as_ref().and_then(|e| e.gate.as_ref()).map(|g| g.checks.as_slice()).unwrap_or_default() {
        let row = match out.iter_mut().position(|t| t.task == check.task && t.metric == check.metric) {
            Some(i) => &mut out[i],
            None => {
                out.push(TaskAccuracy {
                    task: check.task.clone(),
                    metric: check.metric.clone(),
                    baseline: None,
                    candidate: Some(check.value),
                    diff: None,
                    paired: 0,
                    gate: None,
                    threshold: None,
                    source: None,
                    meets_threshold: None,
                    outcome: Outcome::Pass,
                });
                out.last_mut().expect("just pushed")
            }
        };
        row.threshold = Some(check.threshold);
        row.source = Some(check.source.clone());
        row.meets_threshold = Some(check.passed);
        let threshold = if check.passed { Outcome::Pass } else { Outcome::Fail };
        row.outcome = Outcome::combine([row.outcome, threshold]).expect("two outcomes");
    }
    out
}

/// The paired questions of one task metric and the gate's decision on its
/// drop: b (baseline right, candidate wrong) and c (the reverse) among the
/// questions both arms scored. A score other than 0 or 1 has no right or
/// wrong: such a metric is not paired (INCONCLUSIVE, no estimate).
///
/// `by_doc`: pair by doc_id alone (another tool's prompts may differ byte for byte).
fn judge_task_metric(b: &[TaskSample], c: &[TaskSample], task: &str, metric: &str, o: &Options, by_doc: bool) -> (usize, AccuracyGate) {
    let of = |s: &[TaskSample]| -> BTreeMap<(u64, String), f64> {
        s.iter()
            .filter(|x| x.task == task && x.metric == metric)
            .map(|x| ((x.doc_id, if by_doc { String::new() } else { x.prompt_hash.clone() }), x.value))
            .collect()
    };
    let (bm, cm) = (of(b), of(c));
    let pairs: Vec<(f64, f64)> = cm.iter().filter_map(|(k, &cv)| bm.get(k).map(|&bv| (bv, cv))).collect();
    let binary = pairs.iter().all(|&(x, y)| [x, y].iter().all(|v| *v == 0.0 || *v == 1.0));
    if !binary {
        return (pairs.len(), super::gate::judge_accuracy(0, 0, 0, o.max_accuracy_drop, None));
    }
    let lost = pairs.iter().filter(|&&(x, y)| x == 1.0 && y == 0.0).count() as u64;
    let gained = pairs.iter().filter(|&&(x, y)| x == 0.0 && y == 1.0).count() as u64;
    (pairs.len(), super::gate::judge_accuracy(lost, gained, pairs.len() as u64, o.max_accuracy_drop, None))
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

/// The gate ([`super::gate`] gives the rule): decides every figure of the
/// rows with 2 or more repeats a side against `max_regression` (or its
/// noise floor, where larger) and records it in the figure; takes both
/// accuracy metrics' outcomes; and combines them. Rows with one repeat on a
/// side are not gated on performance (their interval cannot support a
/// run-to-run claim; see [`GateResult::perf_not_gated`]); accuracy is gated
/// whatever the repeats (the eval runs once, greedy): the built-in task's
/// metrics, and per task and metric the lm-eval tasks' drops and every
/// task's threshold (`tasks`). Nothing gated at all is INCONCLUSIVE.
pub fn gate(rows: &mut [Row], accuracy: Option<&Accuracy>, tasks: &[TaskAccuracy], o: &Options) -> GateResult {
    use super::numbers::{ci_text, pct, pct_abs, pct_unsigned};
    let (mut failures, mut inconclusive) = (Vec::new(), Vec::new());
    let mut outcomes = Vec::new();
    let mut repeats_needed: Option<Needed> = None;
    let one_repeat: Vec<String> =
        rows.iter().filter(|r| (r.repeats.0 < 2 || r.repeats.1 < 2) && r.undecidable.is_none()).map(Row::key_text).collect();
    let any_judged = one_repeat.len() < rows.len();
    let perf_not_gated = (!one_repeat.is_empty()).then(|| {
        let which = if any_judged { format!("at {}", one_repeat.join(", ")) } else { "at any point".to_string() };
        format!(
            "performance not gated {which}: one repeat on a side gives no run-to-run interval, so no regression \
             claim can be made there; run --repeats 3 or more for a performance gate"
        )
    });
    for r in rows.iter_mut() {
        let key = r.key_text();
        let repeats = r.repeats;
        if let Some(why) = &r.undecidable {
            // Another tool's single run: every compared figure INCONCLUSIVE, one line per row.
            let mut figures = Vec::new();
            for f in r.figures.iter_mut() {
                f.gate = None;
                if f.not_compared.is_none() {
                    figures.push(format!("{} {} {}", f.metric.short(), pct(f.delta), ci_text(f.ci)));
                    f.gate = Some(FigureGate { outcome: Outcome::Inconclusive, margin: o.max_regression, repeats_needed: None });
                    outcomes.push(Outcome::Inconclusive);
                }
            }
            if !figures.is_empty() {
                inconclusive.push(format!("{key}: {}: not decided: {why}", figures.join(", ")));
            }
            continue;
        }
        for f in &mut r.figures {
            f.gate = None;
            if repeats.0 < 2 || repeats.1 < 2 {
                continue;
            }
            let margin = o.max_regression.max(f.noise_floor.unwrap_or(0.0));
            let limit = if margin > o.max_regression { format!("{} (A/A noise floor)", pct_abs(margin)) } else { pct_unsigned(margin) };
            let head = format!("{key}: {} {} {}", f.metric.title(), pct(f.delta), ci_text(f.ci));
            let g = match f.perf_input(repeats) {
                Some(input) => super::gate::judge_perf(&input, margin),
                None => FigureGate { outcome: Outcome::Inconclusive, margin, repeats_needed: None },
            };
            match (g.outcome, g.repeats_needed) {
                (Outcome::Fail, _) => failures.push(format!("{head}: the whole CI is a regression beyond {limit}")),
                (Outcome::Inconclusive, Some(n)) => {
                    inconclusive.push(format!(
                        "{head} straddles the {limit} regression limit: {} repeats a side would decide it at the observed spread",
                        n.text()
                    ));
                    repeats_needed = repeats_needed.max(Some(n));
                }
                (Outcome::Inconclusive, None) => inconclusive.push(format!("{head}: no interval to decide on")),
                (Outcome::Pass, _) => {}
            }
            outcomes.push(g.outcome);
            f.gate = Some(g);
        }
    }
    let mut questions_needed: Option<Needed> = None;
    let limit = format!("{:.2}-point drop limit", o.max_accuracy_drop * 100.0);
    let mut judge = |head: String, g: &AccuracyGate, available: Option<usize>, samples: &str, unpaired: bool| {
        let (unit, observed) =
            if unpaired { ("questions a side (unpaired)", "the observed scores") } else { ("paired questions", "the observed disagreement") };
        match (g.outcome, g.questions_needed) {
            (Outcome::Fail, _) => failures.push(format!("accuracy did not hold: {head}: the whole CI is a drop beyond the {limit}")),
            (Outcome::Inconclusive, Some(Needed::About(n))) => {
                inconclusive.push(format!(
                    "accuracy not resolved: {head} straddles the {limit}: about {n} {unit} would decide it at {observed} (--eval-limit {n})"
                ));
                questions_needed = questions_needed.max(Some(Needed::About(n)));
            }
            (Outcome::Inconclusive, Some(Needed::MoreThan(n))) => {
                inconclusive.push(format!(
                    "accuracy not resolved: {head} straddles the {limit}: more than {n} {unit} would be needed at {observed}{}",
                    if available.is_some_and(|q| q as u64 == n) { ", more than the task has" } else { "" }
                ));
                questions_needed = questions_needed.max(Some(Needed::MoreThan(n)));
            }
            (Outcome::Inconclusive, None) => inconclusive.push(format!("accuracy not resolved: {head}: no per-question samples ({samples}) to pair")),
            (Outcome::Pass, _) => {}
        }
        outcomes.push(g.outcome);
    };
    if let Some(a) = accuracy {
        for (name, m) in [("strict-match", &a.strict), ("flexible-extract", &a.flexible)] {
            let p = m.mcnemar.map_or(String::new(), |t| format!(", McNemar p = {}", super::numbers::p_text(t.p_value)));
            let head = format!("{name} {}{p})", points_change(m.baseline, m.candidate, m.gate.ci));
            judge(head, &m.gate, a.questions_available, "gsm8k_samples.jsonl", a.unpaired);
        }
    }
    for t in tasks {
        if let (Some(g), Some(b), Some(c)) = (&t.gate, t.baseline, t.candidate) {
            let head = format!("{} {} {})", t.task, t.metric, points_change(b, c, g.ci));
            judge(head, g, None, "lm-eval's samples_*.jsonl", t.paired == 0 && g.ci.is_some());
        }
    }
    for t in tasks {
        if let (Some(met), Some(th), Some(c)) = (t.meets_threshold, t.threshold, t.candidate) {
            if !met {
                let source = t.source.as_deref().unwrap_or("?");
                failures.push(format!("accuracy below threshold: {} {} = {c:.4} < {th:.2} ({source})", t.task, t.metric));
            }
            outcomes.push(if met { Outcome::Pass } else { Outcome::Fail });
        }
    }
    let outcome = Outcome::combine(outcomes).unwrap_or_else(|| {
        inconclusive.push("nothing gated: no point has 2 or more repeats a side and there is no eval".into());
        Outcome::Inconclusive
    });
    GateResult { outcome, failures, inconclusive, repeats_needed, questions_needed, perf_not_gated }
}

/// `71.00% -> 70.00% (-1.00 points [lo, hi]` (the caller closes it): an
/// accuracy change with its paired interval in points, when there is one.
fn points_change(baseline: f64, candidate: f64, ci: Option<(f64, f64)>) -> String {
    let ci = ci.map_or(String::new(), |(lo, hi)| format!(" [{:+.2}, {:+.2}]", lo * 100.0, hi * 100.0));
    format!("{:.2}% -> {:.2}% ({:+.2} points{ci}", baseline * 100.0, candidate * 100.0, (candidate - baseline) * 100.0)
}
