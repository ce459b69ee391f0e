//! The serving tier: a real `vllm serve` on 127.0.0.1 driven by a streaming
//! OpenAI-compatible client, timed as `vllm bench serve` times it (tier 3
//! of `enginebench overhead`).
//!
//! - [`server`]: start `vllm serve` from the venv on a free port, wait until
//!   ready, stop its whole process group on every exit path.
//! - [`sse`]: incremental server-sent-events parsing of OpenAI streams.
//! - [`client`]: the closed-loop (or request-rate) benchmark client producing
//!   one [`crate::protocol::RequestRecord`] per request.
//!
//! Linux only (process groups, `/proc`, `PR_SET_PDEATHSIG`).

pub mod client;
pub mod process;
pub mod server;
pub mod sse;

pub use client::{ClientConfig, run_benchmark};
pub use server::{ServerSpec, VllmServer};
