//! Asking an interpreter what it is, before any worker starts in it: its
//! implementation and version, and whether `import vllm` and `import torch`
//! would find a package (`importlib.util.find_spec`, which imports neither:
//! milliseconds, where importing vLLM takes 5-15 s).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{MIN_PYTHON, Origin};
use crate::error::usage;

/// A Python interpreter that passed the checks the worker module needs
/// (CPython, at least [`MIN_PYTHON`], not a free-threaded build: abi3 modules
/// do not load there), and what it lacks to build a real engine.
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
    /// Where the path came from, in words for messages ("--python",
    /// "--candidate-python", "`python` of [variants.pr]", ...).
    #[serde(skip)]
    pub chosen_by: String,
    /// Engine packages ([`ENGINE_PACKAGES`]) `import` would not find there,
    /// in that order; see [`require_engine_packages`].
    #[serde(skip)]
    pub missing: Vec<MissingPackage>,
    /// The file `import` would load for each engine package it finds
    /// (`vllm` -> `.../vllm/__init__.py`).
    #[serde(skip)]
    pub package_files: std::collections::BTreeMap<String, PathBuf>,
    /// What the interpreter's vLLM said of itself before any engine started
    /// (the run's check that it can serve); `None` until asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<FoundBuild>,
}

/// The vLLM build an interpreter has, as its worker reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FoundBuild {
    /// `vllm.__version__`.
    pub vllm: Option<String>,
    /// `torch.__version__`.
    pub torch: Option<String>,
    /// The folder vLLM was imported from.
    pub vllm_path: Option<String>,
}

/// The packages a worker imports to build a real engine, in the order a
/// message names them.
pub const ENGINE_PACKAGES: [&str; 2] = ["vllm", "torch"];

/// Printed by the interpreter as one JSON line; written so that even Python 2
/// runs it, so an old interpreter is named with its version, not a SyntaxError.
/// `packages`: per name, the file or folder `import` would load, else why not
/// (a folder without `__init__.py` is only a namespace, not an install).
const PROBE: &str = r#"
import json, platform, sys, sysconfig
def find(name):
    try:
        import importlib.util
        spec = importlib.util.find_spec(name)
    except Exception as e:
        return {"found": None, "problem": "looking for it raised %s: %s" % (type(e).__name__, e)}
    if spec is None:
        return {"found": None, "problem": "no module named %s" % name}
    if spec.origin in (None, "namespace"):
        where = ", ".join(spec.submodule_search_locations or [])
        return {"found": None, "problem": "%s is only a folder without __init__.py (%s), not an installed package" % (name, where)}
    return {"found": spec.origin, "problem": None}
print(json.dumps({
    "implementation": platform.python_implementation(),
    "version": platform.python_version(),
    "version_info": list(sys.version_info[:2]),
    "executable": sys.executable,
    "prefix": sys.prefix,
    "purelib": sysconfig.get_paths()["purelib"],
    "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "packages": dict((name, find(name)) for name in sys.argv[1:]),
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
    #[serde(default)]
    packages: std::collections::BTreeMap<String, Package>,
}

/// Where `import NAME` would load a package from, or why it would not.
#[derive(Debug, Clone, Deserialize)]
struct Package {
    found: Option<String>,
    problem: Option<String>,
}

/// An engine package ([`ENGINE_PACKAGES`]) that `import` would not find, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MissingPackage {
    /// `vllm` or `torch`.
    pub name: String,
    /// e.g. "no module named vllm".
    pub problem: String,
}

/// Runs `path` on a probe script and checks the interpreter itself; the
/// engine packages it lacks are recorded in [`Interpreter::missing`], not an
/// error here ([`require_engine_packages`] is; `doctor` lists every problem).
/// `chosen_by` names where the path came from in messages.
///
/// Errors (usage, naming the interpreter and what was found): it does not
/// exist or does not run, is not CPython, is older than 3.10, or is a
/// free-threaded build.
pub fn inspect(path: &Path, origin: Origin, chosen_by: &str) -> Result<Interpreter> {
    let shown = path.display();
    let how = chosen_by;
    if !path.exists() {
        return Err(usage(format!(
            "Python interpreter {shown} (from {how}) does not exist: give the path of a CPython 3.10+ `python` that can import vllm"
        )));
    }
    let out = Command::new(path).arg("-c").arg(PROBE).args(ENGINE_PACKAGES).output().map_err(|e| {
        usage(format!("Python interpreter {shown} (from {how}) cannot be run: {e}"))
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Report = match (out.status.success(), serde_json::from_str(text.trim())) {
        (true, Ok(r)) => r,
        _ => {
            return Err(usage(format!(
                "{shown} (from {how}) is not a working Python interpreter ({}): give a CPython 3.10+ `python`",
                what_it_said(&out)
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
    let missing = ENGINE_PACKAGES
        .iter()
        .filter_map(|&name| {
            let problem = match report.packages.get(name) {
                Some(Package { found: Some(_), .. }) => return None,
                Some(Package { problem: Some(p), .. }) => p.clone(),
                _ => format!("no module named {name}"),
            };
            Some(MissingPackage { name: name.to_string(), problem })
        })
        .collect();
    let package_files = report
        .packages
        .iter()
        .filter_map(|(name, p)| p.found.as_ref().map(|f| (name.clone(), PathBuf::from(f))))
        .collect();
    Ok(Interpreter {
        package_files,
        found: None,
        path: path.to_path_buf(),
        executable: report.executable,
        version: report.version,
        prefix: report.prefix,
        purelib: report.purelib,
        origin,
        chosen_by: chosen_by.to_string(),
        missing,
    })
}

/// What a program that should have run the probe did instead, in a few
/// words for an error: its exit status and its last line of stderr (a
/// failure's reason; for CPython's fatal errors, e.g. an unknown
/// `PYTHONMALLOC`, the `Fatal Python error:` line, which names the cause
/// before the runtime state and any thread dump), else of stdout (a script
/// that printed something else than the probe's report), else that it
/// printed nothing.
fn what_it_said(out: &std::process::Output) -> String {
    let reason = |b: &[u8]| {
        let text = String::from_utf8_lossy(b);
        let fatal = text.lines().find(|l| l.starts_with("Fatal Python error:"));
        fatal.or_else(|| text.lines().rev().find(|l| !l.trim().is_empty())).map(|l| l.chars().take(200).collect::<String>())
    };
    let (err, said) = (reason(&out.stderr), reason(&out.stdout));
    match (out.status.success(), err, said) {
        (false, Some(e), _) => format!("{}; {e}", out.status),
        (_, _, Some(o)) => format!("{}, it printed {o:?} instead of the probe's report (Python's version, prefix and packages)", out.status),
        (_, Some(e), None) => format!("{}; {e}", out.status),
        (_, None, None) => format!("{}, it printed nothing: no Python version, no probe report", out.status),
    }
}

/// `$ENGINEBENCH_FAKE_ENGINE` selects the stand-in engine (src/engine/fake.rs),
/// which runs in any CPython 3.10+ without vLLM or torch.
pub fn fake_engine_selected() -> bool {
    matches!(crate::engine::fake::FakeConfig::from_env(), Ok(Some(_)))
}

/// Every command that starts engines calls this for each interpreter it will
/// start one in, before any worker starts: the error names the interpreter,
/// how it was chosen, what is missing and what would be right. Ok when
/// nothing is missing, or when the fake engine of the runner's tests is
/// selected (it imports neither package).
///
/// A missing vLLM is reported as missing, not as an unsupported version.
/// (A vLLM that is there but fails to import is reported by the worker.)
pub fn require_engine_packages(python: &Interpreter) -> Result<()> {
    if python.missing.is_empty() || fake_engine_selected() {
        return Ok(());
    }
    let names: Vec<&str> = python.missing.iter().map(|m| m.name.as_str()).collect();
    let why: Vec<String> = python.missing.iter().map(|m| m.problem.clone()).collect();
    Err(usage(format!(
        "Python {} at {} (from {}) cannot import {} ({}): use the interpreter of an environment with vLLM \
         installed (torch comes with it; choose it with --python or $ENGINEBENCH_PYTHON), or install vLLM into {}",
        python.version,
        python.path.display(),
        python.chosen_by,
        names.join(" or "),
        why.join("; "),
        python.prefix
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn failed(stderr: &str) -> std::process::Output {
        std::process::Output { status: std::process::ExitStatus::from_raw(1 << 8), stdout: Vec::new(), stderr: stderr.into() }
    }

    #[test]
    fn a_fatal_python_error_is_named_by_its_cause_and_other_failures_by_their_last_line() {
        let fatal = failed("Fatal Python error: preconfig_init_allocator: PYTHONMALLOC: unknown allocator\nPython runtime state: preinitializing\n\n");
        assert_eq!(what_it_said(&fatal), "exit status: 1; Fatal Python error: preconfig_init_allocator: PYTHONMALLOC: unknown allocator");
        let raised = failed("Traceback (most recent call last):\n  File \"<string>\", line 1\nImportError: no json\n");
        assert_eq!(what_it_said(&raised), "exit status: 1; ImportError: no json");
    }
}
