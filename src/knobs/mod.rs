//! The knob report: did each of a recipe's knobs take effect in this vLLM
//! build? (issue 42; docs/knobs.md)
//!
//! The shim gathers vLLM's facts per environment variable, `vllm serve`
//! flag and `--hf-overrides` key ([`crate::protocol::knobs::KnobReport`],
//! python-shim/enginebench_shim/knobs.py); this folder judges them:
//! - [`verdict`]: one verdict per knob (read, no effect, unknown) by the
//!   rules docs/knobs.md lists;
//! - [`diff`]: what differs between two arms and whether any of it takes
//!   effect (`ab` refuses a candidate whose every difference is a no-op);
//! - [`quick_reduce`]: vLLM's ROCm quick all-reduce rule in words;
//! - [`render`]: the block for `recipe show`/`check`, `run`'s header line,
//!   `ab.md`'s "What took effect" section and `ab`'s refusal.

pub mod diff;
pub mod quick_reduce;
pub mod render;
pub mod verdict;

pub use diff::{Difference, differences, overall};
pub use verdict::{Effect, Verdict, verdicts};
