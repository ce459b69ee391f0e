//! What a comparison reads: for each variant, its repeats (one job of a
//! result, the job's measured requests and its eval samples), loaded from
//! result files, handed over in memory by the `ab` command, or made from
//! another tool's file by [`super::foreign`].

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::Result;
use serde::Deserialize;

use crate::error::usage;
use crate::eval::score::Sample;
use crate::report::result::{JobResult, RunResult};

/// One measured request: the fields of a `requests.jsonl` line that a
/// comparison needs (other keys are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RequestRow {
    /// Index of the job in `result.json`'s `jobs` (absent in single-job files: 0).
    #[serde(default)]
    pub job: usize,
    /// Index of the point in the job's `points`.
    pub point: usize,
    /// The run's attempt that wrote it (0 first, k after the k-th `--resume`).
    #[serde(default)]
    pub attempt: u32,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Tokens generated.
    pub output_tokens: u32,
    /// Time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// Time per output token after the first, ms (only with more than one output token).
    pub tpot_ms: Option<f64>,
    /// End-to-end latency, ms.
    pub e2el_ms: Option<f64>,
    #[serde(default)]
    pub error: Option<String>,
    /// Index of the request in its point.
    #[serde(default)]
    pub request: usize,
    /// Generated token ids (recorded by `ab` for the lossless check; else empty).
    #[serde(default)]
    pub token_ids: Vec<u32>,
}

impl RequestRow {
    /// Completed normally (counted in the point's figures, as bench serve counts).
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.e2el_ms.is_some()
    }
}

/// One repeat of one variant: a job as it ran, its measured requests (every
/// point's, `point` indexing `job.points`), its eval samples and its lm-eval
/// tasks' per-question scores (either may be empty).
#[derive(Debug, Clone)]
pub struct Repeat {
    pub job: JobResult,
    pub requests: Vec<RequestRow>,
    pub samples: Vec<Sample>,
    pub task_samples: Vec<TaskSample>,
}

/// One question's score on one metric of an lm-eval task: from a line of
/// lm-eval's `samples_<task>_<date>.jsonl` (its `doc_id`, `prompt_hash`,
/// `filter`, and the value of each name in `metrics`), what the comparison
/// pairs the arms on.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSample {
    pub task: String,
    /// lm-eval's `<metric>,<filter>`, as in its results, e.g. `exact_match,strict-match`.
    pub metric: String,
    pub doc_id: u64,
    pub prompt_hash: String,
    /// The question's score (exact_match: 0 or 1).
    pub value: f64,
}

impl Repeat {
    /// Tensor-parallel size: the job's `tp`, else the engine's
    /// `tensor_parallel_size`, else 1.
    pub fn tp(&self) -> u32 {
        self.job
            .tp
            .or_else(|| self.job.engine.as_ref()?.tensor_parallel_size)
            .unwrap_or(1)
    }
}

/// One variant: its label and its repeats, in the order they ran. Repeats
/// with different TP sizes are different rows of the comparison, never
/// repeats of each other.
#[derive(Debug, Clone)]
pub struct Arm {
    pub label: String,
    pub repeats: Vec<Repeat>,
    /// `None` for our own runs; for another tool's file (one repeat), what
    /// the file holds ([`super::foreign`]).
    pub source: Option<super::source::Source>,
}

impl Arm {
    /// The eval samples of the first repeat that has any (greedy decoding
    /// makes later repeats' samples the same questions again).
    pub fn samples(&self) -> &[Sample] {
        self.repeats.iter().map(|r| r.samples.as_slice()).find(|s| !s.is_empty()).unwrap_or(&[])
    }

    /// The lm-eval per-question scores of the first repeat that has any.
    pub fn task_samples(&self) -> &[TaskSample] {
        self.repeats.iter().map(|r| r.task_samples.as_slice()).find(|s| !s.is_empty()).unwrap_or(&[])
    }

    /// The first profiled kernel table of each point (ISL, OSL, TP, conc).
    pub fn kernel_tables(&self) -> crate::profile::diff::Tables<'_> {
        let mut out = crate::profile::diff::Tables::new();
        for r in &self.repeats {
            let tp = r.tp();
            for p in &r.job.points {
                if let Some(prof) = &p.profile {
                    out.entry((p.isl, p.osl, tp, p.conc)).or_insert(&prof.kernels);
                }
            }
        }
        out
    }
}

/// A `gsm8k_samples.jsonl` line: the sample and the label of its job.
#[derive(Deserialize)]
struct SampleLine {
    #[serde(default)]
    label: Option<String>,
    #[serde(flatten)]
    sample: Sample,
}

/// Reads one variant from a result file: the jobs whose label is `label`
/// (or, when none is, whose variant is), with the `requests.jsonl` and
/// `gsm8k_samples.jsonl` lines beside it that belong to them. Without a
/// label the file must hold exactly one job (or one label). Jobs with the
/// same label are repeats; a samples line is matched to its job by label,
/// and when several jobs share the label each question's first line is
/// used. `role` ("baseline" / "candidate") and `flag` name the option in errors.
pub fn load_arm(result_path: &Path, label: Option<&str>, role: &str, flag: &str) -> Result<(RunResult, Arm)> {
    let result = crate::report::export::read_result(result_path)?;
    let labels: Vec<&str> = {
        let mut v: Vec<&str> = result.jobs.iter().map(|j| j.label.as_str()).collect();
        v.dedup();
        v
    };
    let chosen: Vec<usize> = match label {
        Some(l) => {
            let by_label: Vec<usize> = (0..result.jobs.len()).filter(|&i| result.jobs[i].label == l).collect();
            if by_label.is_empty() {
                (0..result.jobs.len()).filter(|&i| result.jobs[i].variant.as_deref() == Some(l)).collect()
            } else {
                by_label
            }
        }
        None => {
            let mut distinct = labels.clone();
            distinct.sort();
            distinct.dedup();
            if distinct.len() > 1 {
                return Err(usage(format!(
                    "{} has jobs {}: pick the {role} with {flag}",
                    result_path.display(),
                    quote_list(&distinct)
                )));
            }
            (0..result.jobs.len()).collect()
        }
    };
    if chosen.is_empty() {
        return Err(usage(format!(
            "{}: no job labelled {:?} for the {role} (jobs: {})",
            result_path.display(),
            label.unwrap_or(""),
            quote_list(&labels)
        )));
    }
    let requests = read_jsonl::<RequestRow>(&result_path.with_file_name("requests.jsonl"))?;
    let requests = crate::report::files::current_attempt(requests, |r| (r.job, r.point, r.attempt));
    let sample_lines = read_jsonl::<SampleLine>(&result_path.with_file_name("gsm8k_samples.jsonl"))?;
    let single_job = result.jobs.len() == 1;
    let mut repeats = Vec::new();
    for &ji in &chosen {
        let job = result.jobs[ji].clone();
        let reqs: Vec<RequestRow> = requests.iter().filter(|r| r.job == ji).cloned().collect();
        let mut seen = BTreeMap::new();
        let samples: Vec<Sample> = sample_lines
            .iter()
            .filter(|s| s.label.as_deref().map_or(single_job, |l| l == job.label))
            .filter(|s| seen.insert((s.sample.doc_id, s.sample.prompt_sha256.clone()), ()).is_none())
            .map(|s| s.sample.clone())
            .collect();
        let task_samples = read_task_samples(result_path.parent().unwrap_or(Path::new(".")), &job)?;
        repeats.push(Repeat { job, requests: reqs, samples, task_samples });
    }
    let arm_label = label.map(str::to_string).unwrap_or_else(|| result.jobs[chosen[0]].label.clone());
    Ok((result, Arm { label: arm_label, repeats, source: None }))
}

/// The per-question scores of a job's lm-eval tasks, from the
/// `samples_<task>_<date>.jsonl` files its result lists (relative to the run
/// folder `dir`; lm-eval names them so in `EvaluationTracker.save_results_samples`).
/// Missing files give none (the comparison then has nothing to pair).
///
/// Errors (usage): a line that is not JSON, naming the file and line.
pub(crate) fn read_task_samples(dir: &Path, job: &JobResult) -> Result<Vec<TaskSample>> {
    let files = job.eval.as_ref().and_then(|e| e.lm_eval.as_ref()).map(|l| l.files.as_slice()).unwrap_or_default();
    read_sample_files(dir, files)
}

/// The per-question scores in lm-eval's samples files `files` (relative to
/// `dir`), the task named by each file's name (`samples_<task>_<date>.jsonl`):
/// one [`TaskSample`] per line and metric. Missing files give none.
///
/// Errors (usage): a line that is not JSON, naming the file and line.
pub(crate) fn read_sample_files(dir: &Path, files: &[String]) -> Result<Vec<TaskSample>> {
    let mut out = Vec::new();
    for f in files {
        let path = dir.join(f);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(task) = name.strip_prefix("samples_").and_then(|n| n.strip_suffix(".jsonl")).and_then(|n| n.rsplit_once('_')).map(|(t, _date)| t)
        else {
            continue;
        };
        for line in read_jsonl::<serde_json::Value>(&path)? {
            let (Some(doc_id), Some(filter)) = (line["doc_id"].as_u64(), line["filter"].as_str()) else { continue };
            let prompt_hash = line["prompt_hash"].as_str().unwrap_or_default();
            for metric in line["metrics"].as_array().into_iter().flatten().filter_map(|m| m.as_str()) {
                if let Some(value) = line[metric].as_f64() {
                    out.push(TaskSample { task: task.to_string(), metric: format!("{metric},{filter}"), doc_id, prompt_hash: prompt_hash.to_string(), value });
                }
            }
        }
    }
    Ok(out)
}

fn quote_list(items: &[&str]) -> String {
    items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
}

/// Reads a JSON-lines file beside a result; empty when the file is absent.
fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let Ok(file) = std::fs::File::open(path) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| usage(format!("{}: {e}", path.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| usage(format!("{}:{}: {e}", path.display(), i + 1)))?);
    }
    Ok(out)
}
