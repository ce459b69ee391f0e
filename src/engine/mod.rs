//! The engine side: vLLM's `LLMEngine` in the worker's own interpreter (the
//! `python` feature, built into the extension module), behind the small
//! [`StepEngine`] interface the request loops drive.

pub mod fake;
pub mod fake_dp;
#[cfg(feature = "python")]
pub mod pyerror;
#[cfg(feature = "python")]
pub mod token_lists;
#[cfg(feature = "python")]
pub mod vllm;

use std::path::Path;

use anyhow::Result;

pub use crate::protocol::{ChatMessage, Completion, Delta, EngineInfo, EngineTiming, Prompt, SpecCounts, StepOutput, StepStats};

/// An engine that Rust drives one step at a time. Request ids must be unique
/// among requests in flight.
pub trait StepEngine {
    /// Adds a perf request: a token-id prompt, greedy, `max_tokens` new tokens
    /// (exactly that many when `ignore_eos`). Its tokens arrive as [`Delta`]s.
    fn add_tokens(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool)
    -> Result<()>;
    /// Adds an eval request: a text prompt, or chat messages put through the
    /// tokenizer's chat template; greedy, stopping at any of `stop`. It yields
    /// one [`Completion`] when it finishes (and a [`Delta`]).
    fn add_text(&mut self, rid: u64, prompt: &Prompt, max_tokens: u32, stop: &[String])
    -> Result<()>;
    /// Gets token requests ready before a loop's clock starts (all of a
    /// fixed list is known then): each `(prompt, max_tokens, ignore_eos)` is
    /// put in the form the engine takes, so that a later [`add_tokens`] of
    /// the same prompt slice (same address and length) and settings only
    /// hands it over. Replaces what an earlier call prepared; `&[]` frees
    /// it. Default: nothing is prepared.
    ///
    /// [`add_tokens`]: StepEngine::add_tokens
    fn prepare_tokens(&mut self, _requests: &[(&[u32], u32, bool)]) -> Result<()> {
        Ok(())
    }
    /// A handle that stages prompts in the engine's form from another
    /// thread ([`PromptStager`]), for prompts known ahead of their send
    /// (a replay's next turn). Default: none, every prompt is made at its
    /// [`add_tokens`](StepEngine::add_tokens).
    fn prompt_stager(&self) -> Option<std::sync::Arc<dyn PromptStager>> {
        None
    }
    /// Whether the loop must step now, with `in_flight` of its own requests
    /// in the engine and (`pending`) more still to send: default, while any
    /// is in flight. A rank of a data-parallel group answers for the whole
    /// group (vLLM's cross-rank all-reduce, `has_unfinished_requests`): it
    /// steps (a dummy batch when it has nothing in flight) while any rank
    /// has work in flight or to send, and every rank's loop ends at the
    /// same iteration. Every rank must call it once per loop iteration.
    fn keep_stepping(&mut self, in_flight: usize, pending: bool) -> Result<bool> {
        let _ = pending;
        Ok(in_flight > 0)
    }
    /// Called once before a loop's clock starts; a rank of a data-parallel
    /// group waits there for every rank (the same all-reduce), so each
    /// phase (warm-up, measured requests, eval) starts at the same
    /// iteration on every rank. The vLLM engine also freezes its Python
    /// heap there (the shim's `loop_starts`), so that no full garbage
    /// collection walks it during the loop. Default: nothing.
    fn sync_ranks(&mut self) -> Result<()> {
        Ok(())
    }
    /// Runs one engine step (schedule + execute + update), filling `out`.
    fn step(&mut self, out: &mut StepOutput) -> Result<()>;
    /// Aborts requests in flight (a graceful stop).
    fn abort(&mut self, rids: &[u64]) -> Result<()>;
}

/// Stages token prompts in an engine's own form on a thread other than the
/// driver's (issue 46): the vLLM engine's is a Python list of the ids, which
/// at AgentX's lengths (up to ~200k tokens) takes hundreds of microseconds
/// to allocate and fill, and made at the send it lengthens the gap between
/// two engine steps. The prefetch thread stages it, allocation included,
/// without the GIL; the send only wraps what was staged.
pub trait PromptStager: Send + Sync {
    /// Stages `prompt` for the very buffer a later
    /// [`StepEngine::add_tokens`] will pass (matched by address and
    /// length): that send then hands the staged form over. Runs on the
    /// prefetch thread and must not take the GIL. `None`: not staged (too
    /// short to be worth it, or the engine cannot); the send makes it.
    fn stage(&self, prompt: &[u32]) -> Option<Staged>;
    /// Prompts staged so far, how many of them their send took, and what
    /// the token sends since the last report (a replay's) paid between two
    /// engine steps.
    fn report(&self) -> StageReport;
}

/// What a [`PromptStager`] did and what the sends cost the driver's
/// thread (worker.log says it after a replay, issue 46). Times in us.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageReport {
    /// Prompts staged ahead, and those of them their send took.
    pub made: u64,
    pub taken: u64,
    /// A replay's token sends, and how long each waited for the GIL
    /// (another thread held it when the send began): p50, p99, max.
    pub sends: u64,
    pub gil_wait_us: [f64; 3],
    /// Sends of a prompt long enough to stage that made its list
    /// themselves, and how long that took: p50, p99, max.
    pub made_at_send: u64,
    pub made_at_send_us: [f64; 3],
}

/// The claim of a staged prompt ([`PromptStager::stage`]): while it lives,
/// an `add_tokens` of its buffer takes the staged form; dropping it
/// withdraws one not taken. Drop it after the send and before the buffer is
/// freed or written again (an address and length are its only key).
pub struct Staged(pub Box<dyn Send>);

/// An engine with a KV connector, as one side of a disaggregated
/// prefill/decode pair (issue 44, docs/pd.md). Finished requests' transfer
/// parameters and arrived-by-transfer token counts come back in the
/// [`StepOutput`] (`kv_params`, `external_cached`).
pub trait KvTransfer: StepEngine {
    /// Adds a prefill-only request: the prompt's token ids, `max_tokens` 1,
    /// with the `kv_transfer_params` that ask the connector to keep its KV
    /// for a remote decode (the shim's `PREFILL_TRANSFER_PARAMS`, the keys
    /// vLLM's toy proxy sends). The finished output's parameters come back
    /// in [`StepOutput::kv_params`].
    fn add_prefill(&mut self, rid: u64, prompt: &[u32]) -> Result<()>;
    /// [`StepEngine::add_tokens`] with a finished prefill's
    /// `kv_transfer_params` (a JSON object) on the request
    /// (`SamplingParams.extra_args`): the decode side reads the prompt's KV
    /// from the prefill engine instead of computing it.
    fn add_decode(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool, params: &serde_json::Value) -> Result<()>;
    /// The connector's transfer figures since the last call (`None`: no
    /// step reported any).
    fn take_kv_transfer_stats(&mut self) -> Result<Option<crate::protocol::pd::KvTransferStats>>;
}

/// An engine that can open a profiler window around some of its steps.
pub trait Profiler {
    /// Starts the profiler; returns the activities it records (`CPU`, `CUDA`).
    fn profile_start(&mut self) -> Result<Vec<String>>;
    /// Stops it and writes rank 0's Chrome trace to `trace` (the other
    /// ranks' beside it, see [`ProfileStop::other_ranks`]).
    fn profile_stop(&mut self, trace: &Path) -> Result<ProfileStop>;
}

/// What stopping a profiler window took and wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileStop {
    /// Stopping the profiler (with vLLM's worker profiler: every worker's
    /// stop and trace export, which its `stop_profile` waits for), s.
    pub stop_s: f64,
    /// Writing or moving the trace into place afterwards, s.
    pub export_s: f64,
    /// The traces of ranks other than 0 (TP/PP > 1), one per rank, beside `trace`.
    pub other_ranks: Vec<std::path::PathBuf>,
}

/// What the worker needs of an engine besides stepping it (and opening a
/// profiler window, for `--profile`): the vLLM one, or the [`fake`] stand-in.
pub trait WorkerEngine: StepEngine + Profiler {
    /// Facts about the built engine (versions, model, dtype, parallel sizes).
    fn info(&self) -> &EngineInfo;
    /// Token ids a random prompt may use (vocabulary minus special tokens).
    fn allowed_token_ids(&self) -> &[u32];
    /// Makes later steps return each perf request's new token ids.
    fn record_token_ids(&mut self, on: bool) -> Result<()>;
    /// The engine's own speculative-decoding totals, if it keeps them.
    fn spec_counters(&self) -> Option<SpecCounts>;
    /// Shuts the engine down.
    fn shutdown(&mut self) -> Result<()>;
    /// Empties the prefix cache (and a KV connector's cache) between points;
    /// only with no request in the engine. `Some(false)`: the engine refused
    /// (blocks still held); `None`: this engine has no reset.
    fn reset_prefix_cache(&mut self) -> Result<Option<bool>>;
    /// (prefix, suffix) token ids the tokenizer's chat template puts around
    /// one user message's content (with the generation prompt).
    fn chat_frame(&mut self) -> Result<(Vec<u32>, Vec<u32>)>;
    /// Token ids of chat messages through the chat template (with the
    /// generation prompt), as the engine's chat endpoint tokenizes them.
    fn tokenize_chat(&mut self, messages: &[ChatMessage]) -> Result<Vec<u32>>;
    /// How many tokens a text is (no special tokens added).
    fn count_tokens(&mut self, text: &str) -> Result<u32>;
    /// The knob report of the engine's configuration (`argv`: model, then
    /// flags): what this vLLM build does with each knob (crate::knobs).
    /// `None`: this engine has no vLLM to ask (the fake engine).
    fn knob_report(&self, _argv: &[String], _request: &crate::protocol::knobs::KnobRequest) -> Option<Result<crate::protocol::KnobReport>> {
        None
    }
    /// A P/D proxy's figures for the requests `rids` (a point's measured
    /// requests, in send order) and its connector's transfers since the
    /// last call; requests before `rids` are forgotten. `None`: this engine
    /// is not a P/D proxy (crate::pd::proxy).
    fn pd_point(&mut self, _rids: std::ops::Range<u64>) -> Result<Option<crate::protocol::pd::PdRaw>> {
        Ok(None)
    }
}

/// enginebench's request id in the id vLLM reports: the id itself, or the
/// part before the first '-' (vLLM's `InputProcessor.assign_request_id`
/// appends "-<8 random chars>", vllm/v1/engine/input_processor.py).
///
/// Errors: the id is not ours (a message naming it).
pub fn request_id_of(text: &str) -> std::result::Result<u64, String> {
    let ours = text.split_once('-').map_or(text, |(a, _)| a);
    ours.parse::<u64>().map_err(|e| format!("request id {text:?} from the engine: {e}"))
}

#[cfg(test)]
mod tests {
    use super::request_id_of;

    #[test]
    fn request_ids_map_back_with_or_without_vllm_suffix() {
        assert_eq!(request_id_of("42"), Ok(42));
        assert_eq!(request_id_of("42-9f3ab01c"), Ok(42));
        let err = request_id_of("chatcmpl-42").unwrap_err();
        assert!(err.contains("chatcmpl-42"), "{err}");
    }
}
