//! enginebench as a library: the command-line program (`app::main`) and the
//! engine worker (`orchestrate::worker`), shared by the `enginebench` binary
//! and the Python extension module `enginebench_native` (crate `native/`),
//! which runs the worker inside the user's chosen interpreter.
//!
//! # Module map
//!
//! Each top-level module owns one concern; [`protocol`] is the bottom (it
//! imports no other module), and no two top-level modules import each other.
//!
//! | module | owns |
//! |---|---|
//! | [`app`], [`cli`] | parsing the command line (clap) and dispatching it |
//! | [`commands`] | one thin entry point per subcommand (its table maps each command to the module doing the work) |
//! | [`orchestrate`] | planning a run from a recipe, the worker processes (started with the recipe's environment in `spawn`), the job runner and its executors (local, parallel, Slurm), `ab`, `overhead`, `recipe check`, `doctor` |
//! | [`protocol`] | the vocabulary orchestrator and worker share: the wire messages, points, workloads, steps, engine facts, per-request records (TTFT, TPOT, E2EL in `records`) |
//! | [`workload`] | what is sent and when: random prompts and lengths, arrival schedules, the one request driver, trace and conversation replays (prompts built from hash ids in `synth`) |
//! | [`pd`] | disaggregated prefill/decode: the decode worker's proxy over its prefill workers, the prefill workers' loop, the links between them |
//! | [`engine`] | the engine behind the `StepEngine` trait: vLLM through pyo3 (feature `python`), and the fake engine for tests |
//! | [`python`] | which interpreter runs the engine, probing it, the worker's command line |
//! | [`recipe`] | the recipe schema, variants, the sweep matrix, command-line overlays |
//! | [`import`] | InferenceX master configs and launchers to recipes (run in a sandbox) |
//! | [`metrics`] | a point's figures as `vllm bench serve` computes them, step statistics, speculative decoding, prefix cache, the cross-check |
//! | [`eval`] | GSM8K on the same engine: data, few-shot draw, prompts, filters, scores |
//! | [`knobs`] | the knob report: whether each env var, flag and hf-override takes effect in this vLLM build, and what differs between two arms |
//! | [`ab`] | the A/B comparison: intervals, verdicts, accuracy tests, the gate, its Markdown, changelog and plots |
//! | [`profile`] | `--profile`: the window over chosen steps, reading the trace, the top-kernels table, the kernel diff |
//! | [`report`] | the result document, the run folder's files, the terminal table, charts, exports |
//! | [`telemetry`] | the GPU and host sampler and energy math |
//! | [`serve`] | a `vllm serve` process and a streaming client (the third tier of `overhead`) |
//! | [`install`] | where set-up put the venv and the bundled models |
//! | [`error`] | error kinds and the exit codes they give |

#[macro_use]
mod print;

pub mod ab;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod error;
pub mod eval;
pub mod import;
pub mod install;
pub mod knobs;
pub mod metrics;
pub mod orchestrate;
pub mod pd;
pub mod protocol;
pub mod profile;
pub mod recipe;
pub mod report;
pub mod telemetry;
pub mod serve;
pub mod workload;
pub mod app;
pub mod python;
