//! `enginebench_native`: the Python extension module that runs enginebench's
//! Rust code inside the user's own interpreter.
//!
//! Built for CPython's stable ABI (abi3, 3.10+), so one file serves every
//! interpreter from 3.10 on. Two entry points, both releasing the GIL so the
//! Rust side attaches only around each call into Python, as before:
//!
//! * `worker_main()`: the engine worker. The orchestrator (the `enginebench`
//!   binary, or `cli_main` below) starts `<python> -c <bootstrap>` that loads
//!   this module and calls it; it reads its task on stdin, builds vLLM in this
//!   very process and drives `step()` from Rust (see
//!   `enginebench::orchestrate::worker`).
//! * `cli_main(argv)`: the whole command line, for the `enginebench` console
//!   script a pip-installed wheel puts on PATH.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the engine worker; returns its exit code (0 ok, 1 failed).
#[pyfunction]
fn worker_main(py: Python<'_>) -> i32 {
    py.detach(enginebench::commands::worker::main)
}

/// Runs the command line `argv` (program name first); returns the exit code.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(|| enginebench::app::main(argv.into_iter().map(OsString::from)))
}

#[pymodule]
fn enginebench_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(worker_main, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
