//! The sweep's workload keys: which kind of requests every point sends
//! (`workload = "random" | "chat_random" | "conversation" | "trace"`) and
//! the settings of the session workloads (`[sweep.trace]`,
//! `[sweep.conversation]`), resolved into the worker's [`Workload`].
//!
//! Trace defaults are InferenceX's AgentX replay settings
//! (benchmarks/benchmark_lib.sh `build_replay_cmd` and the
//! `inferencex-agentx-mvp` scenario): 64-token hash blocks, lanes start at a
//! seeded point 25-75% into their trace, 10 warm-up requests per lane, a
//! 300 s idle cap per session tree, 10 s for the whole replay, a
//! per-replay cache-bust marker. AgentX runs 3600 s per point; here the
//! measured-request budget (`num_prompts` / `prompts_per_conc`) ends a point
//! unless `duration_s` ends it first. A timed trace replays whole unless a
//! request count is given on top of the recipe (`--num-prompts`, a
//! variant's) or `request_budget = true`; every cut is printed with the
//! point and recorded in it (`sessions.stopped_by`).
//!
//! Timed traces take Mooncake's conventions (kvcache-ai/Mooncake
//! `FAST25-release/traces/README.md`): 512-token blocks, timestamps in
//! milliseconds; and no idle cap, as neither vLLM's `timed_trace` dataset
//! (vllm/benchmarks/datasets.py `TimedTrace`) nor AIPerf's fixed schedule
//! has one. vLLM's `timed_trace` defaults differ (seconds,
//! `--timed-trace-sec-multiplier 1`; 16-token chunks): `time_unit = "s"`,
//! `block_size = 16`. The format, when not given, is read off the file's
//! first line ([`crate::workload::trace::sniff_format`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::protocol::{ConversationSpec, TraceFormat, TraceSpec, Workload};

/// The unit of a trace's timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum TimeUnit {
    /// Seconds (AgentX's `t`, vLLM's `timed_trace` default).
    S,
    /// Milliseconds (Mooncake's `timestamp`).
    Ms,
}

impl TimeUnit {
    /// Seconds per unit.
    pub fn seconds(self) -> f64 {
        match self {
            TimeUnit::S => 1.0,
            TimeUnit::Ms => 0.001,
        }
    }
}

/// The workload's name in a recipe and on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum WorkloadName {
    /// Random token ids of the sweep's ISL/OSL (vLLM's random dataset).
    #[default]
    Random,
    /// Random token ids as one user message through the chat template.
    ChatRandom,
    /// Multi-turn conversations from a ShareGPT-shaped file.
    Conversation,
    /// A replay of recorded agentic sessions (AgentX) or a timed trace.
    Trace,
}

/// `[sweep.trace]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSettings {
    /// A `.jsonl` file, or a folder holding `traces.jsonl` (relative paths
    /// are relative to the recipe's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// `agentx` or `timed` (default: read off the file's first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<TraceFormat>,
    /// The timestamps' unit, `s` or `ms` (default: `s` for AgentX traces,
    /// `ms` for timed ones, Mooncake's); `time_scale` instead gives seconds
    /// per unit as a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_unit: Option<TimeUnit>,
    /// Tokens per hash id (default: the `block_size` an AgentX file's first
    /// line declares, else 64; 512 for timed ones, as Mooncake's traces are cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Seconds of measurement per point (AgentX: 3600); the measured-request
    /// budget still ends a point when it comes first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Where each lane starts in its trace, as fractions of the trace's span
    /// (default [0.25, 0.75]; [0, 0] starts every trace at its first turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ratio: Option<[f64; 2]>,
    /// Warm-up requests per lane after the primers (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_requests_per_lane: Option<u32>,
    /// Idle caps, s (AgentX traces: 300 per session tree, 10 for the whole
    /// replay; timed traces: none unless given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_idle_cap_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_idle_cap_s: Option<f64>,
    /// Seconds per timestamp unit (default: that of `time_unit`); below
    /// the unit's it compresses the replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// A per-replay marker before each session (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_bust: Option<bool>,
    /// Whether the measured-request budget (`num_prompts` /
    /// `prompts_per_conc`) ends a point (default: true for AgentX traces;
    /// false for timed traces, which replay whole as vLLM's timed replay and
    /// AIPerf's fixed schedule do); false: only `duration_s` or the end of
    /// the file does, as in AgentX. Setting a request count in a variant or
    /// on the command line (`--num-prompts`) turns it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_budget: Option<bool>,
    /// AgentX traces: split the top-level requests and each subagent's into
    /// parallel agent chains by their hash ids, as InferenceX's AIPerf
    /// replay does (default true); false: one serial stream each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_chains: Option<bool>,
}

/// `[sweep.conversation]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationSettings {
    /// A ShareGPT-shaped JSON or JSON-lines file (relative: to the recipe's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// At most this many user turns per conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Output tokens per turn: the recorded reply's length, at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

impl TraceSettings {
    /// `over`'s keys win.
    pub fn overlay(&self, over: &TraceSettings) -> TraceSettings {
        TraceSettings {
            file: over.file.clone().or_else(|| self.file.clone()),
            format: over.format.or(self.format),
            time_unit: over.time_unit.or(self.time_unit),
            block_size: over.block_size.or(self.block_size),
            duration_s: over.duration_s.or(self.duration_s),
            start_ratio: over.start_ratio.or(self.start_ratio),
            warmup_requests_per_lane: over.warmup_requests_per_lane.or(self.warmup_requests_per_lane),
            tree_idle_cap_s: over.tree_idle_cap_s.or(self.tree_idle_cap_s),
            system_idle_cap_s: over.system_idle_cap_s.or(self.system_idle_cap_s),
            time_scale: over.time_scale.or(self.time_scale),
            cache_bust: over.cache_bust.or(self.cache_bust),
            request_budget: over.request_budget.or(self.request_budget),
            split_chains: over.split_chains.or(self.split_chains),
        }
    }
}

impl ConversationSettings {
    /// `over`'s keys win.
    pub fn overlay(&self, over: &ConversationSettings) -> ConversationSettings {
        ConversationSettings {
            file: over.file.clone().or_else(|| self.file.clone()),
            max_turns: over.max_turns.or(self.max_turns),
            max_output_tokens: over.max_output_tokens.or(self.max_output_tokens),
        }
    }
}

/// AgentX's replay defaults (see the module overview).
pub const AGENTX_BLOCK_SIZE: u32 = 64;
pub const TIMED_BLOCK_SIZE: u32 = 512;
pub const AGENTX_START_RATIO: [f64; 2] = [0.25, 0.75];
pub const AGENTX_WARMUP_REQUESTS_PER_LANE: u32 = 10;
pub const AGENTX_TREE_IDLE_CAP_S: f64 = 300.0;
pub const AGENTX_SYSTEM_IDLE_CAP_S: f64 = 10.0;

/// The worker's workload for `name` with these settings; `seed` is the
/// sweep's. The measured-request budget is set per point later.
///
/// Errors: a missing file key, or a value outside its range (the message
/// names the key and the range).
pub fn resolve(
    name: WorkloadName,
    trace: Option<&TraceSettings>,
    conversation: Option<&ConversationSettings>,
    seed: u64,
) -> Result<Workload, String> {
    match name {
        WorkloadName::Random => Ok(Workload::Random),
        WorkloadName::ChatRandom => Ok(Workload::ChatRandom),
        WorkloadName::Conversation => {
            let c = conversation.cloned().unwrap_or_default();
            let path = c.file.ok_or("workload = \"conversation\" needs [sweep.conversation] file = \"path.json\" (or --conversation-file)")?;
            if c.max_turns == Some(0) || c.max_output_tokens == Some(0) {
                return Err("[sweep.conversation] max_turns and max_output_tokens must be at least 1".into());
            }
            Ok(Workload::Conversation(ConversationSpec { path, max_turns: c.max_turns, max_output_tokens: c.max_output_tokens }))
        }
        WorkloadName::Trace => {
            let t = trace.cloned().unwrap_or_default();
            let path = t.file.ok_or("workload = \"trace\" needs [sweep.trace] file = \"traces.jsonl\" (or --trace-file)")?;
            let format = match t.format {
                Some(f) => f,
                // A file not here (a dataset address, or one that appears
                // later) is AgentX's; the loader refuses a mismatch.
                None => crate::workload::trace::sniff_format(&path).transpose()?.unwrap_or_default(),
            };
            let timed = format == TraceFormat::Timed;
            let default_block = if format == TraceFormat::Timed { TIMED_BLOCK_SIZE } else { AGENTX_BLOCK_SIZE };
            // The recipe's, else the one an AgentX file declares, else the format's.
            let block_size = t
                .block_size
                .or_else(|| if timed { None } else { crate::workload::trace::sniff_block_size(&path) })
                .unwrap_or(default_block);
            if block_size == 0 {
                return Err("[sweep.trace] block_size must be at least 1 token".into());
            }
            if let Some(d) = t.duration_s {
                check_duration(d).map_err(|why| format!("[sweep.trace] duration_s = {d}: {why}"))?;
            }
            let [lo, hi] = t.start_ratio.unwrap_or(AGENTX_START_RATIO);
            if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
                return Err(format!("[sweep.trace] start_ratio = [{lo}, {hi}]: give [min, max] with 0 <= min <= max <= 1"));
            }
            let cap = |key: &str, v: Option<f64>, default: f64| match v.unwrap_or(default) {
                c if c > 0.0 => Ok(Some(c)),
                c => Err(format!("[sweep.trace] {key} = {c}: give seconds > 0")),
            };
            let time_scale = match (t.time_scale, t.time_unit) {
                (Some(s), None) => s,
                (None, Some(u)) => u.seconds(),
                (None, None) if timed => TimeUnit::Ms.seconds(),
                (None, None) => TimeUnit::S.seconds(),
                (Some(_), Some(_)) => return Err("[sweep.trace] give time_unit (s or ms) or time_scale (seconds per unit), not both".into()),
            };
            if !(time_scale > 0.0) {
                return Err(format!("[sweep.trace] time_scale = {time_scale}: give seconds per timestamp unit > 0"));
            }
            Ok(Workload::Trace(TraceSpec {
                path,
                format,
                block_size,
                seed,
                duration_s: t.duration_s,
                max_requests: None,
                start_min_ratio: lo,
                start_max_ratio: hi,
                warmup_requests_per_lane: t.warmup_requests_per_lane.unwrap_or(AGENTX_WARMUP_REQUESTS_PER_LANE),
                tree_idle_cap_s: cap("tree_idle_cap_s", t.tree_idle_cap_s, AGENTX_TREE_IDLE_CAP_S)?,
                system_idle_cap_s: match t.system_idle_cap_s {
                    None if timed => None,
                    v => cap("system_idle_cap_s", v, AGENTX_SYSTEM_IDLE_CAP_S)?,
                },
                time_scale,
                cache_bust: t.cache_bust.unwrap_or(true),
                split_chains: t.split_chains.unwrap_or(true),
            }))
        }
    }
}

/// A replay's measured seconds per point: > 0 (the caller names the key or
/// the flag, as [`super::sweep::check_request_rate`]'s callers do).
pub fn check_duration(d: f64) -> Result<f64, String> {
    if d > 0.0 && d.is_finite() { Ok(d) } else { Err("give seconds > 0".into()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_defaults_are_agentx_and_bad_values_name_the_key() {
        let t = TraceSettings { file: Some("t.jsonl".into()), ..Default::default() };
        let Workload::Trace(spec) = resolve(WorkloadName::Trace, Some(&t), None, 7).unwrap() else { panic!() };
        assert_eq!((spec.block_size, spec.start_min_ratio, spec.start_max_ratio), (64, 0.25, 0.75));
        assert_eq!((spec.warmup_requests_per_lane, spec.tree_idle_cap_s, spec.system_idle_cap_s), (10, Some(300.0), Some(10.0)));
        assert_eq!((spec.seed, spec.cache_bust), (7, true));
        let timed = TraceSettings { format: Some(TraceFormat::Timed), ..t.clone() };
        let Workload::Trace(spec) = resolve(WorkloadName::Trace, Some(&timed), None, 0).unwrap() else { panic!() };
        // Mooncake's conventions, and no idle cap unless asked.
        assert_eq!((spec.block_size, spec.time_scale, spec.system_idle_cap_s), (512, 0.001, None));
        let vllm_style = TraceSettings { time_unit: Some(TimeUnit::S), block_size: Some(16), system_idle_cap_s: Some(10.0), ..timed.clone() };
        let Workload::Trace(spec) = resolve(WorkloadName::Trace, Some(&vllm_style), None, 0).unwrap() else { panic!() };
        assert_eq!((spec.block_size, spec.time_scale, spec.system_idle_cap_s), (16, 1.0, Some(10.0)));
        let both = TraceSettings { time_scale: Some(0.5), ..vllm_style };
        assert!(resolve(WorkloadName::Trace, Some(&both), None, 0).unwrap_err().contains("not both"));
        assert!(resolve(WorkloadName::Trace, None, None, 0).unwrap_err().contains("--trace-file"));
        let bad = TraceSettings { start_ratio: Some([0.8, 0.2]), ..t.clone() };
        assert!(resolve(WorkloadName::Trace, Some(&bad), None, 0).unwrap_err().contains("start_ratio"));
        let bad = TraceSettings { duration_s: Some(0.0), ..t };
        assert!(resolve(WorkloadName::Trace, Some(&bad), None, 0).unwrap_err().contains("duration_s = 0"));
        assert!(resolve(WorkloadName::Conversation, None, None, 0).unwrap_err().contains("--conversation-file"));
        assert_eq!(resolve(WorkloadName::ChatRandom, None, None, 0).unwrap(), Workload::ChatRandom);
    }

    #[test]
    fn an_agentx_files_own_block_size_is_the_default() {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces/agentx_chains.jsonl");
        let t = TraceSettings { file: Some(fixture), ..Default::default() };
        let Workload::Trace(spec) = resolve(WorkloadName::Trace, Some(&t), None, 0).unwrap() else { panic!() };
        assert_eq!(spec.block_size, 16, "the file declares 16");
        let given = TraceSettings { block_size: Some(32), ..t };
        let Workload::Trace(spec) = resolve(WorkloadName::Trace, Some(&given), None, 0).unwrap() else { panic!() };
        assert_eq!(spec.block_size, 32, "the recipe's wins (the loader then refuses the mismatch)");
    }

    #[test]
    fn overlays_keep_what_the_top_does_not_set() {
        let base = TraceSettings { file: Some("a".into()), duration_s: Some(5.0), ..Default::default() };
        let top = TraceSettings { file: Some("b".into()), ..Default::default() };
        let o = base.overlay(&top);
        assert_eq!((o.file, o.duration_s), (Some("b".into()), Some(5.0)));
    }
}
