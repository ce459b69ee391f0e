//! Which Python runs the engine, and how a worker is started in it.
//!
//! The `enginebench` binary links no libpython. A worker is the chosen
//! interpreter itself, started as `<python> -c <bootstrap>`: the bootstrap
//! loads enginebench's extension module (`enginebench_native`, CPython's
//! stable ABI, so one build serves 3.10 and later) from the file
//! [`native::module_path`] names and calls its `worker_main()`, which runs the
//! same Rust driver loop as before, in that process, beside that
//! interpreter's vLLM. Why this design and what it cost is in
//! `docs/DESIGN.md`.
//!
//! The interpreter is, in order ([`Origin`]): `--python PATH`,
//! `$ENGINEBENCH_PYTHON`, the Python whose `enginebench` console script is
//! running (a pip-installed wheel), the venv `ci/setup.sh` made, else the
//! first `python3` on PATH that can import `vllm`.

pub mod native;
pub mod probe;
pub mod releases;

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::install::Install;

pub use probe::Interpreter;

/// Oldest CPython the extension module is built for (abi3-py310).
pub const MIN_PYTHON: (u32, u32) = (3, 10);

/// Set by the wheel's console script: the interpreter it runs in.
pub const HOST_PYTHON_VAR: &str = "ENGINEBENCH_HOST_PYTHON";
/// The user's choice of interpreter when `--python` is not given.
pub const PYTHON_VAR: &str = "ENGINEBENCH_PYTHON";

/// How the interpreter was chosen (recorded in results and shown by `doctor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// `--python PATH` (or a variant's `python = "..."`).
    Flag,
    /// `$ENGINEBENCH_PYTHON`.
    Env,
    /// The interpreter running the pip-installed `enginebench` console script.
    Host,
    /// The venv `ci/setup.sh` made (`.enginebench/venv`).
    SetupVenv,
    /// The first `python3` on PATH that imports `vllm`.
    Path,
}

impl Origin {
    /// Where the choice came from, in words ("--python", "$ENGINEBENCH_PYTHON", ...).
    pub fn source(self) -> &'static str {
        match self {
            Origin::Flag => "--python",
            Origin::Env => "$ENGINEBENCH_PYTHON",
            Origin::Host => "the console script's interpreter",
            Origin::SetupVenv => "the set-up venv",
            Origin::Path => "PATH",
        }
    }
}

/// The interpreter a command uses unless a variant names its own: `flag`
/// (the `--python` flag), else `$ENGINEBENCH_PYTHON`, the console script's
/// interpreter, the set-up venv, the first python3 on PATH that has vLLM. Its engine
/// packages are not required here: commands that start engines call
/// [`require_engine_packages`] for every interpreter they will use, before
/// any worker starts; `doctor` lists what is missing.
///
/// Errors (usage): the named interpreter is missing, is not CPython 3.10+, or
/// none was found anywhere (the message lists where it looked).
pub fn default_interpreter(flag: Option<&Path>) -> Result<Interpreter> {
    let (path, origin) = choose(flag)?;
    probe::inspect(&path, origin, origin.source())
}

/// An interpreter named explicitly: `chosen_by` says where, for messages
/// (`--baseline-python`, "`python` of [variants.pr]", ...).
///
/// Errors (usage): as [`default_interpreter`].
pub fn named_interpreter(path: &Path, chosen_by: &str) -> Result<Interpreter> {
    probe::inspect(path, Origin::Flag, chosen_by)
}

pub use probe::require_engine_packages;

fn choose(flag: Option<&Path>) -> Result<(PathBuf, Origin)> {
    if let Some(p) = flag {
        return Ok((p.to_path_buf(), Origin::Flag));
    }
    for (var, origin) in [(PYTHON_VAR, Origin::Env), (HOST_PYTHON_VAR, Origin::Host)] {
        if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return Ok((PathBuf::from(p), origin));
        }
    }
    match Install::locate() {
        Ok(install) => return Ok((install.python(), Origin::SetupVenv)),
        // A set-up named explicitly but broken is an error, not a reason to look elsewhere.
        Err(e) if std::env::var_os("ENGINEBENCH_HOME").is_some() => return Err(e),
        Err(_) => {}
    }
    if let Some(p) = first_on_path_with_vllm() {
        return Ok((p, Origin::Path));
    }
    Err(usage(
        "no Python with vLLM found: pass --python PATH (or set ENGINEBENCH_PYTHON) to the interpreter of your vLLM \
         environment, or run ci/setup.sh in the clone to make one (looked at --python, $ENGINEBENCH_PYTHON, \
         the set-up venv .enginebench/venv, and every python3 on PATH)",
    ))
}

/// The first `python3` on PATH that passes [`probe::inspect`] and in which
/// `import vllm` would find a package (found without importing vLLM:
/// ~50 ms, not ~10 s).
fn first_on_path_with_vllm() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("python3")).find(|candidate| {
        candidate.is_file()
            && probe::inspect(candidate, Origin::Path, Origin::Path.source())
                .is_ok_and(|python| python.missing.iter().all(|m| m.name != "vllm"))
    })
}

/// The git commit of the vLLM source checkout whose package folder is `dir`
/// (vLLM imported from a source tree, e.g. a branch under test: the package
/// sits at the top of the repository), or None when it is not one.
pub fn git_commit(dir: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["-C", dir, "rev-parse", "--show-toplevel", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (top, commit) = (lines.next()?, lines.next()?.trim());
    // A venv inside some other repository is not a vLLM checkout.
    let is_checkout = Path::new(dir).parent().is_some_and(|p| p == Path::new(top));
    (out.status.success() && is_checkout && commit.len() >= 7).then(|| commit.to_string())
}
