//! Any lm-eval task, through lm-eval itself, on the same in-process engine.
//!
//! The design keeps Rust owning the request loop and every clock while lm-eval
//! keeps everything that makes a task what it is (its registry, YAML task
//! files with `!function` helpers, few-shot rules, chat-template flags,
//! filters, metrics, result files):
//!
//! 1. Before any engine starts, [`preflight::preflight`] runs the job's
//!    interpreter on `python-shim/enginebench_shim/lmeval.py` ([`SOURCE`]):
//!    lm-eval imports (else exit 2 naming `pip install lm-eval`), every task
//!    is found, generates greedily (`loglikelihood` tasks are refused by
//!    name) and its data loads as lm-eval loads it (else exit 2 naming how
//!    to fetch it).
//! 2. In the worker, on the built engine, [`bridge::evaluate`] calls
//!    lm-eval's own `simple_evaluate` with a model class of ours whose
//!    `generate_until` calls back into Rust with the whole batch of lm-eval's
//!    requests: a pyo3 callable wrapping a closure that runs them through
//!    the product's driver loop ([`crate::workload::drive`]) at the eval
//!    concurrency and returns the completions. One call from Python into
//!    Rust per request type (lm-eval batches every task's requests into
//!    one), so the loop, its timing and the engine stats are the same code
//!    as the built-in GSM8K's. lm-eval then filters, scores and writes its
//!    own `results_<date>.json` and `samples_<task>_<date>.jsonl`; its results
//!    JSON comes back and [`parse_results`] turns it into [`LmEvalResult`].
//!
//! (The other design, Rust asking Python for the requests and feeding the
//! completions back, needs lm-eval's `evaluate` cut in two around its model
//! call, which lm-eval does not offer: it would run in a Python thread
//! parked on queues. The callback needs no thread.)

pub mod preflight;
#[cfg(feature = "python")]
pub mod bridge;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::tasks::BUILTIN_TASKS;
use crate::error::usage;
use crate::protocol::LmEvalLoad;

/// The Python side, compiled in (the worker loads it as a module; preflight
/// runs it with `python -c`).
pub const SOURCE: &str = include_str!("../../../python-shim/enginebench_shim/lmeval.py");

/// Prefix that sends a name to lm-eval even when a built-in task has it
/// (`lm-eval:gsm8k` is lm-eval's gsm8k, `gsm8k` the built-in one).
pub const PREFIX: &str = "lm-eval:";

/// One `--task` / `[eval] tasks` entry, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskRef {
    /// A built-in task (`gsm8k`, `gsm8k_cot`, `gsm8k_inferencex`) or a task TOML.
    Builtin(String),
    /// A task of lm-eval's registry (wildcards allowed).
    Registry(String),
    /// An lm-eval task YAML file, or a folder of them.
    File(PathBuf),
}

impl TaskRef {
    /// Built-in names and `.toml` paths are built-in; `lm-eval:NAME` is
    /// lm-eval's NAME; `.yaml`/`.yml` paths and folders are lm-eval task
    /// files; any other name is a task of lm-eval's registry.
    pub fn classify(text: &str) -> TaskRef {
        if let Some(name) = text.strip_prefix(PREFIX) {
            return TaskRef::Registry(name.to_string());
        }
        let path = std::path::Path::new(text);
        if BUILTIN_TASKS.iter().any(|(n, _)| *n == text) || text.ends_with(".toml") {
            TaskRef::Builtin(text.to_string())
        } else if text.ends_with(".yaml") || text.ends_with(".yml") || path.is_dir() {
            TaskRef::File(path.to_path_buf())
        } else {
            TaskRef::Registry(text.to_string())
        }
    }
}

/// The eval selection split by who runs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The built-in task, if one was named (at most one per run).
    pub builtin: Option<String>,
    /// lm-eval registry names.
    pub registry: Vec<String>,
    /// lm-eval task files and folders.
    pub files: Vec<PathBuf>,
}

impl Selection {
    /// Classifies `tasks` and adds `task_files` (`--task-file`).
    ///
    /// Errors (usage): two built-in tasks; nothing selected.
    pub fn new(tasks: &[String], task_files: &[PathBuf]) -> Result<Selection> {
        let mut s = Selection { files: task_files.to_vec(), ..Selection::default() };
        for t in tasks {
            match TaskRef::classify(t) {
                TaskRef::Builtin(name) => {
                    if let Some(first) = &s.builtin {
                        return Err(usage(format!(
                            "eval tasks {first} and {name} are both built-in: one built-in task per run (lm-eval's own \
                             tasks can join it: e.g. {PREFIX}gsm8k, gpqa_diamond_cot_n_shot or a --task-file)"
                        )));
                    }
                    s.builtin = Some(name);
                }
                TaskRef::Registry(name) if !s.registry.contains(&name) => s.registry.push(name),
                TaskRef::Registry(_) => {}
                TaskRef::File(path) => s.files.push(path),
            }
        }
        if s.builtin.is_none() && !s.uses_lm_eval() {
            return Err(usage("no eval task selected: give --task NAME or --task-file PATH"));
        }
        Ok(s)
    }

    /// Some task runs through lm-eval.
    pub fn uses_lm_eval(&self) -> bool {
        !self.registry.is_empty() || !self.files.is_empty()
    }
}

/// One metric of one task, as lm-eval reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// lm-eval's key: `<metric>,<filter>`, e.g. `exact_match,strict-match`.
    pub name: String,
    pub value: f64,
    /// lm-eval's standard error (`<metric>_stderr,<filter>`); absent when it
    /// reported none or "N/A" (one document).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<f64>,
    /// From lm-eval's `higher_is_better`, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub higher_is_better: Option<bool>,
}

/// One task's (or group's) scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskScore {
    /// lm-eval's task (or group) name.
    pub task: String,
    /// Documents scored (lm-eval's `n-samples.effective`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_fewshot: Option<u64>,
    pub metrics: Vec<Metric>,
    /// Requests generated for this task and their tokens (0 for a group).
    #[serde(default)]
    pub requests: u64,
    #[serde(default)]
    pub output_tokens: u64,
}

impl TaskScore {
    /// The metrics an accuracy gate reads: every `exact_match,<filter>` (as
    /// InferenceX's validate_scores.py checks them), else every metric
    /// lm-eval marks higher-is-better.
    pub fn gated_metrics(&self) -> Vec<&Metric> {
        let exact: Vec<&Metric> = self.metrics.iter().filter(|m| m.name.starts_with("exact_match,")).collect();
        if !exact.is_empty() {
            return exact;
        }
        self.metrics.iter().filter(|m| m.higher_is_better == Some(true)).collect()
    }
}

/// The lm-eval tasks of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmEvalResult {
    /// lm-eval's version (from its results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lm_eval_version: Option<String>,
    /// lm-eval's own files, relative to the run folder.
    pub files: Vec<String>,
    /// Prompts went through the chat template (`--apply_chat_template`).
    pub chat: bool,
    /// The token limit given to every request, when one was (else each task's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Wall time of the generation in the driver loop, s.
    pub duration_s: f64,
    /// lm-eval's whole evaluation in the worker (its import, task and
    /// prompt building, the generation, filters, metrics and files), s.
    #[serde(default)]
    pub wall_s: f64,
    /// Requests generated and their tokens, all tasks.
    pub requests: u64,
    pub output_tokens: u64,
    /// Per task, then per group, in lm-eval's order.
    pub tasks: Vec<TaskScore>,
}

impl LmEvalResult {
    /// Output tokens per second of the generation.
    pub fn output_throughput(&self) -> f64 {
        if self.duration_s > 0.0 { self.output_tokens as f64 / self.duration_s } else { 0.0 }
    }
}

/// lm-eval's results JSON (what `simple_evaluate` returns, samples removed)
/// into per-task scores, with the driver loop's load per task.
///
/// Errors: not JSON, or no `results` mapping.
pub fn parse_results(json: &str, load: &[LmEvalLoad]) -> Result<Vec<TaskScore>> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| anyhow::anyhow!("lm-eval's results are not JSON: {e}"))?;
    let results = v["results"].as_object().ok_or_else(|| anyhow::anyhow!("lm-eval's results have no `results` mapping"))?;
    let mut out = Vec::new();
    for (task, metrics) in results {
        let Some(metrics) = metrics.as_object() else { continue };
        let better = &v["higher_is_better"][task];
        let mut list: Vec<Metric> = metrics
            .iter()
            .filter(|(k, _)| k.contains(',') && !k.contains("_stderr,"))
            .filter_map(|(k, val)| {
                let value = val.as_f64()?;
                let (metric, filter) = k.split_once(',')?;
                let stderr = metrics.get(&format!("{metric}_stderr,{filter}")).and_then(|s| s.as_f64());
                Some(Metric { name: k.clone(), value, stderr, higher_is_better: better[metric].as_bool() })
            })
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        let mine = load.iter().filter(|l| l.task == *task);
        out.push(TaskScore {
            task: task.clone(),
            n: v["n-samples"][task]["effective"].as_u64(),
            num_fewshot: v["n-shot"][task].as_u64(),
            metrics: list,
            requests: mine.clone().map(|l| l.requests).sum(),
            output_tokens: mine.map(|l| l.output_tokens).sum(),
        });
    }
    Ok(out)
}

/// The lm-eval version named in its results JSON, if any.
pub fn version_of(json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v["lm_eval_version"].as_str().map(str::to_string)
}

/// Per-task load from the driver loop's per-request tasks and tokens.
pub fn load_by_task(tasks: &[String], output_tokens: &[u32]) -> Vec<LmEvalLoad> {
    let mut by: BTreeMap<&str, LmEvalLoad> = BTreeMap::new();
    for (t, n) in tasks.iter().zip(output_tokens) {
        let e = by.entry(t).or_insert_with(|| LmEvalLoad { task: t.clone(), ..LmEvalLoad::default() });
        e.requests += 1;
        e.output_tokens += u64::from(*n);
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_classified() {
        assert_eq!(TaskRef::classify("gsm8k"), TaskRef::Builtin("gsm8k".into()));
        assert_eq!(TaskRef::classify("gsm8k_inferencex"), TaskRef::Builtin("gsm8k_inferencex".into()));
        assert_eq!(TaskRef::classify("evals/mine.toml"), TaskRef::Builtin("evals/mine.toml".into()));
        assert_eq!(TaskRef::classify("lm-eval:gsm8k"), TaskRef::Registry("gsm8k".into()));
        assert_eq!(TaskRef::classify("gpqa_diamond_cot_n_shot"), TaskRef::Registry("gpqa_diamond_cot_n_shot".into()));
        assert_eq!(TaskRef::classify("utils/evals/gpqa_diamond.yaml"), TaskRef::File("utils/evals/gpqa_diamond.yaml".into()));
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        assert_eq!(TaskRef::classify(d), TaskRef::File(dir.path().into()));

        let s = Selection::new(&["gsm8k_inferencex".into(), "mmlu_pro".into(), "mmlu_pro".into()], &["t.yaml".into()]).unwrap();
        assert_eq!(s.builtin.as_deref(), Some("gsm8k_inferencex"));
        assert_eq!(s.registry, ["mmlu_pro"]);
        assert_eq!(s.files, [PathBuf::from("t.yaml")]);
        assert!(s.uses_lm_eval());
        let e = Selection::new(&["gsm8k".into(), "gsm8k_cot".into()], &[]).unwrap_err();
        assert!(e.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(e.to_string().contains("gsm8k and gsm8k_cot") && e.to_string().contains("lm-eval:gsm8k"), "{e}");
        assert!(Selection::new(&[], &[]).is_err());
    }

    /// The shape of lm-eval 0.4.10's results (`evaluator.py` `simple_evaluate`),
    /// values made up.
    const RESULTS: &str = r#"{
      "results": {"gpqa_mini": {"alias": "gpqa_mini", "exact_match,extract_abcd": 0.5,
                                "exact_match_stderr,extract_abcd": 0.2887},
                  "gsm8k_local": {"alias": "gsm8k_local", "exact_match,strict-match": 0.25,
                                  "exact_match_stderr,strict-match": "N/A",
                                  "exact_match,flexible-extract": 0.5,
                                  "exact_match_stderr,flexible-extract": 0.1}},
      "n-shot": {"gpqa_mini": 0, "gsm8k_local": 5},
      "higher_is_better": {"gpqa_mini": {"exact_match": true}, "gsm8k_local": {"exact_match": true}},
      "n-samples": {"gpqa_mini": {"original": 4, "effective": 4}, "gsm8k_local": {"original": 9, "effective": 4}},
      "lm_eval_version": "0.4.10"
    }"#;

    #[test]
    fn results_parse_per_task() {
        let load = load_by_task(&["gsm8k_local".into(), "gpqa_mini".into(), "gsm8k_local".into()], &[10, 7, 5]);
        let tasks = parse_results(RESULTS, &load).unwrap();
        assert_eq!(tasks.len(), 2);
        let g = tasks.iter().find(|t| t.task == "gsm8k_local").unwrap();
        assert_eq!((g.n, g.num_fewshot, g.requests, g.output_tokens), (Some(4), Some(5), 2, 15));
        let names: Vec<&str> = g.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["exact_match,flexible-extract", "exact_match,strict-match"]);
        assert_eq!(g.metrics[1].stderr, None, "N/A is no stderr");
        assert_eq!(g.metrics[0].stderr, Some(0.1));
        assert_eq!(g.gated_metrics().len(), 2);
        let q = tasks.iter().find(|t| t.task == "gpqa_mini").unwrap();
        assert_eq!(q.metrics[0].value, 0.5);
        assert_eq!(q.metrics[0].higher_is_better, Some(true));
        assert_eq!(version_of(RESULTS).as_deref(), Some("0.4.10"));
        assert!(parse_results("{}", &[]).is_err());
    }
}
