//! The messages between orchestrator and worker: a [`Task`] on the worker's
//! stdin (one JSON document), [`Message`]s back on its channel (JSON lines).


use serde::{Deserialize, Serialize};

use super::engine_info::EngineInfo;
use super::point::{Point, RandomDataset};
use super::profile::{ProfileRaw, ProfileTarget};
use super::records::{RequestRecord, StepRecord, TurnInfo};
use super::step::{EngineTiming, Prompt, SpecCounts};
use super::workload::Workload;

/// The signal the orchestrator sends a worker for a graceful stop. Python
/// leaves it alone (it only handles SIGINT), so the worker's Rust flag sees it.
pub const STOP_SIGNAL: i32 = libc::SIGUSR1;

/// What the orchestrator asks of a worker (its stdin, one JSON document).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Task {
    /// Build one engine and run points and the eval on it.
    Run(Job),
    /// Parse flag lists with vLLM's serve parser; build nothing.
    Check(CheckJob),
    /// Report vLLM, torch, the platform and the compatibility items (`doctor`).
    Doctor,
    /// Serve prefills to a decode worker (a P/D job's prefill side).
    Prefill(super::pd::PrefillJob),
}

/// Flag lists to check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckJob {
    pub items: Vec<CheckItem>,
}

/// One engine configuration to check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckItem {
    /// `vllm serve` arguments: the model, then the flags.
    pub argv: Vec<String>,
    /// Environment names the engine would get.
    pub env_names: Vec<String>,
    /// Make the knob report too (`recipe show`, `recipe check`, `ab`'s no-op check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs: Option<super::knobs::KnobRequest>,
}

/// vLLM's verdict on one flag list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlagCheck {
    /// The parser's message (with close flag names for unknown ones).
    pub error: Option<String>,
    /// Flags only the API server uses, ignored in-process.
    pub ignored: Vec<String>,
    pub max_model_len: Option<u64>,
    pub tensor_parallel_size: Option<u64>,
    /// `VLLM_*` names this vLLM does not know.
    pub unknown_env: Vec<String>,
    /// How many variables this vLLM knows (0: the list was not found).
    pub known_env_count: usize,
    /// Tokens this vLLM's parser does not know (a newer or GPU-only flag and
    /// its value); the other flags were checked without them.
    #[serde(default)]
    pub unknown_flags: Vec<String>,
    /// `vllm.__version__` of the checking interpreter.
    #[serde(default)]
    pub vllm_version: Option<String>,
    /// vLLM's device type in the checking interpreter; `None` when it found
    /// no platform (e.g. its CUDA build on a machine without a GPU): the
    /// flags are still checked by its parser.
    #[serde(default)]
    pub platform: Option<String>,
    /// Variables of the configuration that this vLLM lists as removed, with
    /// its own hint (vLLM 0.34's `envs.removed_environment_variables`: it
    /// refuses them when the engine starts).
    #[serde(default)]
    pub removed_env: std::collections::BTreeMap<String, String>,
    /// The knob report, when asked for (`CheckItem::knobs`); `None` also when
    /// making it failed (then `knobs_error` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs: Option<super::knobs::KnobReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs_error: Option<String>,
}

/// What a worker is asked to do with its one engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// `vllm serve` arguments: the model, then the flags.
    pub engine_argv: Vec<String>,
    pub points: Vec<PointSpec>,
    #[serde(default)]
    pub eval: Option<EvalJob>,
    /// Return each perf request's generated token ids (`RawPoint::token_ids`).
    #[serde(default)]
    pub record_token_ids: bool,
    /// Points to profile after they are measured (`--profile`, the profile pass).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<ProfileTarget>,
    /// A data-parallel job's rank this worker is (`None`: one engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp: Option<DpRank>,
    /// Make the knob report once the engine is built (sent as
    /// [`Message::Knobs`]; by rank 0 of a data-parallel job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs: Option<super::knobs::KnobRequest>,
    /// A P/D job's decode worker: the proxy to these prefill workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<super::pd::DecodeSide>,
}

/// A data-parallel worker's place in its job: its rank, the DP size, and
/// whether the ranks form one vLLM DP group that steps in lockstep (MoE) or
/// are independent engines (dense). Which requests of a point it sends and
/// how many it keeps in flight: vLLM's server balancer for equal requests
/// (orchestrate/dp's module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DpRank {
    pub rank: u32,
    pub size: u32,
    pub lockstep: bool,
}

impl DpRank {
    /// Ranks that get requests at concurrency `conc`: all, or `conc` of them
    /// when the concurrency is below the DP size.
    pub fn active(&self, conc: u32) -> u32 {
        self.size.min(conc.max(1))
    }

    /// This rank's concurrency: `conc / active` (the first `conc mod active`
    /// ranks one more); 0 for a rank with no share.
    pub fn conc(&self, conc: u32) -> u32 {
        let active = self.active(conc);
        if self.rank >= active {
            return 0;
        }
        conc / active + u32::from(self.rank < conc % active)
    }

    /// Whether request `i` of a point (warm-ups and measured requests
    /// numbered apart) at concurrency `conc` is this rank's.
    pub fn owns(&self, i: usize, conc: u32) -> bool {
        let active = self.active(conc) as usize;
        (self.rank as usize) < active && i % active == self.rank as usize
    }
}

/// One sweep point and how to run it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointSpec {
    pub point: Point,
    /// The prompts (warm-ups and measured ones are drawn together, warm-ups
    /// first) of the random workloads; the seed of every workload.
    pub dataset: RandomDataset,
    /// What kind of requests the point sends (default: random token ids).
    #[serde(default, skip_serializing_if = "is_random")]
    pub workload: Workload,
    /// Empty the engine's prefix cache before the point (its warm-ups
    /// included), so nothing cached by an earlier point helps it.
    #[serde(default)]
    pub reset_prefix_cache: bool,
    /// Request-rate mode (req/s) and burstiness; `None`: all at once.
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    pub ignore_eos: bool,
}

fn is_random(w: &Workload) -> bool {
    *w == Workload::Random
}

/// What the worker measured for one point; the orchestrator computes the figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawPoint {
    pub spec: PointSpec,
    /// One per measured request, in submission order.
    pub records: Vec<RequestRecord>,
    /// vLLM's own timings, parallel to `records`.
    pub engine_timings: Vec<Option<EngineTiming>>,
    /// Requested output length per measured request, tokens.
    pub requested_output_lens: Vec<u32>,
    pub duration_s: f64,
    /// CLOCK_MONOTONIC at the start of the measured requests, s: with
    /// `duration_s`, the point's window in the telemetry series.
    pub started_mono_s: f64,
    pub steps: Vec<StepRecord>,
    /// vLLM's own speculative-decoding totals over the measured requests
    /// (its counters after minus before); absent when it keeps none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_spec: Option<SpecCounts>,
    /// Generated token ids per measured request (only with `Job::record_token_ids`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_ids: Vec<Vec<u32>>,
    /// Cut short by a graceful stop (Ctrl-C): in-flight requests were aborted.
    #[serde(default)]
    pub partial: bool,
    /// The prefix cache was emptied before the point (`Some(true)`); `None`:
    /// not asked, or this engine has no reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_reset: Option<bool>,
    /// Session workloads: per record (same order), which session, stream
    /// and turn it was, its phase (primer, warm-up, measured) and its
    /// theoretical cache hit; `records` then hold warm-ups too. Empty for
    /// the random workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnInfo>,
    /// Names of the traces / conversations `turns[i].trace` indexes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_names: Vec<String>,
    /// Session workloads: when the measured phase began, s on the records' clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_start_s: Option<f64>,
    /// Session workloads: what stopped the replay (`None`: Ctrl-C, or it
    /// never stopped sending by a rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_stop: Option<super::StopReason>,
    /// Session workloads: requests (turns) the file holds in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_requests: Option<u32>,
    /// A P/D job's figures (the decode worker's; `None` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<super::pd::PdRaw>,
}

/// How `max_tokens` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensPolicy {
    /// `max_tokens` as written.
    #[default]
    Fixed,
    /// InferenceX's `run_lm_eval`: context - 4096 when the context exceeds
    /// 4096, else context / 2, at most 16384; context = the engine's
    /// max_model_len (16384 when unknown, InferenceX's default).
    Inferencex,
}

impl MaxTokensPolicy {
    /// The generation limit: `fixed` as written, or InferenceX's rule on the
    /// engine's `max_model_len`.
    pub fn resolve(self, fixed: u32, max_model_len: Option<u32>) -> u32 {
        match self {
            MaxTokensPolicy::Fixed => fixed,
            MaxTokensPolicy::Inferencex => {
                let ctx = max_model_len.unwrap_or(16384);
                let v = if ctx > 4096 { ctx - 4096 } else { ctx / 2 };
                v.min(16384)
            }
        }
    }
}

/// The eval's generation step: the built-in task's prompts, completed
/// greedily, and the tasks that run through lm-eval itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalJob {
    /// The built-in task's prompts (empty when only lm-eval tasks run).
    pub prompts: Vec<Prompt>,
    /// The task's generation limit, resolved with `max_tokens_policy` against
    /// the engine's max_model_len once it is built.
    pub max_tokens: u32,
    pub max_tokens_policy: MaxTokensPolicy,
    pub stop: Vec<String>,
    /// Requests kept in flight (the built-in task's and lm-eval's).
    pub concurrency: u32,
    /// Tasks run through lm-eval's own evaluation on the engine, after the
    /// built-in task (see `crate::eval::lmeval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lm_eval: Option<LmEvalJob>,
}

/// lm-eval tasks to run with lm-eval's `simple_evaluate` on the engine. The
/// Python side (`python-shim/enginebench_shim/lmeval.py`) reads this as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LmEvalJob {
    /// Task names of lm-eval's registry (wildcards allowed), as `lm-eval --tasks` takes them.
    pub tasks: Vec<String>,
    /// Task YAML files, or folders whose *.yaml files are tasks (`--task-file`).
    pub task_files: Vec<std::path::PathBuf>,
    /// Documents per task (`--limit`); all when absent.
    pub limit: Option<u32>,
    /// Shots per question (`--num_fewshot`); the tasks' own when absent.
    pub num_fewshot: Option<usize>,
    /// `--apply_chat_template`: prompts go through the tokenizer's chat template.
    pub chat: bool,
    /// `--fewshot_as_multiturn` (with the chat template).
    pub fewshot_as_multiturn: bool,
    /// `--system_instruction`.
    pub system_instruction: Option<String>,
    /// Max new tokens of every request (`--gen_kwargs max_tokens=N`, as
    /// InferenceX passes it), resolved with `max_tokens_policy`; absent with
    /// the fixed policy: each task's own (`max_gen_toks`, lm-eval's default 256).
    pub max_tokens: Option<u32>,
    pub max_tokens_policy: MaxTokensPolicy,
    /// Where lm-eval writes its own results_<date>.json and samples_<task>_<date>.jsonl.
    pub output_dir: std::path::PathBuf,
    /// The model's name in lm-eval's results.
    pub model: String,
}

/// What the lm-eval tasks' generation took in the driver loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LmEvalLoad {
    /// lm-eval's task name.
    pub task: String,
    /// Requests generated (documents x repeats).
    pub requests: u64,
    /// Tokens generated, stop strings included.
    pub output_tokens: u64,
}

/// One eval prompt's greedy completion.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EvalCompletion {
    pub text: String,
    /// Tokens generated (the stop string, if any, is not in `text`).
    pub output_tokens: u32,
    /// The generated token ids.
    pub token_ids: Vec<u32>,
}

/// Worker -> orchestrator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// `doctor`'s report (the shim's `doctor()`), also what every command
    /// that starts engines asks before its result folder exists.
    Doctor { report: Box<super::DoctorReport> },
    /// The engine is built.
    Ready { engine: Box<EngineInfo>, engine_start_s: f64 },
    /// The job's knob report (`Job::knobs`), or why it could not be made
    /// (the run goes on either way).
    Knobs { report: Option<Box<super::knobs::KnobReport>>, error: Option<String> },
    /// `done` of `total` requests of `phase` finished.
    Progress { phase: String, done: u64, total: u64 },
    /// A measured point.
    Point { raw: Box<RawPoint> },
    /// The profile pass of a point, sent after its `Point` (`--profile`).
    Profile { raw: Box<ProfileRaw> },
    /// Eval completions, in prompt order, and the generation limit used.
    Eval { completions: Vec<EvalCompletion>, duration_s: f64, max_tokens: u32 },
    /// The lm-eval tasks' results: lm-eval's own results JSON (without
    /// samples), the generation's wall time in the driver loop, s, lm-eval's
    /// whole evaluation in the worker (import, tasks, generation, scoring,
    /// files), s, the load per task, and the token limit given to every
    /// request (if one was).
    LmEval { results: String, duration_s: f64, #[serde(default)] wall_s: f64, load: Vec<LmEvalLoad>, max_tokens: Option<u32> },
    /// The worker failed; nothing more follows. `bad_input` when the cause is
    /// the user's input (e.g. a flag vLLM's parser rejected): exit code 2.
    Error { message: String, traceback: Option<String>, #[serde(default)] bad_input: bool },
    /// The results of a [`CheckJob`], in order.
    Checked { results: Vec<FlagCheck> },
    /// All work done, engine shut down.
    Done,
}
