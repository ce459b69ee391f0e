//! Telemetry sampled beside the engine: GPU power, energy, temperature,
//! clocks, utilisation and memory (NVML, AMD SMI / ROCm SMI libraries, or the
//! amd-smi / rocm-smi tools), and the host (CPU, memory, the engine's RSS and
//! CPU, RAPL package energy).
//!
//! The sampler runs on its own thread in the orchestrator process (which never
//! imports Python), at a fixed interval (default 100 ms), stamping each sample
//! with [`mono_now_s`] (`CLOCK_MONOTONIC`), the clock the worker's timestamps
//! use too. Sources are tried in order and each is reported with why it was or
//! wasn't used: NVML, then AMD SMI, ROCm SMI, `amd-smi`, `rocm-smi` (the first
//! that gives GPUs is sampled; the rest are "not tried"), and the host always.
//!
//! ```ignore
//! let tel = Telemetry::start(TelemetryConfig { gpu_count_hint: Some(tp), ..Default::default() });
//! tel.set_engine_pid(child.id());
//! tel.mark("engine load");
//! let (t0, t1) = (mono_now_s(), { run_point(); mono_now_s() });
//! let figures = tel.window(t0, t1, output_tokens, total_tokens);
//! let report = tel.stop(); // sources, samples, markers, sampler CPU
//! ```

mod amd;
mod amd_cli;
pub mod capture;
pub mod amd_json;
mod cli;
mod clock;
pub mod energy;
mod host;
mod nvml;
pub mod summary;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use cli::cli_main;
pub use clock::{lower_thread_priority, mono_now_s, thread_cpu_s};
pub use energy::{CrossCheck, Stats};
pub use host::RaplZone;
pub use summary::{GpuWindow, HostWindow, WindowSummary};

/// One GPU's readings at one time. Absent fields were not available (N/A).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    /// GPU index (physical, as the source numbers them).
    pub gpu: u32,
    /// When the reading was taken, mono s, if not the sample's `t` (CLI tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    /// Power, W (NVML power usage; AMD current socket power, else average).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    /// AMD average socket power, W, where the device reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_avg_w: Option<f64>,
    /// Cumulative energy counter, J (origin arbitrary: use differences).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Edge temperature (NVIDIA: the GPU die), °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<f64>,
    /// Hotspot / junction temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_hotspot_c: Option<f64>,
    /// Memory temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_mem_c: Option<f64>,
    /// SM (NVIDIA) / GFX (AMD) clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gfx_clock_mhz: Option<f64>,
    /// Memory clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<f64>,
    /// Utilisation, % (NVIDIA: time a kernel ran; AMD: GFX activity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<f64>,
    /// Memory-controller utilisation, %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_util_pct: Option<f64>,
    /// Device memory used, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<u64>,
    /// Device memory installed, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<u64>,
    /// Enforced power limit, W (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// NVML clocks-throttle-reason bit mask (see `nvml::THROTTLE_REASONS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<u64>,
}

/// The host's readings at one time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReading {
    /// Whole-machine CPU utilisation since the previous sample, % of all logical CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct: Option<f64>,
    /// System memory used, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<u64>,
    /// System memory installed, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<u64>,
    /// Resident memory of the engine process and its descendants, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_rss_bytes: Option<u64>,
    /// CPU of the engine process tree since the previous sample, % of one logical CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_cpu_pct: Option<f64>,
    /// Processes in the engine's tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_procs: Option<u32>,
    /// RAPL `energy_uj` per zone (order of `TelemetryReport::rapl_zones`), µJ, raw (wraps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rapl_uj: Vec<Option<u64>>,
}

/// One sample: a time and the readings taken then. One compact JSON line of
/// `telemetry.jsonl` ([`Sample::to_json_line`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// [`mono_now_s`] when the sample was taken, s.
    pub t: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuReading>,
    pub host: HostReading,
}

impl Sample {
    /// Compact JSON, no newline.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("samples serialise")
    }
}

/// A phase marker (engine load, warm-up, point N, eval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    /// [`mono_now_s`] when marked, s.
    pub t: f64,
    pub label: String,
}

/// A source tried, and why it was or wasn't used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// nvml, amd_smi, rocm_smi, amd-smi, rocm-smi, host, rapl.
    pub name: String,
    pub used: bool,
    /// What is sampled, or why not (library not found, no device, permission, N/A).
    pub reason: String,
}

/// A GPU being sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Index as the source numbers the devices.
    pub gpu: u32,
    /// Product name, where the source gives it.
    pub name: Option<String>,
    /// The source sampling it.
    pub source: String,
    /// The physical package (AMD SMI socket) this GPU is a partition of, as
    /// an index in the source's socket order; `None` when the source does not
    /// say. A partitioned MI300X/MI355X (DPX, QPX, CPX) shows each partition
    /// as a GPU of the same socket, and socket power and energy are read on
    /// the primary partition only (AMD SMI, `docs/conceptual/partition.md`,
    /// "Physical GPU, socket, and logical device hierarchy", in
    /// ROCm/rocm-systems `projects/amdsmi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<u32>,
    /// The partition's number within its socket: 0 is the primary partition
    /// (AMD SMI's processor 0 of the socket), which carries the socket's
    /// power and energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    /// Which reading the power series is (e.g. NVML's instantaneous field or
    /// its 1 s average); `None` when the source has one kind only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_field: Option<String>,
}

impl GpuInfo {
    /// A GPU with no socket, partition or power-field facts.
    pub fn new(gpu: u32, name: Option<String>, source: &str) -> GpuInfo {
        GpuInfo { gpu, name, source: source.to_owned(), socket: None, partition: None, power_field: None }
    }
}

/// Sampler settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Time between samples (default 100 ms).
    pub interval: Duration,
    /// Physical GPU indices visible to the engine ([`visible_gpus_from_env`]);
    /// `None`: all.
    pub visible_gpus: Option<Vec<u32>>,
    /// Sample only the first this many visible GPUs (`None`: all of them).
    /// A run leaves it `None`: which GPUs the engine uses is known only once
    /// it is built, and [`Telemetry::set_engine_gpus`] narrows the windows then.
    pub gpu_count_hint: Option<u32>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { interval: Duration::from_millis(100), visible_gpus: None, gpu_count_hint: None }
    }
}

/// What a stopped sampler hands back. Serialisable (the samples are also
/// meant for `telemetry.jsonl`, one [`Sample::to_json_line`] each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryReport {
    /// Sampling interval, ms.
    pub interval_ms: f64,
    /// Every source tried, in order, with its reason.
    pub sources: Vec<SourceStatus>,
    /// The GPUs sampled.
    pub gpus: Vec<GpuInfo>,
    /// The RAPL zones in `HostReading::rapl_uj`.
    pub rapl_zones: Vec<RaplZone>,
    pub samples: Vec<Sample>,
    pub markers: Vec<Marker>,
    /// CPU time of the sampler thread itself (`CLOCK_THREAD_CPUTIME_ID`), s,
    /// probing the sources included.
    pub sampler_cpu_seconds: f64,
    /// The part of `sampler_cpu_seconds` spent probing the sources at start, s.
    pub sampler_probe_cpu_seconds: f64,
    /// Wall time the sampler ran, s.
    pub sampler_wall_seconds: f64,
    /// `gpu_count_hint` of the config.
    pub expected_gpus: Option<u32>,
    /// The engine's GPUs ([`Telemetry::set_engine_gpus`]), source indices;
    /// `None` when never set (windows then cover every sampled GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_gpus: Option<Vec<u32>>,
}

impl TelemetryReport {
    /// `sampler_cpu_seconds / sampler_wall_seconds`: the share of one CPU the sampler used.
    pub fn sampler_cpu_fraction(&self) -> f64 {
        if self.sampler_wall_seconds > 0.0 { self.sampler_cpu_seconds / self.sampler_wall_seconds } else { 0.0 }
    }

    /// The sampler's CPU share once started (probing excluded).
    pub fn sampler_steady_cpu_fraction(&self) -> f64 {
        if self.sampler_wall_seconds > 0.0 {
            (self.sampler_cpu_seconds - self.sampler_probe_cpu_seconds) / self.sampler_wall_seconds
        } else {
            0.0
        }
    }

    /// The figures for `[t0, t1]` from the stored samples (as [`Telemetry::window`]).
    pub fn window(&self, t0: f64, t1: f64, output_tokens: u64, total_tokens: u64) -> WindowSummary {
        summary::summarize(
            &self.samples,
            &self.gpus,
            &self.rapl_zones,
            self.engine_gpus.as_deref(),
            self.expected_gpus,
            t0,
            t1,
            output_tokens,
            total_tokens,
        )
    }

    /// Write the samples as JSON lines (`telemetry.jsonl`).
    pub fn write_jsonl(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for s in &self.samples {
            writeln!(f, "{}", s.to_json_line())?;
        }
        f.flush()
    }
}

/// A GPU source: one reading per sampled GPU (a CLI source may return none
/// when it has nothing new).
trait GpuSource: Send {
    fn read(&mut self) -> Vec<GpuReading>;

    /// How long after its own timestamp a reading may take to be handed over
    /// (zero for a library read on the spot; a CLI tool's poll period plus a
    /// call for [`amd_cli`]): how long a window may wait for a reading past
    /// its end.
    fn reading_lag(&self) -> Duration {
        Duration::ZERO
    }
}

/// The GPUs to sample out of `count`: the visible ones (all when `None`) that
/// exist, the first `hint` of them. Notes say what was dropped.
pub fn select_gpus(count: u32, visible: Option<&[u32]>, hint: Option<u32>) -> (Vec<u32>, Vec<String>) {
    let mut notes = Vec::new();
    let mut v: Vec<u32> = match visible {
        Some(list) => {
            let (ok, missing): (Vec<u32>, Vec<u32>) = list.iter().partition(|&&i| i < count);
            if !missing.is_empty() {
                notes.push(format!("visible devices {missing:?} do not exist ({count} present)"));
            }
            ok
        }
        None => (0..count).collect(),
    };
    if let Some(h) = hint.filter(|&h| h > 0) {
        if (h as usize) < v.len() {
            v.truncate(h as usize);
        } else if (h as usize) > v.len() {
            notes.push(format!("engine expects {h} GPU(s), {} available", v.len()));
        }
    }
    (v, notes)
}

/// Physical GPU indices visible to the engine, from its environment:
/// `ROCR_VISIBLE_DEVICES` selects among physical devices, then
/// `HIP_VISIBLE_DEVICES` (else `CUDA_VISIBLE_DEVICES`, which HIP also honours)
/// selects among those. `None` when none is set (all visible) or when an entry
/// is not an index (e.g. a `GPU-<uuid>`), which this does not map.
///
/// NVML numbers devices in PCI bus order; CUDA does too only with
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID` (on one-model nodes the orders agree).
pub fn visible_gpus_from_env(env: &BTreeMap<String, String>) -> Option<Vec<u32>> {
    fn parse(s: &str) -> Option<Vec<u32>> {
        let s = s.trim();
        if s.is_empty() {
            return Some(vec![]);
        }
        s.split(',').map(|p| p.trim().parse::<u32>().ok()).collect()
    }
    // ROCR_VISIBLE_DEVICES set but not plain indices: unmappable.
    let base = match env.get("ROCR_VISIBLE_DEVICES") {
        Some(s) => Some(parse(s)?),
        None => None,
    };
    let inner = env.get("HIP_VISIBLE_DEVICES").or_else(|| env.get("CUDA_VISIBLE_DEVICES"));
    match (base, inner) {
        (None, None) => None,
        (Some(b), None) => Some(b),
        (None, Some(i)) => parse(i),
        (Some(b), Some(i)) => parse(i).map(|i| i.into_iter().filter_map(|k| b.get(k as usize).copied()).collect()),
    }
}

/// The environment the engine process gets: this process's own (`inherited`),
/// less the recipe's `unset` names, plus the recipe's `recipe` variables (as
/// `orchestrate::spawn` builds the worker's). A visibility variable such as
/// `CUDA_VISIBLE_DEVICES=4,5,6,7 enginebench run ...` is inherited, not in
/// the recipe: reading the recipe alone would sample GPUs 0-3.
pub fn engine_env(
    inherited: impl IntoIterator<Item = (String, String)>,
    recipe: &BTreeMap<String, String>,
    unset: &[String],
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = inherited.into_iter().filter(|(k, _)| !unset.contains(k)).collect();
    env.extend(recipe.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// [`visible_gpus_from_env`] of the engine's environment ([`engine_env`] of
/// this process's environment).
pub fn visible_gpus_for_engine(recipe: &BTreeMap<String, String>, unset: &[String]) -> Option<Vec<u32>> {
    visible_gpus_from_env(&engine_env(std::env::vars(), recipe, unset))
}

/// The source indices of the GPUs an engine runs on, from the visible
/// ordinals its workers use (`EngineInfo::device_ids`: vLLM's
/// `logical_device_id_to_visible_device_id(rank)` for ranks `0..world_size`,
/// vllm/platforms/interface.py:317-340) and the visible list
/// ([`visible_gpus_from_env`]; `None`: all GPUs visible in source order).
///
/// Errors: an ordinal past the visible list, named.
pub fn engine_gpus_from_ordinals(visible: Option<&[u32]>, ordinals: &[u32]) -> Result<Vec<u32>, String> {
    match visible {
        None => Ok(ordinals.to_vec()),
        Some(list) => ordinals
            .iter()
            .map(|&k| {
                list.get(k as usize).copied().ok_or_else(|| {
                    format!("the engine uses visible device {k}, but only {} are visible ({list:?})", list.len())
                })
            })
            .collect(),
    }
}

struct Shared {
    samples: Mutex<Vec<Sample>>,
    markers: Mutex<Vec<Marker>>,
    engine_pid: AtomicU32,
}

struct Probed {
    sources: Vec<SourceStatus>,
    gpus: Vec<GpuInfo>,
    rapl_zones: Vec<RaplZone>,
    /// The GPU source's [`GpuSource::reading_lag`].
    lag: Duration,
}

/// A running sampler. Dropping it without [`Telemetry::stop`] stops the thread too.
pub struct Telemetry {
    shared: Arc<Shared>,
    stop_tx: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<(f64, f64, f64)>>,
    probed: Probed,
    config: TelemetryConfig,
    /// [`Telemetry::set_engine_gpus`].
    engine_gpus: Mutex<Option<Result<Vec<u32>, String>>>,
}

/// How a sampler finds its GPU source: the real probes, or (tests) a given one.
type ProbeGpus = Box<dyn FnOnce(&TelemetryConfig) -> (Option<Box<dyn GpuSource>>, Vec<GpuInfo>, Vec<SourceStatus>) + Send>;

/// Names the GPU sources to try (comma-separated, e.g. `amd-smi,rocm-smi`);
/// the others are reported as not tried. Unset: all, in order. For checking
/// a fallback (the CLI tools) on a node where a library source works.
pub const SOURCES_VAR: &str = "ENGINEBENCH_TELEMETRY_SOURCES";

/// Whether `name` is in the comma-separated `list`.
fn source_listed(list: &str, name: &str) -> bool {
    list.split(',').any(|n| n.trim() == name)
}

/// Try the GPU sources in order; the first that yields GPUs is used.
fn probe_gpus(cfg: &TelemetryConfig) -> (Option<Box<dyn GpuSource>>, Vec<GpuInfo>, Vec<SourceStatus>) {
    let vis = cfg.visible_gpus.as_deref();
    let hint = cfg.gpu_count_hint;
    type Probe<'a> = Box<dyn Fn() -> Result<(Box<dyn GpuSource>, Vec<GpuInfo>, String), String> + 'a>;
    fn boxed<S: GpuSource + 'static>(
        r: Result<(S, Vec<GpuInfo>, String), String>,
    ) -> Result<(Box<dyn GpuSource>, Vec<GpuInfo>, String), String> {
        r.map(|(s, g, d)| (Box::new(s) as Box<dyn GpuSource>, g, d))
    }
    let interval = cfg.interval;
    let probes: Vec<(&str, Probe)> = vec![
        ("nvml", Box::new(move || boxed(nvml::probe(vis, hint)))),
        ("amd_smi", Box::new(move || boxed(amd::probe_amd_smi(vis, hint)))),
        ("rocm_smi", Box::new(move || boxed(amd::probe_rocm_smi(vis, hint)))),
        ("amd-smi", Box::new(move || boxed(amd_cli::probe_cli(amd_cli::CliTool::AmdSmi, vis, hint, interval)))),
        ("rocm-smi", Box::new(move || boxed(amd_cli::probe_cli(amd_cli::CliTool::RocmSmi, vis, hint, interval)))),
    ];
    let mut statuses = Vec::new();
    let mut chosen: Option<(Box<dyn GpuSource>, Vec<GpuInfo>)> = None;
    let only = std::env::var(SOURCES_VAR).ok();
    for (name, probe) in probes {
        if let Some(list) = only.as_deref().filter(|l| !source_listed(l, name)) {
            statuses.push(SourceStatus { name: name.into(), used: false, reason: format!("not tried: {SOURCES_VAR}={list}") });
            continue;
        }
        if let Some((_, g)) = &chosen {
            statuses.push(SourceStatus {
                name: name.into(),
                used: false,
                reason: format!("not tried: {} already samples the GPUs", g[0].source),
            });
            continue;
        }
        match probe() {
            Ok((src, gpus, detail)) => {
                statuses.push(SourceStatus { name: name.into(), used: true, reason: detail });
                chosen = Some((src, gpus));
            }
            Err(reason) => statuses.push(SourceStatus { name: name.into(), used: false, reason }),
        }
    }
    match chosen {
        Some((s, g)) => (Some(s), g, statuses),
        None => (None, vec![], statuses),
    }
}

impl Telemetry {
    /// Probe the sources and start sampling on a new thread. Returns once the
    /// sources are known and the first sample is taken, so a window that starts
    /// after this call is bracketed. Never fails: a source that cannot be used
    /// is reported in `sources`.
    pub fn start(config: TelemetryConfig) -> Telemetry {
        Self::start_with_rapl_root(config, Path::new("/sys/class/powercap"))
    }

    fn start_with_rapl_root(config: TelemetryConfig, rapl_root: &Path) -> Telemetry {
        Self::start_with(config, rapl_root, Box::new(probe_gpus))
    }

    fn start_with(config: TelemetryConfig, rapl_root: &Path, probe: ProbeGpus) -> Telemetry {
        let shared = Arc::new(Shared {
            samples: Mutex::new(Vec::new()),
            markers: Mutex::new(Vec::new()),
            engine_pid: AtomicU32::new(0),
        });
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (probe_tx, probe_rx) = mpsc::sync_channel::<Probed>(1);
        let sh = shared.clone();
        let cfg = config.clone();
        let rapl_root = rapl_root.to_owned();
        let handle = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn(move || {
                clock::lower_thread_priority();
                let cpu0 = thread_cpu_s();
                let wall0 = mono_now_s();
                let (mut gpu_src, gpus, mut sources) = probe(&cfg);
                let lag = gpu_src.as_ref().map(|s| s.reading_lag()).unwrap_or_default();
                let (mut host, host_status) = host::HostSampler::new(&rapl_root);
                sources.extend(host_status);
                let rapl_zones = host.rapl_zones();
                let mut take = |gpu_src: &mut Option<Box<dyn GpuSource>>| {
                    let t = mono_now_s();
                    let gpus = gpu_src.as_mut().map(|s| s.read()).unwrap_or_default();
                    let host = host.read(sh.engine_pid.load(Ordering::Relaxed));
                    sh.samples.lock().unwrap().push(Sample { t, gpus, host });
                };
                let probe_cpu = thread_cpu_s() - cpu0;
                take(&mut gpu_src);
                probe_tx.send(Probed { sources, gpus, rapl_zones, lag }).ok();
                let mut next = Instant::now() + cfg.interval;
                loop {
                    let wait = next.saturating_duration_since(Instant::now());
                    match stop_rx.recv_timeout(wait) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                    take(&mut gpu_src);
                    next += cfg.interval;
                    let now = Instant::now();
                    if next < now {
                        // Fell behind (suspended, overloaded): skip the missed ticks.
                        next = now + cfg.interval;
                    }
                }
                // A last sample, so windows ending just before stop are bracketed.
                take(&mut gpu_src);
                drop(gpu_src);
                (thread_cpu_s() - cpu0, probe_cpu, mono_now_s() - wall0)
            })
            .expect("spawn the telemetry thread");
        let probed = probe_rx.recv().unwrap_or(Probed {
            sources: vec![SourceStatus {
                name: "sampler".into(),
                used: false,
                reason: "sampler thread died while probing".into(),
            }],
            gpus: vec![],
            rapl_zones: vec![],
            lag: Duration::ZERO,
        });
        Telemetry { shared, stop_tx: Some(stop_tx), handle: Some(handle), probed, config, engine_gpus: Mutex::new(None) }
    }

    /// The engine's GPUs, source indices ([`engine_gpus_from_ordinals`]):
    /// from now on windows cover exactly these, expect that many, and say
    /// which of them is not sampled. An empty list is an engine on no GPU;
    /// an error (they could not be told) makes every window's power invalid
    /// with that reason.
    pub fn set_engine_gpus(&self, gpus: Result<Vec<u32>, String>) {
        *self.engine_gpus.lock().unwrap() = Some(gpus);
    }

    /// The sources tried, in order, with reasons.
    pub fn sources(&self) -> &[SourceStatus] {
        &self.probed.sources
    }

    /// The GPUs being sampled.
    pub fn gpus(&self) -> &[GpuInfo] {
        &self.probed.gpus
    }

    /// Include this process (and its descendants) in the host samples: RSS and CPU.
    pub fn set_engine_pid(&self, pid: u32) {
        self.shared.engine_pid.store(pid, Ordering::Relaxed);
    }

    /// Record a phase marker at [`mono_now_s`].
    pub fn mark(&self, label: &str) {
        self.shared.markers.lock().unwrap().push(Marker { t: mono_now_s(), label: label.to_owned() });
    }

    /// A copy of the samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.shared.samples.lock().unwrap().clone()
    }

    /// Figures for `[t0, t1]` (mono seconds) with the point's token counts.
    /// Waits for a sample at or after `t1`, and for a GPU reading whose own
    /// timestamp is at or after `t1` (a CLI tool's readings are stamped
    /// with the middle of their call and handed over a call later), so the
    /// window is bracketed when called right after it ends. The wait is
    /// bounded: 3 intervals + 1 s + the source's [`GpuSource::reading_lag`].
    pub fn window(&self, t0: f64, t1: f64, output_tokens: u64, total_tokens: u64) -> WindowSummary {
        let deadline = Instant::now() + self.config.interval * 3 + Duration::from_secs(1) + self.probed.lag;
        let has_gpus = !self.probed.gpus.is_empty();
        while self.handle.as_ref().is_some_and(|h| !h.is_finished()) && Instant::now() < deadline {
            if bracketed_after(&self.shared.samples.lock().unwrap(), t1, has_gpus) {
                break;
            }
            std::thread::sleep((self.config.interval / 4).max(Duration::from_millis(5)));
        }
        // Copy only the samples that can matter (the window, plus margin for
        // bracketing and gaps), so the sampler is not held up while summarising.
        let margin = energy::MAX_SAMPLE_GAP_S + 2.0;
        let samples: Vec<Sample> = {
            let all = self.shared.samples.lock().unwrap();
            let lo = all.partition_point(|s| s.t < t0 - margin);
            let hi = all.partition_point(|s| s.t <= t1 + margin);
            all[lo..hi].to_vec()
        };
        let engine_gpus = self.engine_gpus.lock().unwrap().clone();
        let mut w = summary::summarize(
            &samples,
            &self.probed.gpus,
            &self.probed.rapl_zones,
            engine_gpus.as_ref().and_then(|r| r.as_deref().ok()),
            self.config.gpu_count_hint,
            t0,
            t1,
            output_tokens,
            total_tokens,
        );
        if let Some(Err(e)) = engine_gpus {
            w.invalidate(format!("engine_gpus_unknown: {e}"));
        }
        w
    }

    /// Stop sampling (after one last sample) and hand everything back.
    pub fn stop(mut self) -> TelemetryReport {
        let (cpu, probe_cpu, wall) = self.finish();
        let samples = std::mem::take(&mut *self.shared.samples.lock().unwrap());
        let markers = std::mem::take(&mut *self.shared.markers.lock().unwrap());
        TelemetryReport {
            interval_ms: self.config.interval.as_secs_f64() * 1000.0,
            sources: std::mem::take(&mut self.probed.sources),
            gpus: std::mem::take(&mut self.probed.gpus),
            rapl_zones: std::mem::take(&mut self.probed.rapl_zones),
            samples,
            markers,
            sampler_cpu_seconds: cpu,
            sampler_probe_cpu_seconds: probe_cpu,
            sampler_wall_seconds: wall,
            expected_gpus: self.config.gpu_count_hint,
            engine_gpus: self.engine_gpus.lock().unwrap().clone().and_then(Result::ok),
        }
    }

    fn finish(&mut self) -> (f64, f64, f64) {
        if let Some(tx) = self.stop_tx.take() {
            tx.send(()).ok();
        }
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or((0.0, 0.0, 0.0))
    }
}

/// Whether `samples` (in time order) reach past `t1`: a sample at or after
/// it and, when GPUs are sampled, a GPU reading whose own time
/// (`GpuReading::t`, else its sample's) is at or after it.
fn bracketed_after(samples: &[Sample], t1: f64, gpus: bool) -> bool {
    let Some(last) = samples.last() else { return false };
    if last.t < t1 {
        return false;
    }
    !gpus
        || samples
            .iter()
            .rev()
            .take_while(|s| s.t >= t1)
            .any(|s| s.gpus.iter().any(|r| r.t.unwrap_or(s.t) >= t1))
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests;
