//! P/D jobs on the orchestrator's side (issue 44, docs/pd.md): which
//! workers a prefill/decode job runs ([`PdPlan`]), each worker's engine id
//! and NIXL side channel, and starting them ([`spawn_pair`]). The decode
//! workers are the job's workers as the watcher sees them (their points,
//! their figures): several split the workload as dense data-parallel ranks
//! do, each the proxy to every prefill worker; the prefill workers serve
//! them and end when the last hangs up.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::spawn::{Worker, kill_all, spawn_worker};
use crate::protocol::pd::{DecodeSide, PrefillAddr, PrefillJob};
use crate::protocol::{Job, Task};
use crate::recipe::EngineConfig;
use crate::recipe::roles::{KV_TRANSFER_FLAGS, PdRole, kv_transfer};

/// vLLM's NIXL side channel (vllm/envs.py): where each engine's connector
/// listens for the handshake of the engine that pulls from it.
pub const SIDE_CHANNEL_HOST_VAR: &str = "VLLM_NIXL_SIDE_CHANNEL_HOST";
pub const SIDE_CHANNEL_PORT_VAR: &str = "VLLM_NIXL_SIDE_CHANNEL_PORT";

/// How long the prefill workers may take to exit once the decode worker
/// hung up before they are killed.
const PREFILL_EXIT_WAIT: Duration = Duration::from_secs(15);

/// The prefill side of a P/D job (the decode side is the job's own config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PdPlan {
    /// The prefill engine's configuration (flags, env, unset).
    pub prefill: EngineConfig,
    /// Its process environment (config env + enginebench defaults).
    pub prefill_env: BTreeMap<String, String>,
    /// Prefill workers (`[roles.prefill] layout.workers`).
    pub workers: u32,
    /// Decode workers (`[roles.decode] layout.workers`).
    #[serde(default = "crate::protocol::pd::one_worker")]
    pub decode_workers: u32,
    /// The decode side's `kv_load_failure_policy` (vLLM's default "fail").
    pub on_prefill_failure: String,
    /// The recipe runs on the CPU backend: the engines split the cores.
    pub cpu: bool,
}

impl PdPlan {
    /// The plan of one (prefill, decode) pair of a recipe's configurations.
    ///
    /// Errors (one line, exit 2 by the caller): what P/D jobs do not run
    /// yet: a side over several nodes, data parallelism on either side.
    pub fn of(prefill: EngineConfig, prefill_env: BTreeMap<String, String>, decode: &EngineConfig, cpu: bool) -> Result<PdPlan, String> {
        for c in [&prefill, decode] {
            let side = c.role.map_or("decode", PdRole::name);
            if c.layout.nodes > 1 {
                return Err(format!("[roles.{side}] layout nodes = {}: P/D jobs run on one node for now (each side's engines on this machine)", c.layout.nodes));
            }
            let dp = crate::recipe::parallel::data_parallel(&c.args, c.env.get(crate::recipe::parallel::DP_SIZE_VAR).map(String::as_str));
            if let Some(dp) = dp {
                return Err(format!("[roles.{side}] data parallel size {}: a P/D side runs one engine per worker for now; use layout.workers for more engines", dp.size));
            }
        }
        let on_prefill_failure = kv_transfer(PdRole::Decode, &decode.args)?.load_failure_policy.unwrap_or_else(|| "fail".into());
        Ok(PdPlan { workers: prefill.layout.workers, decode_workers: decode.layout.workers.max(1), prefill, prefill_env, on_prefill_failure, cpu })
    }

    /// Devices per prefill worker: its engine's world size (TP x PP x PCP,
    /// [`crate::recipe::parallel::Layout`]; a side runs no DP).
    pub fn prefill_devices(&self) -> u32 {
        crate::recipe::parallel::Layout::of(&self.prefill.args, self.prefill.tp, None).world_size()
    }
}

/// `args` with the `--kv-transfer-config` JSON's `engine_id` set to `id`
/// (each worker's own: the decode side names the engine it pulls from by
/// it). The recipe's flags were checked when it was read, so the JSON is
/// an object.
pub fn with_engine_id(args: &[String], id: &str) -> Vec<String> {
    let mut out = args.to_vec();
    let mut i = 0;
    while i < out.len() {
        let (flag, inline) = match out[i].split_once('=') {
            Some((f, v)) if KV_TRANSFER_FLAGS.contains(&f) => (f.to_string(), Some(v.to_string())),
            _ if KV_TRANSFER_FLAGS.contains(&out[i].as_str()) => (out[i].clone(), None),
            _ => {
                i += 1;
                continue;
            }
        };
        let at = if inline.is_some() { i } else { i + 1 };
        let text = inline.or_else(|| out.get(at).cloned()).unwrap_or_default();
        if let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str::<serde_json::Value>(&text) {
            map.insert("engine_id".into(), id.into());
            let json = serde_json::Value::Object(map).to_string();
            out[at] = if at == i { format!("{flag}={json}") } else { json };
        }
        i = at + 1;
    }
    out
}

/// On the CPU backend, each engine of the job on its own cores (the
/// prefill workers first, then the decode workers; with fewer cores than
/// engines they share round robin, [`super::dp::split_cores`]), as dense DP
/// ranks are: `OMP_NUM_THREADS` and vLLM's `VLLM_CPU_OMP_THREADS_BIND`,
/// unless the recipe's side sets them (`recipe_env`). Two engines whose
/// OpenMP teams each span every core slow each other down severalfold.
fn bind_cores(env: &mut BTreeMap<String, String>, recipe_env: &BTreeMap<String, String>, set: Option<&Vec<usize>>) {
    let Some(set) = set else { return };
    if recipe_env.contains_key("OMP_NUM_THREADS") || recipe_env.contains_key("VLLM_CPU_OMP_THREADS_BIND") {
        return;
    }
    env.insert("OMP_NUM_THREADS".into(), set.len().max(1).to_string());
    env.insert("VLLM_CPU_OMP_THREADS_BIND".into(), set.iter().map(usize::to_string).collect::<Vec<_>>().join(","));
}

/// What starting a pair needs from the job runner.
pub struct PairLaunch<'a> {
    pub python: &'a crate::python::Interpreter,
    pub model_path: &'a str,
    /// The decode engine's configuration (its recipe env) and process env.
    pub decode: &'a EngineConfig,
    pub decode_env: &'a BTreeMap<String, String>,
    pub decode_unset: &'a [String],
    pub dir: &'a Path,
    pub suffix: &'a str,
    pub start_timeout: Duration,
    pub verbose: bool,
    pub ui: &'a indicatif::MultiProgress,
}

/// Starts the prefill workers, then the decode workers with `request`
/// (whose `engine_argv` is the decode engine's), each made the proxy to
/// every prefill worker; with M > 1 decode workers, decode worker j is
/// dense data-parallel rank j of M (it runs its share of each point, and
/// the watcher merges the shares as it merges ranks'). Logs:
/// `worker{suffix}.prefill{i}.log`, and the decode worker's
/// `worker{suffix}.log` (`worker{suffix}.decode{j}.log` with several).
/// Each engine gets its own engine id and side channel port (free loopback
/// ports). Returns (decode workers, prefill workers).
///
/// Errors: a worker cannot be started (the ones started are killed).
pub fn spawn_pair(pd: &PdPlan, request: Job, at: &PairLaunch<'_>) -> Result<(Vec<Worker>, Vec<Worker>)> {
    let mut prefill_workers: Vec<Worker> = Vec::new();
    let mut addrs = Vec::new();
    let timeout_s = at.start_timeout.as_secs_f64();
    let decode_workers = pd.decode_workers;
    let engines = (pd.workers + decode_workers) as usize;
    let cores = if pd.cpu { super::dp::split_cores(&super::dp::allowed_cores(), engines) } else { Vec::new() };
    for i in 0..pd.workers {
        let port = super::dp::free_port()?;
        let mut argv = vec![at.model_path.to_string()];
        argv.extend(with_engine_id(&pd.prefill.args, &format!("prefill{i}")));
        let task = Task::Prefill(PrefillJob { engine_argv: argv, index: i, port, connect_timeout_s: timeout_s, decode_workers });
        let mut env = pd.prefill_env.clone();
        env.insert(SIDE_CHANNEL_HOST_VAR.into(), "127.0.0.1".into());
        env.insert(SIDE_CHANNEL_PORT_VAR.into(), super::dp::free_port()?.to_string());
        bind_cores(&mut env, &pd.prefill.env, cores.get(i as usize));
        let log = at.dir.join(format!("worker{}.prefill{i}.log", at.suffix));
        match spawn_worker(at.python, &task, &env, &pd.prefill.env_unset, &log, at.verbose, at.ui) {
            Ok(w) => {
                addrs.push(PrefillAddr { host: "127.0.0.1".into(), port, pid: w.child.id(), log: log.display().to_string() });
                prefill_workers.push(w);
            }
            Err(e) => {
                kill_all(&mut prefill_workers);
                return Err(e);
            }
        }
    }
    let mut decode = Vec::new();
    for j in 0..decode_workers {
        let mut job = request.clone();
        job.engine_argv = std::iter::once(request.engine_argv[0].clone()).chain(with_engine_id(&request.engine_argv[1..], &format!("decode{j}"))).collect();
        job.pd = Some(DecodeSide {
            prefill: addrs.clone(),
            on_prefill_failure: pd.on_prefill_failure.clone(),
            connect_timeout_s: timeout_s,
            prefill_devices: pd.prefill_devices(),
            decode_index: j,
            decode_workers,
        });
        if decode_workers > 1 {
            job.dp = Some(crate::protocol::DpRank { rank: j, size: decode_workers, lockstep: false });
        }
        let mut env = at.decode_env.clone();
        env.insert(SIDE_CHANNEL_HOST_VAR.into(), "127.0.0.1".into());
        env.insert(SIDE_CHANNEL_PORT_VAR.into(), super::dp::free_port()?.to_string());
        bind_cores(&mut env, &at.decode.env, cores.get((pd.workers + j) as usize));
        let name = if decode_workers > 1 { format!("worker{}.decode{j}.log", at.suffix) } else { format!("worker{}.log", at.suffix) };
        match spawn_worker(at.python, &Task::Run(job), &env, at.decode_unset, &at.dir.join(name), at.verbose, at.ui) {
            Ok(w) => decode.push(w),
            Err(e) => {
                kill_all(&mut decode);
                kill_all(&mut prefill_workers);
                return Err(e);
            }
        }
    }
    Ok((decode, prefill_workers))
}

/// Ends the prefill workers once the decode worker is done: each exits by
/// itself when its link closes; one still running after
/// [`PREFILL_EXIT_WAIT`] is killed. Returns the first that ended badly,
/// with its exit.
pub fn end_prefill_workers(workers: &mut [Worker]) -> Option<(usize, String)> {
    let deadline = Instant::now() + PREFILL_EXIT_WAIT;
    let mut bad = None;
    for (i, w) in workers.iter_mut().enumerate() {
        let status = loop {
            match w.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                _ => {
                    super::spawn::kill_group(w.child.id());
                    let _ = w.child.wait();
                    break None;
                }
            }
        };
        if let Some(s) = status.filter(|s| !s.success()) {
            bad.get_or_insert((i, super::spawn::describe_exit(s)));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_worker_gets_its_engine_id_in_either_spelling() {
        let a = with_engine_id(&args(&["--dtype", "float32", "--kv-transfer-config", r#"{"kv_connector":"NixlConnector","kv_role":"kv_both","engine_id":"theirs"}"#]), "prefill1");
        let v: serde_json::Value = serde_json::from_str(&a[3]).unwrap();
        assert_eq!((v["engine_id"].as_str(), v["kv_connector"].as_str(), a.len()), (Some("prefill1"), Some("NixlConnector"), 4));
        let b = with_engine_id(&args(&[r#"--kv_transfer_config={"kv_connector":"NixlConnector","kv_role":"kv_both"}"#]), "decode0");
        let (flag, json) = b[0].split_once('=').unwrap();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!((flag, v["engine_id"].as_str()), ("--kv_transfer_config", Some("decode0")));
        assert_eq!(with_engine_id(&args(&["--enforce-eager"]), "x"), args(&["--enforce-eager"]));
    }
}
