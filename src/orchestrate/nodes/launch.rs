//! Starting a job's node groups: on this machine (no Slurm allocation) or
//! one per node of the allocation through `srun`; and ending them.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::NodeTask;
use crate::orchestrate::spawn::Worker;

/// Where a job's node groups run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hosts {
    /// Every node on this machine ("nodes" are local rank groups over
    /// loopback): node n's group runs on the n-th share of this process's
    /// CPUs and sees the n-th slice of `gpus_per_node` visible GPUs.
    Local,
    /// One node each of the Slurm allocation this process runs in, by host
    /// name (the first is node 0, the master); each group is started with
    /// `srun` from here.
    Slurm { hosts: Vec<String> },
}

/// Slurm's variables of an allocation (sbatch/salloc set them).
const SLURM_NODELIST: &str = "SLURM_JOB_NODELIST";

impl Hosts {
    /// The hosts for a job of `nodes` nodes: the Slurm allocation this
    /// process runs in when there is one (its node list, through `scontrol
    /// show hostnames`), else this machine.
    ///
    /// Errors: an allocation with fewer nodes than the job needs; `scontrol`
    /// failing.
    pub fn detect(nodes: u32) -> Result<Hosts> {
        let Ok(list) = std::env::var(SLURM_NODELIST) else { return Ok(Hosts::Local) };
        let out = Command::new("scontrol").args(["show", "hostnames", &list]).output().context("scontrol show hostnames")?;
        if !out.status.success() {
            bail!("scontrol show hostnames {list}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let hosts: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
        if (hosts.len() as u32) < nodes {
            bail!(
                "the job spans {nodes} nodes but this Slurm allocation has {} ({list}); submit with --slurm (it asks for the nodes) or salloc --nodes={nodes}",
                hosts.len()
            );
        }
        Ok(Hosts::Slurm { hosts: hosts.into_iter().take(nodes as usize).collect() })
    }

    /// The address every rank meets at: the first node's (resolved to an
    /// IP address), or the loopback address on one machine.
    ///
    /// Errors: the first host's name does not resolve.
    pub fn master_ip(&self) -> Result<String> {
        match self {
            Hosts::Local => Ok("127.0.0.1".into()),
            Hosts::Slurm { hosts } => {
                use std::net::ToSocketAddrs;
                let addr = (hosts[0].as_str(), 0)
                    .to_socket_addrs()
                    .with_context(|| format!("resolving the first node {}", hosts[0]))?
                    .find(|a| a.is_ipv4())
                    .with_context(|| format!("the first node {} has no IPv4 address", hosts[0]))?;
                Ok(addr.ip().to_string())
            }
        }
    }

    /// In words, for the log: "2 nodes on this machine" or the host names.
    pub fn describe(&self, nodes: u32) -> String {
        match self {
            Hosts::Local => format!("{nodes} nodes as local rank groups on this machine (no Slurm allocation)"),
            Hosts::Slurm { hosts } => format!("{nodes} nodes of the Slurm allocation: {}", hosts.join(", ")),
        }
    }
}

/// The command of node `node`'s group: `enginebench __node` here, or
/// wrapped in `srun` for its host.
pub fn node_command(hosts: &Hosts, node: u32, exe: &Path) -> Command {
    match hosts {
        Hosts::Local => {
            let mut c = Command::new(exe);
            c.arg("__node");
            c
        }
        Hosts::Slurm { hosts } => {
            let mut c = Command::new("srun");
            c.args(srun_args(&hosts[node as usize])).arg(exe).arg("__node");
            c
        }
    }
}

/// `srun`'s options for one node group on `host`: one task on that node,
/// overlapping the batch step's resources, the caller's environment.
pub fn srun_args(host: &str) -> Vec<String> {
    ["--nodes=1", "--ntasks=1", &format!("--nodelist={host}"), "--overlap", "--export=ALL", "--kill-on-bad-exit=1"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Starts node `task.node`'s group: its task on stdin, its messages on the
/// returned worker's stdout, its own log (the group's and its followers'
/// lines, not its ranks': they have their own) in `log_path`. `cores`: the
/// CPUs it may run on (this machine's share for the node, `None`: all).
pub fn spawn_node_group(hosts: &Hosts, task: &NodeTask, cores: Option<&[usize]>, log_path: &Path) -> Result<Worker> {
    let exe: PathBuf = std::env::current_exe().context("the enginebench binary")?;
    let mut command = node_command(hosts, task.node, &exe);
    let cores: Option<Vec<usize>> = cores.map(<[usize]>::to_vec);
    // SAFETY: between fork and exec only async-signal-safe calls
    // (sched_setaffinity, prctl) on the child's own state.
    unsafe {
        command.pre_exec(move || {
            if let Some(cores) = &cores {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &c in cores {
                    libc::CPU_SET(c, &mut set);
                }
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            // The group (or srun, which passes it on) ends with the job's watcher.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting node {}'s group ({})", task.node, if matches!(hosts, Hosts::Local) { "enginebench __node" } else { "srun" }))?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(&serde_json::to_vec(task)?)?;
    drop(stdin);
    let log_tail = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let stderr = child.stderr.take().expect("piped");
    let mut log = std::fs::File::create(log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let tail = std::sync::Arc::clone(&log_tail);
    crate::orchestrate::spawn::named_thread("eb-node-log", move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            if let Ok(mut t) = tail.lock() {
                if t.len() == crate::orchestrate::spawn::LOG_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
    });
    let stdout = child.stdout.take();
    Ok(Worker { child, stdout, log_tail })
}

/// How long node groups get to end (their processes, their telemetry) after
/// SIGTERM before SIGKILL: longer than a group gives its own processes.
pub const END_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// Starts every node group of `job` (one per node of `plan`), each with its
/// [`NodeTask`]: the job's worker `request`, the DP ranks `dp` when the
/// nodes hold DP ranks, the master (the first node's address, one port: the
/// recipe's `VLLM_DP_MASTER_PORT` or a free one), this machine's share of
/// CPUs and of the `visible` GPUs per node when every node is local; logs in
/// `dir` as `worker{suffix}.node{n}.log`.
///
/// Errors: the hosts cannot be told (an allocation too small), a group does
/// not start (the ones started are ended).
pub fn spawn_nodes(
    job: &crate::orchestrate::plan::PlannedJob,
    plan: &super::NodePlan,
    dp: Option<&crate::orchestrate::dp::DpPlan>,
    request: crate::protocol::Job,
    visible: Option<&[u32]>,
    (dir, suffix): (&Path, &str),
    telemetry_interval: std::time::Duration,
    ui: &indicatif::MultiProgress,
) -> Result<Vec<Worker>> {
    let hosts = Hosts::detect(plan.nodes)?;
    crate::orchestrate::progress::say(ui, &format!("  {}", hosts.describe(plan.nodes)));
    let master_ip = hosts.master_ip()?;
    let master_port = match dp.and_then(|d| d.master_port) {
        Some(p) => p,
        None => crate::orchestrate::dp::free_port()?,
    };
    let local = hosts == Hosts::Local;
    let shares = local.then(|| crate::orchestrate::dp::split_cores(&crate::orchestrate::dp::allowed_cores(), plan.nodes as usize));
    let mut workers: Vec<Worker> = Vec::new();
    for node in 0..plan.nodes {
        // On one machine each "node" sees its own slice of the GPUs.
        let node_visible = match (local, plan.gpus_per_node.filter(|_| !plan.cpu)) {
            (true, Some(g)) => {
                let all: Vec<u32> = visible.map_or_else(|| (0..plan.nodes * g).collect(), <[u32]>::to_vec);
                let slice: Vec<u32> = all.iter().copied().skip((node * g) as usize).take(g as usize).collect();
                if slice.len() < g as usize {
                    anyhow::bail!(
                        "{} nodes of {g} GPUs on this machine need {} visible GPUs, {} are ({all:?}); run it on a Slurm allocation of {} nodes (--slurm)",
                        plan.nodes,
                        plan.nodes * g,
                        all.len(),
                        plan.nodes
                    );
                }
                Some(slice)
            }
            (true, None) => visible.map(<[u32]>::to_vec),
            (false, _) => None,
        };
        let mut env = job.env.clone();
        if let Some(v) = &node_visible {
            let text = v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            env.insert("CUDA_VISIBLE_DEVICES".into(), text.clone());
            if std::env::var_os("HIP_VISIBLE_DEVICES").is_some() {
                env.insert("HIP_VISIBLE_DEVICES".into(), text);
            }
        }
        let task = NodeTask {
            node,
            plan: plan.clone(),
            dp: dp.cloned(),
            master_ip: master_ip.clone(),
            master_port,
            python: job.python.clone(),
            env,
            unset: job.config.env_unset.clone(),
            request: request.clone(),
            visible: node_visible,
            dir: dir.to_path_buf(),
            suffix: suffix.to_string(),
            telemetry_interval_ms: telemetry_interval.as_millis() as u64,
        };
        let log = dir.join(format!("worker{suffix}.node{node}.log"));
        let cores = shares.as_ref().map(|s| s[node as usize].as_slice());
        match spawn_node_group(&hosts, &task, cores, &log) {
            Ok(w) => workers.push(w),
            Err(e) => {
                end_node_groups(&workers.iter().map(|w| w.child.id()).collect::<Vec<_>>(), END_GRACE);
                return Err(e);
            }
        }
    }
    Ok(workers)
}

/// Ends node groups: SIGTERM to each group's process group (a group ends its
/// processes and writes its telemetry; srun passes the signal to its node),
/// then SIGKILL to whatever is left after `grace`.
pub fn end_node_groups(pids: &[u32], grace: std::time::Duration) {
    for &pid in pids {
        // SAFETY: signals to our own children's process groups.
        unsafe { libc::kill(-(pid as i32), libc::SIGTERM) };
    }
    let pids = pids.to_vec();
    crate::orchestrate::spawn::named_thread("eb-node-reaper", move || {
        std::thread::sleep(grace);
        for pid in pids {
            // SAFETY: as above; a group already gone makes this a no-op.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_group_under_slurm_is_one_srun_step_on_its_host() {
        let hosts = Hosts::Slurm { hosts: vec!["gpu-a".into(), "gpu-b".into()] };
        let c = node_command(&hosts, 1, Path::new("/shared/enginebench"));
        let argv: Vec<String> = std::iter::once(c.get_program()).chain(c.get_args()).map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            argv,
            ["srun", "--nodes=1", "--ntasks=1", "--nodelist=gpu-b", "--overlap", "--export=ALL", "--kill-on-bad-exit=1", "/shared/enginebench", "__node"]
        );
        let local = node_command(&Hosts::Local, 1, Path::new("/x/enginebench"));
        assert_eq!(local.get_program(), "/x/enginebench");
        assert_eq!(Hosts::Local.master_ip().unwrap(), "127.0.0.1");
        assert!(hosts.describe(2).contains("gpu-a, gpu-b"));
    }
}
