//! Figures for one window (a sweep point, the eval, ...) from the samples.
//!
//! Per GPU: power statistics, energy (counter delta when the counter is valid,
//! else the trapezoidal integral of valid power, cross-checked when both
//! exist), temperature, clocks, utilisation, memory, and energy per token.
//! Over all GPUs: InferenceX's fields (`utils/aggregate_power.py`,
//! `_derived_metrics`): `total_gpu_energy_j` = sum over GPUs;
//! `avg_total_gpu_power_w` = total / window duration; `avg_power_w` = that / GPUs;
//! `joules_per_{output,input,total}_token` = total / tokens; `power_valid`.
//! Host: CPU utilisation, memory, the engine's RSS and CPU, and CPU package
//! energy from RAPL the same way (counter delta with wrap at
//! `max_energy_range_uj`).

use serde::{Deserialize, Serialize};

use super::energy::{self, CROSS_CHECK_TOLERANCE, CrossCheck, Stats};
use super::host::RaplZone;
use super::nvml::throttle_names;
use super::{GpuInfo, Sample};

/// One GPU over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuWindow {
    /// GPU index (physical, as the source numbers them).
    pub gpu: u32,
    /// The source: nvml, amd_smi, rocm_smi, amd-smi, rocm-smi.
    pub source: String,
    /// The GPU whose readings carry this one's socket power and energy, when
    /// it is another partition of the same package (see `GpuInfo::socket`):
    /// this GPU's own energy is then not counted, so no package is counted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_on_gpu: Option<u32>,
    /// Readings with a timestamp inside the window.
    pub samples: usize,
    /// Power readings inside the window, W.
    pub power_w: Option<Stats>,
    /// Energy over the window divided by its duration, W.
    pub avg_power_w: Option<f64>,
    /// Energy over the window, J (see `energy_method`).
    pub energy_j: Option<f64>,
    /// "counter" (hardware energy counter delta) or "trapezoid" (integrated power).
    pub energy_method: Option<String>,
    /// Energy counter delta, J, when the counter was usable.
    pub counter_energy_j: Option<f64>,
    /// Trapezoidal integral of power, J, when the power bracketed the window.
    pub integrated_energy_j: Option<f64>,
    /// Counter vs integral, when both exist and the power readings are valid.
    pub energy_cross_check: Option<CrossCheck>,
    /// The power readings pass the validity rule (`energy::power_invalid_reasons`).
    pub power_readings_valid: bool,
    /// An energy figure exists (from a valid counter or valid power).
    pub energy_valid: bool,
    /// Why power or energy are not valid, or warnings (counter unusable, cross-check mismatch).
    pub notes: Vec<String>,
    /// Edge (NVIDIA: GPU die) temperature, °C.
    pub temp_c: Option<Stats>,
    /// Hotspot / junction temperature, °C (AMD).
    pub temp_hotspot_c: Option<Stats>,
    /// Memory temperature, °C (AMD).
    pub temp_mem_c: Option<Stats>,
    /// SM (NVIDIA) / GFX (AMD) clock, MHz.
    pub gfx_clock_mhz: Option<Stats>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Option<Stats>,
    /// Utilisation (NVIDIA: kernel time; AMD: GFX activity), %.
    pub util_pct: Option<Stats>,
    /// Memory-controller utilisation, %.
    pub mem_util_pct: Option<Stats>,
    /// Memory used, bytes.
    pub mem_used_bytes: Option<Stats>,
    /// Memory installed, bytes.
    pub mem_total_bytes: Option<u64>,
    /// Enforced power limit, W (NVIDIA).
    pub power_limit_w: Option<f64>,
    /// Throttle reasons seen in the window (NVIDIA), by NVML name.
    pub throttle_reasons: Vec<String>,
    /// This GPU's energy per output token, J/token.
    pub joules_per_output_token: Option<f64>,
    /// This GPU's energy per input + output token, J/token.
    pub joules_per_total_token: Option<f64>,
}

/// The host over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostWindow {
    /// Samples inside the window.
    pub samples: usize,
    /// Whole-machine CPU utilisation, % of all logical CPUs.
    pub cpu_pct: Option<Stats>,
    /// System memory used, bytes.
    pub mem_used_bytes: Option<Stats>,
    /// The engine process tree's resident memory, bytes.
    pub engine_rss_bytes: Option<Stats>,
    /// The engine process tree's CPU, % of one logical CPU (can exceed 100).
    pub engine_cpu_pct: Option<Stats>,
    /// CPU package energy over the window (RAPL, all packages), J.
    pub cpu_energy_j: Option<f64>,
    /// `cpu_energy_j` / duration, W.
    pub cpu_avg_power_w: Option<f64>,
    /// CPU package energy per output token, J/token.
    pub cpu_joules_per_output_token: Option<f64>,
    /// Why there is no CPU energy figure.
    pub cpu_energy_note: Option<String>,
}

/// Everything about one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// Window start and end, `mono_now_s` seconds.
    pub t0: f64,
    pub t1: f64,
    /// t1 - t0, s.
    pub duration_s: f64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub gpus: Vec<GpuWindow>,
    pub host: HostWindow,
    /// InferenceX: mean power per GPU = `avg_total_gpu_power_w` / GPUs, W.
    pub avg_power_w: Option<f64>,
    /// InferenceX: all GPUs' energy / duration, W.
    pub avg_total_gpu_power_w: Option<f64>,
    /// InferenceX: energy summed over GPUs, J.
    pub total_gpu_energy_j: Option<f64>,
    /// InferenceX: `total_gpu_energy_j` / output tokens, J/token.
    pub joules_per_output_token: Option<f64>,
    /// InferenceX: `total_gpu_energy_j` / input tokens, J/token.
    pub joules_per_input_token: Option<f64>,
    /// InferenceX: `total_gpu_energy_j` / (input + output) tokens, J/token.
    pub joules_per_total_token: Option<f64>,
    /// InferenceX's `power_valid`: every expected GPU has a valid energy
    /// figure. (InferenceX writes it as 1/0 in its aggregate.) The
    /// InferenceX figures above are present only when it is true.
    pub power_valid: bool,
    /// Why `power_valid` is false.
    pub power_invalid_reasons: Vec<String>,
    /// A job over several nodes: each node's own window (its GPUs and host,
    /// on its own clock), node order; the figures above are over all of
    /// them ([`merge_node_windows`]). Empty on one node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<WindowSummary>,
}

impl WindowSummary {
    /// Marks the power figures invalid for `reason` (the InferenceX totals
    /// exist only for valid windows).
    pub fn invalidate(&mut self, reason: String) {
        self.power_valid = false;
        self.power_invalid_reasons.push(reason);
        self.avg_power_w = None;
        self.avg_total_gpu_power_w = None;
        self.total_gpu_energy_j = None;
        self.joules_per_output_token = None;
        self.joules_per_input_token = None;
        self.joules_per_total_token = None;
    }
}

fn per_token(j: Option<f64>, tokens: u64) -> Option<f64> {
    j.filter(|_| tokens > 0).map(|j| j / tokens as f64)
}

/// Summarise `[t0, t1]` (mono seconds) over `samples`.
///
/// `gpus` are the sampled GPUs. `engine_gpus`, when known, are the engine's
/// (source indices): the window covers exactly those, and one that is not
/// sampled makes power invalid; `None`: every sampled GPU. `expected_gpus`:
/// a GPU count to check against, when known.
///
/// Partitions of one package (`GpuInfo::socket`) share its power and
/// energy, which the primary partition reports: the package's energy is
/// counted once, from the primary, and only when every sampled partition of
/// the package is in the window (otherwise it covers work outside it).
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    samples: &[Sample],
    gpus: &[GpuInfo],
    rapl: &[RaplZone],
    engine_gpus: Option<&[u32]>,
    expected_gpus: Option<u32>,
    t0: f64,
    t1: f64,
    output_tokens: u64,
    total_tokens: u64,
) -> WindowSummary {
    let duration_s = t1 - t0;
    let inside = |t: f64| t >= t0 && t <= t1;
    let mut reasons = Vec::new();
    let window_gpus: Vec<&GpuInfo> = match engine_gpus {
        None => gpus.iter().collect(),
        Some(ids) => {
            if ids.is_empty() {
                reasons.push("engine_uses_no_gpu: the engine runs on no GPU".to_owned());
            }
            ids.iter()
                .filter_map(|&id| {
                    let found = gpus.iter().find(|g| g.gpu == id);
                    // With no GPU sampled at all, `no_gpu_telemetry` says it once.
                    if found.is_none() && !gpus.is_empty() {
                        reasons.push(format!(
                            "engine_gpu_not_sampled: the engine runs on GPU {id}, which is not sampled (sampled: {:?})",
                            gpus.iter().map(|g| g.gpu).collect::<Vec<_>>()
                        ));
                    }
                    found
                })
                .collect()
        }
    };
    let mut gpu_windows = Vec::new();
    for info in window_gpus.iter().copied() {
        let readings: Vec<(f64, &super::GpuReading)> = samples
            .iter()
            .flat_map(|s| s.gpus.iter().filter(|r| r.gpu == info.gpu).map(move |r| (r.t.unwrap_or(s.t), r)))
            .collect();
        let series = |f: &dyn Fn(&super::GpuReading) -> Option<f64>| -> Vec<(f64, f64)> {
            readings.iter().filter_map(|(t, r)| f(r).map(|v| (*t, v))).collect()
        };
        let in_window = |f: &dyn Fn(&super::GpuReading) -> Option<f64>| -> Vec<f64> {
            readings.iter().filter(|(t, _)| inside(*t)).filter_map(|(_, r)| f(r)).collect()
        };
        let power = series(&|r| r.power_w);
        let counter = series(&|r| r.energy_j);
        let util = in_window(&|r| r.util_pct);
        let mut notes = energy::power_invalid_reasons(&power, &util, t0, t1);
        let power_readings_valid = notes.is_empty();
        let integrated = energy::trapezoid_j(&power, t0, t1);
        let counter_delta = if counter.is_empty() {
            Err("no energy counter readings".to_owned())
        } else {
            energy::counter_delta(&counter, t0, t1, None).map(|d| d.joules)
        };
        if let Err(e) = &counter_delta {
            notes.push(format!("energy_counter_unusable: {e}"));
        }
        let counter_j = counter_delta.ok();
        let (energy_j, method) = match (counter_j, integrated) {
            (Some(c), _) => (Some(c), Some("counter")),
            (None, Some(i)) if power_readings_valid => (Some(i), Some("trapezoid")),
            _ => (None, None),
        };
        let cross = match (counter_j, integrated) {
            (Some(c), Some(i)) if power_readings_valid => Some(energy::cross_check(c, i, CROSS_CHECK_TOLERANCE)),
            _ => None,
        };
        if let Some(x) = cross.as_ref().filter(|x| !x.within_tolerance) {
            notes.push(format!(
                "energy_mismatch: counter {:.1} J vs integrated power {:.1} J ({:.1} % > {:.0} %)",
                x.counter_j,
                x.integrated_j,
                x.relative_error * 100.0,
                x.tolerance * 100.0
            ));
        }
        let throttle_mask =
            readings.iter().filter(|(t, _)| inside(*t)).filter_map(|(_, r)| r.throttle_reasons).fold(0, |a, b| a | b);
        let stats = |f: &dyn Fn(&super::GpuReading) -> Option<f64>| Stats::of(&in_window(f));
        gpu_windows.push(GpuWindow {
            gpu: info.gpu,
            source: info.source.clone(),
            energy_on_gpu: None,
            samples: readings.iter().filter(|(t, _)| inside(*t)).count(),
            power_w: stats(&|r| r.power_w),
            avg_power_w: energy_j.filter(|_| duration_s > 0.0).map(|e| e / duration_s),
            energy_j,
            energy_method: method.map(str::to_owned),
            counter_energy_j: counter_j,
            integrated_energy_j: integrated,
            energy_cross_check: cross,
            power_readings_valid,
            energy_valid: energy_j.is_some(),
            notes,
            temp_c: stats(&|r| r.temp_c),
            temp_hotspot_c: stats(&|r| r.temp_hotspot_c),
            temp_mem_c: stats(&|r| r.temp_mem_c),
            gfx_clock_mhz: stats(&|r| r.gfx_clock_mhz),
            mem_clock_mhz: stats(&|r| r.mem_clock_mhz),
            util_pct: Stats::of(&util),
            mem_util_pct: stats(&|r| r.mem_util_pct),
            mem_used_bytes: stats(&|r| r.mem_used_bytes.map(|b| b as f64)),
            mem_total_bytes: readings.iter().rev().find_map(|(_, r)| r.mem_total_bytes),
            power_limit_w: readings.iter().rev().find_map(|(_, r)| r.power_limit_w),
            throttle_reasons: throttle_names(throttle_mask),
            joules_per_output_token: per_token(energy_j, output_tokens),
            joules_per_total_token: per_token(energy_j, total_tokens),
        });
    }

    share_package_energy(&mut gpu_windows, &window_gpus, gpus, &mut reasons);
    if gpus.is_empty() {
        reasons.push("no_gpu_telemetry: no GPU source available (see sources)".to_owned());
    }
    if let Some(n) = expected_gpus.filter(|&n| n > 0 && !gpus.is_empty() && n as usize != window_gpus.len()) {
        reasons.push(format!("expected_gpu_count_mismatch: expected {n}, observed {}", window_gpus.len()));
    }
    if duration_s <= 0.0 {
        reasons.push("invalid_window: t1 <= t0".to_owned());
    }
    for g in gpu_windows.iter().filter(|g| !g.energy_valid && g.energy_on_gpu.is_none()) {
        reasons.push(format!("gpu {}: no valid energy ({})", g.gpu, g.notes.join("; ")));
    }
    let power_valid = reasons.is_empty();
    // A secondary partition's energy is its package's, counted on the primary.
    let total = power_valid
        .then(|| gpu_windows.iter().filter(|g| g.energy_on_gpu.is_none()).filter_map(|g| g.energy_j).sum::<f64>());
    let avg_total = total.map(|e| e / duration_s);
    let input_tokens = total_tokens.saturating_sub(output_tokens);

    WindowSummary {
        t0,
        t1,
        duration_s,
        output_tokens,
        total_tokens,
        host: host_window(samples, rapl, t0, t1, output_tokens),
        avg_power_w: avg_total.map(|p| p / gpu_windows.len() as f64),
        avg_total_gpu_power_w: avg_total,
        total_gpu_energy_j: total,
        joules_per_output_token: per_token(total, output_tokens),
        joules_per_input_token: per_token(total, input_tokens),
        joules_per_total_token: per_token(total, total_tokens),
        gpus: gpu_windows,
        power_valid,
        power_invalid_reasons: reasons,
        nodes: Vec::new(),
    }
}

/// One point's window over several nodes' windows (each node sampled its
/// own GPUs and host over its ranks' part of the point): the GPUs of every
/// node in node order, node 0's host, the InferenceX totals from the nodes'
/// energy summed over the point's `[t0, t1]` (the job's clock) and its
/// tokens, valid only when every node's power is (a node's reasons are
/// kept, prefixed `node N:`); each node's window in `nodes`.
///
/// Panics: `nodes` is empty.
pub fn merge_node_windows(nodes: Vec<WindowSummary>, t0: f64, t1: f64, output_tokens: u64, total_tokens: u64) -> WindowSummary {
    let duration_s = t1 - t0;
    let mut reasons: Vec<String> = nodes
        .iter()
        .enumerate()
        .flat_map(|(n, w)| w.power_invalid_reasons.iter().map(move |r| format!("node {n}: {r}")))
        .collect();
    if duration_s <= 0.0 {
        reasons.push("invalid_window: t1 <= t0".to_owned());
    }
    let gpus: Vec<GpuWindow> = nodes.iter().flat_map(|w| w.gpus.iter().cloned()).collect();
    let power_valid = reasons.is_empty();
    let total = power_valid.then(|| nodes.iter().filter_map(|w| w.total_gpu_energy_j).sum::<f64>());
    let avg_total = total.map(|e| e / duration_s);
    let input_tokens = total_tokens.saturating_sub(output_tokens);
    WindowSummary {
        t0,
        t1,
        duration_s,
        output_tokens,
        total_tokens,
        host: nodes[0].host.clone(),
        avg_power_w: avg_total.map(|p| p / gpus.len().max(1) as f64),
        avg_total_gpu_power_w: avg_total,
        total_gpu_energy_j: total,
        joules_per_output_token: per_token(total, output_tokens),
        joules_per_input_token: per_token(total, input_tokens),
        joules_per_total_token: per_token(total, total_tokens),
        gpus,
        power_valid,
        power_invalid_reasons: reasons,
        nodes,
    }
}

/// Marks each secondary partition's window as counted on its package's
/// primary partition (`energy_on_gpu`; its energy figures cleared, its
/// validity the primary's), and gives a reason for each package whose
/// primary is not in the window or whose sampled partitions are not all in
/// it: that package's energy would cover work outside the window's GPUs.
fn share_package_energy(windows: &mut [GpuWindow], in_window: &[&GpuInfo], sampled: &[GpuInfo], reasons: &mut Vec<String>) {
    let mut sockets: Vec<u32> = in_window.iter().filter_map(|g| g.socket).collect();
    sockets.sort_unstable();
    sockets.dedup();
    for s in sockets {
        let members: Vec<&GpuInfo> = sampled.iter().filter(|g| g.socket == Some(s)).collect();
        if members.len() < 2 {
            continue; // a whole package: nothing shared
        }
        let primary = members.iter().min_by_key(|g| g.partition.unwrap_or(u32::MAX)).map(|g| g.gpu);
        let primary_window = windows.iter().find(|w| Some(w.gpu) == primary).map(|w| (w.energy_valid, w.power_readings_valid));
        let outside: Vec<u32> = members.iter().filter(|m| !in_window.iter().any(|g| g.gpu == m.gpu)).map(|m| m.gpu).collect();
        if primary_window.is_none() || !outside.is_empty() {
            reasons.push(format!(
                "shared_package: package {s} (GPUs {:?}, primary partition GPU {}) reports one energy for all its partitions, and GPUs {outside:?} of it are not among this window's",
                members.iter().map(|g| g.gpu).collect::<Vec<_>>(),
                primary.map_or("?".to_owned(), |p| p.to_string())
            ));
        }
        for w in windows.iter_mut().filter(|w| in_window.iter().any(|g| g.gpu == w.gpu && g.socket == Some(s)) && Some(w.gpu) != primary) {
            w.energy_on_gpu = primary;
            (w.energy_valid, w.power_readings_valid) = primary_window.unwrap_or((false, false));
            (w.energy_j, w.avg_power_w, w.energy_method, w.counter_energy_j, w.integrated_energy_j, w.energy_cross_check) =
                (None, None, None, None, None, None);
            (w.joules_per_output_token, w.joules_per_total_token) = (None, None);
            w.notes = vec![format!(
                "package_energy_on_primary: socket power and energy of this partition's package are read on its primary partition, GPU {}",
                primary.map_or("?".to_owned(), |p| p.to_string())
            )];
        }
    }
}

fn host_window(samples: &[Sample], rapl: &[RaplZone], t0: f64, t1: f64, output_tokens: u64) -> HostWindow {
    let inside: Vec<&Sample> = samples.iter().filter(|s| s.t >= t0 && s.t <= t1).collect();
    let stats = |f: &dyn Fn(&Sample) -> Option<f64>| Stats::of(&inside.iter().filter_map(|s| f(s)).collect::<Vec<_>>());
    let duration = t1 - t0;
    let (cpu_energy_j, note) = if rapl.is_empty() {
        (None, Some("RAPL not readable (see sources)".to_owned()))
    } else {
        let mut total = 0.0;
        let mut err = None;
        for (i, z) in rapl.iter().enumerate() {
            let series: Vec<(f64, f64)> = samples
                .iter()
                .filter_map(|s| s.host.rapl_uj.get(i).copied().flatten().map(|uj| (s.t, uj as f64 * 1e-6)))
                .collect();
            match energy::counter_delta(&series, t0, t1, z.max_energy_range_uj.map(|r| r as f64 * 1e-6)) {
                Ok(d) => total += d.joules,
                Err(e) => {
                    err = Some(format!("{}: {e}", z.zone));
                    break;
                }
            }
        }
        match err {
            None => (Some(total), None),
            Some(e) => (None, Some(e)),
        }
    };
    HostWindow {
        samples: inside.len(),
        cpu_pct: stats(&|s| s.host.cpu_pct),
        mem_used_bytes: stats(&|s| s.host.mem_used_bytes.map(|b| b as f64)),
        engine_rss_bytes: stats(&|s| s.host.engine_rss_bytes.map(|b| b as f64)),
        engine_cpu_pct: stats(&|s| s.host.engine_cpu_pct),
        cpu_avg_power_w: cpu_energy_j.filter(|_| duration > 0.0).map(|e| e / duration),
        cpu_joules_per_output_token: per_token(cpu_energy_j, output_tokens),
        cpu_energy_j,
        cpu_energy_note: note,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GpuReading, HostReading};
    use super::*;

    fn info(gpu: u32) -> GpuInfo {
        GpuInfo::new(gpu, None, "test")
    }

    /// 2 GPUs at 10 Hz over 0..=10 s: GPU 0 draws 300 W with a counter that
    /// agrees; GPU 1 reads 1 W while 95 % busy with no counter (MI325X-style).
    fn series(gpu1_watts: f64, gpu1_counter: bool) -> Vec<Sample> {
        (0..=100)
            .map(|i| {
                let t = 100.0 + i as f64 * 0.1;
                let wiggle = if i % 2 == 0 { 5.0 } else { -5.0 };
                Sample {
                    t,
                    gpus: vec![
                        GpuReading {
                            gpu: 0,
                            power_w: Some(300.0 + wiggle),
                            energy_j: Some(5000.0 + 300.0 * (t - 100.0)),
                            util_pct: Some(90.0),
                            temp_c: Some(60.0 + i as f64 * 0.1),
                            mem_used_bytes: Some(1 << 30),
                            throttle_reasons: Some(if i == 50 { 0x4 } else { 0 }),
                            ..Default::default()
                        },
                        GpuReading {
                            gpu: 1,
                            power_w: Some(gpu1_watts + if i % 3 == 0 { 0.5 } else { 0.0 }),
                            energy_j: gpu1_counter.then_some(10.0 + 250.0 * (t - 100.0)),
                            util_pct: Some(95.0),
                            ..Default::default()
                        },
                    ],
                    host: HostReading {
                        cpu_pct: Some(50.0),
                        mem_used_bytes: Some(8 << 30),
                        engine_rss_bytes: Some(2 << 30),
                        engine_cpu_pct: Some(150.0),
                        rapl_uj: vec![Some(((t - 100.0) * 50e6) as u64)],
                        ..Default::default()
                    },
                }
            })
            .collect()
    }

    fn rapl() -> Vec<RaplZone> {
        vec![RaplZone {
            zone: "intel-rapl:0".into(),
            name: "package-0".into(),
            max_energy_range_uj: Some(262143328850),
        }]
    }

    #[test]
    fn node_windows_merge_into_one_point_window() {
        // Two nodes with the same 2-GPU series: energy adds up, GPUs are every node's.
        let one = summarize(&series(250.0, true), &[info(0), info(1)], &rapl(), None, Some(2), 101.0, 109.0, 800, 4000);
        assert!(one.power_valid, "{:?}", one.power_invalid_reasons);
        let m = merge_node_windows(vec![one.clone(), one.clone()], 10.0, 18.0, 800, 4000);
        assert_eq!((m.gpus.len(), m.nodes.len()), (4, 2));
        let e = one.total_gpu_energy_j.unwrap();
        assert!((m.total_gpu_energy_j.unwrap() - 2.0 * e).abs() < 1e-9);
        assert!((m.avg_total_gpu_power_w.unwrap() - 2.0 * e / 8.0).abs() < 1e-9);
        assert!((m.avg_power_w.unwrap() - 2.0 * e / 8.0 / 4.0).abs() < 1e-9);
        assert!((m.joules_per_output_token.unwrap() - 2.0 * e / 800.0).abs() < 1e-9);
        // One node's invalid power makes the job's invalid, and says which node.
        let stuck = summarize(&series(1.0, false), &[info(0), info(1)], &rapl(), None, Some(2), 101.0, 109.0, 800, 4000);
        let m = merge_node_windows(vec![one, stuck], 10.0, 18.0, 800, 4000);
        assert!(!m.power_valid && m.total_gpu_energy_j.is_none());
        assert!(m.power_invalid_reasons.iter().all(|r| r.starts_with("node 1: ")), "{:?}", m.power_invalid_reasons);
    }

    #[test]
    fn stuck_gpu_without_counter_invalidates_power() {
        let s = series(1.0, false);
        let w = summarize(&s, &[info(0), info(1)], &rapl(), None, Some(2), 101.0, 109.0, 800, 4000);
        let g0 = &w.gpus[0];
        assert_eq!(g0.energy_method.as_deref(), Some("counter"));
        assert!((g0.energy_j.unwrap() - 2400.0).abs() < 1e-6);
        assert!(g0.energy_cross_check.as_ref().unwrap().within_tolerance);
        assert!((g0.integrated_energy_j.unwrap() - 2400.0).abs() < 10.0);
        assert_eq!(g0.throttle_reasons, vec!["sw_power_cap"]);
        assert_eq!(g0.samples, 81);
        assert!((g0.joules_per_output_token.unwrap() - 3.0).abs() < 1e-9);
        let g1 = &w.gpus[1];
        assert!(!g1.power_readings_valid && !g1.energy_valid);
        assert!(g1.notes[0].starts_with("power_stuck_low"), "{:?}", g1.notes);
        assert!(!w.power_valid);
        assert!(w.power_invalid_reasons[0].starts_with("gpu 1: no valid energy"));
        assert_eq!(w.total_gpu_energy_j, None);
        assert_eq!(w.avg_power_w, None);
        // Host: RAPL 50 W over 8 s.
        assert!((w.host.cpu_energy_j.unwrap() - 400.0).abs() < 1e-3);
        assert!((w.host.cpu_avg_power_w.unwrap() - 50.0).abs() < 1e-3);
        assert_eq!(w.host.engine_rss_bytes.as_ref().unwrap().max, (2u64 << 30) as f64);
        assert_eq!(w.host.samples, 81);
    }

    #[test]
    fn stuck_power_with_valid_counter_still_gives_energy() {
        let s = series(1.0, true);
        let w = summarize(&s, &[info(0), info(1)], &rapl(), None, Some(2), 101.0, 109.0, 800, 4000);
        let g1 = &w.gpus[1];
        assert!(!g1.power_readings_valid && g1.energy_valid);
        assert_eq!(g1.energy_method.as_deref(), Some("counter"));
        assert!(g1.energy_cross_check.is_none(), "no cross-check against invalid power");
        assert!(w.power_valid, "{:?}", w.power_invalid_reasons);
        let total = 2400.0 + 2000.0;
        assert!((w.total_gpu_energy_j.unwrap() - total).abs() < 1e-6);
        assert!((w.avg_total_gpu_power_w.unwrap() - total / 8.0).abs() < 1e-6);
        assert!((w.avg_power_w.unwrap() - total / 16.0).abs() < 1e-6);
        assert!((w.joules_per_output_token.unwrap() - total / 800.0).abs() < 1e-9);
        assert!((w.joules_per_input_token.unwrap() - total / 3200.0).abs() < 1e-9);
        assert!((w.joules_per_total_token.unwrap() - total / 4000.0).abs() < 1e-9);
    }

    #[test]
    fn trapezoid_when_no_counter_and_mismatch_flag() {
        let s = series(250.0, false);
        let w = summarize(&s, &[info(0), info(1)], &[], None, None, 101.0, 109.0, 800, 4000);
        let g1 = &w.gpus[1];
        assert_eq!(g1.energy_method.as_deref(), Some("trapezoid"));
        assert!((g1.energy_j.unwrap() - 250.17 * 8.0).abs() < 2.0, "{:?}", g1.energy_j);
        assert!(w.power_valid);
        assert!(w.host.cpu_energy_j.is_none() && w.host.cpu_energy_note.is_some());
        // A counter that runs at twice the integrated power is flagged.
        let mut s = series(250.0, true);
        for x in &mut s {
            x.gpus[1].energy_j = Some(500.0 * x.t);
        }
        let w = summarize(&s, &[info(0), info(1)], &[], None, None, 101.0, 109.0, 800, 4000);
        let g1 = &w.gpus[1];
        assert!(!g1.energy_cross_check.as_ref().unwrap().within_tolerance);
        assert!(g1.notes.iter().any(|n| n.starts_with("energy_mismatch")), "{:?}", g1.notes);
    }

    #[test]
    fn no_gpu_and_count_mismatch() {
        let s = series(250.0, true);
        let w = summarize(&s, &[], &rapl(), None, Some(1), 101.0, 109.0, 10, 20);
        assert!(!w.power_valid && w.power_invalid_reasons[0].starts_with("no_gpu_telemetry"));
        assert!(w.host.cpu_energy_j.is_some());
        let w = summarize(&s, &[info(0)], &rapl(), None, Some(2), 101.0, 109.0, 10, 20);
        assert!(w.power_invalid_reasons[0].starts_with("expected_gpu_count_mismatch"));
    }

    /// Readings of `gpus` at 10 Hz over 100..=110 s: each draws `watts` with
    /// an energy counter that agrees, except those in `na`, which report
    /// neither (a secondary partition without the package's metrics).
    fn flat(gpus: &[u32], watts: f64, na: &[u32]) -> Vec<Sample> {
        (0..=100)
            .map(|i| {
                let t = 100.0 + i as f64 * 0.1;
                let wiggle = if i % 2 == 0 { 3.0 } else { -3.0 };
                Sample {
                    t,
                    gpus: gpus
                        .iter()
                        .map(|&gpu| {
                            let on = !na.contains(&gpu);
                            GpuReading {
                                gpu,
                                power_w: on.then_some(watts + wiggle),
                                energy_j: on.then_some(1000.0 + watts * (t - 100.0)),
                                util_pct: Some(90.0),
                                ..Default::default()
                            }
                        })
                        .collect(),
                    host: HostReading::default(),
                }
            })
            .collect()
    }

    #[test]
    fn window_covers_the_engine_gpus_only() {
        // GPUs 0-7 sampled (the whole node), the engine on 4-7: energy is of
        // those four; 0-3 draw idle power that must not count.
        let all: Vec<u32> = (0..8).collect();
        let infos: Vec<GpuInfo> = all.iter().map(|&g| info(g)).collect();
        let s = flat(&all, 100.0, &[]);
        let w = summarize(&s, &infos, &[], Some(&[4, 5, 6, 7]), None, 101.0, 109.0, 800, 1600);
        assert!(w.power_valid, "{:?}", w.power_invalid_reasons);
        assert_eq!(w.gpus.iter().map(|g| g.gpu).collect::<Vec<_>>(), vec![4, 5, 6, 7]);
        assert!((w.total_gpu_energy_j.unwrap() - 4.0 * 800.0).abs() < 1e-6);
        // An engine GPU the source does not sample makes the figures invalid.
        let w = summarize(&s, &infos[..4], &[], Some(&[4, 5]), None, 101.0, 109.0, 800, 1600);
        assert!(!w.power_valid && w.power_invalid_reasons[0].starts_with("engine_gpu_not_sampled: the engine runs on GPU 4"), "{:?}", w.power_invalid_reasons);
        // A CPU engine: no GPU figure is the engine's.
        let w = summarize(&s, &infos, &[], Some(&[]), None, 101.0, 109.0, 800, 1600);
        assert!(!w.power_valid && w.gpus.is_empty() && w.power_invalid_reasons[0].starts_with("engine_uses_no_gpu"));
    }

    fn partition(gpu: u32, socket: u32, partition: u32) -> GpuInfo {
        GpuInfo { socket: Some(socket), partition: Some(partition), ..GpuInfo::new(gpu, None, "amd_smi") }
    }

    #[test]
    fn partitioned_package_energy_is_counted_once_on_the_primary() {
        // One MI300X in CPX mode: 8 partitions (GPUs 0-7) of socket 0, and a
        // second package in SPX (GPU 8). Only the primary partition reports
        // the package's socket power and energy.
        let mut infos: Vec<GpuInfo> = (0..8).map(|p| partition(p, 0, p)).collect();
        infos.push(partition(8, 1, 0));
        let all: Vec<u32> = (0..9).collect();
        let s = flat(&all, 600.0, &[1, 2, 3, 4, 5, 6, 7]);
        let w = summarize(&s, &infos, &[], None, None, 101.0, 109.0, 800, 1600);
        assert!(w.power_valid, "{:?}", w.power_invalid_reasons);
        assert!((w.total_gpu_energy_j.unwrap() - 2.0 * 4800.0).abs() < 1e-6, "two packages, each once");
        let g3 = w.gpus.iter().find(|g| g.gpu == 3).unwrap();
        assert_eq!((g3.energy_on_gpu, g3.energy_j, g3.energy_valid), (Some(0), None, true));
        // A driver that repeats the package's figures on every partition:
        // still counted once.
        let s = flat(&all, 600.0, &[]);
        let w = summarize(&s, &infos, &[], None, None, 101.0, 109.0, 800, 1600);
        assert!((w.total_gpu_energy_j.unwrap() - 2.0 * 4800.0).abs() < 1e-6, "{:?}", w.total_gpu_energy_j);
        // An engine on partitions 0-3 only: the package's energy covers
        // partitions 4-7 too, so it is not the engine's.
        let w = summarize(&s, &infos, &[], Some(&[0, 1, 2, 3]), None, 101.0, 109.0, 800, 1600);
        assert!(!w.power_valid && w.power_invalid_reasons.iter().any(|r| r.starts_with("shared_package: package 0")), "{:?}", w.power_invalid_reasons);
        assert_eq!(w.total_gpu_energy_j, None);
    }

    #[test]
    fn rapl_wrap_inside_window() {
        let range_uj = 1_000_000_000u64; // 1000 J
        let s: Vec<Sample> = (0..=20)
            .map(|i| Sample {
                t: i as f64,
                gpus: vec![],
                host: HostReading {
                    rapl_uj: vec![Some((900_000_000 + i * 20_000_000) % range_uj)],
                    ..Default::default()
                },
            })
            .collect();
        let z = vec![RaplZone {
            zone: "intel-rapl:0".into(),
            name: "package-0".into(),
            max_energy_range_uj: Some(range_uj),
        }];
        let w = summarize(&s, &[], &z, None, None, 0.0, 20.0, 0, 0);
        assert!((w.host.cpu_energy_j.unwrap() - 400.0).abs() < 1e-6, "{:?}", w.host);
    }

    #[test]
    fn cli_readings_use_their_own_timestamps() {
        // A CLI source's readings carry t; samples without them are skipped.
        let s: Vec<Sample> = (0..=40)
            .map(|i| Sample {
                t: i as f64 * 0.25,
                gpus: if i % 4 == 1 {
                    vec![GpuReading {
                        gpu: 0,
                        t: Some(i as f64 * 0.25 - 0.1),
                        power_w: Some(100.0 + i as f64),
                        ..Default::default()
                    }]
                } else {
                    vec![]
                },
                host: HostReading::default(),
            })
            .collect();
        let w = summarize(&s, &[info(0)], &[], None, None, 1.0, 8.0, 0, 0);
        assert_eq!(w.gpus[0].samples, 7);
        assert_eq!(w.gpus[0].energy_method.as_deref(), Some("trapezoid"));
    }
}
