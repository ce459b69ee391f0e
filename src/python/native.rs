//! Finding enginebench's extension module and starting a worker with it.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;

use super::Interpreter;
use crate::error::usage;

/// Overrides where the extension module is (the wheel's console script sets
/// it to the installed module's file).
pub const NATIVE_VAR: &str = "ENGINEBENCH_NATIVE";

/// The file cargo builds for crate `native/` (beside the binary in `target/<profile>/`).
pub const CARGO_FILE_NAME: &str = "libenginebench_native.so";

/// Loads the module from the file `$ENGINEBENCH_NATIVE` names, whatever the
/// file is called, and runs the worker: one start-up path for a cargo build
/// and a wheel.
///
/// When the worker returns, its job is done and written. The process then
/// ends as an interpreter's exit would begin (non-daemon threads joined, the
/// exit handlers run: vLLM's and multiprocessing's clean-ups of child
/// processes among them, streams flushed) and skips the rest of the
/// teardown, which after a vLLM engine took ~3.3 s of every job here
/// (modules and the heap freed one object at a time, libraries' destructors;
/// 2026-12-05, the bundled model on this 2-core VM).
const BOOTSTRAP: &str = "\
import atexit, importlib.util, os, sys, threading
spec = importlib.util.spec_from_file_location('enginebench_native', os.environ['ENGINEBENCH_NATIVE'])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
code = module.worker_main()
getattr(threading, '_shutdown', lambda: None)()
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
";

/// The extension module's file: `$ENGINEBENCH_NATIVE`, else
/// [`CARGO_FILE_NAME`] beside the running binary.
///
/// Errors (usage): not found, with the command that builds it.
pub fn module_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(NATIVE_VAR).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(usage(format!("{NATIVE_VAR}={} is not a file: unset it or point it at enginebench_native's .so", p.display())))
        };
    }
    let exe = std::env::current_exe().map_err(|e| usage(format!("cannot locate the enginebench binary: {e}")))?;
    let beside = exe.with_file_name(CARGO_FILE_NAME);
    if beside.is_file() {
        return Ok(beside);
    }
    Err(usage(format!(
        "enginebench's worker module {} is missing: build it with `cargo build --release -p enginebench-native` (ci/setup.sh does)",
        beside.display()
    )))
}

/// A command that starts a worker in `python` (stdin/stdout/env are the caller's).
///
/// Errors: see [`module_path`].
pub fn worker_command(python: &Interpreter) -> Result<Command> {
    let mut command = Command::new(&python.path);
    command.arg("-c").arg(BOOTSTRAP).env(NATIVE_VAR, module_path()?);
    Ok(command)
}
