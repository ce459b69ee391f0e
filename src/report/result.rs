//! The result document (`result.json`), schema version 1.
//!
//! Units are in the key names (`_ms`, `_s`); throughputs are per second
//! (`request_throughput` req/s, `*_throughput` tok/s).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::PointFigures;

/// Bumped whenever a key changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// How token arrival times are taken; written into every result.
pub const TIMING_NOTE: &str = "in-process: a token arrives when the engine step() that produced it returns to the harness; times are taken on the harness's monotonic clock";

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: u32,
    /// "running" while the run goes on, then "ok" or "failed".
    pub status: String,
    pub recipe: RecipeInfo,
    pub versions: Versions,
    pub host: Host,
    /// RFC 3339, UTC.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Facts the engine reported once built (model, dtype, max_model_len, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<serde_json::Value>,
    /// Engine construction time (import + load + KV cache allocation), s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_start_s: Option<f64>,
    pub timing: String,
    pub points: Vec<PointResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<Evals>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
}

/// The recipe as run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecipeInfo {
    pub name: String,
    /// The recipe file.
    pub file: String,
    /// `model` as written in the recipe.
    pub model: String,
    /// What vLLM was given (a bundled model resolved to its folder).
    pub model_path: String,
    /// The `vllm serve` flags after the model.
    pub engine_args: Vec<String>,
    /// Environment set for the engine process (recipe plus enginebench defaults).
    pub env: BTreeMap<String, String>,
}

/// Software versions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Versions {
    pub enginebench: String,
    #[serde(default)]
    pub vllm: Option<String>,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
}

/// The machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    pub cpu: String,
    pub logical_cpus: usize,
}

impl Host {
    /// Reads the host name and CPU model (Linux `/proc/cpuinfo`).
    pub fn detect() -> Host {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        let logical_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Host { hostname, cpu, logical_cpus }
    }
}

/// One point of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Concurrency: requests kept in flight.
    pub conc: u32,
    /// Input sequence length, tokens.
    pub isl: u32,
    /// Output sequence length requested, tokens.
    pub osl: u32,
    /// Measured requests.
    pub num_prompts: u32,
    /// Warm-up requests run first and excluded.
    pub warmups: u32,
    #[serde(flatten)]
    pub figures: PointFigures,
    /// Engine steps during the measured requests.
    pub steps: u64,
    /// Mean wall time of one `step()`, ms.
    pub mean_step_ms: f64,
}

/// Accuracy results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evals {
    pub gsm8k: Gsm8kResult,
}

/// GSM8K on the same engine, lm-eval's metric.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gsm8kResult {
    /// Questions scored.
    pub n: usize,
    /// exact_match after the strict-match filter (0..1).
    pub exact_match_strict: f64,
    pub exact_match_strict_stderr: f64,
    /// exact_match after the flexible-extract filter (0..1).
    pub exact_match_flexible: f64,
    pub exact_match_flexible_stderr: f64,
    pub num_fewshot: usize,
    /// Where the shots came from (e.g. `first-k-test-excluded`).
    pub fewshot_source: String,
    /// The data file read.
    pub data_source: String,
    /// Generation of all questions on the engine, s.
    pub duration_s: f64,
    /// Tokens generated over all questions.
    pub output_tokens: u64,
}

/// Why a run failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunError {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// The last lines of the engine process's log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
}
