//! `enginebench export`: a result in the shapes other tools read, one file
//! per point, one module per shape:
//!
//! * `inferencex`: the aggregate InferenceX writes for the point's scenario:
//!   [`inferencex`] for fixed-length points (utils/process_result.py),
//!   [`agentx`] for session workloads (the agentic aggregation's
//!   `request_metrics` / `server_metrics`).
//! * `vllm-bench`: [`vllm_bench`], `vllm bench serve`'s `--save-result` JSON.
//!
//! The fixed-length shapes carry bench serve's `spec_decode_*` keys when the
//! engine speculated (see [`spec_decode_fields`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

mod agentx;
mod inferencex;
mod vllm_bench;

use anyhow::Result;
use serde_json::{Value, json};

use super::result::{JobResult, PointResult, RunResult};
use crate::error::usage;
use crate::protocol::EngineInfo;

/// Target shape of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Inferencex,
    VllmBench,
}

/// Reads `result.json` (schema 1) with a usage error naming the file.
pub fn read_result(path: &Path) -> Result<RunResult> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not JSON: {e}", path.display())))?;
    match value.get("schema_version").and_then(Value::as_u64) {
        Some(1) => {}
        Some(v) => return Err(usage(format!("{}: schema_version {v} is not supported (this enginebench reads 1)", path.display()))),
        None => return Err(usage(format!("{} is not an enginebench result.json (no schema_version)", path.display()))),
    }
    serde_json::from_value(value).map_err(|e| usage(format!("{}: not a valid result: {e}", path.display())))
}

/// Exports every point of `result`. `requests` are the lines of the run's
/// `requests.jsonl` (needed by `vllm-bench`).
pub fn export(result: &RunResult, requests: &[Value], format: Format) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (ji, job) in result.jobs.iter().enumerate() {
        for (pi, p) in job.points.iter().enumerate() {
            let label = if result.jobs.len() > 1 { format!("_{}", job.label.replace([' ', '='], "-")) } else { String::new() };
            let stem = format!("{}{label}_{}_{}_conc{}", result.recipe.name, p.isl, p.osl, p.conc);
            out.push(match format {
                Format::Inferencex if p.workload.is_sessions() => {
                    (format!("agg_{stem}.json"), agentx::aggregate(result, job, p, &point_lines(requests, ji, pi)))
                }
                Format::Inferencex => (format!("agg_{stem}.json"), inferencex::aggregate(result, job, p)),
                Format::VllmBench => (format!("{stem}.json"), vllm_bench::document(result, job, p, &point_lines(requests, ji, pi))),
            });
        }
    }
    out
}

/// The `requests.jsonl` lines of point `pi` of job `ji`.
fn point_lines(requests: &[Value], ji: usize, pi: usize) -> Vec<&Value> {
    let at = |r: &&Value, k: &str, v: usize| r[k].as_u64() == Some(v as u64);
    requests.iter().filter(|r| at(r, "job", ji) && at(r, "point", pi)).collect()
}

/// One of the engine's parallel sizes (1 when the engine did not say).
pub(super) fn engine_size(job: &JobResult, size: impl Fn(&EngineInfo) -> Option<u32>) -> u64 {
    job.engine.as_ref().and_then(size).map_or(1, u64::from)
}

/// The `*_ms` figures (and their keys) of a point, as bench serve names them.
pub(super) fn latency_figures(p: &PointResult) -> &BTreeMap<String, f64> {
    &p.figures.latency_ms
}

/// The speculative-decoding keys of `vllm bench serve`'s result
/// (vllm/benchmarks/serve.py): `spec_decode_acceptance_rate` in percent,
/// `spec_decode_acceptance_length`, `spec_decode_num_drafts`,
/// `spec_decode_draft_tokens`, `spec_decode_accepted_tokens` and
/// `spec_decode_per_position_acceptance_rates` (fractions). Like bench
/// serve, none when nothing was drafted or the engine does not speculate.
pub(super) fn spec_decode_fields(p: &PointResult) -> Vec<(&'static str, Value)> {
    let Some(s) = p.spec_decode.as_ref() else { return Vec::new() };
    let (Some(rate), Some(length)) = (s.acceptance_rate, s.acceptance_length) else { return Vec::new() };
    vec![
        ("spec_decode_acceptance_rate", json!(rate * 100.0)),
        ("spec_decode_acceptance_length", json!(length)),
        ("spec_decode_num_drafts", json!(s.counts.drafts)),
        ("spec_decode_draft_tokens", json!(s.counts.draft_tokens)),
        ("spec_decode_accepted_tokens", json!(s.counts.accepted_tokens)),
        ("spec_decode_per_position_acceptance_rates", json!(s.per_position_acceptance_rates)),
    ]
}

/// Reads the `requests.jsonl` next to a result file (empty when absent):
/// its current lines, without those an interrupted attempt left before a
/// `--resume` ([`crate::report::files::current_attempt`]).
pub fn read_requests(result_path: &Path) -> Result<Vec<Value>> {
    let path = result_path.with_file_name("requests.jsonl");
    let Ok(file) = std::fs::File::open(&path) else { return Ok(Vec::new()) };
    let lines = BufReader::new(file)
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let line = line?;
            serde_json::from_str(&line).map_err(|e| usage(format!("{}:{}: {e}", path.display(), i + 1)))
        })
        .collect::<Result<Vec<Value>>>()?;
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    Ok(crate::report::files::current_attempt(lines, |v| (n(v, "job") as usize, n(v, "point") as usize, n(v, "attempt") as u32)))
}

/// `enginebench export`: writes one file per point into `out_dir`, or prints
/// a JSON array to stdout. Returns the files written.
pub fn run_export(result_path: &Path, format: Format, out_dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    let result = read_result(result_path)?;
    let requests = read_requests(result_path)?;
    let docs = export(&result, &requests, format);
    match out_dir {
        None => {
            use std::io::Write;
            let array: Vec<&Value> = docs.iter().map(|(_, v)| v).collect();
            let text = serde_json::to_string_pretty(&array)?;
            // A closed pipe (`| head`) is not an error worth a panic.
            match writeln!(std::io::stdout().lock(), "{text}") {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(Vec::new()),
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
            docs.into_iter()
                .map(|(name, v)| {
                    let path = dir.join(name);
                    super::files::write_json_atomic(&path, &v)?;
                    Ok(path)
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests;
