//! InferenceX's sweep matrix for one master-config entry and the
//! environment its benchmark workflow gives each point: the fixed-seq-len
//! scenarios (one point per ISL/OSL pair and concurrency) and the
//! agentic-coding configs (one point per concurrency; trace replay, KV
//! offload with a DRAM budget from the runner's hardware).
//!
//! Sources (InferenceX): `utils/matrix_logic/generate_sweep_configs.py`
//! (points, `exp-name`, `agentic_dram_offload_gb`), `.github/workflows/
//! benchmark-tmpl.yml` (env, `RESULT_FILENAME`, `GPU_COUNT`),
//! `run-sweep.yml` job `sweep-agentic` (agentic rows pass ISL, OSL and
//! max-model-len `0`, duration 3600), `configs/runners.yaml` `hardware:`.

use std::collections::BTreeMap;
use std::path::Path;

use super::master_config::{Component, Entry, Space};

/// `PORT` as InferenceX's runners export it.
pub const PORT: &str = "8888";
/// `RANDOM_RANGE_RATIO` of InferenceX's benchmark workflow.
pub const RANDOM_RANGE_RATIO: f64 = 0.8;
/// Seconds of an agentic replay (validation.py `DEFAULT_AGENTIC_DURATION_SECONDS`).
pub const AGENTIC_DURATION_S: u32 = 3600;
/// The cap on a node's CPU DRAM before the utilization share, MiB
/// (generate_sweep_configs.py `MAX_AGENTIC_AVAILABLE_CPU_DRAM_MIB`: 3 TB).
const MAX_AVAILABLE_CPU_DRAM_MIB: u128 = 2_861_022;

/// Which scenario a point belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    FixedSeqLen,
    Agentic,
}

/// One point of InferenceX's sweep matrix for an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixPoint {
    pub kind: Kind,
    /// Tokens; 0 for agentic points (the trace gives the lengths).
    pub isl: u32,
    pub osl: u32,
    pub conc: u32,
    pub tp: u32,
    pub ep: u32,
    pub dp_attn: bool,
    pub pp: u32,
    pub dcp: u32,
    pub pcp: u32,
    /// `none`, `mtp`, `draft_model`, ...
    pub spec: String,
    /// Agentic: `none`, or the DRAM offload backend's name.
    pub offload: Option<String>,
    /// The environment the launcher gets.
    pub env: BTreeMap<String, String>,
}

impl MatrixPoint {
    /// `8k1k` for a fixed-length point, `agentic` for a replay.
    pub fn scenario(&self) -> String {
        match self.kind {
            Kind::FixedSeqLen => scenario_name(self.isl, self.osl),
            Kind::Agentic => "agentic".into(),
        }
    }

    /// For messages: `8k1k tp8 ep1 dp-attn false spec none conc 4`.
    pub fn label(&self) -> String {
        let offload = self.offload.as_deref().map(|o| format!(" offload {o}")).unwrap_or_default();
        format!(
            "{} tp{} ep{} dp-attn {} spec {}{offload} conc {}",
            self.scenario(),
            self.tp,
            self.ep,
            self.dp_attn,
            self.spec,
            self.conc
        )
    }
}

/// "1k", "8k", or the number (InferenceX's `seq_len_to_str`).
fn len_str(n: u32) -> String {
    if n % 1024 == 0 { format!("{}k", n / 1024) } else { n.to_string() }
}

/// The scenario name InferenceX uses, e.g. `8k1k`.
pub fn scenario_name(isl: u32, osl: u32) -> String {
    format!("{}{}", len_str(isl), len_str(osl))
}

/// A node's CPU DRAM and GPUs (`configs/runners.yaml` `hardware:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hardware {
    pub available_cpu_dram_mib: u64,
    pub gpus_per_node: u32,
}

/// The `hardware:` entry of `runner` in runners.yaml text.
///
/// Errors: invalid YAML, or no entry for the runner (naming the file's runners).
pub fn read_hardware(yaml: &str, runner: &str) -> Result<Hardware, String> {
    let docs = yaml_rust2::YamlLoader::load_from_str(yaml).map_err(|e| format!("invalid YAML: {e}"))?;
    let hw = &docs.first().ok_or("empty YAML file")?["hardware"];
    let h = &hw[runner];
    // YAML 1.1 (PyYAML, which InferenceX reads it with) allows `3_095_781`.
    let int = |k: &str| h[k].as_i64().or_else(|| h[k].as_str()?.replace('_', "").parse().ok()).filter(|v| *v > 0);
    match (int("available-cpu-dram-mib"), int("gpus-per-node")) {
        (Some(mib), Some(gpus)) => Ok(Hardware { available_cpu_dram_mib: mib as u64, gpus_per_node: gpus as u32 }),
        _ => {
            let known: Vec<&str> = hw.as_hash().map(|m| m.keys().filter_map(|k| k.as_str()).collect()).unwrap_or_default();
            Err(format!(
                "runner {runner:?} has no available-cpu-dram-mib/gpus-per-node under hardware: (it has: {})",
                known.join(", ")
            ))
        }
    }
}

/// The runners.yaml that describes a master config's runners: beside it,
/// or one folder up (for `configs/deprecated/`), within the checkout `root`.
pub fn runners_yaml(master: &Path, root: &Path) -> Option<std::path::PathBuf> {
    let dir = master.parent()?;
    [dir.join("runners.yaml"), dir.parent()?.join("runners.yaml")]
        .into_iter()
        .find(|p| p.starts_with(root) && p.symlink_metadata().is_ok())
}

/// `TOTAL_CPU_DRAM_GB` of an agentic point, as InferenceX's sweep generator
/// computes it (`agentic_dram_offload_gb`): 0 without DRAM offload, else
/// `floor(min(available MiB, 2_861_022) x 2^20 x utilization x gpus /
/// gpus_per_node / 1e9)` with `gpus = TP x PP x PCP`, in exact decimal
/// arithmetic (`utilization` as written, e.g. 0.683).
///
/// Errors: the point uses more GPUs than the node has, or no utilization.
pub fn total_cpu_dram_gb(sp: &Space, utilization: Option<f64>, hw: Option<Hardware>) -> Result<u64, String> {
    if sp.kv_offloading.as_deref() != Some("dram") {
        return Ok(0);
    }
    let hw = hw.ok_or("kv-offloading: dram needs the runner's CPU DRAM (configs/runners.yaml hardware:), which was not found")?;
    let util = utilization.ok_or("kv-offloading: dram needs the config's dram-utilization")?;
    let gpus = u128::from(sp.tp.unwrap_or(1) * sp.pp.unwrap_or(1) * sp.pcp.unwrap_or(1));
    if gpus > u128::from(hw.gpus_per_node) {
        return Err(format!("TP x PP x PCP = {gpus} GPUs exceeds the runner's {} per node", hw.gpus_per_node));
    }
    // Python's str(float) is the shortest round-trip text, as Rust's Display.
    let (num, den) = decimal_fraction(&util.to_string()).ok_or_else(|| format!("dram-utilization {util} is not a decimal"))?;
    let mib = u128::from(hw.available_cpu_dram_mib).min(MAX_AVAILABLE_CPU_DRAM_MIB);
    let bytes_num = mib * 1_048_576 * num * gpus;
    let gb = bytes_num / (den * u128::from(hw.gpus_per_node) * 1_000_000_000);
    Ok(gb as u64)
}

/// `0.683` -> (683, 1000); `1` -> (1, 1).
fn decimal_fraction(text: &str) -> Option<(u128, u128)> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{int}{frac}");
    let num: u128 = digits.parse().ok()?;
    Some((num, 10u128.checked_pow(frac.len() as u32)?))
}

/// What every point shares: the entry's identity and the workflow's fixed
/// variables (benchmark-tmpl.yml `env:` and its launch step). `MODEL_PATH`
/// is the model id: where a runner keeps local copies is the site's, not
/// the recipe's. Benchmark context: `RUN_EVAL` and `EVAL_ONLY` false.
fn common_env(e: &Entry, sp: &Space, conc: u32, exp: &str) -> Vec<(&'static str, String)> {
    let model = e.model.clone().unwrap_or_default();
    let precision = e.precision.clone().unwrap_or_default();
    let framework = e.framework.clone().unwrap_or_else(|| "vllm".into());
    let runner = e.runner.clone().unwrap_or_default();
    let (tp, pp, dcp, pcp, ep) = (sp.tp.unwrap_or(1), sp.pp.unwrap_or(1), sp.dcp.unwrap_or(1), sp.pcp.unwrap_or(1), sp.ep.unwrap_or(1));
    let dpa = sp.dp_attn.unwrap_or(false);
    let spec = sp.spec_decoding.clone().unwrap_or_else(|| "none".into());
    let result = format!(
        "{exp}_{precision}_{framework}_tp{tp}-pp{pp}-dcp{dcp}-pcp{pcp}-ep{ep}-dpa{dpa}_disagg-false_spec-{spec}_conc{conc}_{runner}"
    );
    vec![
        ("MODEL", model.clone()),
        ("MODEL_PATH", model),
        ("MODEL_PREFIX", prefix(e)),
        ("EXP_NAME", exp.to_string()),
        ("IMAGE", e.image.clone().unwrap_or_default()),
        ("FRAMEWORK", framework),
        ("PRECISION", precision),
        ("RUNNER", runner.clone()),
        ("RUNNER_TYPE", runner),
        ("TP", tp.to_string()),
        ("PP_SIZE", pp.to_string()),
        ("DCP_SIZE", dcp.to_string()),
        ("PCP_SIZE", pcp.to_string()),
        ("EP_SIZE", ep.to_string()),
        ("DP_ATTENTION", dpa.to_string()),
        ("CONC", conc.to_string()),
        ("SPEC_DECODING", spec),
        ("DISAGG", "false".into()),
        ("RUN_EVAL", "false".into()),
        ("EVAL_ONLY", "false".into()),
        ("RANDOM_RANGE_RATIO", RANDOM_RANGE_RATIO.to_string()),
        ("PORT", PORT.into()),
        ("HF_HUB_CACHE", "/mnt/hf_hub_cache/".into()),
        ("RESULT_DIR", "/workspace/results".into()),
        ("RESULT_FILENAME", result),
        ("GPU_COUNT", (tp * pp * pcp).to_string()),
        ("GITHUB_WORKSPACE", "/workspace".into()),
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
        ("PYTHONPYCACHEPREFIX", "/tmp/inferencex-pycache".into()),
        ("AIPERF_FAILED_REQUEST_THRESHOLD", "0.10".into()),
        ("REQUIRE_POWER", "0".into()),
        ("AIPERF_EXPERIMENTAL_FAST", "0".into()),
    ]
}

/// The entry's model prefix (`model-prefix`, else the key's first part).
pub fn prefix(e: &Entry) -> String {
    e.model_prefix.clone().unwrap_or_else(|| e.key.split('-').next().unwrap_or("").to_string())
}

/// The environment of a fixed-seq-len point (InferenceX's sweep generator:
/// EP 1, DP-attention false and spec-decoding none by default,
/// `MAX_MODEL_LEN = ISL + OSL + 256`; the agentic variables empty, as the
/// workflow leaves them).
pub fn workflow_env(e: &Entry, sp: &Space, isl: u32, osl: u32, conc: u32) -> BTreeMap<String, String> {
    let exp = format!("{}_{}", prefix(e), scenario_name(isl, osl));
    let mut pairs = common_env(e, sp, conc, &exp);
    pairs.extend([
        ("SCENARIO_TYPE", "fixed-seq-len".into()),
        ("SCENARIO_SUBDIR", "fixed_seq_len/".into()),
        ("IS_AGENTIC", "0".into()),
        ("ISL", isl.to_string()),
        ("OSL", osl.to_string()),
        ("MAX_MODEL_LEN", (isl + osl + 256).to_string()),
        ("KV_OFFLOADING", String::new()),
        ("KV_OFFLOAD_BACKEND", String::new()),
        ("KV_OFFLOAD_BACKEND_METADATA", String::new()),
        ("ROUTER_METADATA", String::new()),
        ("KV_P2P_TRANSFER", String::new()),
        ("TOTAL_CPU_DRAM_GB", "0".into()),
        ("DURATION", AGENTIC_DURATION_S.to_string()),
    ]);
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The environment of an agentic point: scenario `agentic-coding` (launcher
/// folder `agentic/`), ISL/OSL/MAX_MODEL_LEN `0`, the KV offload choice
/// with its backend's metadata JSON and DRAM budget, the router's
/// metadata, `DURATION` 3600, and `EXP_NAME` as the sweep generator writes
/// it (`{prefix}_tp{TP}_conc{CONC}_{kvnone|kv<offloading>-<backend>}[_spec-X]`).
pub fn agentic_env(e: &Entry, sp: &Space, conc: u32, dram_gb: u64) -> BTreeMap<String, String> {
    let offloading = sp.kv_offloading.clone().unwrap_or_else(|| "none".into());
    let backend = sp.kv_offload_backend.as_ref();
    let spec = sp.spec_decoding.clone().unwrap_or_else(|| "none".into());
    let kv = match backend {
        _ if offloading == "none" => "kvnone".to_string(),
        Some(b) => format!("kv{offloading}-{}", b.name),
        None => format!("kv{offloading}-"),
    };
    let exp = format!(
        "{}_tp{}_conc{conc}_{kv}{}",
        prefix(e),
        sp.tp.unwrap_or(1),
        if spec == "none" { String::new() } else { format!("_spec-{spec}") }
    );
    let json = |c: Option<&Component>| c.map(Component::to_json).unwrap_or_default();
    let mut pairs = common_env(e, sp, conc, &exp);
    pairs.extend([
        ("SCENARIO_TYPE", "agentic-coding".into()),
        ("SCENARIO_SUBDIR", "agentic/".into()),
        ("IS_AGENTIC", "1".into()),
        ("ISL", "0".into()),
        ("OSL", "0".into()),
        ("MAX_MODEL_LEN", "0".into()),
        ("KV_OFFLOADING", offloading),
        ("KV_OFFLOAD_BACKEND", backend.map(|b| b.name.clone()).unwrap_or_default()),
        ("KV_OFFLOAD_BACKEND_METADATA", json(backend)),
        ("ROUTER_METADATA", json(sp.router.as_ref())),
        ("KV_P2P_TRANSFER", sp.kv_p2p_transfer.clone().unwrap_or_default()),
        ("TOTAL_CPU_DRAM_GB", dram_gb.to_string()),
        ("DURATION", AGENTIC_DURATION_S.to_string()),
    ]);
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn point(kind: Kind, sp: &Space, isl: u32, osl: u32, conc: u32, env: BTreeMap<String, String>) -> MatrixPoint {
    MatrixPoint {
        kind,
        isl,
        osl,
        conc,
        tp: sp.tp.unwrap_or(1),
        ep: sp.ep.unwrap_or(1),
        dp_attn: sp.dp_attn.unwrap_or(false),
        pp: sp.pp.unwrap_or(1),
        dcp: sp.dcp.unwrap_or(1),
        pcp: sp.pcp.unwrap_or(1),
        spec: sp.spec_decoding.clone().unwrap_or_else(|| "none".into()),
        offload: (kind == Kind::Agentic).then(|| match (&sp.kv_offloading, &sp.kv_offload_backend) {
            (Some(o), Some(b)) if o == "dram" => b.name.clone(),
            (Some(o), _) => o.clone(),
            (None, _) => "none".into(),
        }),
        env,
    }
}

/// Every point of the entry: its fixed-seq-len scenarios (only `scenario`,
/// e.g. `8k1k`, when given; `agentic` selects the agentic points) and its
/// agentic-coding configs. `hardware` is the runner's, for DRAM budgets.
///
/// Errors: a scenario name the entry does not have (naming those it has),
/// an entry without points, a DRAM budget that cannot be computed.
pub fn matrix(e: &Entry, scenario: Option<&str>, hardware: Option<Hardware>) -> Result<Vec<MatrixPoint>, String> {
    let mut names: Vec<String> = e.scenarios.iter().map(|s| scenario_name(s.isl, s.osl)).collect();
    if !e.agentic_configs.is_empty() {
        names.push("agentic".into());
    }
    if let Some(want) = scenario {
        if !names.iter().any(|n| n == want) {
            return Err(format!("entry {} has no scenario {want:?}; it has: {}", e.key, names.join(", ")));
        }
    }
    let mut out = Vec::new();
    for s in &e.scenarios {
        if scenario.is_some_and(|w| w != scenario_name(s.isl, s.osl)) {
            continue;
        }
        for sp in &s.spaces {
            for conc in sp.concs() {
                out.push(point(Kind::FixedSeqLen, sp, s.isl, s.osl, conc, workflow_env(e, sp, s.isl, s.osl, conc)));
            }
        }
    }
    if scenario.is_none_or(|w| w == "agentic") {
        for c in &e.agentic_configs {
            for sp in &c.spaces {
                let gb = total_cpu_dram_gb(sp, c.dram_utilization, hardware)
                    .map_err(|why| format!("entry {}: tp {} {}: {why}", e.key, sp.tp.unwrap_or(1), sp.kv_offloading.as_deref().unwrap_or("")))?;
                for conc in sp.concs() {
                    out.push(point(Kind::Agentic, sp, 0, 0, conc, agentic_env(e, sp, conc, gb)));
                }
            }
        }
    }
    if out.is_empty() {
        return Err(format!("entry {} has no search-space points", e.key));
    }
    Ok(out)
}

/// The entry's runner hardware from the runners.yaml beside its master
/// config in the checkout `root` (a real path), when the entry offloads KV
/// to DRAM (the budget needs it); `None` otherwise.
///
/// Errors: DRAM offload without a runners.yaml, or without the runner in
/// it; a runners.yaml that is a link out of the checkout
/// ([`super::confined::read`]).
pub fn hardware_for(master: &Path, e: &Entry, root: &Path) -> Result<Option<Hardware>, String> {
    let dram = e.agentic_configs.iter().flat_map(|c| &c.spaces).any(|s| s.kv_offloading.as_deref() == Some("dram"));
    if !dram {
        return Ok(None);
    }
    let file = runners_yaml(master, root).ok_or_else(|| {
        format!("entry {} offloads KV to DRAM: its budget needs the runner's CPU DRAM from runners.yaml, found neither beside {} nor one folder up", e.key, master.display())
    })?;
    let yaml = super::confined::read(root, &file)?;
    read_hardware(&yaml, e.runner.as_deref().unwrap_or("")).map(Some).map_err(|err| format!("{}: {err}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNERS: &str = "hardware:\n  cluster:b200-dgxc:\n    available-cpu-dram-mib: 3_095_781\n    gpus-per-node: 8\n  cluster:b300-nv:\n    available-cpu-dram-mib: 2964436\n    gpus-per-node: 8\n";

    fn dram(tp: u32) -> Space {
        Space { tp: Some(tp), kv_offloading: Some("dram".into()), ..Space::default() }
    }

    /// InferenceX's own figures: B200 TP8 at 0.95 -> 2849 GB; B300 TP4 at
    /// 0.80 -> 1199, TP8 -> 2399 (values of their generated matrix).
    #[test]
    fn dram_budget_as_the_sweep_generator() {
        let b200 = read_hardware(RUNNERS, "cluster:b200-dgxc").unwrap();
        assert_eq!(b200, Hardware { available_cpu_dram_mib: 3_095_781, gpus_per_node: 8 });
        assert_eq!(total_cpu_dram_gb(&dram(8), Some(0.95), Some(b200)), Ok(2849));
        let b300 = read_hardware(RUNNERS, "cluster:b300-nv").unwrap();
        assert_eq!(total_cpu_dram_gb(&dram(4), Some(0.8), Some(b300)), Ok(1199));
        assert_eq!(total_cpu_dram_gb(&dram(8), Some(0.8), Some(b300)), Ok(2399));
        let none = Space { tp: Some(8), kv_offloading: Some("none".into()), ..Space::default() };
        assert_eq!(total_cpu_dram_gb(&none, None, None), Ok(0));
        assert!(total_cpu_dram_gb(&dram(16), Some(0.5), Some(b200)).unwrap_err().contains("exceeds"));
        assert!(read_hardware(RUNNERS, "mi355x").unwrap_err().contains("cluster:b200-dgxc"));
        assert_eq!(decimal_fraction("0.683"), Some((683, 1000)));
    }
}
