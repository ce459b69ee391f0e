//! Accuracy on the same engine: GSM8K with lm-eval's prompt, filters and metric.

pub mod filters;
pub mod gsm8k;
pub mod score;
#[allow(dead_code)]
pub mod pyrandom;
#[allow(dead_code)]
pub mod data;
#[allow(dead_code)]
pub mod tasks;
