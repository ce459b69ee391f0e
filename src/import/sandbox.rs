//! Runs one InferenceX launcher under real bash for one search-space point,
//! with every external command replaced by a recorder, and returns what
//! `vllm serve`, the client and the agentic replay were called with.
//!
//! The sandbox: `bash --noprofile --norc LAUNCHER` inside bubblewrap
//! (`bwrap --unshare-all`: no network, own PID/IPC/UTS namespaces), with a
//! cleared environment (exactly the point's variables, `PATH` = the recorder
//! folder only), `/usr` read-only, `/tmp` and `/workspace` (the working
//! directory) throwaway tmpfs, the checkout read-only at `/inferencex`, and a
//! time limit ([`TIME_LIMIT`]). `BASH_ENV` sources `sandbox/prelude.sh`,
//! which defines the recorders as shell functions (so each knows the
//! launcher's line) and replaces `benchmark_lib.sh` by `sandbox/benchmark_lib.sh`.
//!
//! Without bubblewrap (`bwrap` not on PATH) nothing runs: the import fails
//! with exit 2 and says to install it (Debian: `apt-get install
//! bubblewrap`). A weaker fallback (`unshare --net`, PATH isolation only)
//! was rejected: launchers write to absolute paths (`/workspace/server.log`)
//! that would then be the user's.
//!
//! `/sys` in the sandbox holds only the machine facts that are files
//! ([`super::machine`]); a text tool that reads an unknown path there stops
//! the launcher (prelude.sh `__eb_files`).
//!
//! A point fails (nothing is guessed) when: a command that has no recorder
//! runs, a recorder's output is read (`$(nvidia-smi ...)`), bash reports an
//! error (`script: line N: ...`), the launcher exits non-zero, the time limit
//! passes, a recorder was cut off before its record was whole, or `vllm
//! serve` never runs. Each problem names its line.
//!
//! Determinism: a record is written into a fresh folder and renamed into
//! place once whole, the launcher's shell waits for its background
//! recorders before it exits (prelude.sh overrides `exit`), and calls are
//! ordered by content, not by which recorder finished first: the same
//! checkout and point give the same calls, however loaded the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The most one launcher evaluation may take. The scripts only assign
/// variables and call recorders; anything longer is a loop waiting for a
/// server or file that will never come.
pub const TIME_LIMIT: Duration = Duration::from_secs(20);

const PRELUDE: &str = include_str!("sandbox/prelude.sh");
const BENCHMARK_LIB: &str = include_str!("sandbox/benchmark_lib.sh");

/// Recorder names that get an executable in the PATH folder too (for
/// `sudo X`, `timeout N X`, `xargs X`, which start them as programs).
const RECORDED: [&str; 14] = [
    "vllm", "python3", "python", "pip", "pip3", "hf", "huggingface-cli", "nvidia-smi", "amd-smi", "rocm-smi",
    "curl", "wget", "sleep", "docker",
];

/// Real programs the launchers may use for text and files; they run as they
/// are (inside the sandbox they only see the throwaway folders).
const REAL_TOOLS: [&str; 45] = [
    "cat", "grep", "egrep", "sed", "awk", "cut", "tr", "head", "tail", "sort", "uniq", "wc", "seq", "paste", "basename",
    "dirname", "readlink", "realpath", "mkdir", "rm", "cp", "mv", "ln", "touch", "ls", "date", "env", "printf",
    "echo", "test", "true", "false", "mktemp", "tee", "find", "xargs", "expr", "bc", "jq", "id", "whoami",
    "uname", "stat", "chmod", "bash",
];

/// Variables of the recorded environment that are the shell's or ours, not
/// the launcher's.
const SHELL_VARS: [&str; 10] =
    ["PATH", "PWD", "OLDPWD", "SHLVL", "_", "BASH_ENV", "EB_IMPORT_REC", "EB_IMPORT_LIB", "EB_IMPORT_FACTS", "HOME"];

/// One recorded call: a `vllm serve`, the client (`run_benchmark_serving`),
/// the agentic replay (`build_replay_cmd`) or the trace choice
/// (`resolve_trace_source`, argv = the loader).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The launcher's line (1-based; 0 when started through another program).
    pub line: u32,
    /// The arguments, exactly as bash passed them (after `vllm serve`).
    pub args: Vec<String>,
    /// The whole exported environment at that moment (sandbox variables removed).
    pub env: BTreeMap<String, String>,
}

/// What one evaluation saw.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub serves: Vec<Call>,
    pub clients: Vec<Call>,
    pub replays: Vec<Call>,
    pub traces: Vec<Call>,
    /// `(line, name)` of helper servers the launcher started beside the
    /// engine (`mooncake_master`, `vllm-router`, `lmcache server`).
    pub services: Vec<(u32, String)>,
    /// `(line, text)`: every reason the point cannot be trusted.
    pub problems: Vec<(u32, String)>,
    /// `(line, command line or file path)` of machine commands whose output
    /// was read, and machine files, for which no fact was given
    /// ([`super::machine`]).
    pub facts_needed: Vec<(u32, String)>,
    /// `(line, command line or file path)` of machine facts the launcher read.
    pub facts_used: Vec<(u32, String)>,
    /// `(line, download command)` of stubbed downloads into a folder, whose
    /// checkpoint was counted as present.
    pub checkpoints: Vec<(u32, String)>,
}

/// Where the launcher lives: `root` is bound read-only at `/inferencex` and
/// the launcher runs as `/inferencex/<rel>`, so `$(dirname "$0")` and
/// relative `source`s resolve as in a checkout.
pub struct Script<'a> {
    pub root: &'a Path,
    pub rel: &'a Path,
}

/// Runs the launcher with exactly `env` (plus `PATH`, `HOME`, `BASH_ENV`);
/// `facts` (command line to output) answer the machine commands whose
/// output the launcher reads.
///
/// Errors: the sandbox could not be made or started (a message naming what
/// to install or fix). Problems of the launcher itself are in the
/// [`Outcome`], not errors.
pub fn evaluate(script: &Script, env: &BTreeMap<String, String>, facts: &BTreeMap<String, String>) -> Result<Outcome, String> {
    let dir = TempDir::new()?;
    let (bin, lib, rec, known, sys) = (dir.0.join("bin"), dir.0.join("lib"), dir.0.join("rec"), dir.0.join("facts"), dir.0.join("sys"));
    for d in [&bin, &lib, &rec, &known, &sys] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot make {}: {e}", d.display()))?;
    }
    for (cmd, output) in facts {
        // A file fact lies at its own path in the sandbox's /sys; a command's
        // output in the facts folder, named by the command line's bytes.
        match cmd.strip_prefix("/sys/") {
            Some(rel) if !rel.split('/').any(|c| c == ".." || c.is_empty()) => {
                let p = sys.join(rel);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
                }
                write(&p, output)?;
            }
            _ => write(&known.join(super::machine::fact_file_name(cmd)), output)?,
        }
    }
    write(&lib.join("prelude.sh"), PRELUDE)?;
    write(&lib.join("benchmark_lib.sh"), BENCHMARK_LIB)?;
    for tool in RECORDED {
        let p = bin.join(tool);
        write(&p, &format!("#!/usr/bin/bash\n{tool} \"$@\"\n"))?;
        set_executable(&p)?;
    }
    for tool in REAL_TOOLS {
        // Resolved: /usr/bin/awk is a link through /etc/alternatives, which the sandbox lacks.
        let real = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists()).and_then(|p| p.canonicalize().ok());
        if let Some(real) = real {
            std::os::unix::fs::symlink(&real, bin.join(tool)).map_err(|e| format!("cannot link {tool}: {e}"))?;
        }
    }

    let bwrap = which("bwrap").ok_or(
        "the import runs launchers under bubblewrap, and `bwrap` is not on PATH: install it (Debian/Ubuntu: apt-get install bubblewrap)",
    )?;
    let mut vars: BTreeMap<String, String> = env.clone();
    vars.insert("PATH".into(), "/eb/bin".into());
    vars.insert("HOME".into(), "/tmp".into());
    vars.insert("BASH_ENV".into(), "/eb/lib/prelude.sh".into());
    vars.insert("EB_IMPORT_REC".into(), "/eb/rec".into());
    vars.insert("EB_IMPORT_LIB".into(), "/eb/lib".into());
    vars.insert("EB_IMPORT_FACTS".into(), "/eb/facts".into());

    let secs = TIME_LIMIT.as_secs().to_string();
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "2", &secs]);
    cmd.arg(&bwrap).args(["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]);
    cmd.args(["--ro-bind", "/usr", "/usr"]);
    for top in ["/bin", "/lib", "/lib64", "/sbin"] {
        match std::fs::read_link(top) {
            Ok(target) => cmd.arg("--symlink").arg(target).arg(top),
            Err(_) if Path::new(top).exists() => cmd.args(["--ro-bind", top, top]),
            Err(_) => &mut cmd,
        };
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/workspace"]);
    cmd.arg("--ro-bind").arg(&bin).arg("/eb/bin");
    cmd.arg("--ro-bind").arg(&lib).arg("/eb/lib");
    cmd.arg("--bind").arg(&rec).arg("/eb/rec");
    cmd.arg("--ro-bind").arg(&known).arg("/eb/facts");
    // What the launchers read of the machine as files (RDMA rails under
    // /sys/class/infiniband): only the file facts, given or read here
    // (super::machine), never this machine's /sys unrecorded.
    cmd.arg("--ro-bind").arg(&sys).arg("/sys");
    cmd.arg("--ro-bind").arg(script.root).arg("/inferencex");
    cmd.args(["--chdir", "/workspace"]);
    for (k, v) in &vars {
        cmd.args(["--setenv", k, v]);
    }
    cmd.args(["/usr/bin/bash", "--noprofile", "--norc"]).arg(Path::new("/inferencex").join(script.rel));
    // A file, not a pipe: a recorder reads a pipe on its stdout as "my output is used".
    let log = dir.0.join("stdout.log");
    let stdout = std::fs::File::create(&log).map_err(|e| format!("cannot make {}: {e}", log.display()))?;
    let out = cmd
        .stdin(Stdio::null())
        .stdout(stdout)
        .output()
        .map_err(|e| format!("cannot start the import sandbox (timeout, bwrap/unshare, bash): {e}"))?;
    if out.status.code() == Some(1) && String::from_utf8_lossy(&out.stderr).starts_with("bwrap:") {
        return Err(format!("bubblewrap could not make the sandbox: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }

    let mut outcome = Outcome {
        serves: read_calls(&rec, "serve")?,
        clients: read_calls(&rec, "client")?,
        replays: read_calls(&rec, "replay")?,
        traces: read_calls(&rec, "trace")?,
        ..Outcome::default()
    };
    if let Ok(text) = std::fs::read_to_string(rec.join("services")) {
        for l in text.lines() {
            let (line, name) = l.split_once('\t').unwrap_or(("0", l));
            outcome.services.push((line.parse().unwrap_or(0), name.to_string()));
        }
    }
    outcome.problems = read_lines(&rec, "problems");
    outcome.facts_needed = read_lines(&rec, "facts_needed");
    outcome.facts_used = read_lines(&rec, "facts_used");
    outcome.checkpoints = read_lines(&rec, "checkpoints");
    let cut = cut_off_records(&rec);
    if cut > 0 {
        outcome.problems.push((
            0,
            format!("{cut} recorded call(s) were cut off before their environment was written (the launcher ended while a background recorder ran): what it was called with is unknown"),
        ));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let diag = regex::Regex::new(r"^(\S+): line (\d+): (.*)$").expect("valid regex");
    for l in stderr.lines() {
        if let Some(c) = diag.captures(l) {
            let file = c[1].rsplit('/').next().unwrap_or(&c[1]).to_string();
            outcome.problems.push((c[2].parse().unwrap_or(0), format!("bash ({file}): {}", &c[3])));
        }
    }
    match out.status.code() {
        Some(0) => {}
        Some(124) | Some(137) | None => outcome
            .problems
            .push((0, format!("the launcher did not finish within {secs} s (waiting for something that never comes?)"))),
        Some(code) => {
            let last = std::fs::read_to_string(rec.join("lasterr")).unwrap_or_default();
            let (line, what) = last.trim_end().split_once('\t').unwrap_or(("0", ""));
            // What the launcher said last (its own error message; `set -x` traces and bash's diagnostics left out).
            let said = stderr.lines().rev().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('+') && !diag.is_match(l));
            outcome.problems.push((
                line.parse().unwrap_or(0),
                format!(
                    "the launcher exited with status {code}{}{}",
                    if what.is_empty() { String::new() } else { format!(" after `{what}` failed") },
                    said.map(|l| format!(" (it said: {})", l.chars().take(300).collect::<String>())).unwrap_or_default()
                ),
            ));
        }
    }
    Ok(outcome)
}

/// The recorded calls of `kind` (`serve`, `client`, ...), ordered by line,
/// then arguments, then environment: the same launcher gives the same list
/// whatever order background recorders finished in.
fn read_calls(rec: &Path, kind: &str) -> Result<Vec<Call>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(rec).map_err(|e| format!("cannot read {}: {e}", rec.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.strip_prefix(kind).and_then(|n| n.strip_prefix('.')).is_none() {
            continue;
        }
        let read = |file: &str| std::fs::read(e.path().join(file)).map_err(|err| format!("record {name}/{file}: {err}"));
        let split = |bytes: Vec<u8>| -> Vec<String> {
            bytes.split(|&b| b == 0).map(|s| String::from_utf8_lossy(s).to_string()).collect::<Vec<_>>()
        };
        let mut args = split(read("args")?);
        args.pop(); // after the last NUL
        let env = split(read("env")?)
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .filter(|(k, _)| !SHELL_VARS.contains(&k.as_str()) && !k.starts_with("BASH_FUNC_"))
            .collect();
        let line = String::from_utf8_lossy(&read("line")?).trim().parse().unwrap_or(0);
        out.push(Call { line, args, env });
    }
    out.sort_by(|a, b| (a.line, &a.args, &a.env).cmp(&(b.line, &b.args, &b.env)));
    Ok(out)
}

/// The `LINE<TAB>TEXT` lines of a recorder file (none when absent), sorted
/// and without repeats.
fn read_lines(rec: &Path, file: &str) -> Vec<(u32, String)> {
    let text = std::fs::read_to_string(rec.join(file)).unwrap_or_default();
    let mut out: Vec<(u32, String)> = text
        .lines()
        .map(|l| {
            let (line, what) = l.split_once('\t').unwrap_or(("0", l));
            (line.parse().unwrap_or(0), what.to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Records a recorder began and never finished (`.partial.*` folders): the
/// sandbox ended while one was writing.
fn cut_off_records(rec: &Path) -> usize {
    std::fs::read_dir(rec)
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".partial.")).count())
        .unwrap_or(0)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

fn write(p: &Path, text: &str) -> Result<(), String> {
    std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

fn set_executable(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).map_err(|e| format!("chmod {}: {e}", p.display()))
}

/// A folder under the system temp folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir()
            .join(format!("enginebench-import-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("cannot make {}: {e}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
