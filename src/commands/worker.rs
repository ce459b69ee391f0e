//! The engine worker process (no subcommand: `enginebench_native.worker_main()`,
//! started by the orchestrator in the chosen interpreter).

/// Runs the worker; returns the process exit code. See
/// [`crate::orchestrate::worker::main`].
pub fn main() -> i32 {
    crate::orchestrate::worker::main()
}
