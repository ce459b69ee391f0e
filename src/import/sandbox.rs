//! Runs one InferenceX launcher under real bash for one search-space point,
//! with every external command replaced by a recorder, and returns what
//! `vllm serve`, the client and the agentic replay were called with.
//!
//! The sandbox ([`launch`]): `bash --noprofile --norc LAUNCHER` inside
//! bubblewrap (`bwrap --unshare-all`: no network, own PID/IPC/UTS/user
//! namespaces) as an unprivileged user with no capabilities, with a cleared
//! environment (exactly the point's variables, `PATH` = the recorder
//! folder only), `/usr` read-only, a size-limited throwaway tmpfs as its
//! root (`/tmp`, `/workspace`: the working directory), the checkout
//! read-only at `/inferencex`, a process limit and a time limit (the
//! caller's, at most [`POINT_LIMIT`] by default). `BASH_ENV` sources
//! `sandbox/prelude.sh`, which defines the recorders as shell functions (so
//! each knows the launcher's line) and replaces `benchmark_lib.sh` by
//! `sandbox/benchmark_lib.sh`. The recorded programs' own files under
//! `/usr` (`/usr/bin/curl`, `/usr/bin/python3`, ...; [`by_path_refused`])
//! are covered by a stub that fails the point: run by its path, a program
//! would bypass its recorder.
//!
//! Without bubblewrap (`bwrap` not on PATH) nothing runs: the import fails
//! with exit 2 and says to install it (Debian: `apt-get install
//! bubblewrap`). A weaker fallback (`unshare --net`, PATH isolation only)
//! was rejected: launchers write to absolute paths (`/workspace/server.log`)
//! that would then be the user's. As root, where bubblewrap cannot run the
//! launcher as an unprivileged user, nothing runs unless `--unsafe-import`
//! ([`identity`]).
//!
//! `/sys` in the sandbox holds only the machine facts that are files
//! ([`super::machine`]); a text tool that reads an unknown path there stops
//! the launcher (prelude.sh `__eb_files`).
//!
//! A point fails (nothing is guessed) when: a command that has no recorder
//! runs, a recorder's output is read (`$(nvidia-smi ...)`), bash reports an
//! error (`script: line N: ...`), the launcher exits non-zero, the time limit
//! passes, a recorder was cut off before its record was whole, `vllm
//! serve` never runs, a recorded program is run by its path, the standard
//! error passes its cap, or a record is not a plain file within its size
//! ([`records`]). Each problem names its line.
//!
//! Determinism: a record is written into a fresh folder and renamed into
//! place once whole, the launcher's shell waits for its background
//! recorders before it exits (prelude.sh overrides `exit`), and calls are
//! ordered by content, not by which recorder finished first: the same
//! checkout and point give the same calls, however loaded the machine.

pub mod launch;
pub mod probe;
pub mod records;

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use launch::{Identity, Spec, Status};
use records::Folder;

/// The most one launcher evaluation may take by default
/// (`--launcher-timeout`). The scripts only assign variables and call
/// recorders; anything longer is a loop waiting for a server or file that
/// will never come.
pub const POINT_LIMIT: Duration = Duration::from_secs(20);
/// The most a whole import may take by default (`--import-timeout`): every
/// point of every fact round together.
pub const IMPORT_LIMIT: Duration = Duration::from_secs(600);

const PRELUDE: &str = include_str!("sandbox/prelude.sh");
const BENCHMARK_LIB: &str = include_str!("sandbox/benchmark_lib.sh");
const BY_PATH: &str = include_str!("sandbox/by_path.sh");

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

/// Folders of the system whose recorded programs are covered by the
/// refusing stub in the sandbox.
const PROGRAM_DIRS: [&str; 4] = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"];

/// Variables of the recorded environment that are the shell's or ours, not
/// the launcher's.
const SHELL_VARS: [&str; 10] =
    ["PATH", "PWD", "OLDPWD", "SHLVL", "_", "BASH_ENV", "EB_IMPORT_REC", "EB_IMPORT_LIB", "EB_IMPORT_FACTS", "HOME"];

/// How launchers are run: the command line's `--launcher-timeout`,
/// `--import-timeout` and `--unsafe-import`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The most one point's evaluation may take.
    pub point_limit: Duration,
    /// The most the whole import may take.
    pub import_limit: Duration,
    /// As root, run launchers even where bubblewrap cannot run them as an
    /// unprivileged user ([`Identity::RootWithoutCaps`]).
    pub unsafe_import: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { point_limit: POINT_LIMIT, import_limit: IMPORT_LIMIT, unsafe_import: false }
    }
}

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
    /// True when the launcher was stopped at its time limit.
    pub timed_out: bool,
}

/// Where the launcher lives: `root` is bound read-only at `/inferencex` and
/// the launcher runs as `/inferencex/<rel>`, so `$(dirname "$0")` and
/// relative `source`s resolve as in a checkout.
pub struct Script<'a> {
    pub root: &'a Path,
    /// Relative, without `..` (checked).
    pub rel: &'a Path,
}

/// Whom launchers run as on this machine: the importing user when it is
/// not root; as root, a uid of the sandbox's own when bubblewrap can make
/// a user namespace as that uid ([`probe::switched`], once per process),
/// else root without capabilities if `unsafe_import`.
///
/// Errors: root, no unprivileged user namespace, and no `--unsafe-import`
/// (what to do instead).
pub fn identity(unsafe_import: bool) -> Result<Identity, String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Ok(Identity::Caller(euid));
    }
    match probe::switched() {
        Ok(()) => Ok(Identity::Switched(launch::sandbox_uid())),
        Err(_) if unsafe_import => Ok(Identity::RootWithoutCaps),
        Err(why) => Err(format!(
            "running as root, the import runs launchers as an unprivileged user in a user namespace, and here bubblewrap cannot ({why}): allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; Debian: kernel.unprivileged_userns_clone=1; Ubuntu: kernel.apparmor_restrict_unprivileged_userns=0), or import as a user other than root, or give --unsafe-import to run the launchers as root with every capability dropped but no process limit (`enginebench doctor` shows the sandbox)"
        )),
    }
}

/// Runs the launcher with exactly `env` (plus `PATH`, `HOME`, `BASH_ENV`)
/// for at most `limit`; `facts` (command line to output) answer the
/// machine commands whose output the launcher reads.
///
/// Errors: the sandbox could not be made or started (a message naming what
/// to install or fix), or the launcher path leaves its folder. Problems of
/// the launcher itself are in the [`Outcome`], not errors.
pub fn evaluate(
    script: &Script,
    env: &BTreeMap<String, String>,
    facts: &BTreeMap<String, String>,
    limit: Duration,
    settings: &Settings,
) -> Result<Outcome, String> {
    if script.rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(format!("launcher {}: not a path inside its folder", script.rel.display()));
    }
    let identity = identity(settings.unsafe_import)?;
    if let Identity::Switched(_) = identity {
        if let Some(closed) = closed_to_others(script.root, script.rel) {
            return Err(format!(
                "{}: the sandbox runs launchers as an unprivileged user, and this is not readable by every user: make the checkout readable (chmod -R a+rX {})",
                closed.display(),
                script.root.display()
            ));
        }
    }
    let dir = TempDir::new()?;
    let (bin, lib, known, sys) = (dir.0.join("bin"), dir.0.join("lib"), dir.0.join("facts"), dir.0.join("sys"));
    for d in [&bin, &lib, &known, &sys] {
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
    let by_path = lib.join("by_path.sh");
    write(&by_path, BY_PATH)?;
    set_executable(&by_path)?;
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
    // Readable by the sandbox's uid whatever the umask.
    open_up(&dir.0)?;

    let mut vars: BTreeMap<String, String> = env.clone();
    vars.insert("PATH".into(), "/eb/bin".into());
    vars.insert("HOME".into(), "/tmp".into());
    vars.insert("EB_IMPORT_REC".into(), "/eb/rec".into());
    vars.insert("EB_IMPORT_LIB".into(), "/eb/lib".into());
    vars.insert("EB_IMPORT_FACTS".into(), "/eb/facts".into());
    let mut ro: Vec<(&Path, String)> = vec![
        (&bin, "/eb/bin".into()),
        (&lib, "/eb/lib".into()),
        (&known, "/eb/facts".into()),
        // What the launchers read of the machine as files (RDMA rails under
        // /sys/class/infiniband): only the file facts, given or read here
        // (super::machine), never this machine's /sys unrecorded.
        (&sys, "/sys".into()),
        (script.root, "/inferencex".into()),
    ];
    let shadowed = by_path_refused();
    ro.extend(shadowed.iter().map(|p| (by_path.as_path(), p.display().to_string())));
    let launcher = Path::new("/inferencex").join(script.rel).display().to_string();
    let argv = ["/usr/bin/env", "BASH_ENV=/eb/lib/prelude.sh", "/usr/bin/bash", "--noprofile", "--norc", &launcher];
    let ended = launch::run(&Spec {
        ro,
        env: &vars,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        chdir: "/workspace",
        limit,
        identity,
    })?;

    let mut outcome = Outcome { timed_out: ended.status == Status::TimedOut, ..Outcome::default() };
    if let Some(rec) = &ended.records {
        outcome.serves = read_calls(rec, "serve")?;
        outcome.clients = read_calls(rec, "client")?;
        outcome.replays = read_calls(rec, "replay")?;
        outcome.traces = read_calls(rec, "trace")?;
        // In the order started (a service started twice is noted twice).
        outcome.services = line_pairs(&rec.text("services")?);
        outcome.problems = read_lines(rec, "problems")?;
        outcome.facts_needed = read_lines(rec, "facts_needed")?;
        outcome.facts_used = read_lines(rec, "facts_used")?;
        outcome.checkpoints = read_lines(rec, "checkpoints")?;
    }
    let cut = ended.records.as_ref().map_or(0, |rec| rec.names().iter().filter(|n| n.starts_with(".partial.")).count());
    if cut > 0 {
        outcome.problems.push((
            0,
            format!("{cut} recorded call(s) were cut off before their environment was written (the launcher ended while a background recorder ran): what it was called with is unknown"),
        ));
    }
    if ended.stderr_cut {
        outcome.problems.push((
            0,
            format!("the launcher wrote more than {} KiB to standard error: the rest was dropped unread (bash's diagnostics among it)", launch::STDERR_BYTES >> 10),
        ));
    }
    let stderr = &ended.stderr;
    let diag = regex::Regex::new(r"^(\S+): line (\d+): (.*)$").expect("valid regex");
    for l in stderr.lines() {
        if let Some(c) = diag.captures(l) {
            let file = c[1].rsplit('/').next().unwrap_or(&c[1]).to_string();
            outcome.problems.push((c[2].parse().unwrap_or(0), format!("bash ({file}): {}", &c[3])));
        }
    }
    match ended.status {
        Status::Exited(0) => {}
        Status::TimedOut => outcome.problems.push((
            0,
            format!("the launcher did not finish within {} (waiting for something that never comes?)", seconds(limit)),
        )),
        Status::Signaled => outcome.problems.push((0, "the sandbox was ended by a signal".into())),
        Status::Exited(code) => {
            let last = match &ended.records {
                Some(rec) => rec.text("lasterr")?,
                None => String::new(),
            };
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

/// A duration for messages: `20 s`, `1.5 s` (a tenth at most).
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 { format!("{s} s") } else { format!("{s:.1} s") }
}

/// The files (real paths) under [`PROGRAM_DIRS`] of programs a recorder
/// stands for ([`RECORDED`], the machine commands of [`super::machine`],
/// every `python*`/`pip*` version) that resolve inside `/usr`: in the
/// sandbox each is covered by `sandbox/by_path.sh`, which fails the point.
pub fn by_path_refused() -> Vec<PathBuf> {
    let recorded = |name: &str| {
        RECORDED.contains(&name)
            || super::machine::MACHINE_COMMANDS.contains(&name)
            || ["python", "pip"].iter().any(|p| name.strip_prefix(p).is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.')))
    };
    let mut out = Vec::new();
    for dir in PROGRAM_DIRS {
        let found = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| recorded(&e.file_name().to_string_lossy()))
            // The file a link leads to is covered (covering covers every
            // name of it); a link that leaves /usr dangles in the sandbox.
            .filter_map(|e| e.path().canonicalize().ok())
            .filter(|real| real.starts_with("/usr/") && real.is_file());
        out.extend(found);
    }
    out.sort();
    out.dedup();
    out
}

/// The recorded calls of `kind` (`serve`, `client`, ...), ordered by line,
/// then arguments, then environment: the same launcher gives the same list
/// whatever order background recorders finished in.
///
/// Errors: a record that is not a folder of plain files within their size
/// ([`records`]), or lacks one of its three files.
fn read_calls(rec: &Folder, kind: &str) -> Result<Vec<Call>, String> {
    let mut out = Vec::new();
    for name in rec.names() {
        if name.strip_prefix(kind).and_then(|n| n.strip_prefix('.')).is_none() {
            continue;
        }
        let call = rec.folder(&name)?;
        let read = |file: &str| call.read(file).map_err(|e| format!("{name}/{e}"))?.ok_or_else(|| format!("record {name}/{file}: missing"));
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
///
/// Errors: as [`Folder::read`].
fn read_lines(rec: &Folder, file: &str) -> Result<Vec<(u32, String)>, String> {
    let mut out = line_pairs(&rec.text(file)?);
    out.sort();
    out.dedup();
    Ok(out)
}

/// `(line, text)` of each `LINE<TAB>TEXT` line, in order (line 0 when the
/// number is missing).
fn line_pairs(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .map(|l| {
            let (line, what) = l.split_once('\t').unwrap_or(("0", l));
            (line.parse().unwrap_or(0), what.to_string())
        })
        .collect()
}

fn write(p: &Path, text: &str) -> Result<(), String> {
    std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

/// The first of `root`, the folders of `rel` and the launcher itself that
/// a user other than its owner and group cannot enter (folders) or read
/// (the launcher): a sandbox switched to a uid of its own could not run it.
fn closed_to_others(root: &Path, rel: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let mut p = root.to_path_buf();
    let mut steps = vec![(p.clone(), 0o001)];
    let parts: Vec<_> = rel.components().collect();
    for (i, c) in parts.iter().enumerate() {
        p.push(c);
        steps.push((p.clone(), if i + 1 == parts.len() { 0o004 } else { 0o001 }));
    }
    steps.into_iter().find(|(p, bit)| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & bit == 0)).map(|(p, _)| p)
}

fn set_executable(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).map_err(|e| format!("chmod {}: {e}", p.display()))
}

/// Makes everything under `dir` readable (folders searchable) by any
/// user, and runnable by any user what its owner may run: the sandbox's
/// uid is not the one that wrote them. Links are left as they are.
fn open_up(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|e| format!("chmod {}: {e}", p.display()));
    chmod(dir, 0o755)?;
    for e in std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?.flatten() {
        let p = e.path();
        let t = e.file_type().map_err(|e| format!("{}: {e}", p.display()))?;
        if t.is_dir() {
            open_up(&p)?;
        } else if t.is_file() {
            let runnable = e.metadata().is_ok_and(|m| m.permissions().mode() & 0o100 != 0);
            chmod(&p, if runnable { 0o755 } else { 0o644 })?;
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkout folder only its owner may enter is named before a sandbox
    /// with a uid of its own would fail on it.
    #[test]
    fn folders_closed_to_other_users_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("benchmarks");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("l.sh"), "true\n").unwrap();
        for (p, mode) in [(dir.path(), 0o755), (sub.as_path(), 0o755), (sub.join("l.sh").as_path(), 0o644)] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let rel = Path::new("benchmarks/l.sh");
        assert_eq!(closed_to_others(dir.path(), rel), None);
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(closed_to_others(dir.path(), rel), Some(sub.clone()));
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(sub.join("l.sh"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(closed_to_others(dir.path(), rel), Some(sub.join("l.sh")));
        assert_eq!(seconds(Duration::from_secs(20)), "20 s");
        assert_eq!(seconds(Duration::from_millis(201)), "0.2 s");
    }
}
