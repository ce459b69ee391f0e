//! The node group, `enginebench __node` (hidden): one per node of a job
//! that spans nodes. It reads its [`NodeTask`] on stdin, starts its node's
//! processes (DP ranks' workers, or node 0's engine worker / a headless
//! follower), samples the node's telemetry, and prints [`NodeEvent`]s on
//! stdout: its ranks' lines tagged with the rank, a telemetry window per
//! point over its ranks' part, the processes' ends, its sampler at the end.
//!
//! Signals: the job's stop signal (Ctrl-C's graceful stop) is passed to its
//! ranks; SIGTERM ends every process of the node (SIGTERM, then SIGKILL
//! after a grace) and the group, after it wrote its telemetry.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{MultiProgress, ProgressDrawTarget};
use signal_hook::consts::SIGTERM;

use super::{NodeEvent, NodeKind, NodeTask, wall_minus_mono_s};
use crate::error::ExitStatus;
use crate::orchestrate::dp::{allowed_cores, split_cores};
use crate::orchestrate::spawn::spawn_worker;
use crate::protocol::{Message, STOP_SIGNAL, Task};
use crate::telemetry::{Telemetry, TelemetryConfig};

/// How long processes get between SIGTERM and SIGKILL when the node ends.
const GRACE: Duration = Duration::from_secs(5);

/// The vLLM entry point a headless follower runs (`vllm serve`).
const VLLM_CLI: &str = "vllm.entrypoints.cli.main";

/// One process the group started.
struct Proc {
    child: Child,
    /// The DP rank (or the spanning engine's rank 0); `None`: a follower.
    rank: Option<u32>,
    exited: bool,
}

/// Runs the node group whose task is on stdin; exit 0 once its processes
/// ended and its telemetry is written (a process's failure is reported as
/// an event, for the job's watcher to judge).
pub fn run() -> Result<ExitStatus> {
    let task: NodeTask = serde_json::from_reader(std::io::stdin().lock()).context("reading the node task on stdin")?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let emit = {
        let out = Arc::clone(&out);
        move |e: &NodeEvent| {
            if let (Ok(mut o), Ok(text)) = (out.lock(), serde_json::to_string(e)) {
                let _ = writeln!(o, "{text}");
                let _ = o.flush();
            }
        }
    };
    let node = task.node;
    emit(&NodeEvent::Clock { node, wall_minus_mono_s: wall_minus_mono_s() });
    let telemetry = Telemetry::start(TelemetryConfig {
        interval: Duration::from_millis(task.telemetry_interval_ms),
        visible_gpus: task.visible.clone(),
        gpu_count_hint: None,
    });
    let mut procs = match start(&task) {
        Ok(p) => p,
        Err(e) => {
            emit(&NodeEvent::Failed { node, message: format!("node {node}: {e:#}") });
            telemetry.stop();
            return Ok(ExitStatus::Failed);
        }
    };
    if let Some(first) = procs.first() {
        telemetry.set_engine_pid(first.child.id());
    }
    let terminated = watch_signals(&procs);

    // The ranks' lines, from reader threads.
    let (tx, rx) = mpsc::channel::<(u32, Option<String>)>();
    let mut open = 0;
    for p in procs.iter_mut() {
        let (Some(rank), Some(stdout)) = (p.rank, p.child.stdout.take()) else { continue };
        open += 1;
        let tx = tx.clone();
        crate::orchestrate::spawn::named_thread("eb-node-rank-lines", move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((rank, Some(line))).is_err() {
                    return;
                }
            }
            let _ = tx.send((rank, None));
        });
    }
    drop(tx);
    let ranks: Vec<u32> = procs.iter().filter_map(|p| p.rank).collect();
    let mut windows = PointWindows::new(&ranks);
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((rank, Some(line))) => {
                if let Ok(Message::Point { raw }) = serde_json::from_str::<Message>(&line) {
                    windows.add(rank, &raw);
                }
                emit(&NodeEvent::Line { rank, line });
                while let Some((point, t0, t1, out_tokens, total_tokens)) = windows.next_ready() {
                    let window = telemetry.window(t0, t1, out_tokens, total_tokens);
                    emit(&NodeEvent::Window { node, point, window: Box::new(window) });
                }
            }
            Ok((rank, None)) => {
                open -= 1;
                emit(&NodeEvent::Closed { rank });
            }
            Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => {}
        }
        // A process that ended: its rank's stream closes too; a follower's
        // end is news (it serves until the job ends it).
        for p in procs.iter_mut().filter(|p| !p.exited) {
            if let Ok(Some(status)) = p.child.try_wait() {
                p.exited = true;
                let ok = status.success() || (p.rank.is_none() && terminated.load(Ordering::SeqCst));
                emit(&NodeEvent::Exited { node, rank: p.rank, ok, status: crate::orchestrate::spawn::describe_exit(status) });
            }
        }
        let followers_running = procs.iter().any(|p| p.rank.is_none() && !p.exited);
        if open == 0 && (!followers_running || terminated.load(Ordering::SeqCst)) && procs.iter().filter(|p| p.rank.is_some()).all(|p| p.exited) {
            break;
        }
        if open == 0 && ranks.is_empty() && !followers_running {
            break;
        }
    }
    // Followers end with the job: SIGTERM came, or every rank is done.
    end_all(&mut procs, node, &emit);
    let report = telemetry.stop();
    let series = format!("telemetry{}.node{node}.jsonl", task.suffix);
    report.write_jsonl(&task.dir.join(&series)).with_context(|| format!("writing {series}"))?;
    let info = crate::report::result::TelemetryInfo::of(&report, series);
    emit(&NodeEvent::Telemetry { node, info: Box::new(info) });
    Ok(ExitStatus::Ok)
}

/// Starts the node's processes: its DP ranks' workers, or (a spanning
/// engine) node 0's engine worker or a headless follower.
fn start(task: &NodeTask) -> Result<Vec<Proc>> {
    let ui = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
    let cores = allowed_cores();
    let mut procs = Vec::new();
    match (&task.plan.kind, &task.dp) {
        (NodeKind::DpRanks { .. }, Some(dp)) => {
            let args = &task.request.engine_argv[1..];
            let launches = dp.launches_for(task.plan.ranks_of(task.node), args, task.visible.as_deref(), (&task.master_ip, task.master_port), &cores);
            for launch in launches {
                let (env, unset) = launch.environment(&task.env, &task.unset);
                let log = task.dir.join(format!("worker{}.rank{}.log", task.suffix, launch.rank));
                let w = spawn_worker(&task.python, &Task::Run(launch.request(&task.request, dp)), &env, &unset, &log, false, &ui)?;
                let mut child = w.child;
                child.stdout = w.stdout;
                procs.push(Proc { child, rank: Some(launch.rank), exited: false });
            }
        }
        (NodeKind::Spanning { world_size }, _) => {
            let local_world = (world_size / task.plan.nodes).max(1) as usize;
            let mut env = task.env.clone();
            env.extend(cpu_binding(&cores, local_world));
            let flags = multi_node_flags(task);
            if task.node == 0 {
                let mut request = task.request.clone();
                request.engine_argv.extend(flags);
                let log = task.dir.join(format!("worker{}.rank0.log", task.suffix));
                let w = spawn_worker(&task.python, &Task::Run(request), &env, &task.unset, &log, false, &ui)?;
                let mut child = w.child;
                child.stdout = w.stdout;
                procs.push(Proc { child, rank: Some(0), exited: false });
            } else {
                let mut argv = task.request.engine_argv.clone();
                argv.extend(flags);
                argv.push("--headless".into());
                let log = task.dir.join(format!("worker{}.node{}.follower.log", task.suffix, task.node));
                procs.push(Proc { child: spawn_follower(task, &argv, &env, &log)?, rank: None, exited: false });
            }
        }
        (NodeKind::DpRanks { .. }, None) => anyhow::bail!("a DP node plan without the job's DP ranks"),
    }
    Ok(procs)
}

/// vLLM's multi-node executor flags of this node (`--nnodes`,
/// `--node-rank`, `--master-addr`, `--master-port`; the multiprocessing
/// backend unless the flags name one).
fn multi_node_flags(task: &NodeTask) -> Vec<String> {
    let mut f: Vec<String> = vec![
        "--nnodes".into(),
        task.plan.nodes.to_string(),
        "--node-rank".into(),
        task.node.to_string(),
        "--master-addr".into(),
        task.master_ip.clone(),
        "--master-port".into(),
        task.master_port.to_string(),
    ];
    if crate::recipe::parallel::flag_value(&task.request.engine_argv, &["--distributed-executor-backend"]).is_none() {
        f.extend(["--distributed-executor-backend".into(), "mp".into()]);
    }
    f
}

/// The CPU backend's binding of `workers` local workers over `cores`:
/// `OMP_NUM_THREADS` (a set's size) and `VLLM_CPU_OMP_THREADS_BIND` (the
/// sets, `|`-separated, local rank order). Harmless on GPU nodes (vLLM's CPU
/// platform reads them).
fn cpu_binding(cores: &[usize], workers: usize) -> BTreeMap<String, String> {
    let sets = split_cores(cores, workers);
    let text = sets.iter().map(|s| s.iter().map(usize::to_string).collect::<Vec<_>>().join(",")).collect::<Vec<_>>().join("|");
    BTreeMap::from([("OMP_NUM_THREADS".to_string(), sets[0].len().max(1).to_string()), ("VLLM_CPU_OMP_THREADS_BIND".to_string(), text)])
}

/// A headless follower: `python -m vllm.entrypoints.cli.main serve MODEL
/// FLAGS --nnodes N --node-rank n ... --headless` (vLLM's workers of this
/// node, no engine core), its output to `log`.
fn spawn_follower(task: &NodeTask, argv: &[String], env: &BTreeMap<String, String>, log: &std::path::Path) -> Result<Child> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut c = Command::new(&task.python.path);
    c.args(["-m", VLLM_CLI, "serve"]).args(argv);
    for k in &task.unset {
        c.env_remove(k);
    }
    // SAFETY: prctl on the child's own state between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    c.envs(env)
        .env("PYTHONUNBUFFERED", "1")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting node {}'s headless follower ({} -m {VLLM_CLI} serve)", task.node, task.python.path.display()))
}

/// A thread that passes the job's stop signal to the ranks, and on SIGTERM
/// ends every process of the node; returns the SIGTERM flag.
fn watch_signals(procs: &[Proc]) -> Arc<AtomicBool> {
    let terminated = Arc::new(AtomicBool::new(false));
    let pids: Vec<(u32, bool)> = procs.iter().map(|p| (p.child.id(), p.rank.is_some())).collect();
    let flag = Arc::clone(&terminated);
    match signal_hook::iterator::Signals::new([STOP_SIGNAL, SIGTERM]) {
        Ok(mut signals) => {
            crate::orchestrate::spawn::named_thread("eb-node-signals", move || {
                for sig in signals.forever() {
                    if sig == STOP_SIGNAL {
                        for &(pid, rank) in &pids {
                            if rank {
                                // SAFETY: the stop signal to our own worker.
                                unsafe { libc::kill(pid as i32, STOP_SIGNAL) };
                            }
                        }
                    } else {
                        flag.store(true, Ordering::SeqCst);
                        terminate(&pids.iter().map(|p| p.0).collect::<Vec<_>>());
                    }
                }
            });
        }
        Err(e) => tracing::warn!("node group: cannot watch signals: {e}"),
    }
    terminated
}

/// SIGTERM to each process group, SIGKILL after [`GRACE`].
fn terminate(pids: &[u32]) {
    for &pid in pids {
        // SAFETY: signals to our own children's process groups.
        unsafe { libc::kill(-(pid as i32), libc::SIGTERM) };
    }
    let pids = pids.to_vec();
    crate::orchestrate::spawn::named_thread("eb-node-reaper", move || {
        std::thread::sleep(GRACE);
        for pid in pids {
            // SAFETY: as above; no-op for a group already gone.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    });
}

/// Ends what still runs (followers, a rank that did not exit) and reports
/// every process's end not yet reported.
fn end_all(procs: &mut [Proc], node: u32, emit: &dyn Fn(&NodeEvent)) {
    let running: Vec<u32> = procs.iter().filter(|p| !p.exited).map(|p| p.child.id()).collect();
    if !running.is_empty() {
        terminate(&running);
    }
    for p in procs.iter_mut().filter(|p| !p.exited) {
        if let Ok(status) = p.child.wait() {
            // A follower ended by the job's end is the normal end.
            let ok = status.success() || p.rank.is_none();
            emit(&NodeEvent::Exited { node, rank: p.rank, ok, status: crate::orchestrate::spawn::describe_exit(status) });
        }
        p.exited = true;
    }
}

/// Each point's part on this node: once every rank of the node sent its
/// raw point k, the window over them (the ranks that ran requests: a rank
/// without a share of a low concurrency does not stretch it) and their
/// tokens.
struct PointWindows {
    ranks: Vec<u32>,
    /// Per rank, its points so far: (start, end, output tokens, total tokens).
    seen: BTreeMap<u32, Vec<(f64, f64, u64, u64)>>,
    next: usize,
}

impl PointWindows {
    fn new(ranks: &[u32]) -> PointWindows {
        PointWindows { ranks: ranks.to_vec(), seen: BTreeMap::new(), next: 0 }
    }

    fn add(&mut self, rank: u32, raw: &crate::protocol::RawPoint) {
        let out: u64 = raw.records.iter().map(|r| r.output_tokens as u64).sum();
        let input: u64 = raw.records.iter().map(|r| r.input_tokens as u64).sum();
        let busy = !raw.records.is_empty();
        let (t0, t1) = if busy { (raw.started_mono_s, raw.started_mono_s + raw.duration_s) } else { (f64::NAN, f64::NAN) };
        self.seen.entry(rank).or_default().push((t0, t1, out, out + input));
    }

    /// The next point every rank of the node has sent: (index, t0, t1,
    /// output tokens, total tokens).
    fn next_ready(&mut self) -> Option<(usize, f64, f64, u64, u64)> {
        if self.ranks.is_empty() {
            return None;
        }
        let k = self.next;
        let parts: Vec<(f64, f64, u64, u64)> = self.ranks.iter().map(|r| self.seen.get(r).and_then(|v| v.get(k)).copied()).collect::<Option<_>>()?;
        self.next += 1;
        let t0 = parts.iter().map(|p| p.0).filter(|t| t.is_finite()).fold(f64::INFINITY, f64::min);
        let t1 = parts.iter().map(|p| p.1).filter(|t| t.is_finite()).fold(f64::NEG_INFINITY, f64::max);
        let (t0, t1) = if t0.is_finite() { (t0, t1) } else { (0.0, 0.0) };
        Some((k, t0, t1, parts.iter().map(|p| p.2).sum(), parts.iter().map(|p| p.3).sum()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_binding_splits_the_nodes_cores_over_its_workers() {
        let b = cpu_binding(&[4, 5, 6, 7], 2);
        assert_eq!((b["OMP_NUM_THREADS"].as_str(), b["VLLM_CPU_OMP_THREADS_BIND"].as_str()), ("2", "4,5|6,7"));
    }
}
