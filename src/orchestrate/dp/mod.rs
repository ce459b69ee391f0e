//! Data-parallel jobs (`-dp N` / `--data-parallel-size N`, or `VLLM_DP_SIZE`
//! in the engine's environment): one worker process per DP rank, started
//! together, ended together, their figures merged into one point.
//!
//! Two kinds, as vLLM runs them (0.32-0.34):
//! - **Dense models**: N independent engines, each with 1/N of the
//!   requests. vLLM's server runs dense DP ranks as separate engines
//!   (v1/engine/core.py: only MoE ranks form a `DPEngineCoreProc` group), and
//!   an in-process engine refuses a DP group for a dense model
//!   (config/parallel.py `__post_init__`: "Offline data parallel mode is not
//!   supported/useful for dense models"). Each rank runs without the DP
//!   flag, on its own devices: `CUDA_VISIBLE_DEVICES` = its `world_size`
//!   slice of the visible list (what vLLM's engine-core launcher sets per
//!   local rank, v1/engine/utils.py), or on the CPU backend its own cores.
//! - **MoE models (DP attention, expert parallel)**: N ranks of one vLLM DP
//!   group ("lockstep"). Each rank is its own process with `VLLM_DP_SIZE`,
//!   `VLLM_DP_RANK`, `VLLM_DP_RANK_LOCAL`, `VLLM_DP_MASTER_IP` and one shared
//!   `VLLM_DP_MASTER_PORT` (vLLM's offline SPMD mode,
//!   examples/offline_inference/data_parallel.py); every rank sees the whole
//!   visible device list and vLLM places rank r's workers on
//!   `local_rank + r x world_size`. The driver keeps every rank stepping
//!   while any rank has work ([`crate::engine::StepEngine::keep_stepping`]).
//!
//! The load split follows vLLM's server balancer for equal requests: its
//! internal load balancer sends each request to the engine with the lowest
//! `4 x waiting + running` (v1/engine/core_client.py
//! `DPLBAsyncMPClient.get_core_engine_for_request`), which for a closed
//! loop of equal requests keeps the in-flight requests even across ranks.
//! Here: request i of a point goes to rank `i mod N` (of the ranks with a
//! share of the concurrency), and rank r keeps `conc / N` in flight (the
//! first `conc mod N` ranks one more). See [`crate::protocol::DpRank`].

pub mod blame;
pub mod merge;
pub mod moe;

use std::collections::BTreeMap;

use anyhow::Result;

use crate::error::usage;
use crate::recipe::parallel::{DataParallel, Layout, flag_value};

/// vLLM's DP rendezvous variables (vllm/envs.py).
pub const DP_RANK_VAR: &str = "VLLM_DP_RANK";
pub const DP_RANK_LOCAL_VAR: &str = "VLLM_DP_RANK_LOCAL";
pub const DP_MASTER_IP_VAR: &str = "VLLM_DP_MASTER_IP";
pub const DP_MASTER_PORT_VAR: &str = "VLLM_DP_MASTER_PORT";

/// Flags that ask for expert parallelism (vLLM's serve parser).
const EP_FLAGS: [&str; 2] = ["--enable-expert-parallel", "-ep"];

/// How a job runs data parallel, decided at plan time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DpPlan {
    /// The DP size, > 1.
    pub size: u32,
    /// How the recipe asked for it, as written ([`DataParallel::spelled`]).
    pub spelled: String,
    /// MoE: the ranks form one vLLM DP group and step in lockstep; dense:
    /// independent engines.
    pub lockstep: bool,
    /// vLLM's world size per rank (TP x PP x PCP).
    pub world_size: u32,
    /// Lockstep: the master address and port every rank names (`None`: a
    /// free local port is taken when the ranks start).
    pub master_ip: String,
    pub master_port: Option<u16>,
    /// The engine runs on the CPU backend (ranks split the cores).
    pub cpu: bool,
}

/// What one rank's worker is started with, beyond the job's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankLaunch {
    pub rank: u32,
    /// The engine flags (the DP flag removed: each rank is one engine, or one
    /// member of the group named by the environment).
    pub args: Vec<String>,
    /// Variables set for this rank (over the job's environment).
    pub env: BTreeMap<String, String>,
    /// Variables removed for this rank.
    pub unset: Vec<String>,
    /// The source indices of the devices this rank's engine may use
    /// (`None`: the job's whole visible list, or the CPU).
    pub devices: Option<Vec<u32>>,
}

impl DpPlan {
    /// The plan of a job's DP ranks, `None` when the job is one engine.
    /// `model_config`: the folder or hub id vLLM is given (read for whether
    /// the model is MoE); `visible`: the device list the job's environment
    /// leaves visible (`None`: all); `env_var`: a variable as the engine
    /// would see it.
    ///
    /// Errors (usage, exit 2, before any engine starts): a DP size that does
    /// not divide the devices given, a dense model with expert-parallel
    /// flags, a master address without a master port, a model whose config
    /// cannot be read to tell dense from MoE.
    pub fn of(
        dp: Option<DataParallel>,
        args: &[String],
        sweep_tp: Option<u32>,
        model: &str,
        visible: Option<&[u32]>,
        cpu: bool,
        env_var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<DpPlan>> {
        let Some(dp) = dp else { return Ok(None) };
        let world_size = Layout::of(args, sweep_tp, None).world_size();
        let ep = EP_FLAGS.iter().find(|f| args.iter().any(|a| a == *f));
        // Expert parallelism only exists for MoE models: with the flag, a
        // config not downloaded yet is no reason to refuse.
        let moe = match moe::is_moe(model) {
            Ok(moe) => moe,
            Err(_) if ep.is_some() => true,
            Err(e) => return Err(usage(format!("{}: {e}", dp.spelled()))),
        };
        if let (false, Some(flag)) = (moe, ep) {
            return Err(usage(format!(
                "{flag} with {}: {model} is a dense model (its config names no experts), so expert parallelism does not apply; remove {flag} (dense DP runs one engine per rank)",
                dp.spelled()
            )));
        }
        if let Some(list) = visible.filter(|_| !cpu) {
            let need = world_size * dp.size;
            if list.len() as u32 % dp.size != 0 || (list.len() as u32) < need {
                return Err(usage(format!(
                    "{}: DP size {} x world size {world_size} needs {need} GPUs, split evenly across ranks, but {} are visible ({list:?}); give a multiple of {need} GPUs or change -dp",
                    dp.spelled(),
                    dp.size,
                    list.len()
                )));
            }
        }
        let master_ip = env_var(DP_MASTER_IP_VAR).unwrap_or_else(|| "127.0.0.1".into());
        let master_port = match env_var(DP_MASTER_PORT_VAR) {
            Some(p) => Some(p.trim().parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| {
                usage(format!("{DP_MASTER_PORT_VAR}={p}: not a port number (1-65535); every rank of the DP group names this one port"))
            })?),
            None => None,
        };
        let local = ["127.0.0.1", "localhost", "::1"].contains(&master_ip.as_str());
        if moe && master_port.is_none() && !local {
            return Err(usage(format!(
                "{DP_MASTER_IP_VAR}={master_ip} without {DP_MASTER_PORT_VAR}: every rank of a DP group meets at one master port; set {DP_MASTER_PORT_VAR} in the recipe's env (or drop {DP_MASTER_IP_VAR}: the ranks then meet on a free local port)"
            )));
        }
        Ok(Some(DpPlan { size: dp.size, spelled: dp.spelled(), lockstep: moe, world_size, master_ip, master_port, cpu }))
    }

    /// Every rank's launch, all on this host. `visible`: the job's visible
    /// devices (`None`: all, ordinals from 0); `master_port`: the port the
    /// group meets on (lockstep); `cores`: the CPUs this process may run on
    /// (CPU backend).
    pub fn launches(&self, args: &[String], visible: Option<&[u32]>, master_port: u16, cores: &[usize]) -> Vec<RankLaunch> {
        self.launches_for(0..self.size, args, visible, (&self.master_ip, master_port), cores)
    }

    /// The launches of ranks `ranks` (one node's: `n x L .. (n + 1) x L`),
    /// started on one host whose visible devices are `visible` and whose
    /// CPUs are `cores`: each rank's `VLLM_DP_RANK_LOCAL` (and its slice of
    /// devices and cores) is its index among `ranks`, `VLLM_DP_RANK` its
    /// global rank; every rank names `master` (the first node's address and
    /// the group's one base port).
    pub fn launches_for(&self, ranks: std::ops::Range<u32>, args: &[String], visible: Option<&[u32]>, master: (&str, u16), cores: &[usize]) -> Vec<RankLaunch> {
        let (master_ip, master_port) = master;
        let n = self.size;
        let first = ranks.start;
        let local_ranks = ranks.len();
        let args = strip_dp_flags(args);
        // One core set per worker process on this host, DP-major (vLLM's CPU
        // binding reads `VLLM_CPU_OMP_THREADS_BIND` as `|`-separated sets in
        // [DP, PP, TP] order for a DP group, and takes its local DP rank's
        // slice, utils/ompmultiprocessing.py).
        let ws = self.world_size.max(1) as usize;
        let core_sets = split_cores(cores, local_ranks * ws);
        let text = |sets: &[Vec<usize>]| {
            sets.iter().map(|set| set.iter().map(usize::to_string).collect::<Vec<_>>().join(",")).collect::<Vec<_>>().join("|")
        };
        ranks
            .map(|rank| {
                let local = rank - first;
                let mut env = BTreeMap::new();
                let mut unset = Vec::new();
                let mut devices = None;
                if self.lockstep {
                    for (k, v) in [
                        (crate::recipe::parallel::DP_SIZE_VAR, n.to_string()),
                        (DP_RANK_VAR, rank.to_string()),
                        (DP_RANK_LOCAL_VAR, local.to_string()),
                        (DP_MASTER_IP_VAR, master_ip.to_string()),
                        (DP_MASTER_PORT_VAR, master_port.to_string()),
                    ] {
                        env.insert(k.to_string(), v);
                    }
                } else {
                    // An independent engine: no DP group in its environment either.
                    unset.push(crate::recipe::parallel::DP_SIZE_VAR.to_string());
                    if !self.cpu {
                        let ws = self.world_size;
                        let slice: Vec<u32> = match visible {
                            Some(list) => list.iter().copied().skip((local * ws) as usize).take(ws as usize).collect(),
                            None => (local * ws..(local + 1) * ws).collect(),
                        };
                        let text = slice.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
                        env.insert("CUDA_VISIBLE_DEVICES".into(), text.clone());
                        if std::env::var_os("HIP_VISIBLE_DEVICES").is_some() {
                            env.insert("HIP_VISIBLE_DEVICES".into(), text);
                        }
                        // Ordinals of this slice are now relative to it.
                        unset.push("ROCR_VISIBLE_DEVICES".into());
                        devices = Some(slice);
                    }
                }
                if self.cpu {
                    // Each rank on its own cores (vLLM's CPU worker binds its
                    // OpenMP threads to VLLM_CPU_OMP_THREADS_BIND): a dense
                    // rank is told its own sets, a group's ranks every set
                    // (each takes its DP rank's slice).
                    let mine = &core_sets[local as usize * ws..(local as usize + 1) * ws];
                    let bind = if self.lockstep { text(&core_sets) } else { text(mine) };
                    env.insert("OMP_NUM_THREADS".into(), mine[0].len().max(1).to_string());
                    env.insert("VLLM_CPU_OMP_THREADS_BIND".into(), bind);
                }
                RankLaunch { rank, args: args.clone(), env, unset, devices }
            })
            .collect()
    }
}

impl RankLaunch {
    /// The worker request of this rank from the job's `request`: its flags
    /// after the model, its place in the group.
    pub fn request(&self, request: &crate::protocol::Job, dp: &DpPlan) -> crate::protocol::Job {
        let mut job = request.clone();
        job.engine_argv = std::iter::once(request.engine_argv[0].clone()).chain(self.args.iter().cloned()).collect();
        job.dp = Some(crate::protocol::DpRank { rank: self.rank, size: dp.size, lockstep: dp.lockstep });
        job
    }

    /// This rank's environment over the job's `env` and `unset`: (variables
    /// set, variables removed).
    pub fn environment(&self, env: &BTreeMap<String, String>, unset: &[String]) -> (BTreeMap<String, String>, Vec<String>) {
        let mut env = env.clone();
        env.extend(self.env.clone());
        for k in &self.unset {
            env.remove(k);
        }
        let mut unset = unset.to_vec();
        unset.extend(self.unset.iter().cloned());
        (env, unset)
    }
}

/// Flags of vLLM's server-side DP orchestration that take a value: the DP
/// size and where a `vllm serve` process's ranks sit among the nodes. Each
/// rank here is one engine (or one member of the group its environment
/// names), placed by [`crate::recipe::layout::Placement`].
const DP_VALUE_FLAGS: [&str; 6] = [
    "--data-parallel-size",
    "-dp",
    "--data-parallel-size-local",
    "--data-parallel-start-rank",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
];
/// Switches of the same: the server's hybrid load balancing.
const DP_SWITCHES: [&str; 1] = ["--data-parallel-hybrid-lb"];

/// `args` without the DP size flag (`-dp N`, `--data-parallel-size N`, `=`
/// forms) and vLLM's per-node DP flags (`--data-parallel-size-local`,
/// `--data-parallel-start-rank`, `--data-parallel-address`,
/// `--data-parallel-rpc-port`, `--data-parallel-hybrid-lb`): a rank is one
/// engine, or one member of the group its environment names.
pub fn strip_dp_flags(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if DP_VALUE_FLAGS.contains(&a.as_str()) {
            skip = true;
            continue;
        }
        if DP_SWITCHES.contains(&a.as_str()) || DP_VALUE_FLAGS.iter().chain(&DP_SWITCHES).any(|n| a.strip_prefix(n).is_some_and(|r| r.starts_with('='))) {
            continue;
        }
        out.push(a.clone());
    }
    debug_assert!(flag_value(&out, &DP_VALUE_FLAGS).is_none());
    out
}

/// `cores` split into `n` disjoint, contiguous, nearly equal sets (each at
/// least one core: with fewer cores than ranks, ranks share round-robin).
pub fn split_cores(cores: &[usize], n: usize) -> Vec<Vec<usize>> {
    if cores.len() < n {
        return (0..n).map(|r| vec![*cores.get(r % cores.len().max(1)).unwrap_or(&0)]).collect();
    }
    let (per, extra) = (cores.len() / n, cores.len() % n);
    let mut at = 0;
    (0..n)
        .map(|r| {
            let take = per + usize::from(r < extra);
            let set = cores[at..at + take].to_vec();
            at += take;
            set
        })
        .collect()
}

/// The CPUs this process may run on (sched_getaffinity), in order.
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t filled by sched_getaffinity for this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// A free TCP port on this host for an engine to bind later (a DP group's
/// rendezvous, a NIXL side channel, a prefill worker's listener): bound,
/// then released. Chosen below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), from [`PORT_FLOOR`]: a port
/// the kernel hands out for a bind to port 0 can go to another engine's own
/// socket (gloo, zmq) before vLLM binds it (a 2P2D job's prefill worker
/// failed on "Address already in use" so). Never the same port twice in
/// one process. Falls back to a kernel-chosen port when none is free.
///
/// Errors: no port could be bound at all.
pub fn free_port() -> Result<u16> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let span = u32::from(ephemeral_port_low().saturating_sub(PORT_FLOOR));
    // Different runs start at different ports (pid and clock), then walk.
    let seed = std::process::id() ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for k in 0..span {
        let port = PORT_FLOOR + ((seed.wrapping_add(k)) % span) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return Ok(port);
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    given.insert(port);
    Ok(port)
}

/// The lowest port [`free_port`] hands out.
pub const PORT_FLOOR: u16 = 20000;

/// The first port of the kernel's ephemeral range (Linux's default 32768
/// when it cannot be read).
fn ephemeral_port_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::DpRank;
    use crate::recipe::parallel::DpSource;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let low = ephemeral_port_low();
        let ports: Vec<u16> = (0..16).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        assert!(ports.iter().all(|&p| (PORT_FLOOR..low).contains(&p)), "{ports:?} not in {PORT_FLOOR}..{low}");
    }

    #[test]
    fn shares_split_requests_and_concurrency_like_the_balancer() {
        let r = |rank| DpRank { rank, size: 2, lockstep: false };
        assert_eq!((r(0).conc(5), r(1).conc(5)), (3, 2));
        let owned: Vec<usize> = (0..6).filter(|&i| r(1).owns(i, 4)).collect();
        assert_eq!(owned, vec![1, 3, 5]);
        // Concurrency 1 on 2 ranks: rank 0 takes every request.
        assert_eq!((r(0).conc(1), r(1).conc(1)), (1, 0));
        assert!((0..4).all(|i| r(0).owns(i, 1) && !r(1).owns(i, 1)));
        let three: Vec<u32> = (0..3).map(|rank| DpRank { rank, size: 3, lockstep: false }.conc(7)).collect();
        assert_eq!(three, vec![3, 2, 2]);
    }

    #[test]
    fn the_dp_flags_are_removed_in_every_spelling() {
        assert_eq!(strip_dp_flags(&args("-tp 2 -dp 4 --x")), args("-tp 2 --x"));
        assert_eq!(strip_dp_flags(&args("--data-parallel-size=8 --enable-expert-parallel")), args("--enable-expert-parallel"));
        assert_eq!(strip_dp_flags(&args("--data-parallel-size 2 --data-parallel-size-local 1 -ep")), args("-ep"));
        let node = args("-dp 8 --data-parallel-start-rank 4 --data-parallel-address 10.0.0.1 --data-parallel-rpc-port=13345 --data-parallel-hybrid-lb -tp 1");
        assert_eq!(strip_dp_flags(&node), args("-tp 1"));
    }

    #[test]
    fn cores_are_split_disjoint() {
        assert_eq!(split_cores(&[0, 1], 2), vec![vec![0], vec![1]]);
        assert_eq!(split_cores(&[0, 1, 2, 3, 4], 2), vec![vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(split_cores(&[0], 2), vec![vec![0], vec![0]]);
    }

    fn plan(lockstep: bool, cpu: bool) -> DpPlan {
        DpPlan {
            size: 2,
            spelled: "-dp 2".into(),
            lockstep,
            world_size: 2,
            master_ip: "127.0.0.1".into(),
            master_port: None,
            cpu,
        }
    }

    #[test]
    fn dense_ranks_get_their_device_slice_and_lockstep_ranks_the_group() {
        let a = args("-tp 2 -dp 2");
        let dense = plan(false, false).launches(&a, Some(&[4, 5, 6, 7]), 0, &[0, 1]);
        assert_eq!(dense[1].env["CUDA_VISIBLE_DEVICES"], "6,7");
        assert_eq!(dense[1].devices, Some(vec![6, 7]));
        assert_eq!(dense[0].args, args("-tp 2"));
        assert!(dense[0].unset.contains(&"VLLM_DP_SIZE".to_string()));
        let moe = plan(true, false).launches(&a, None, 29555, &[0, 1]);
        let e = &moe[1].env;
        assert_eq!((e["VLLM_DP_SIZE"].as_str(), e["VLLM_DP_RANK"].as_str(), e["VLLM_DP_RANK_LOCAL"].as_str()), ("2", "1", "1"));
        assert_eq!((e["VLLM_DP_MASTER_IP"].as_str(), e["VLLM_DP_MASTER_PORT"].as_str()), ("127.0.0.1", "29555"));
        assert!(!e.contains_key("CUDA_VISIBLE_DEVICES"), "vLLM places MoE ranks itself");
        let cpu = plan(false, true).launches(&a, None, 0, &[0, 1, 2, 3]);
        assert_eq!((cpu[1].env["OMP_NUM_THREADS"].as_str(), cpu[1].env["VLLM_CPU_OMP_THREADS_BIND"].as_str()), ("1", "2|3"));
        let group = plan(true, true).launches(&a, None, 1, &[0, 1, 2, 3]);
        assert_eq!(group[1].env["VLLM_CPU_OMP_THREADS_BIND"], "0|1|2|3", "every set: vLLM takes rank 1's slice");
        // Node 1 of 2 (one rank a node): global rank 1, local rank 0, node 0's master.
        let node1 = plan(true, true).launches_for(1..2, &a, None, ("10.0.0.1", 29555), &[4, 5]);
        let e = &node1[0].env;
        assert_eq!((node1[0].rank, e["VLLM_DP_RANK"].as_str(), e["VLLM_DP_RANK_LOCAL"].as_str()), (1, "1", "0"));
        assert_eq!((e["VLLM_DP_MASTER_IP"].as_str(), e["VLLM_DP_MASTER_PORT"].as_str()), ("10.0.0.1", "29555"));
        assert_eq!(e["VLLM_CPU_OMP_THREADS_BIND"], "4|5", "the node's own cores, its local rank's slice");
        let dense = plan(false, false).launches_for(1..2, &a, Some(&[0, 1]), ("x", 0), &[0]);
        assert_eq!(dense[0].env["CUDA_VISIBLE_DEVICES"], "0,1", "the node's first slice for its first rank");
    }

    #[test]
    fn bad_dp_input_is_refused_before_any_engine() {
        let dir = std::env::temp_dir().join(format!("eb-dp-plan-{}", std::process::id()));
        let dense = dir.join("dense");
        let moe = dir.join("moe");
        std::fs::create_dir_all(&dense).unwrap();
        std::fs::create_dir_all(&moe).unwrap();
        std::fs::write(dense.join("config.json"), r#"{"architectures": ["LlamaForCausalLM"]}"#).unwrap();
        std::fs::write(moe.join("config.json"), r#"{"num_experts": 4}"#).unwrap();
        let dp = Some(DataParallel { size: 2, source: DpSource::Flag });
        let none = |_: &str| None;
        let of = |a: &str, m: &std::path::Path, vis: Option<&[u32]>, env: &dyn Fn(&str) -> Option<String>| {
            DpPlan::of(dp, &args(a), None, m.to_str().unwrap(), vis, false, env)
        };
        let err = |r: Result<Option<DpPlan>>| {
            let e = r.unwrap_err();
            assert!(e.downcast_ref::<crate::error::UsageError>().is_some(), "{e:#}");
            format!("{e:#}")
        };
        assert!(err(of("-dp 2 --enable-expert-parallel", &dense, None, &none)).contains("dense model"));
        assert!(err(of("-dp 2", &dense, Some(&[0, 1, 2]), &none)).contains("3 are visible"));
        let remote = |k: &str| (k == DP_MASTER_IP_VAR).then(|| "10.0.0.2".to_string());
        assert!(err(of("-dp 2", &moe, None, &remote)).contains("without VLLM_DP_MASTER_PORT"));
        assert!(err(of("-dp 2", &dir.join("absent"), None, &none)).contains("config.json"));
        assert!(of("-dp 2 --enable-expert-parallel", &dir.join("absent"), None, &none).unwrap().unwrap().lockstep, "EP: MoE");
        let ok = of("-dp 2 -ep", &moe, Some(&[0, 1]), &none).unwrap().unwrap();
        assert!(ok.lockstep);
        assert!(!of("-dp 2", &dense, None, &none).unwrap().unwrap().lockstep);
        assert_eq!(of("-tp 1", &dense, None, &none).map(|p| p.is_some()).ok(), Some(true), "dp given by the caller");
        assert!(DpPlan::of(None, &args("-tp 1"), None, "x", None, false, &none).unwrap().is_none());
        std::fs::remove_dir_all(&dir).ok();
    }
}
