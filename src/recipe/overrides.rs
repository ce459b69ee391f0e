//! The command-line overrides of a recipe's workload (`--workload`,
//! `--trace-file`, `--conversation-file`, `--duration`,
//! `--no-prefix-cache-reset`): parsed by clap, saved in `plan.json` with the
//! run, applied as an overlay on the recipe's sweep. Here, below both the
//! command line and the orchestrator, so that neither imports the other.

use std::path::PathBuf;

use clap::Args;

use super::sweep;

/// What the points send (run, ab, overhead): overrides of the recipe's
/// `workload`, `[sweep.trace]`, `[sweep.conversation]`, `reset_prefix_cache`.
#[derive(Debug, Args, Default, Clone, serde::Serialize, serde::Deserialize)]
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
    /// The conversations to replay (ShareGPT-shaped JSON or JSON lines);
    /// implies --workload conversation.
    #[arg(long, value_name = "PATH", conflicts_with = "trace_file")]
    pub conversation_file: Option<PathBuf>,
    /// Trace replay: seconds of measurement per point (the measured-request
    /// budget, --num-prompts, still ends a point when it comes first).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Keep the prefix cache between points (default: emptied before each).
    #[arg(long)]
    pub no_prefix_cache_reset: bool,
}

impl WorkloadArgs {
    /// The same with the files made absolute against the current folder
    /// (a recipe's own relative paths are relative to the recipe instead).
    ///
    /// Errors (usage): the current folder cannot be read.
    pub fn absolute(mut self) -> anyhow::Result<WorkloadArgs> {
        let cwd = std::env::current_dir().map_err(|e| crate::error::usage(format!("the current folder: {e}")))?;
        for p in [&mut self.trace_file, &mut self.conversation_file].into_iter().flatten() {
            if p.is_relative() && !crate::workload::hub::is_dataset(p) {
                *p = cwd.join(&*p);
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
        let trace = (self.trace_file.is_some() || self.duration.is_some())
            .then(|| TraceSettings { file: self.trace_file.clone(), duration_s: self.duration, ..TraceSettings::default() });
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
