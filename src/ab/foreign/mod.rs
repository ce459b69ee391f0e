//! Baselines from other tools: `compare` takes, as either side, a file that
//! another benchmark or eval wrote, and turns it into the same in-memory
//! [`Arm`] the comparison reads from our own `result.json`, together with a
//! [`Source`]: what the file holds (its tool, engine and version where it
//! says them, summary figures or per-request arrays, the workload settings it
//! records, the conversion rules applied and the figures refused).
//!
//! One reader per format, the format read off the file ([`classify`]):
//!
//! * [`bench_serve`]: `vllm bench serve --save-result` JSON (vLLM 0.32's
//!   `vllm/benchmarks/serve.py`, with or without `--save-detailed`) and the
//!   `benchmark_serving.py` forks that write the same keys (InferenceX's
//!   `utils/bench_serving`, ATOM's `atom/benchmarks`); one file per point,
//!   a folder of them, or JSON lines (`--append-result`).
//! * [`inferencex`]: InferenceX's fixed-sequence aggregate rows
//!   (`utils/process_result.py`'s `agg_*.json`; `export --format inferencex`
//!   writes the same): one row, a JSON array of rows, or a folder.
//! * [`lm_eval`]: lm-eval's `results_<date>.json`, with the
//!   `samples_<task>_<date>.jsonl` files of `--log_samples` beside it when
//!   they are there.
//!
//! A file that is none of these is a usage error (exit 2) naming the keys
//! the closest format missed. A foreign arm has one repeat (one run of the
//! other tool); [`Source::points`] runs parallel to its job's points.

pub mod bench_serve;
pub mod inferencex;
pub mod lm_eval;
pub mod matching;

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::Value;

use super::input::{Arm, Repeat, RequestRow, TaskSample};
pub use super::source::{EvalRecord, Format, PointRecord, Source};
use crate::error::usage;
use crate::metrics::PointFigures;
use crate::report::result::{Evals, JobResult, PointResult, RecipeInfo, RunResult};

/// What a reader makes of one point.
#[derive(Debug, Clone)]
pub struct ForeignPoint {
    pub isl: u32,
    pub osl: u32,
    pub conc: u32,
    /// TP as recorded (or given); `None`: unknown.
    pub tp: Option<u32>,
    pub chat: bool,
    pub figures: PointFigures,
    /// Completed and failed requests (empty: summary figures only).
    pub requests: Vec<RequestRow>,
    pub record: PointRecord,
}

/// What a reader makes of a file or a folder of files.
#[derive(Debug, Clone)]
pub struct Read {
    pub source: Source,
    pub points: Vec<ForeignPoint>,
    pub evals: Option<Evals>,
    pub task_samples: Vec<TaskSample>,
}

/// Facts a foreign file may not record, given on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Hints {
    /// `--foreign-isl-osl ISL/OSL`.
    pub isl_osl: Option<(u32, u32)>,
    /// `--foreign-tp N`.
    pub tp: Option<u32>,
}

/// One side of a comparison as loaded.
#[derive(Debug)]
pub enum Side {
    /// An enginebench `result.json`.
    Ours(RunResult, Arm),
    /// Another tool's file; the arm's `source` says what it holds.
    Foreign(Arm),
}

/// The keys that identify a format ([`classify`] needs all of them).
pub fn required_keys(format: Format) -> &'static [&'static str] {
    match format {
        Format::BenchServe => bench_serve::REQUIRED,
        Format::Inferencex => inferencex::REQUIRED,
        Format::LmEval => lm_eval::REQUIRED,
    }
}

/// A file's format, read off its keys: `Ok(None)` for an enginebench
/// `result.json` (it has `schema_version`), `Ok(Some(format))` for a
/// foreign one.
///
/// Errors (usage): none matches; the message names the closest format and
/// the keys it missed.
pub fn classify(v: &Value, file: &Path) -> Result<Option<Format>> {
    let Some(obj) = v.as_object() else {
        return Err(usage(format!("{}: a JSON object or array of objects was expected", file.display())));
    };
    if obj.contains_key("schema_version") {
        return Ok(None);
    }
    let formats = [Format::BenchServe, Format::Inferencex, Format::LmEval];
    if let Some(f) = formats.iter().find(|f| required_keys(**f).iter().all(|k| obj.contains_key(*k))) {
        return Ok(Some(*f));
    }
    let missing = |f: &Format| required_keys(*f).iter().filter(|k| !obj.contains_key(**k)).copied().collect::<Vec<_>>();
    let closest = formats.iter().min_by_key(|f| missing(f).len() * 100 / required_keys(**f).len()).expect("three formats");
    Err(usage(format!(
        "{}: not a file compare reads; closest is {}, which needs {} (missing: {}). Readable: an enginebench result.json \
         (schema_version), a `vllm bench serve` result ({}), InferenceX aggregate rows ({}), an lm-eval results file ({})",
        file.display(),
        closest.text(),
        required_keys(*closest).join(", "),
        missing(closest).join(", "),
        required_keys(Format::BenchServe).join(", "),
        required_keys(Format::Inferencex).join(", "),
        required_keys(Format::LmEval).join(", "),
    )))
}

/// The JSON documents of one file: one object, the elements of an array, or
/// JSON lines (vLLM's `--append-result` writes one object per line).
///
/// Errors (usage): unreadable, or neither JSON nor JSON lines.
pub fn documents(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(a)) => Ok(a),
        Ok(v) => Ok(vec![v]),
        Err(first) => {
            let lines: Result<Vec<Value>, _> = text.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect();
            match lines {
                Ok(v) if !v.is_empty() => Ok(v),
                _ => Err(usage(format!("{} is not JSON: {first}", path.display()))),
            }
        }
    }
}

/// Loads one side: an enginebench `result.json` (the job chosen by `label`
/// as [`super::input::load_arm`] chooses it), or a foreign file or folder
/// of files (`label`, if given, names the side). `role` and `flag` name the
/// side and its label option in errors.
///
/// Errors (usage): unreadable input, an unknown format (naming the keys
/// missed), files of different formats in one folder, or a foreign file
/// that lacks what the comparison needs and `hints` do not give.
pub fn load(path: &Path, label: Option<&str>, role: &str, flag: &str, hints: Hints) -> Result<Side> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| usage(format!("cannot read the folder {}: {e}", path.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        v.sort();
        if v.is_empty() {
            return Err(usage(format!("{}: no .json file in the folder", path.display())));
        }
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut docs: Vec<(PathBuf, Value, Format)> = Vec::new();
    for f in &files {
        for d in documents(f)? {
            match classify(&d, f)? {
                None if files.len() == 1 => {
                    let (result, arm) = super::input::load_arm(f, label, role, flag)?;
                    return Ok(Side::Ours(result, arm));
                }
                None => {
                    return Err(usage(format!(
                        "{}: an enginebench result.json in a folder of other files; give the result.json itself",
                        f.display()
                    )));
                }
                Some(format) => docs.push((f.clone(), d, format)),
            }
        }
    }
    let format = docs[0].2;
    if let Some((f, _, other)) = docs.iter().find(|(_, _, x)| *x != format) {
        return Err(usage(format!(
            "{}: {} beside {} in {}: give one format per side",
            f.display(),
            other.text(),
            format.text(),
            path.display()
        )));
    }
    let read = match format {
        Format::BenchServe => bench_serve::read(&docs, hints)?,
        Format::Inferencex => inferencex::read(&docs)?,
        Format::LmEval => {
            if docs.len() > 1 {
                return Err(usage(format!("{}: {} lm-eval results files: give one", path.display(), docs.len())));
            }
            lm_eval::read(&docs[0].0, &docs[0].1)?
        }
    };
    if read.points.is_empty() && read.evals.is_none() {
        let why = read.source.skipped.join("; ");
        return Err(usage(format!("{}: nothing to compare in {}: {why}", path.display(), format.text())));
    }
    let default_label = match format {
        Format::BenchServe => read.source.engine.clone().unwrap_or_else(|| "bench-serve".into()),
        Format::Inferencex => read.source.engine.clone().unwrap_or_else(|| "inferencex".into()),
        Format::LmEval => "lm-eval".into(),
    };
    Ok(Side::Foreign(arm_of(read, label.map(str::to_string).unwrap_or(default_label))?))
}

/// The arm of a foreign read: one repeat, one job whose points carry the
/// file's figures (fields the file does not record hold placeholders that
/// the comparison does not read for a foreign side: [`PointRecord`] says
/// what is known).
fn arm_of(read: Read, label: String) -> Result<Arm> {
    let mut job: JobResult = serde_json::from_value(serde_json::json!({
        "label": label, "status": "ok", "engine_args": [], "env": {}, "points": [],
        "sweep": {"space": [], "inferencex": false, "length_convention": "vllm", "range_ratio": 0.0, "prefix_len": 0,
                  "request_rate": null, "burstiness": 1.0, "ignore_eos": false, "percentiles": [], "goodput": null, "seed": 0,
                  "count": {"prompts_per_conc": null, "num_prompts": null, "warmups_per_conc": null, "warmups": null}},
    }))
    .map_err(|e| anyhow::anyhow!("building the foreign job: {e}"))?;
    let tps: Vec<u32> = read.points.iter().filter_map(|p| p.tp).collect();
    job.tp = tps.first().copied().filter(|t| tps.iter().all(|x| x == t));
    let mut requests = Vec::new();
    let mut records = Vec::new();
    for (pi, p) in read.points.into_iter().enumerate() {
        let mut point = PointResult {
            conc: p.conc,
            isl: p.isl,
            osl: p.osl,
            num_prompts: p.record.num_prompts.unwrap_or(p.figures.completed + p.figures.failed),
            warmups: 0,
            length_convention: crate::protocol::LengthConvention::Vllm,
            range_ratio: 0.0,
            prefix_len: p.record.prefix_len.unwrap_or(0),
            request_rate: None,
            burstiness: None,
            ignore_eos: p.record.ignore_eos.unwrap_or(false),
            gpus: p.record.gpus.unwrap_or(0),
            workload: if p.chat { crate::protocol::Workload::ChatRandom } else { crate::protocol::Workload::Random },
            status: crate::report::result::PointStatus::Ok,
            figures: p.figures,
            step_stats: Default::default(),
            crosscheck: None,
            spec_decode: None,
            prefix_cache: None,
            sessions: None,
            pd: None,
            telemetry: None,
            profile: None,
            ranks: Vec::new(),
        };
        let tpot = point.figures.ms("median_tpot_ms");
        if tpot.is_finite() && tpot > 0.0 {
            point.figures.latency_ms.insert("median_intvty".into(), 1000.0 / tpot);
        }
        job.points.push(point);
        let tp = p.tp;
        requests.extend(p.requests.into_iter().map(|r| RequestRow { point: pi, ..r }));
        records.push((tp, p.record));
    }
    // A point whose TP differs from the job's keeps its own through a job per TP.
    let mut source = read.source;
    source.points = records.iter().map(|(_, r)| r.clone()).collect();
    let mut repeats = Vec::new();
    let distinct: Vec<Option<u32>> = {
        let mut v: Vec<Option<u32>> = records.iter().map(|(t, _)| *t).collect();
        v.sort();
        v.dedup();
        v
    };
    if distinct.len() <= 1 {
        job.eval = read.evals;
        repeats.push(Repeat { job, requests, samples: Vec::new(), task_samples: read.task_samples });
        return Ok(Arm { label, repeats, source: Some(source) });
    }
    Err(usage(format!(
        "{}: points of several TP sizes ({}) in one side; give one TP per side (a folder per TP)",
        source.files.join(", "),
        distinct.iter().map(|t| t.map_or("?".into(), |t| t.to_string())).collect::<Vec<_>>().join(", ")
    )))
}

/// Both arms made ready for a comparison where either is another tool's
/// file: a foreign side without TP takes the other side's ([`align_tp`]),
/// and an lm-eval file's task that our built-in eval reproduces becomes its
/// built-in eval ([`lm_eval::as_builtin`]). Returns the arms and notes.
pub fn prepare(baseline: &Arm, candidate: &Arm) -> (Arm, Arm, Vec<String>) {
    let (mut b, mut c) = (baseline.clone(), candidate.clone());
    let mut notes = Vec::new();
    if b.source.is_some() {
        notes.extend(align_tp(&mut b, candidate));
    }
    if c.source.is_some() {
        notes.extend(align_tp(&mut c, baseline));
    }
    notes.extend(bridge_eval(&mut b, candidate));
    notes.extend(bridge_eval(&mut c, baseline));
    (b, c, notes)
}

/// When `foreign` is an lm-eval file and `other` ran a built-in eval: its
/// matching task becomes `foreign`'s built-in eval. A note says which task,
/// or why none.
fn bridge_eval(foreign: &mut Arm, other: &Arm) -> Option<String> {
    if foreign.source.as_ref()?.format != Format::LmEval {
        return None;
    }
    let ours = other.repeats.iter().find_map(|r| r.job.eval.as_ref()?.gsm8k.as_ref())?;
    let tasks = |a: &Arm| -> Vec<String> {
        a.repeats.iter().filter_map(|r| r.job.eval.as_ref()?.lm_eval.as_ref()).flat_map(|l| l.tasks.iter().map(|t| t.task.clone())).collect()
    };
    let held = tasks(foreign);
    Some(match lm_eval::as_builtin(foreign, &ours.task) {
        Some(t) => format!("the {} file's lm-eval task {t} is compared with this run's {}", foreign.label, ours.task),
        None => format!(
            "accuracy not compared: the {} file has no lm-eval task {} with exact_match strict-match and flexible-extract (it has {})",
            foreign.label,
            lm_eval::SAME_TASK.iter().find(|(b, _)| *b == ours.task).map_or(ours.task.as_str(), |(_, l)| l),
            if held.is_empty() { "none".to_string() } else { held.join(", ") }
        ),
    })
}

/// Gives the foreign arm's points whose TP the file did not record the
/// other side's TP at the same ISL/OSL and concurrency when that side ran
/// exactly one there (the per-GPU figure stays refused: its divisor is not
/// recorded). Returns a note per point matched that way and per point left
/// unmatched (the other side ran several TPs there).
pub fn align_tp(foreign: &mut Arm, other: &Arm) -> Vec<String> {
    let Some(source) = &foreign.source else { return Vec::new() };
    if source.points.iter().all(|p| p.tp_known) || foreign.repeats.len() != 1 {
        return Vec::new();
    }
    let mut notes = Vec::new();
    let mut tps: Vec<u32> = Vec::new();
    for p in &foreign.repeats[0].job.points {
        let mut there: Vec<u32> = other
            .repeats
            .iter()
            .flat_map(|r| r.job.points.iter().map(move |q| (r.tp(), q)))
            .filter(|(_, q)| (q.isl, q.osl, q.conc) == (p.isl, p.osl, p.conc))
            .map(|(t, _)| t)
            .collect();
        there.sort();
        there.dedup();
        match there.as_slice() {
            [t] => tps.push(*t),
            [] => {}
            many => notes.push(format!(
                "ISL/OSL {}/{} conc {}: the {} file records no TP and the other side ran TP {}: not matched",
                p.isl,
                p.osl,
                p.conc,
                foreign.label,
                many.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    tps.sort();
    tps.dedup();
    match tps.as_slice() {
        // No point in common: the comparison lists them as unmatched.
        [] if notes.is_empty() => {}
        [t] if notes.is_empty() => {
            foreign.repeats[0].job.tp = Some(*t);
            notes.push(format!(
                "the {} file records no TP (or GPU count): its points are matched to the other side's TP {t}; tok/s/gpu is not compared",
                foreign.label
            ));
        }
        _ => {
            // No one TP fits every point: match none rather than guess (TP 0 matches no run).
            foreign.repeats[0].job.tp = Some(0);
            notes.push(format!(
                "the {} file records no TP (or GPU count) and no one TP of the other side fits all its points: none matched; give --foreign-tp N",
                foreign.label
            ));
        }
    }
    notes
}

/// A number that may be written as a string (`--metadata isl=1024` writes `"1024"`).
pub(crate) fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A boolean that may be written as a string (`"true"`, `"True"`, `"1"`).
pub(crate) fn boolean(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Some(true),
            "false" | "0" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// The first of `keys` holding a non-negative whole number.
pub(crate) fn whole(obj: &Value, keys: &[&str]) -> Option<u32> {
    keys.iter().find_map(|k| number(&obj[*k]).filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x <= f64::from(u32::MAX)).map(|x| x as u32))
}

/// The first of `keys` holding a non-empty string.
pub(crate) fn text(obj: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| obj[*k].as_str().filter(|s| !s.is_empty()).map(str::to_string))
}

/// The recipe shown for a foreign side when no side is a run of ours.
pub fn recipe_of(arm: &Arm, path: &Path) -> RecipeInfo {
    let s = arm.source.as_ref();
    let model = s.and_then(|s| s.model.clone()).unwrap_or_else(|| "model not recorded".into());
    RecipeInfo {
        name: arm.label.clone(),
        file: path.display().to_string(),
        model: model.clone(),
        hardware: s.and_then(|s| s.hardware.clone()),
        precision: s.and_then(|s| s.precision.clone()),
        model_path: model,
    }
}

#[cfg(test)]
mod tests;
