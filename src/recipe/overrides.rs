//! The command-line overrides of a recipe, each flag declared once: one
//! struct per recipe section is both the clap arguments (with the flag's
//! help) and what `plan.json` saves with a run, and it turns itself into the
//! overlay on the recipe. [`SweepArgs`] overrides `[sweep]` (`--conc`,
//! `--isl`, ..., with [`WorkloadArgs`] for what the points send), [`EvalFlags`]
//! the `[eval]` section. Here, below both the command line and the
//! orchestrator, so that neither imports the other.
//!
//! Where a new flag goes:
//! - it overrides a `[sweep]` key (a sweep dimension, a client setting): a
//!   field of [`SweepArgs`] with its help, and one line in
//!   [`SweepArgs::sweep`] (add the key to [`sweep::Sweep`] first if recipes
//!   lack it);
//! - it changes what the points send (a workload or replay setting): a field
//!   of [`WorkloadArgs`] and its line in [`WorkloadArgs::sweep`];
//! - it overrides the eval: a field of [`EvalFlags`], read where the eval is
//!   planned (`orchestrate::plan`);
//! - it changes how the run behaves, not what it measures (deadlines, step
//!   trace, telemetry): a field of `orchestrate::plan::RunOptions`;
//! - it changes where the jobs execute (Slurm, parallel jobs): `cli::ExecArgs`.
//!
//! `plan.json` files of older builds must keep reading: a renamed or
//! reshaped field gets a line in `orchestrate::runner::task`'s upgrade of
//! older shapes and a case in its test.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::sweep::{self, Goodput};
use crate::protocol::LengthConvention;

/// A list parsed from one argument (`--conc 1,4,16`): clap would otherwise
/// expect one item per value. Saved as a plain JSON array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct List<T>(pub Vec<T>);

/// `a,b,c` as a list of names.
pub fn names(s: &str) -> Result<List<String>, String> {
    Ok(List(s.split(',').map(|v| v.trim().to_string()).collect()))
}

/// Overrides of the recipe's `[sweep]` (run, ab, overhead); absent flags
/// keep the recipe's values.
#[derive(Debug, Args, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct SweepArgs {
    /// Concurrencies: a list (1,4,16) or a doubling range (1..256).
    #[arg(long, value_parser = |s: &str| sweep::parse_conc(s).map(List))]
    pub conc: Option<List<u32>>,
    /// Input sequence length, tokens (overrides the recipe's ISL).
    #[arg(long)]
    pub isl: Option<u32>,
    /// Output sequence length, tokens (overrides the recipe's OSL).
    #[arg(long)]
    pub osl: Option<u32>,
    /// Several ISL/OSL pairs, e.g. 1024/1024,8192/1024.
    #[arg(long, value_parser = |s: &str| sweep::parse_isl_osl(s).map(List), conflicts_with_all = ["isl", "osl"])]
    pub isl_osl: Option<List<[u32; 2]>>,
    /// Measured requests per point (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub num_prompts: Option<u32>,
    /// Warm-up requests per point (excluded from the figures).
    #[arg(long)]
    pub warmups: Option<u32>,
    /// Run as InferenceX's client: 10 x conc prompts, 2 x conc warm-ups,
    /// ignore_eos, percentiles 90/99/99.9, InferenceX length convention.
    #[arg(long)]
    pub inferencex: bool,
    /// Length convention of --range-ratio: vllm [L(1-r), L(1+r)] or inferencex [rL, L].
    #[arg(long, value_parser = parse_convention)]
    pub length_convention: Option<LengthConvention>,
    /// Spread of the random lengths (see --length-convention).
    #[arg(long, value_parser = |s: &str| number(s).and_then(sweep::check_range_ratio))]
    pub range_ratio: Option<f64>,
    /// Tokens of random prefix shared by all prompts of a point.
    #[arg(long)]
    pub prefix_len: Option<u32>,
    /// Request-rate mode: requests/s with gamma-distributed gaps (as vllm bench serve).
    #[arg(long, value_parser = |s: &str| number(s).and_then(sweep::check_request_rate))]
    pub request_rate: Option<f64>,
    /// Gamma shape of the request gaps (1 = Poisson).
    #[arg(long, value_parser = |s: &str| number(s).and_then(sweep::check_burstiness))]
    pub burstiness: Option<f64>,
    /// Latency percentiles to report, e.g. 50,90,99.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| number(s).and_then(sweep::check_percentile))]
    pub percentiles: Option<Vec<f64>>,
    /// Goodput SLOs in ms as KEY:VALUE (ttft, tpot, e2el), e.g. --goodput ttft:500 tpot:50.
    #[arg(long, num_args = 1.., value_parser = sweep::parse_slo)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub goodput: Vec<Goodput>,
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

impl SweepArgs {
    /// These flags as an overlay on the recipe's sweep.
    pub fn sweep(&self) -> sweep::Sweep {
        sweep::Sweep {
            isl: self.isl,
            osl: self.osl,
            isl_osl: self.isl_osl.clone().map(|l| l.0),
            conc: self.conc.clone().map(|l| l.0),
            num_prompts: self.num_prompts,
            warmups: self.warmups,
            inferencex: self.inferencex,
            length_convention: self.length_convention,
            range_ratio: self.range_ratio,
            prefix_len: self.prefix_len.unwrap_or(0),
            request_rate: self.request_rate,
            burstiness: self.burstiness,
            percentiles: self.percentiles.clone(),
            goodput: self.goodput.iter().copied().reduce(Goodput::and),
            ..self.workload.sweep()
        }
    }
}

/// A number from a flag's text (clap's error quotes the text and names the flag).
fn number(s: &str) -> Result<f64, String> {
    s.trim().parse::<f64>().map_err(|_| "not a number".to_string())
}

fn parse_convention(s: &str) -> Result<LengthConvention, String> {
    match s {
        "vllm" => Ok(LengthConvention::Vllm),
        "inferencex" => Ok(LengthConvention::Inferencex),
        _ => Err(format!("{s:?}: use vllm or inferencex")),
    }
}

/// Overrides of the recipe's `[eval]` and of its task (run, eval).
#[derive(Debug, Args, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalFlags {
    /// Eval task, repeatable or comma-separated (replaces the recipe's):
    /// gsm8k, gsm8k_cot, gsm8k_inferencex or a task TOML (built in); any other
    /// name, `lm-eval:NAME` or a .yaml path runs through lm-eval itself.
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub task: Vec<String>,
    /// An lm-eval task YAML file, or a folder of them with their `!function`
    /// helpers (repeatable); run through lm-eval itself.
    #[arg(long)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub task_file: Vec<PathBuf>,
    /// Max new tokens of every eval request: N, or `inferencex` (context - 4096,
    /// context / 2 up to 4096, at most 16384).
    #[arg(long)]
    pub eval_max_tokens: Option<super::EvalMaxTokens>,
    /// Accuracy thresholds per task and model prefix (InferenceX's thresholds.yaml shape).
    #[arg(long)]
    pub thresholds: Option<PathBuf>,
    /// The thresholds file's `models:` entry that applies (InferenceX's model prefix, e.g. dsv4).
    #[arg(long)]
    pub model_prefix: Option<String>,
    /// Questions to score (overrides eval.limit; also --limit, --gsm8k-limit).
    #[arg(long, aliases = ["limit", "gsm8k-limit"])]
    pub eval_limit: Option<u32>,
    /// GSM8K data: a jsonl or parquet file (openai/gsm8k format), or a folder with train and test files.
    #[arg(long)]
    pub gsm8k_data: Option<PathBuf>,
    /// Few-shot examples per question (overrides the task's).
    #[arg(long)]
    pub num_fewshot: Option<usize>,
    /// Apply the tokenizer's chat template (few-shot as turns).
    #[arg(long, conflicts_with = "no_chat")]
    pub chat: bool,
    /// Plain-text prompts even if the task says chat.
    #[arg(long)]
    pub no_chat: bool,
    /// Eval requests kept in flight (overrides eval.concurrency).
    #[arg(long)]
    pub eval_concurrency: Option<u32>,
    /// Accuracy gate: fail (exit 1) when an exact_match is below this fraction (e.g. 0.90).
    #[arg(long)]
    pub min_accuracy: Option<f64>,
}

impl EvalFlags {
    /// `--chat` / `--no-chat` as the task override: `None` keeps the task's.
    pub fn chat(&self) -> Option<bool> {
        if self.chat {
            Some(true)
        } else if self.no_chat {
            Some(false)
        } else {
            None
        }
    }

    /// Whether `--task`/`--task-file` choose the tasks (they replace the recipe's).
    pub fn selects_tasks(&self) -> bool {
        !self.task.is_empty() || !self.task_file.is_empty()
    }

    /// Whether a flag asks for data or a task the recipe's eval must provide.
    pub fn wants_eval(&self) -> bool {
        self.eval_limit.is_some() || self.selects_tasks() || self.gsm8k_data.is_some()
    }
}

/// What the points send (run, ab, overhead): overrides of the recipe's
/// `workload`, `[sweep.trace]`, `[sweep.conversation]`, `reset_prefix_cache`.
#[derive(Debug, Args, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadArgs {
    /// random (token ids), chat_random (token ids in the chat template),
    /// conversation (a ShareGPT file), trace (AgentX or timed trace replay).
    #[arg(long, value_enum)]
    pub workload: Option<crate::recipe::workload::WorkloadName>,
    /// The trace to replay (a .jsonl file, a folder with traces.jsonl, or a
    /// Hugging Face dataset, hf://datasets/OWNER/NAME, from the HF cache or
    /// downloaded into it); implies --workload trace.
    #[arg(long, value_name = "PATH")]
    pub trace_file: Option<PathBuf>,
    /// The trace's format: agentx (one session per line, `requests`) or
    /// timed (one request per line, `timestamp`); default: read off the
    /// file's first line.
    #[arg(long, value_enum)]
    pub trace_format: Option<crate::protocol::TraceFormat>,
    /// The trace's time unit, s or ms (default: s for AgentX traces, ms for
    /// timed ones, as Mooncake's; vLLM's timed_trace uses s).
    #[arg(long, value_enum, value_name = "UNIT")]
    pub trace_time_unit: Option<crate::recipe::workload::TimeUnit>,
    /// The conversations to replay (ShareGPT-shaped JSON or JSON lines);
    /// implies --workload conversation.
    #[arg(long, value_name = "PATH", conflicts_with = "trace_file")]
    pub conversation_file: Option<PathBuf>,
    /// Trace replay: seconds of measurement per point (the measured-request
    /// budget, --num-prompts, still ends a point when it comes first).
    #[arg(long, value_name = "S", value_parser = |s: &str| number(s).and_then(crate::recipe::workload::check_duration))]
    pub duration: Option<f64>,
    /// Keep the prefix cache between points (default: emptied before each).
    #[arg(long)]
    pub no_prefix_cache_reset: bool,
}

impl WorkloadArgs {
    /// The same with the files made absolute against the current folder
    /// (a recipe's own relative paths are relative to the recipe instead).
    ///
    /// Errors (usage): the current folder cannot be read; a local
    /// `--trace-file` or `--conversation-file` that is not there, or a trace
    /// whose first line is no trace format (the message names the flag).
    pub fn absolute(mut self) -> anyhow::Result<WorkloadArgs> {
        use crate::error::usage;
        let cwd = std::env::current_dir().map_err(|e| usage(format!("the current folder: {e}")))?;
        for (flag, p) in [("--trace-file", &mut self.trace_file), ("--conversation-file", &mut self.conversation_file)] {
            let Some(p) = p.as_mut().filter(|p| !crate::workload::hub::is_dataset(p)) else { continue };
            if p.is_relative() {
                *p = cwd.join(&*p);
            }
            if !p.exists() {
                return Err(usage(format!("{flag} {}: no such file or folder", p.display())));
            }
        }
        if let (Some(t), None) = (&self.trace_file, self.trace_format) {
            if let Some(Err(e)) = crate::workload::trace::sniff_format(t) {
                return Err(usage(format!("--trace-file: {e}")));
            }
        }
        Ok(self)
    }

    /// These flags as an overlay on the recipe's sweep.
    pub fn sweep(&self) -> sweep::Sweep {
        use crate::recipe::workload::{ConversationSettings, TraceSettings, WorkloadName};
        let implied = match (&self.trace_file, &self.conversation_file) {
            (Some(_), _) => Some(WorkloadName::Trace),
            (_, Some(_)) => Some(WorkloadName::Conversation),
            _ => None,
        };
        let trace = (self.trace_file.is_some() || self.duration.is_some() || self.trace_format.is_some() || self.trace_time_unit.is_some())
            .then(|| TraceSettings {
                file: self.trace_file.clone(),
                format: self.trace_format,
                time_unit: self.trace_time_unit,
                duration_s: self.duration,
                ..TraceSettings::default()
            });
        let conversation =
            self.conversation_file.as_ref().map(|f| ConversationSettings { file: Some(f.clone()), ..ConversationSettings::default() });
        sweep::Sweep {
            workload: self.workload.or(implied),
            trace,
            conversation,
            reset_prefix_cache: self.no_prefix_cache_reset.then_some(false),
            ..sweep::Sweep::default()
        }
    }
}
