//! The engine side: an embedded CPython running vLLM's `LLMEngine` in-process,
//! behind the small [`StepEngine`] interface the request loops drive.

pub mod interpreter;
pub mod pyerror;
pub mod vllm;

use anyhow::Result;

/// New tokens one request received in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    pub rid: u64,
    /// Tokens produced for `rid` by this step (1 without speculative decoding).
    pub new_tokens: u32,
    /// The request finished in this step (length, stop string or EOS).
    pub finished: bool,
}

/// The full completion of a finished text (eval) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub rid: u64,
    pub text: String,
    /// Tokens generated.
    pub output_tokens: u32,
}

/// What one `step()` produced; reused across steps to avoid allocations.
#[derive(Debug, Default)]
pub struct StepOutput {
    pub deltas: Vec<Delta>,
    pub completions: Vec<Completion>,
}

impl StepOutput {
    pub fn clear(&mut self) {
        self.deltas.clear();
        self.completions.clear();
    }
}

/// An engine that Rust drives one step at a time. Request ids must be unique
/// among requests in flight.
pub trait StepEngine {
    /// Adds a perf request: a token-id prompt, greedy, `max_tokens` new tokens
    /// (exactly that many when `ignore_eos`). Its tokens arrive as [`Delta`]s.
    fn add_tokens(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool)
    -> Result<()>;
    /// Adds an eval request: a text prompt, greedy, stopping at any of `stop`.
    /// It yields one [`Completion`] when it finishes (and a [`Delta`]).
    fn add_text(&mut self, rid: u64, prompt: &str, max_tokens: u32, stop: &[String])
    -> Result<()>;
    /// Runs one engine step (schedule + execute + update), filling `out`.
    fn step(&mut self, out: &mut StepOutput) -> Result<()>;
}
