//! Starting the worker process and capturing its log.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use indicatif::MultiProgress;

use crate::protocol::Task;
use crate::python::Interpreter;
use crate::python::native::worker_command;

/// A running worker: its process, its message stream, the tail of its log.
pub struct Worker {
    pub child: std::process::Child,
    pub stdout: Option<std::process::ChildStdout>,
    pub log_tail: Arc<Mutex<VecDeque<String>>>,
}

/// Lines of the worker log kept for error reports.
pub const LOG_TAIL_LINES: usize = 30;

/// Starts a worker in `python` (see [`crate::python::native`]) with `env`, sends it `task`, and saves
/// everything it prints (Python, vLLM) to `log_path`, echoing it under `-v`.
pub fn spawn_worker(
    python: &Interpreter,
    task: &Task,
    env: &BTreeMap<String, String>,
    env_unset: &[String],
    log_path: &Path,
    verbose: bool,
    ui: &MultiProgress,
) -> Result<Worker> {
    let mut command = worker_command(python)?;
    for k in env_unset {
        command.env_remove(k);
    }
    // Its own process group: Ctrl-C in the terminal reaches only the
    // orchestrator, which decides how to stop the worker (and the worker
    // dies with the orchestrator through PR_SET_PDEATHSIG).
    let mut child = command
        .process_group(0)
        .envs(env)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the engine worker")?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(&serde_json::to_vec(task)?)?;
    drop(stdin);

    let log_tail = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL_LINES)));
    let stderr = child.stderr.take().expect("piped");
    let mut log = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let tail = Arc::clone(&log_tail);
    let ui = ui.clone();
    // Named threads (here and below) let a profile tell ours from vLLM's.
    std::thread::Builder::new().name("eb-worker-log".into()).spawn(move || {
        // Progress bars of Python (tqdm) redraw with '\r': split on both.
        let mut reader = BufReader::new(stderr);
        let mut buf = Vec::new();
        while reader.read_until(b'\n', &mut buf).map(|n| n > 0).unwrap_or(false) {
            let _ = log.write_all(&buf);
            let text = String::from_utf8_lossy(&buf);
            let line = text.rsplit('\r').find(|s| !s.trim().is_empty()).unwrap_or("").trim_end();
            if !line.is_empty() {
                if verbose {
                    super::progress::say(&ui, line);
                }
                if let Ok(mut t) = tail.lock() {
                    if t.len() == LOG_TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(line.to_string());
                }
            }
            buf.clear();
        }
    })?;
    let stdout = child.stdout.take();
    Ok(Worker { child, stdout, log_tail })
}


/// Runs a short task (flag check, doctor) in a worker of `python`, with
/// `env` added to its environment, and returns the message `pick` selects.
/// The log is kept only on failure.
///
/// Errors: the worker reported an error (usage when it said bad input, e.g.
/// a vLLM that does not import), or ended without the message.
pub fn ask_worker<T>(
    python: &Interpreter,
    task: &Task,
    what: &str,
    env: &BTreeMap<String, String>,
    mut pick: impl FnMut(crate::protocol::Message) -> Option<T>,
) -> Result<T> {
    use crate::protocol::Message;
    let log = std::env::temp_dir().join(format!("enginebench-{what}-{}.log", std::process::id()));
    let mut worker = spawn_worker(python, task, env, &[], &log, false, &MultiProgress::new())?;
    let mut found = None;
    let mut error = None;
    for line in BufReader::new(worker.stdout.take().expect("piped")).lines() {
        match serde_json::from_str::<Message>(&line?) {
            Ok(Message::Error { message, bad_input, .. }) => error = Some((message, bad_input)),
            Ok(msg) => found = found.or_else(|| pick(msg)),
            Err(_) => {}
        }
    }
    let status = worker.child.wait()?;
    let tail = || worker.log_tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
    match (found, error) {
        (Some(r), _) if status.success() => {
            let _ = std::fs::remove_file(&log);
            Ok(r)
        }
        (_, Some((e, bad_input))) => {
            let message = format!("the {what} worker in {} failed: {e} (log: {})", python.path.display(), log.display());
            Err(if bad_input { crate::error::usage(message) } else { anyhow::anyhow!(message) })
        }
        _ => anyhow::bail!(
            "the {what} worker in {} ended unexpectedly ({status}); log: {}\n{}",
            python.path.display(),
            log.display(),
            tail()
        ),
    }
}

/// "exit code 1", "killed by signal 9 (SIGKILL)", ...
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL; out of memory is a common cause)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGBUS => " (SIGBUS)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        _ => "unknown status".into(),
    }
}

/// Kills every worker of `workers` and its process group, and reaps it
/// (workers that start together end together).
pub fn kill_all(workers: &mut [Worker]) {
    for w in workers {
        kill_group(w.child.id());
        let _ = w.child.wait();
    }
}

/// Kills the worker and everything it started (its own process group).
pub fn kill_group(pid: u32) {
    // SAFETY: signals to our own child's process group.
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

/// Starts a thread named `name` (a profile or /proc then tells ours from
/// vLLM's), as `std::thread::spawn` does otherwise: it panics only if the
/// OS cannot start a thread.
pub fn named_thread<F: FnOnce() + Send + 'static>(name: &str, f: F) {
    std::thread::Builder::new().name(name.into()).spawn(f).expect("the OS starts a thread");
}
