//! The check before any engine starts: the job's interpreter runs the lm-eval
//! side ([`super::SOURCE`]) with `preflight`, which imports lm-eval, resolves
//! every task, refuses what the engine cannot run and loads the data (into
//! the Hugging Face cache, where the worker finds it again).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde::Deserialize;

use crate::error::usage;
use crate::protocol::LmEvalJob;

/// One task as preflight found it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskInfo {
    pub name: String,
    /// Documents that will be scored (after `--limit`).
    pub docs: u64,
    pub num_fewshot: Option<u64>,
    /// `dataset_path (dataset_name)`.
    pub dataset: String,
    #[serde(default)]
    pub until: Vec<String>,
    #[serde(default)]
    pub max_gen_toks: Option<u64>,
}

/// What preflight reports.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Preflight {
    /// lm-eval's version.
    pub lm_eval: Option<String>,
    pub tasks: Vec<TaskInfo>,
}

/// Checks `job`'s tasks with `python` (the job's interpreter) in the job's
/// environment additions `env`.
///
/// Errors (usage): lm-eval missing (naming `pip install lm-eval`), an
/// unknown or unsupported task, data that does not load (naming how to
/// fetch it), or the check itself failing to run.
pub fn preflight(python: &Path, env: &BTreeMap<String, String>, job: &LmEvalJob) -> Result<Preflight> {
    let spec = serde_json::to_string(job)?;
    let out = Command::new(python)
        .args(["-c", super::SOURCE, "preflight", &spec])
        .envs(env)
        .output()
        .map_err(|e| usage(format!("cannot run {} to check the lm-eval tasks: {e}", python.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| l.trim_start().starts_with('{'));
    let answer: Option<serde_json::Value> = last.and_then(|l| serde_json::from_str(l).ok());
    if let Some(e) = answer.as_ref().and_then(|a| a["error"].as_str()) {
        return Err(usage(e.to_string()));
    }
    match answer.and_then(|a| serde_json::from_value::<Preflight>(a).ok()) {
        Some(p) if out.status.success() => Ok(p),
        _ => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = last.into_iter().chain(stderr.lines().rev().filter(|l| !l.trim().is_empty()).take(5)).collect();
            Err(usage(format!(
                "checking the lm-eval tasks with {} failed ({}): {}",
                python.display(),
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )))
        }
    }
}
