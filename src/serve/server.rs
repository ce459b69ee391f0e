//! A real `vllm serve` on 127.0.0.1, started from the harness's venv and
//! stopped, with every process it started, on every exit path.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::process::{group_members, stop_group};

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// The Python venv holding vLLM (`<venv>/bin/vllm`, else
    /// `<venv>/bin/python -m vllm.entrypoints.cli.main`).
    pub venv: PathBuf,
    /// `vllm serve`'s positional MODEL (hub id or local folder).
    pub model: String,
    /// The recipe's `vllm serve` flags, exactly as on the command line.
    /// `--host` and `--port` are removed (see [`VllmServer::overridden_flags`]).
    pub args: Vec<String>,
    /// Set on top of this process's environment (the recipe's `[env]`, e.g.
    /// `VLLM_CPU_KVCACHE_SPACE`, `OMP_NUM_THREADS`). Everything else is
    /// inherited except [`ServerSpec::env_remove`].
    pub env: BTreeMap<String, String>,
    /// Removed from the server's environment (e.g. an in-process-only
    /// `VLLM_ENABLE_V1_MULTIPROCESSING=0` this process may have inherited).
    pub env_remove: Vec<String>,
    /// The server's stdout and stderr go here (truncated at start).
    pub log: PathBuf,
    /// Give up if not ready by then (vLLM's `bench serve` waits 600 s).
    pub ready_timeout: Duration,
    /// After SIGTERM, wait this long for the group to exit before SIGKILL.
    pub stop_grace: Duration,
}

impl ServerSpec {
    /// A spec with a 600 s ready timeout and a 10 s stop grace period.
    pub fn new(venv: impl Into<PathBuf>, model: impl Into<String>, args: Vec<String>, log: impl Into<PathBuf>) -> Self {
        ServerSpec {
            venv: venv.into(),
            model: model.into(),
            args,
            env: BTreeMap::new(),
            env_remove: Vec::new(),
            log: log.into(),
            ready_timeout: Duration::from_secs(600),
            stop_grace: Duration::from_secs(10),
        }
    }
}

/// A running `vllm serve`. Dropping it stops the server's whole process group
/// (API server, engine core, workers): SIGTERM, then SIGKILL after
/// [`ServerSpec::stop_grace`]. Because the server runs in its own process
/// group (it does not get the terminal's Ctrl-C), it is also started with
/// `PR_SET_PDEATHSIG = SIGTERM`: if the thread that started it ends (e.g.
/// enginebench is killed), the kernel sends it SIGTERM. So keep the guard on
/// the thread that started the server.
#[derive(Debug)]
pub struct VllmServer {
    child: Child,
    pgid: i32,
    port: u16,
    model_id: String,
    log: PathBuf,
    overridden: Vec<String>,
    stop_grace: Duration,
    stopped: bool,
}

/// How many ports to try when the free port is taken between our probe and
/// vLLM's bind.
const PORT_ATTEMPTS: usize = 3;

impl VllmServer {
    /// Starts the server on 127.0.0.1 and a free port, and waits until
    /// `GET /health` answers 200 and `GET /v1/models` lists a model.
    ///
    /// Errors: the venv has no vLLM, the log cannot be written, the server
    /// exited (the error carries the log's tail), or it was not ready within
    /// `ready_timeout` (the server is stopped first).
    pub fn start(spec: &ServerSpec) -> Result<VllmServer> {
        let (args, overridden) = strip_host_port(&spec.args);
        for flag in &overridden {
            tracing::warn!("recipe flag `{flag}` overridden: the server listens on 127.0.0.1 and a free port");
        }
        if let Some(dir) = spec.log.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        File::create(&spec.log).with_context(|| format!("creating {}", spec.log.display()))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            let mut server = spawn(spec, &args, port, overridden.clone())?;
            match server.wait_ready(spec.ready_timeout) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let lost_race = server.exited() && log_tail(&spec.log, 64 * 1024).contains("Address already in use");
                    drop(server);
                    if lost_race && attempt < PORT_ATTEMPTS {
                        tracing::warn!("port {port} was taken before vllm serve bound it; retrying on another");
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Process id of the `vllm serve` process, also its process group id.
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// The model id the server serves (the first of `GET /v1/models`): what
    /// requests must name in `model`.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Recipe flags that were dropped because the harness chooses the
    /// address (`--host X`, `--port=N`, ...), as given.
    pub fn overridden_flags(&self) -> &[String] {
        &self.overridden
    }

    /// Live processes of the server's process group (API server, engine
    /// core, workers), by pid.
    pub fn processes(&self) -> Vec<i32> {
        group_members(self.pgid)
    }

    /// Stops the server and every process of its group, reporting failure
    /// (dropping the guard does the same and only logs).
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        stop_group(self.pgid, &mut self.child, self.stop_grace).map_err(anyhow::Error::msg)
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build()?;
        let base = self.base_url();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "vllm serve exited ({status}) before it was ready; log {}:\n{}",
                    self.log.display(),
                    log_tail(&self.log, 4000)
                );
            }
            if let Some(id) = rt.block_on(probe(&http, &base)) {
                // ready, unless what answered is not our (just died) server
                if self.child.try_wait()?.is_none() {
                    self.model_id = id;
                    return Ok(());
                }
                continue;
            }
            if Instant::now() >= deadline {
                bail!(
                    "vllm serve not ready after {:.0} s; log {}:\n{}",
                    timeout.as_secs_f64(),
                    self.log.display(),
                    log_tail(&self.log, 4000)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for VllmServer {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Err(e) = stop_group(self.pgid, &mut self.child, self.stop_grace) {
            tracing::error!("stopping vllm serve: {e}");
        }
    }
}

/// `GET /health` then `GET /v1/models`: the first model id once both answer.
async fn probe(http: &reqwest::Client, base: &str) -> Option<String> {
    let health = http.get(format!("{base}/health")).send().await.ok()?;
    if !health.status().is_success() {
        return None;
    }
    let models = http.get(format!("{base}/v1/models")).send().await.ok()?;
    if !models.status().is_success() {
        return None;
    }
    let body: serde_json::Value = serde_json::from_slice(&models.bytes().await.ok()?).ok()?;
    body.get("data")?.get(0)?.get("id")?.as_str().map(str::to_string)
}

fn spawn(spec: &ServerSpec, args: &[String], port: u16, overridden: Vec<String>) -> Result<VllmServer> {
    let vllm = spec.venv.join("bin/vllm");
    let mut cmd = if vllm.is_file() {
        Command::new(vllm)
    } else {
        let mut c = Command::new(spec.venv.join("bin/python"));
        c.args(["-m", "vllm.entrypoints.cli.main"]);
        c
    };
    cmd.arg("serve").arg(&spec.model).args(args);
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()]);
    for k in &spec.env_remove {
        cmd.env_remove(k);
    }
    cmd.envs(&spec.env);
    let mut log = OpenOptions::new()
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("opening {}", spec.log.display()))?;
    writeln!(log, "# enginebench: {cmd:?}")?;
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().with_context(|| format!("starting vllm serve from {}", spec.venv.display()))?;
    let pgid = child.id() as i32;
    tracing::info!("vllm serve started: pid {pgid}, port {port}, log {}", spec.log.display());
    Ok(VllmServer {
        child,
        pgid,
        port,
        model_id: String::new(),
        log: spec.log.clone(),
        overridden,
        stop_grace: spec.stop_grace,
        stopped: false,
    })
}

/// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then
/// released): another process may take it before vLLM binds it, which
/// [`VllmServer::start`] handles by retrying.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Removes `--host X`, `--host=X`, `--port N`, `--port=N` from `args`;
/// returns the remaining flags and the removed ones as given.
pub fn strip_host_port(args: &[String]) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--host" || a == "--port" {
            match it.next() {
                Some(v) => removed.push(format!("{a} {v}")),
                None => removed.push(a.clone()),
            }
        } else if a.starts_with("--host=") || a.starts_with("--port=") {
            removed.push(a.clone());
        } else {
            kept.push(a.clone());
        }
    }
    (kept, removed)
}

/// The last `max` bytes of the log file (from a line start where possible).
pub fn log_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    match (start > 0, text.find('\n')) {
        (true, Some(i)) => text[i + 1..].to_string(),
        _ => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn host_and_port_are_stripped_and_reported() {
        let (kept, removed) = strip_host_port(&s(&[
            "--dtype", "float32", "--host", "0.0.0.0", "--port=9000", "--enforce-eager", "--port", "8000",
        ]));
        assert_eq!(kept, s(&["--dtype", "float32", "--enforce-eager"]));
        assert_eq!(removed, s(&["--host 0.0.0.0", "--port=9000", "--port 8000"]));
    }

    /// A fake venv whose `bin/vllm` is the shell script `body`.
    fn fake_venv(body: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let script = bin.join("vllm");
        std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn a_server_that_dies_reports_its_log() {
        let dir = fake_venv("echo \"args: $*\"\necho boom >&2\nexit 3");
        let spec = ServerSpec::new(dir.path(), "m", s(&["--port", "1"]), dir.path().join("logs/serve.log"));
        let err = format!("{:#}", VllmServer::start(&spec).unwrap_err());
        assert!(err.contains("exited") && err.contains("boom"), "{err}");
        assert!(err.contains("args: serve m --host 127.0.0.1 --port "), "{err}");
        assert!(!err.contains("--port 1 "), "{err}");
    }

    #[test]
    fn a_lost_port_race_is_retried_on_other_ports() {
        let dir = fake_venv("echo try >> \"$(dirname \"$0\")/../tries\"\necho 'OSError: [Errno 98] Address already in use' >&2\nexit 1");
        let spec = ServerSpec::new(dir.path(), "m", vec![], dir.path().join("serve.log"));
        let err = format!("{:#}", VllmServer::start(&spec).unwrap_err());
        assert!(err.contains("Address already in use"), "{err}");
        let tries = std::fs::read_to_string(dir.path().join("tries")).unwrap();
        assert_eq!(tries.lines().count(), PORT_ATTEMPTS);
    }

    #[test]
    fn a_server_that_never_gets_ready_is_stopped() {
        let dir = fake_venv("echo $$ > \"$(dirname \"$0\")/../pid\"\nsleep 60 & wait");
        let mut spec = ServerSpec::new(dir.path(), "m", vec![], dir.path().join("serve.log"));
        spec.ready_timeout = Duration::from_millis(800);
        let err = format!("{:#}", VllmServer::start(&spec).unwrap_err());
        assert!(err.contains("not ready after"), "{err}");
        let pid: i32 = std::fs::read_to_string(dir.path().join("pid")).unwrap().trim().parse().unwrap();
        assert!(group_members(pid).is_empty(), "the fake server and its sleep are gone");
    }

    #[test]
    fn log_tail_starts_at_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "first line\nsecond\nthird\n").unwrap();
        assert_eq!(log_tail(&p, 13), "third\n");
        assert_eq!(log_tail(&p, 1000), "first line\nsecond\nthird\n");
    }
}
