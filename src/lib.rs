//! enginebench as a library: the command-line program (`app::main`) and the
//! engine worker (`orchestrate::worker`), shared by the `enginebench` binary
//! and the Python extension module `enginebench_native` (crate `native/`),
//! which runs the worker inside the user's chosen interpreter.

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
pub mod metrics;
pub mod orchestrate;
pub mod protocol;
pub mod profile;
pub mod recipe;
pub mod report;
pub mod telemetry;
pub mod serve;
pub mod workload;
pub mod app;
pub mod python;
