//! Starting one sandbox: bubblewrap as an unprivileged user, with limits,
//! and a record folder the host reads after it ends.
//!
//! **Who runs it.** A sandbox never holds a privilege of the importing
//! machine ([`Identity`]): as root, bubblewrap is started as a uid of its
//! own that no account and no other process has ([`sandbox_uid`]; the
//! group likewise, no supplementary groups), which then maps to uid 1000
//! inside a new user namespace; as another user, as that user. Every
//! capability is dropped (`--cap-drop ALL`; the launcher's uid is not 0
//! inside, so it gets none back), and nested user namespaces are off
//! (`--disable-userns`): a read-only bind cannot be remounted, nothing
//! outside the sandbox's own tmpfs is writable, and what it can read is
//! what its binds show and their owners let any user read. Where
//! bubblewrap cannot make a user namespace as that uid (unprivileged
//! user namespaces disabled), root runs launchers only with
//! `--unsafe-import`, as uid 0 without capabilities and without the
//! process limit ([`Identity::RootWithoutCaps`]).
//!
//! **Files.** The sandbox's root is a tmpfs of [`SCRATCH_BYTES`] (its
//! `/tmp`, `/workspace`, `/dev` and anything a launcher makes); `/usr` and
//! the host folders given are bound read-only from file descriptors opened
//! here (bubblewrap closes each after mounting it), `/dev` holds only
//! `null`, `zero`, `full`, `random` and `urandom`; `/proc` is the sandbox's
//! own, read-only, with `/proc/sys` hidden (procfs lets uid 0 write the
//! host's sysctls, and its other root-owned files, without a capability). The record folder `/eb/rec` is a tmpfs of
//! [`RECORD_BYTES`] the host holds open (`/proc/PID/root/eb/rec`, opened
//! before the launcher starts), so it outlives the sandbox and is read
//! with [`super::records`], never through a path the launcher could bend.
//!
//! **Limits.** [`PROCESSES`] processes (`RLIMIT_NPROC`, set before
//! bubblewrap starts; it counts per uid, hence the uid of its own), the
//! two tmpfs sizes, [`STDERR_BYTES`] of standard error kept (more fails
//! the point; standard output goes to `/dev/null`), and the time limit
//! the caller gives, after which bubblewrap is killed and with it
//! (`--die-with-parent`, its own PID namespace) every process of the
//! sandbox.
//!
//! **Start.** The command first runs a handshake shell: it says it is
//! ready on one pipe and waits for a byte on another, then `exec`s the
//! command; in between the host opens the record folder. Nothing of the
//! launcher has run by then.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::records::Folder;

/// Processes one sandbox may have at once, bubblewrap's two included
/// (`RLIMIT_NPROC`). InferenceX's launchers need a handful (the shell,
/// subshells, pipelines and background recorders).
pub const PROCESSES: u64 = 128;
/// Bytes of the sandbox's root tmpfs: `/tmp`, `/workspace`, `/dev/shm` and
/// whatever else a launcher writes (launchers write logs and a placeholder
/// `config.json`).
pub const SCRATCH_BYTES: u64 = 128 << 20;
/// Bytes of the record folder's tmpfs (a record is a few KiB: argv and
/// the exported environment).
pub const RECORD_BYTES: u64 = 16 << 20;
/// Bytes of the launcher's standard error that are kept; more fails the
/// point (bash's diagnostics could be among the bytes dropped).
pub const STDERR_BYTES: usize = 1 << 20;
/// The first uid (and gid) a sandbox started by root runs as: the range
/// `[SANDBOX_UID_BASE, SANDBOX_UID_BASE + 2^24)` lies above the ids
/// distributions give accounts and containers (systemd's UIDS-GIDS.md:
/// up to 0x6FFFFFFF for container ranges) and below 2^31.
pub const SANDBOX_UID_BASE: u32 = 0x7000_0000;
/// The uid the launcher has inside its user namespace.
pub const INNER_UID: u32 = 1000;

/// Whom the sandbox runs as, outside its user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// The importer's own uid (it is not root).
    Caller(u32),
    /// A uid of the sandbox's own ([`sandbox_uid`]), switched to by root
    /// before bubblewrap starts.
    Switched(u32),
    /// Root where no unprivileged user namespace can be made, with
    /// `--unsafe-import`: uid 0 outside, no capabilities, no process
    /// limit (the kernel does not apply `RLIMIT_NPROC` to uid 0).
    RootWithoutCaps,
}

impl Identity {
    /// For messages: `uid 1879048243 (a uid of its own; 1000 inside)`.
    pub fn describe(&self) -> String {
        match self {
            Identity::Caller(uid) => format!("uid {uid} (the importing user; {INNER_UID} inside)"),
            Identity::Switched(uid) => format!("uid {uid} (a uid of its own, no account; {INNER_UID} inside)"),
            Identity::RootWithoutCaps => format!("uid 0 (root, --unsafe-import; {INNER_UID} inside, no capabilities, no process limit)"),
        }
    }
}

/// A fresh uid for one sandbox started by root: the process id and a
/// counter, so that concurrent imports do not share a process limit.
pub fn sandbox_uid() -> u32 {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    SANDBOX_UID_BASE + (std::process::id().wrapping_mul(4099).wrapping_add(n) & 0x00FF_FFFF)
}

/// What one sandbox runs.
pub struct Spec<'a> {
    /// Host folders or files bound read-only, `(host path, sandbox path)`.
    pub ro: Vec<(&'a Path, String)>,
    /// The environment (nothing else is passed on).
    pub env: &'a BTreeMap<String, String>,
    /// What the handshake shell `exec`s.
    pub argv: Vec<String>,
    /// The working folder inside.
    pub chdir: &'a str,
    /// When the sandbox is killed.
    pub limit: Duration,
    pub identity: Identity,
}

/// How a sandbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The command's exit status.
    Exited(i32),
    /// Ended by a signal (bubblewrap's own, not the command's).
    Signaled,
    /// Killed at the time limit.
    TimedOut,
}

/// What a finished sandbox left.
pub struct Ended {
    pub status: Status,
    /// Its standard error, at most [`STDERR_BYTES`].
    pub stderr: String,
    /// True when it wrote more than [`STDERR_BYTES`] (the rest was dropped).
    pub stderr_cut: bool,
    /// `/eb/rec`, held open; `None` when the time limit passed before the
    /// command started.
    pub records: Option<Folder>,
}

/// `bwrap` on PATH.
pub fn bwrap() -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("bwrap")).find(|p| p.is_file()))
        .ok_or_else(|| {
            "the import runs launchers under bubblewrap, and `bwrap` is not on PATH: install it (Debian/Ubuntu: apt-get install bubblewrap)".to_string()
        })
}

/// Runs `spec` to its end or its time limit.
///
/// Errors: bubblewrap is missing or could not make the sandbox (its
/// message), a pipe or file descriptor could not be made, or the record
/// folder could not be opened.
pub fn run(spec: &Spec) -> Result<Ended, String> {
    let bwrap = bwrap()?;
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (info_r, info_w) = pipe()?;
    let mut binds = Vec::new();
    for (host, _) in &spec.ro {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(host)
            .map_err(|e| format!("cannot open {} for the sandbox: {e}", host.display()))?;
        binds.push(OwnedFd::from(f));
    }
    let (ready, go, info) = (ready_w.as_raw_fd(), go_r.as_raw_fd(), info_w.as_raw_fd());
    let mut cmd = Command::new(&bwrap);
    cmd.args(["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv"]);
    cmd.args(["--uid", &INNER_UID.to_string(), "--gid", &INNER_UID.to_string(), "--cap-drop", "ALL", "--disable-userns"]);
    cmd.args(["--info-fd", &info.to_string()]);
    // The root first: every mount point below is made in it.
    cmd.args(["--size", &SCRATCH_BYTES.to_string(), "--tmpfs", "/"]);
    cmd.args(["--ro-bind", "/usr", "/usr"]);
    for top in ["/bin", "/lib", "/lib64", "/sbin"] {
        match std::fs::read_link(top) {
            Ok(target) => cmd.arg("--symlink").arg(target).arg(top),
            Err(_) if Path::new(top).exists() => cmd.args(["--ro-bind", top, top]),
            Err(_) => &mut cmd,
        };
    }
    // /proc/sys hidden (an empty read-only tmpfs): procfs lets a uid 0
    // write the host's sysctls without any capability (--unsafe-import),
    // and its values are machine facts nobody recorded. The rest of /proc
    // read-only: its root-owned files (sysrq-trigger, ...) check the owner,
    // not a capability, and nothing of a launcher writes there.
    cmd.args(["--proc", "/proc", "--size", "4096", "--tmpfs", "/proc/sys", "--remount-ro", "/proc/sys", "--remount-ro", "/proc"]);
    cmd.args(["--dir", "/dev"]);
    for dev in ["null", "zero", "full", "random", "urandom"] {
        cmd.args(["--dev-bind", &format!("/dev/{dev}"), &format!("/dev/{dev}")]);
    }
    for (name, target) in [("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")] {
        cmd.args(["--symlink", target, &format!("/dev/{name}")]);
    }
    cmd.args(["--perms", "1777", "--dir", "/tmp", "--perms", "1777", "--dir", "/dev/shm", "--dir", "/workspace"]);
    cmd.args(["--size", &RECORD_BYTES.to_string(), "--tmpfs", "/eb/rec"]);
    for ((_, inside), fd) in spec.ro.iter().zip(&binds) {
        cmd.args(["--ro-bind-fd", &fd.as_raw_fd().to_string(), inside]);
    }
    cmd.args(["--chdir", spec.chdir]);
    for (k, v) in spec.env {
        cmd.args(["--setenv", k, v]);
    }
    // The handshake: ready, wait for the host, close the pipes, exec the command.
    let handshake = format!("printf r >&{ready}; exec {ready}>&- {info}>&-; read -r -n 1 _ <&{go}; exec {go}<&- \"$@\"");
    cmd.args(["/usr/bin/bash", "--noprofile", "--norc", "-c", &handshake, "sandbox"]).args(&spec.argv);

    let inherit: Vec<RawFd> = [ready, go, info].into_iter().chain(binds.iter().map(AsRawFd::as_raw_fd)).collect();
    let identity = spec.identity;
    let nproc = match identity {
        Identity::Caller(uid) => Some(PROCESSES + processes_of(uid)),
        Identity::Switched(_) => Some(PROCESSES),
        Identity::RootWithoutCaps => None,
    };
    // SAFETY: between fork and exec only async-signal-safe calls (fcntl,
    // setrlimit, prctl) on values made before the fork.
    if let Identity::Switched(uid) = identity {
        // Std drops the supplementary groups, then sets gid and uid (real,
        // effective and saved), before the closure below runs.
        cmd.uid(uid).gid(uid);
    }
    cmd.current_dir("/");
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(n) = nproc {
                let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After the uid change, which clears it: bubblewrap ends with the importer.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start bubblewrap ({}) for the import sandbox: {e}", bwrap.display()))?;
    drop((ready_w, go_r, info_w, binds));
    let started = Instant::now();
    let stderr = capture(child.stderr.take().expect("piped"));
    let fail = |child: &mut std::process::Child, why: String| {
        let _ = child.kill();
        let _ = child.wait();
        let said = stderr.recv_timeout(Duration::from_secs(2)).map(|(s, _)| s).unwrap_or_default();
        let said = said.trim();
        Err(if said.starts_with("bwrap:") { format!("bubblewrap could not make the sandbox: {said}") } else { format!("{why}{}", if said.is_empty() { String::new() } else { format!(": {said}") }) })
    };
    let mut ready_r = std::fs::File::from(ready_r);
    if !wait_readable(&ready_r, spec.limit) {
        // Not even started within the limit (little was left of an import's time).
        let _ = child.kill();
        let _ = child.wait();
        return Ok(Ended { status: Status::TimedOut, stderr: String::new(), stderr_cut: false, records: None });
    }
    if ready_r.read(&mut [0u8; 1]).unwrap_or(0) != 1 {
        return fail(&mut child, "the import sandbox did not start".into());
    }
    let mut info = String::new();
    let _ = std::fs::File::from(info_r).take(64 << 10).read_to_string(&mut info);
    let pid = serde_json::from_str::<serde_json::Value>(&info).ok().and_then(|v| v["child-pid"].as_u64());
    let Some(pid) = pid else { return fail(&mut child, format!("bubblewrap gave no child pid ({info:?})")) };
    let records = match Folder::open(&Path::new("/proc").join(pid.to_string()).join("root/eb/rec")) {
        Ok(f) => f,
        Err(e) => return fail(&mut child, format!("cannot open the sandbox's record folder: {e}")),
    };
    let mut go_w = std::fs::File::from(go_w);
    if std::io::Write::write_all(&mut go_w, b"g").is_err() {
        return fail(&mut child, "the import sandbox ended before its command started".into());
    }
    drop(go_w);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s.code().map_or(Status::Signaled, Status::Exited),
            Ok(None) if started.elapsed() >= spec.limit => {
                let _ = child.kill();
                let _ = child.wait();
                break Status::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("cannot wait for the import sandbox: {e}")),
        }
    };
    // Every process of the sandbox is gone with bubblewrap (its PID
    // namespace), so the pipe ends; the wait is bounded all the same.
    let (stderr, stderr_cut) = stderr.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    if status == Status::Exited(1) && stderr.starts_with("bwrap:") {
        return Err(format!("bubblewrap could not make the sandbox: {}", stderr.trim()));
    }
    Ok(Ended { status, stderr, stderr_cut, records: Some(records) })
}

/// Reads `pipe` to its end on a thread: the first [`STDERR_BYTES`] are
/// kept, the rest read and dropped (so the writer never blocks), and
/// whether anything was dropped.
fn capture(mut pipe: std::process::ChildStderr) -> std::sync::mpsc::Receiver<(String, bool)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 64 << 10];
        let mut cut = false;
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = STDERR_BYTES - kept.len();
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    cut |= n > room;
                }
            }
        }
        let _ = tx.send((String::from_utf8_lossy(&kept).into_owned(), cut));
    });
    rx
}

/// A pipe whose ends close on exec (the child clears that on the ends it passes on).
fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills the two descriptors, which are then owned here.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("cannot make a pipe for the import sandbox: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both are fresh descriptors owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether `f` has something to read (or its end) within `limit`.
fn wait_readable(f: &std::fs::File, limit: Duration) -> bool {
    let mut p = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = limit.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Processes of `uid` now (the entries of /proc it owns): a non-root
/// importer's process limit counts its other processes too.
fn processes_of(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
                .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
                .count() as u64
        })
        .unwrap_or(0)
}
