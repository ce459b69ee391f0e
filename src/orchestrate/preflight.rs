//! Before a run folder exists: can each interpreter's vLLM serve here?
//!
//! Every command that starts engines (`run`, `eval`, `ab`, `overhead`) asks
//! a worker in each interpreter it will use for the [`DoctorReport`]
//! `doctor` prints, and refuses with exit 2, before any result folder is
//! created, when vLLM does not import, is outside the supported range, or
//! finds no platform (the CUDA build on a machine without a GPU). The
//! versions found are kept with the interpreter and recorded in the result.
//!
//! Importing vLLM takes 5-15 s, so a report that found nothing wrong is
//! cached under `~/.cache/enginebench/preflight/`, keyed by what decides it:
//! the interpreter, the files of its `vllm` and `torch` packages (path, size,
//! modification time), the worker module, the variables vLLM's platform
//! detection reads and the GPU device nodes present. An install, an upgrade
//! or a new GPU changes the key; a problem is never cached. The engine's
//! own start checks the same again, so a stale entry costs a result folder,
//! never a wrong result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::plan::PlannedJob;
use crate::error::usage;
use crate::protocol::{CannotServe, DoctorReport};
use crate::python::Interpreter;
use crate::python::probe::FoundBuild;

/// Variables that change what vLLM's platform detection finds (or which
/// packages load), part of the cache key with their values.
const PLATFORM_VARS: [&str; 8] = [
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "VLLM_TARGET_DEVICE",
    "VLLM_PLUGINS",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "ENGINEBENCH_FAKE_ENGINE",
];

/// Checks every distinct interpreter of `jobs` (with the environment of the
/// first job that uses it) and records what it found in each job's
/// interpreter ([`Interpreter::found`]). `need_platform`: false where the
/// engines run on other machines (a Slurm job array), whose devices this
/// machine cannot judge; then only import and range problems refuse.
///
/// Errors (usage, exit 2): an interpreter's vLLM cannot serve, naming it,
/// how it was chosen, the versions found and why.
pub fn check_jobs(jobs: &mut [PlannedJob], need_platform: bool) -> Result<()> {
    let mut found: BTreeMap<PathBuf, FoundBuild> = BTreeMap::new();
    for i in 0..jobs.len() {
        let path = jobs[i].python.path.clone();
        if !found.contains_key(&path) {
            let build = check(&jobs[i].python, &jobs[i].env, need_platform)?;
            found.insert(path.clone(), build);
        }
        jobs[i].python.found = found.get(&path).cloned();
    }
    Ok(())
}

/// One interpreter: the cached report, else a worker's.
fn check(python: &Interpreter, env: &BTreeMap<String, String>, need_platform: bool) -> Result<FoundBuild> {
    let key = cache_key(python, env);
    let cached = key.as_ref().and_then(|k| read_cached(k));
    let report = match cached {
        Some(r) => r,
        None => {
            errln!("checking vLLM in {} (imports it, builds no engine)...", python.path.display());
            super::doctor::ask_report(python, env).map_err(|e| {
                // A worker that could not report is bad input when it said so.
                if e.downcast_ref::<crate::error::UsageError>().is_some() { e } else { e.context(format!("asking {} what its vLLM is", python.path.display())) }
            })?
        }
    };
    let problems: Vec<CannotServe> =
        report.cannot_serve().into_iter().filter(|c| need_platform || !matches!(c, CannotServe::Platform(_))).collect();
    if let Some(first) = problems.first() {
        let others = problems.len() - 1;
        return Err(usage(format!(
            "the vLLM of Python {} at {} (from {}) cannot serve{}: {}{}",
            python.version,
            python.path.display(),
            python.chosen_by,
            versions_text(&report),
            first.message(),
            if others > 0 { format!(" (and {others} more problem(s): `enginebench doctor --python {}` lists them)", python.path.display()) } else { String::new() }
        )));
    }
    if let (Some(k), true) = (&key, report.cannot_serve().is_empty()) {
        write_cached(k, &report);
    }
    Ok(FoundBuild { vllm: report.vllm.clone(), torch: report.torch.clone(), vllm_path: report.vllm_path.clone() })
}

/// " (vLLM 0.34.0, torch 2.14.0+cu130)", or what is known of it.
fn versions_text(r: &DoctorReport) -> String {
    let parts: Vec<String> = [("vLLM", &r.vllm), ("torch", &r.torch)]
        .iter()
        .filter_map(|(n, v)| v.as_ref().map(|v| format!("{n} {v}")))
        .collect();
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// The cache folder: `$ENGINEBENCH_CACHE`, else `$XDG_CACHE_HOME/enginebench`,
/// else `~/.cache/enginebench` (as ci/setup.sh keeps its venvs), `/preflight`.
fn cache_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = var("ENGINEBENCH_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|x| x.join("enginebench")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/enginebench")))?;
    Some(base.join("preflight"))
}

/// A file's identity for the key: path, size and modification time (ns).
fn stamp(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    Some(format!("{}:{}:{modified}", path.display(), m.len()))
}

/// The key of an interpreter's report; `None` when a part of it cannot be
/// read (then nothing is cached).
fn cache_key(python: &Interpreter, env: &BTreeMap<String, String>) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut parts = vec![python.executable.clone(), python.version.clone()];
    for name in crate::python::probe::ENGINE_PACKAGES {
        let init = python.package_files.get(name)?;
        parts.push(stamp(init)?);
        // vLLM and torch write their version beside __init__.py.
        for f in ["version.py", "_version.py"] {
            parts.extend(init.parent().and_then(|d| stamp(&d.join(f))));
        }
    }
    parts.push(stamp(&crate::python::native::module_path().ok()?)?);
    for var in PLATFORM_VARS {
        let value = env.get(var).cloned().or_else(|| std::env::var(var).ok());
        parts.push(format!("{var}={}", value.unwrap_or_default()));
    }
    parts.extend(device_nodes());
    Some(format!("{:x}", Sha256::digest(parts.join("\n").as_bytes()))[..24].to_string())
}

/// The GPU device nodes present (`/dev/nvidia0`, `/dev/kfd`, `/dev/dri/renderD128`, ...).
fn device_nodes() -> Vec<String> {
    let mut out = Vec::new();
    for (dir, prefixes) in [("/dev", &["nvidia", "kfd"][..]), ("/dev/dri", &["renderD"][..])] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if prefixes.iter().any(|p| name.starts_with(p)) {
                out.push(format!("{dir}/{name}"));
            }
        }
    }
    out.sort();
    out
}

fn read_cached(key: &str) -> Option<DoctorReport> {
    let text = std::fs::read_to_string(cache_dir()?.join(format!("{key}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Best effort: a cache that cannot be written only costs the next run the check.
fn write_cached(key: &str, report: &DoctorReport) {
    let Some(dir) = cache_dir() else { return };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let tmp = dir.join(format!("{key}.json.{}", std::process::id()));
    if let Ok(text) = serde_json::to_string(report) {
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, dir.join(format!("{key}.json")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_words() {
        let r = DoctorReport { vllm: Some("0.34.0".into()), torch: Some("2.14.0+cu130".into()), ..DoctorReport::default() };
        assert_eq!(versions_text(&r), " (vLLM 0.34.0, torch 2.14.0+cu130)");
        assert_eq!(versions_text(&DoctorReport::default()), "");
    }
}
