//! Shared helpers of the integration tests. They run the real binary on the
//! real vLLM CPU build and the real bundled model set up by `ci/setup.sh`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// One engine at a time: an engine holds ~4 GB and the machine has 2 cores.
static ENGINE_LOCK: Mutex<()> = Mutex::new(());

/// The file that serialises engine tests across test processes too (two
/// `cargo test` runs, or clones of the repository, on one machine).
const ENGINE_LOCK_FILE: &str = "/tmp/enginebench-engine-tests.lock";

/// Held while a test's engines run: the in-process lock and the file lock.
pub struct EngineGuard {
    _thread: MutexGuard<'static, ()>,
    _file: Option<std::fs::File>,
}

/// Serialises tests that start an engine, within this test binary and with
/// other processes that take the same lock (poisoning from a failed test is
/// ignored; a lock file that cannot be opened only loses the second part).
pub fn engine_lock() -> EngineGuard {
    use std::os::fd::AsRawFd;
    let thread = ENGINE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new().create(true).append(true).open(ENGINE_LOCK_FILE).ok();
    if let Some(f) = &file {
        // SAFETY: flock on an fd this function owns; released when the file closes.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    }
    EngineGuard { _thread: thread, _file: file }
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
    enginebench_env(args, &[])
}

/// The same with extra environment variables.
pub fn enginebench_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    install();
    Command::new(env!("CARGO_BIN_EXE_enginebench"))
        .args(args)
        .envs(env.iter().copied())
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

/// The start every engine test's recipe shares: the bundled model on the CPU
/// engine in float32 (bf16 has no native support on these CPUs: ~4x slower),
/// eager (no compile time), a `max_model_len`-token context and 1 GiB of KV
/// cache. `extra_env` adds `KEY = "value"` lines to `[env]`; the caller adds
/// `[sweep]` and anything after it.
pub fn bundled_recipe_head(name: &str, max_model_len: u32, extra_env: &str) -> String {
    format!(
        r#"name = "{name}"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
[env]
VLLM_CPU_KVCACHE_SPACE = "1"
{extra_env}
[engine]
args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "{max_model_len}"]
"#
    )
}

/// The short sweep the runner and fault tests use: ISL 32, OSL `osl`, conc 1
/// and 2, 4 prompts, no warm-ups, after [`bundled_recipe_head`]; `variants`
/// follows. Written to DIR/NAME.toml; returns that path.
pub fn small_sweep_recipe(dir: &Path, name: &str, osl: u32, extra_env: &str, variants: &str) -> String {
    let sweep = format!("[sweep]\nisl = 32\nosl = {osl}\nconc = [1, 2]\nnum_prompts = 4\nwarmups = 0\n{variants}\n");
    write_recipe(dir, name, &(bundled_recipe_head(name, 512, extra_env) + &sweep))
}

/// Writes `body` to DIR/NAME.toml and returns the path, as the tests pass it.
pub fn write_recipe(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, body).unwrap();
    path.to_string_lossy().into_owned()
}
