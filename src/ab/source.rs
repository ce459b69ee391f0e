//! What a side of a comparison read from another tool's file holds
//! ([`Source`]): the tool, engine and version the file names, per point the
//! workload settings it records and the figures it lacks, the eval settings
//! of an lm-eval file, and the conversion rules applied. The readers in
//! [`super::foreign`] fill it in; the comparison names it in `ab.md` and the
//! changelog and keeps it in `ab.json`. A leaf beside [`super::metric`].

use serde::Serialize;

use super::metric::Metric;

/// A foreign file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `vllm bench serve`'s result JSON and the `benchmark_serving.py` forks.
    BenchServe,
    /// InferenceX's fixed-sequence aggregate rows.
    Inferencex,
    /// lm-eval's results file.
    LmEval,
}

impl Format {
    /// The format in words, for messages and headers.
    pub fn text(self) -> &'static str {
        match self {
            Format::BenchServe => "a `vllm bench serve` result",
            Format::Inferencex => "InferenceX aggregate rows",
            Format::LmEval => "an lm-eval results file",
        }
    }

}

/// What a foreign file holds, as `ab.json` records it (`baseline_source`,
/// `candidate_source`) and `ab.md` names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    pub format: Format,
    /// The files read.
    pub files: Vec<String>,
    /// The program that wrote them, as far as the keys tell (e.g. `vllm
    /// bench serve`, `benchmark_serving.py (InferenceX utils/bench_serving)`,
    /// `lm-eval 0.4.10`).
    pub tool: String,
    /// The engine measured and its version (or image), where the file says
    /// them; `None`: not recorded.
    pub engine: Option<String>,
    pub version: Option<String>,
    pub model: Option<String>,
    pub hardware: Option<String>,
    pub precision: Option<String>,
    /// Per point of the arm's job (same order): what the file records of the
    /// workload and which figures it lacks.
    pub points: Vec<PointRecord>,
    /// The eval settings the file records (lm-eval files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<EvalRecord>,
    /// Conversion rules applied and figures refused, one phrase each.
    pub definitions: Vec<String>,
    /// Entries of the file left out, with why (e.g. an agentic row).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

impl Source {
    /// `ATOM (image rocm/atom:v1) via benchmark_serving.py (...)`, or the
    /// tool alone: the foreign side in one phrase.
    pub fn describe(&self) -> String {
        let engine = match (&self.engine, &self.version) {
            (Some(e), Some(v)) => format!("{e} {v}"),
            (Some(e), None) => format!("{e} (version not recorded)"),
            (None, Some(v)) => format!("engine not recorded, version {v}"),
            (None, None) => "engine and version not recorded".into(),
        };
        format!("{}: {engine}", self.tool)
    }

    /// The side in a few words: the engine and version where the file
    /// names them (`ATOM v0.1.2`), else the tool.
    pub fn short(&self) -> String {
        match (&self.engine, &self.version) {
            (Some(e), Some(v)) => format!("{e} {v}"),
            (Some(e), None) => e.clone(),
            _ => self.tool.clone(),
        }
    }

    /// Summary figures only at every point (no per-request arrays).
    pub fn summary_only(&self) -> bool {
        self.points.iter().all(|p| !p.per_request)
    }
}

/// One point of a foreign file: what it records of the workload (`None`:
/// not recorded), whether it has per-request arrays, and the figures it
/// cannot give.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointRecord {
    /// Input/output lengths, TTFT and E2EL for every request: the delta gets
    /// a bootstrap interval over requests.
    pub per_request: bool,
    /// The TP (GPU) count came from the file (or `--foreign-tp`); when not,
    /// [`align_tp`] takes the other side's.
    pub tp_known: bool,
    /// GPUs its per-GPU figures divide by, when known.
    pub gpus: Option<u32>,
    pub num_prompts: Option<u32>,
    /// Input and output lengths drawn in [lo, hi] x ISL/OSL.
    pub length_range: Option<(f64, f64)>,
    pub prefix_len: Option<u32>,
    pub ignore_eos: Option<bool>,
    pub chat_template: Option<bool>,
    /// `inf` or requests per second.
    pub request_rate: Option<String>,
    pub burstiness: Option<f64>,
    /// Figures not compared at this point, with why.
    pub missing: Vec<(Metric, String)>,
}

impl PointRecord {
    /// A point that records nothing but its figures.
    pub fn bare() -> PointRecord {
        PointRecord {
            per_request: false,
            tp_known: false,
            gpus: None,
            num_prompts: None,
            length_range: None,
            prefix_len: None,
            ignore_eos: None,
            chat_template: None,
            request_rate: None,
            burstiness: None,
            missing: Vec::new(),
        }
    }
}

/// The eval settings an lm-eval results file records (`None`: not recorded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalRecord {
    pub chat_template: Option<bool>,
    /// Shots per task, as lm-eval's `n-shot`.
    pub num_fewshot: Vec<(String, u64)>,
    /// `generation_kwargs.max_gen_toks` per task.
    pub max_tokens: Vec<(String, u64)>,
    /// `--limit`, when given.
    pub limit: Option<f64>,
    /// The model backend lm-eval drove (`config.model`, e.g. `local-chat-completions`).
    pub model_backend: Option<String>,
}
