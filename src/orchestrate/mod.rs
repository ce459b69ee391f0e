//! Process model: the orchestrator (no Python in it) plans the run and writes
//! results; a worker process (the chosen Python interpreter, started with the
//! recipe's environment, loading the extension module `enginebench_native`:
//! see [`crate::python`]) builds one engine in-process and drives it from Rust. They
//! talk in JSON lines: the job goes in on the worker's stdin, messages come
//! back on its stdout, and everything Python prints goes to its stderr, which
//! the orchestrator saves as `worker.log`.

pub mod ab;
pub mod check;
pub mod doctor;
pub mod dp;
pub mod finish;
pub mod interrupt;
pub mod job;
pub mod lengths;
pub mod nodes;
pub mod outputs;
pub mod overhead;
pub mod pd;
pub mod plan;
pub mod preflight;
pub mod private_fd;
pub mod progress;
pub mod run;
pub mod runner;
pub mod spawn;
#[cfg(feature = "python")]
pub mod worker;
