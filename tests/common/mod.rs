//! Shared helpers of the integration tests. They run the real binary on the
//! real vLLM CPU build and the real bundled model set up by `ci/setup.sh`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// One engine at a time: an engine holds ~4 GB and the machine has 2 cores.
static ENGINE_LOCK: Mutex<()> = Mutex::new(());

/// Serialises tests that start an engine (poisoning from a failed test is ignored).
pub fn engine_lock() -> MutexGuard<'static, ()> {
    ENGINE_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The set-up folder; panics with the command to run when set-up is missing.
pub fn install() -> PathBuf {
    let root = repo().join(".enginebench");
    assert!(
        root.join("venv/bin/python3").exists() && root.join("models/smollm2-135m-instruct/config.json").exists(),
        "set-up missing: run ci/setup.sh first (or ci/test.sh, which does both)"
    );
    root
}

/// Runs the enginebench binary with `args` from the repository root.
pub fn enginebench(args: &[&str]) -> Output {
    install();
    Command::new(env!("CARGO_BIN_EXE_enginebench"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("enginebench runs")
}

pub fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
