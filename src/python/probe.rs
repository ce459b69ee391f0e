//! Asking an interpreter what it is, before any worker starts in it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{MIN_PYTHON, Origin};
use crate::error::usage;

/// A Python interpreter that passed the checks a worker needs (CPython, at
/// least [`MIN_PYTHON`], not a free-threaded build: abi3 modules do not load there).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interpreter {
    /// The path as given (a venv's `bin/python` stays the venv's).
    pub path: PathBuf,
    /// `sys.executable` as the interpreter reports it.
    pub executable: String,
    /// e.g. "3.12.1".
    pub version: String,
    /// `sys.prefix` (a venv's folder, or the installation's).
    pub prefix: String,
    /// `site-packages` of that environment (`sysconfig` purelib).
    pub purelib: PathBuf,
    pub origin: Origin,
}

/// Printed by the interpreter as one JSON line; written so that even Python 2
/// runs it, so an old interpreter is named with its version, not a SyntaxError.
const PROBE: &str = r#"
import json, platform, sys, sysconfig
print(json.dumps({
    "implementation": platform.python_implementation(),
    "version": platform.python_version(),
    "version_info": list(sys.version_info[:2]),
    "executable": sys.executable,
    "prefix": sys.prefix,
    "purelib": sysconfig.get_paths()["purelib"],
    "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
}))
"#;

#[derive(Deserialize)]
struct Report {
    implementation: String,
    version: String,
    version_info: (u32, u32),
    executable: String,
    prefix: String,
    purelib: PathBuf,
    gil_disabled: bool,
}

/// Runs `path` on a probe script and checks what it reports.
///
/// Errors (usage, naming the interpreter and what was found): it does not
/// exist or does not run, is not CPython, is older than 3.10, or is a
/// free-threaded build.
pub fn probe(path: &Path, origin: Origin) -> Result<Interpreter> {
    let shown = path.display();
    let how = origin.source();
    if !path.exists() {
        return Err(usage(format!(
            "Python interpreter {shown} (from {how}) does not exist: give the path of a CPython 3.10+ `python` that can import vllm"
        )));
    }
    let out = Command::new(path).args(["-c", PROBE]).output().map_err(|e| {
        usage(format!("Python interpreter {shown} (from {how}) cannot be run: {e}"))
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Report = match (out.status.success(), serde_json::from_str(text.trim())) {
        (true, Ok(r)) => r,
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            return Err(usage(format!(
                "{shown} (from {how}) is not a working Python interpreter ({}; {last}): give a CPython 3.10+ `python`",
                out.status
            )));
        }
    };
    let found = format!("{} {} at {shown}", report.implementation, report.version);
    if report.implementation != "CPython" {
        return Err(usage(format!("{found} (from {how}): enginebench's worker module needs CPython 3.10 or later")));
    }
    if report.version_info < MIN_PYTHON {
        return Err(usage(format!(
            "{found} (from {how}) is too old: enginebench needs CPython {}.{} or later (vLLM does too)",
            MIN_PYTHON.0, MIN_PYTHON.1
        )));
    }
    if report.gil_disabled {
        return Err(usage(format!(
            "{found} (from {how}) is a free-threaded build, which cannot load stable-ABI (abi3) modules: use the regular build of that Python"
        )));
    }
    Ok(Interpreter {
        path: path.to_path_buf(),
        executable: report.executable,
        version: report.version,
        prefix: report.prefix,
        purelib: report.purelib,
        origin,
    })
}
