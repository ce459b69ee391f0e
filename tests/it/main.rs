//! Every integration test in one binary (one link instead of one per file),
//! one module per area, sharing [`util`]: the engine lock, the set-up check,
//! the command builder and the recipe helpers.
//!
//! Engine tests (anything that starts vLLM) take [`util::engine_lock`], so
//! they run one at a time in this binary and across processes; the rest run
//! in parallel. Pick a module or test by name as usual, e.g.
//! `cargo test --release --test it runner_fake::` or `... -- cli_errors`.

mod util;

mod ab_e2e;
mod agentic_e2e;
mod cli_errors;
mod compare_foreign;
mod dp_e2e;
mod faults;
mod import_sandbox;
mod inferencex_import;
mod knobs;
mod lm_eval_tasks;
mod multinode_e2e;
mod pd_e2e;
mod profile_e2e;
mod python_envs;
mod python_probe;
mod recipes;
mod run_e2e;
mod runner_fake;
mod serve_e2e;
mod shim_compat;
mod shim_gpu_paths;
mod slurm_e2e;
mod spec_e2e;
mod telemetry_sources;
