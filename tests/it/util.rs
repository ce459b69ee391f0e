//! The helpers every integration test shares: the engine lock, the set-up,
//! one builder of `enginebench` commands, one way to write a recipe, and
//! reading results. The tests run the real binary on the real vLLM CPU
//! build and the real bundled model set up by `ci/setup.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// One engine at a time: an engine holds ~4 GB and the machine has 2 cores.
static ENGINE_LOCK: Mutex<()> = Mutex::new(());

/// The file that serialises engine tests across test processes too (two
/// `cargo test` runs, or clones of the repository, on one machine).
const ENGINE_LOCK_FILE: &str = "/tmp/enginebench-engine-tests.lock";

/// Held while a test's engines run: the in-process lock and the file lock.
/// On drop it appends `test name, seconds waited, seconds held` to
/// [`ENGINE_TIMES`], so the suite's slowest engine tests are known from data
/// (the engine tests run one at a time, so their holds add up to the suite).
pub struct EngineGuard {
    _thread: MutexGuard<'static, ()>,
    _file: Option<std::fs::File>,
    asked: std::time::Instant,
    got: std::time::Instant,
}

/// Where each engine test's hold is logged: tab-separated `test`,
/// `wait_s`, `held_s`, one line a test, appended run after run.
pub const ENGINE_TIMES: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/engine-lock-times.tsv");

impl Drop for EngineGuard {
    fn drop(&mut self) {
        use std::io::Write;
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!(
            "{name}\t{:.1}\t{:.1}\n",
            (self.got - self.asked).as_secs_f64(),
            self.got.elapsed().as_secs_f64()
        );
        // A log for people reading the suite's time; failing to write it fails no test.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(ENGINE_TIMES) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Serialises tests that start an engine, within this test binary and with
/// other processes that take the same lock (poisoning from a failed test is
/// ignored; a lock file that cannot be opened only loses the second part).
pub fn engine_lock() -> EngineGuard {
    use std::os::fd::AsRawFd;
    let asked = std::time::Instant::now();
    let thread = ENGINE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new().create(true).append(true).open(ENGINE_LOCK_FILE).ok();
    if let Some(f) = &file {
        // SAFETY: flock on an fd this function owns; released when the file closes.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    }
    EngineGuard { _thread: thread, _file: file, asked, got: std::time::Instant::now() }
}

/// The repository root.
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

/// The enginebench binary with `args`, run from the repository root: the
/// one command builder (tests add their environment or pipes).
pub fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_enginebench"));
    // Every long replay prompt the shim sends by its shortcut is also made
    // by vLLM's input processor whole, and must equal it (steppath.py).
    c.args(args).current_dir(repo()).env("ENGINEBENCH_CHECK_SWAP", "1");
    c
}

/// The system `python3`: fake-engine workers need a real CPython, not vLLM.
pub fn system_python() -> PathBuf {
    ["/usr/bin/python3", "/usr/local/bin/python3"].iter().map(PathBuf::from).find(|p| p.is_file()).expect("a python3 to run workers in")
}

/// [`command`] with the workers on the fake step engine
/// (`ENGINEBENCH_FAKE_ENGINE=fake`, src/engine/fake.rs) in [`system_python`].
pub fn fake_command(fake: &str, args: &[&str]) -> Command {
    let mut c = command(args);
    c.env("ENGINEBENCH_PYTHON", system_python()).env("ENGINEBENCH_FAKE_ENGINE", fake);
    c
}

/// Runs the enginebench binary with `args` from the repository root.
pub fn enginebench(args: &[&str]) -> Output {
    enginebench_env(args, &[])
}

/// The same with extra environment variables.
pub fn enginebench_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    install();
    command(args).envs(env.iter().copied()).output().expect("enginebench runs")
}

/// Runs `c` to its end: its output and its stdout + stderr as text.
pub fn output(c: &mut Command) -> (Output, String) {
    let o = c.output().expect("enginebench runs");
    let log = text(&o);
    (o, log)
}

/// stdout then stderr, as text.
pub fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A JSON file, parsed (panics naming the file).
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON number as f64 (panics naming the value otherwise).
pub fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
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

/// Where a fake vLLM tree keeps the `vllm serve` parser, as the releases do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FakeServe {
    /// `vllm.entrypoints.openai.cli_args.make_arg_parser` (0.23 and earlier).
    Openai,
    /// `vllm.entrypoints.launchers.cli_args.make_arg_parser` (0.32).
    Launchers,
    /// `vllm.entrypoints.common.cli_args.make_arg_parser` (0.33, 0.34).
    Common,
    /// 0.34's layout with its `serve` subcommand
    /// (`vllm.entrypoints.cli.serve.ServeSubcommand`).
    Subcommand,
    /// A release that moved `make_arg_parser` to a path no candidate names;
    /// only the `serve` subcommand still finds it.
    Moved,
    /// No parser anywhere: a vLLM outside the supported range.
    None,
}

/// Writes a stand-in `vllm` package (and a `torch` stub) into `site`: the
/// shim's required items where `serve` says (each a few lines of our own,
/// in the shapes vLLM's own have), `__version__ = version`, and a platform
/// whose device type is `platform` (`None`: vLLM's UnspecifiedPlatform, as
/// its CUDA build finds on a machine without a GPU). torch reports a CUDA
/// 13.0 build with no device. Nothing here is vLLM's code.
pub fn write_fake_vllm(site: &Path, version: &str, serve: FakeServe, platform: Option<&str>) {
    let parser = "\
def make_arg_parser(parser):
    parser.add_argument('model_tag', nargs='?')
    parser.add_argument('--max-model-len', type=int)
    parser.add_argument('--tensor-parallel-size', '-tp', type=int, default=1)
    parser.add_argument('--data-parallel-size', '-dp', type=int, default=1)
    parser.add_argument('--speculative-config', type=str)
    return parser
";
    let device = platform.map_or("''".to_string(), |p| format!("{p:?}"));
    let mut files: Vec<(&str, String)> = vec![
        (
            "vllm/__init__.py",
            format!(
                "__version__ = {version:?}\nimport dataclasses\n@dataclasses.dataclass\nclass EngineArgs:\n    model: str = ''\n    max_model_len: int = 0\n    tensor_parallel_size: int = 1\n    data_parallel_size: int = 1\n\
                 class LLMEngine: pass\nclass SamplingParams: pass\nclass TokensPrompt(dict): pass\n"
            ),
        ),
        ("vllm/utils/__init__.py", String::new()),
        ("vllm/utils/argparse_utils.py", "import argparse\nclass FlexibleArgumentParser(argparse.ArgumentParser): pass\n".into()),
        ("vllm/usage/__init__.py", String::new()),
        ("vllm/usage/usage_lib.py", "import enum\nclass UsageContext(enum.Enum):\n    OPENAI_API_SERVER = 'openai_api_server'\n".into()),
        ("vllm/sampling_params.py", "import enum\nclass RequestOutputKind(enum.Enum):\n    DELTA = 1\n    FINAL_ONLY = 2\n".into()),
        ("vllm/envs.py", "environment_variables = {'VLLM_CPU_KVCACHE_SPACE': None, 'VLLM_DP_SIZE': None}\n".into()),
        ("vllm/entrypoints/__init__.py", String::new()),
        (
            "vllm/platforms/__init__.py",
            format!("class _Platform:\n    device_type = {device}\n    def is_unspecified(self):\n        return not self.device_type\ncurrent_platform = _Platform()\n"),
        ),
        (
            "torch/__init__.py",
            "__version__ = '2.14.0+cu130'\nclass version:\n    cuda = '13.0'\n    hip = None\nclass cuda:\n    @staticmethod\n    def is_available():\n        return False\n".into(),
        ),
    ];
    let subcommand = |module: &str| {
        format!(
            "from {module} import make_arg_parser\nclass ServeSubcommand:\n    name = 'serve'\n    def subparser_init(self, subparsers):\n        return make_arg_parser(subparsers.add_parser(self.name))\n"
        )
    };
    match serve {
        FakeServe::Openai => files.extend([("vllm/entrypoints/openai/__init__.py", String::new()), ("vllm/entrypoints/openai/cli_args.py", parser.into())]),
        FakeServe::Launchers => files.extend([("vllm/entrypoints/launchers/__init__.py", String::new()), ("vllm/entrypoints/launchers/cli_args.py", parser.into())]),
        FakeServe::Common => files.extend([("vllm/entrypoints/common/__init__.py", String::new()), ("vllm/entrypoints/common/cli_args.py", parser.into())]),
        FakeServe::Subcommand => files.extend([
            ("vllm/entrypoints/common/__init__.py", String::new()),
            ("vllm/entrypoints/common/cli_args.py", parser.into()),
            ("vllm/entrypoints/cli/__init__.py", String::new()),
            ("vllm/entrypoints/cli/serve.py", subcommand("vllm.entrypoints.common.cli_args")),
        ]),
        FakeServe::Moved => files.extend([
            ("vllm/entrypoints/serving/__init__.py", String::new()),
            ("vllm/entrypoints/serving/arguments.py", parser.into()),
            ("vllm/entrypoints/cli/__init__.py", String::new()),
            ("vllm/entrypoints/cli/serve.py", subcommand("vllm.entrypoints.serving.arguments")),
        ]),
        FakeServe::None => {}
    }
    for (path, body) in files {
        let p = site.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
}

/// A small tmpfs mounted for one test (a full or read-only disk on demand),
/// unmounted when dropped. Mounting needs root, as CI runs the suite.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `size` (mount's notation, e.g. `4m`) with the mount
    /// options `extra` (e.g. `ro`; empty for none).
    pub fn mount(size: &str, extra: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let opts = if extra.is_empty() { format!("size={size}") } else { format!("size={size},{extra}") };
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &opts, "tmpfs"]).arg(dir.path()).output().expect("mount runs");
        assert!(out.status.success(), "this test mounts a tmpfs and needs root (CI runs as root): {}", text(&out));
        Tmpfs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem: a file written until the disk says it is full.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path().join("filler")).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.flush();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).output();
    }
}

/// The direct children of process `pid` (Linux /proc; none once it is gone).
pub fn children(pid: u32) -> Vec<u32> {
    let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    kids.split_whitespace().filter_map(|k| k.parse().ok()).collect()
}

/// A model folder DIR/NAME holding only `config.json` (what the plan reads
/// of a fake engine's model: dense or MoE); returns its path.
pub fn fake_model(dir: &Path, name: &str, config: &str) -> PathBuf {
    let model = dir.join(name);
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), config).unwrap();
    model
}
