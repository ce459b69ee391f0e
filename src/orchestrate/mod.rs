//! Process model: the orchestrator (no Python in it) plans the run and writes
//! results; a worker process (the same binary, hidden subcommand `__worker`)
//! embeds Python with the recipe's environment and drives one engine. They
//! talk in JSON lines: the job goes in on the worker's stdin, messages come
//! back on its stdout, and everything Python prints goes to its stderr, which
//! the orchestrator saves as `worker.log`.

pub mod ab;
pub mod check;
pub mod finish;
pub mod interrupt;
pub mod job;
pub mod outputs;
pub mod overhead;
pub mod plan;
pub mod progress;
pub mod protocol;
pub mod run;
pub mod spawn;
pub mod worker;
