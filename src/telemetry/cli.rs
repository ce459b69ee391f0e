//! `enginebench telemetry`: list the sources and sample them for a while, to
//! check a node before a sweep (like `amd-smi metric` / `nvidia-smi`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Telemetry, TelemetryConfig, mono_now_s, visible_gpus_from_env};

/// Sample for `seconds` at `interval_ms` and print the sources and a summary;
/// with `json`, one JSON object (`{"sources", "gpus", "summary",
/// "sampler_cpu_seconds", ...}`) instead of text.
pub fn cli_main(seconds: f64, interval_ms: u64, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(seconds.is_finite() && seconds > 0.0, "--seconds must be > 0");
    anyhow::ensure!(interval_ms > 0, "--interval-ms must be > 0");
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let tel = Telemetry::start(TelemetryConfig {
        interval: Duration::from_millis(interval_ms),
        visible_gpus: visible_gpus_from_env(&env),
        gpu_count_hint: None,
    });
    if !json {
        outln!("sources:");
        for s in tel.sources() {
            outln!("  {:<9} {:<8} {}", s.name, if s.used { "used" } else { "not used" }, s.reason);
        }
        errln!("sampling for {seconds} s every {interval_ms} ms ...");
    }
    let t0 = mono_now_s();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let t1 = mono_now_s();
    let window = tel.window(t0, t1, 0, 0);
    let report = tel.stop();
    if json {
        let out = serde_json::json!({
            "sources": report.sources,
            "gpus": report.gpus,
            "rapl_zones": report.rapl_zones,
            "interval_ms": report.interval_ms,
            "samples": report.samples.len(),
            "sampler_cpu_seconds": report.sampler_cpu_seconds,
            "sampler_wall_seconds": report.sampler_wall_seconds,
            "summary": window,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!(
        "sampled {:.1} s: {} samples, sampler thread CPU {:.4} s ({:.3} % of one CPU)",
        report.sampler_wall_seconds,
        report.samples.len(),
        report.sampler_cpu_seconds,
        report.sampler_cpu_fraction() * 100.0
    );
    let f = |s: &Option<super::Stats>, scale: f64, unit: &str| match s {
        Some(s) => format!("{:.1}/{:.1}/{:.1} {unit}", s.mean / scale, s.min / scale, s.max / scale),
        None => "N/A".into(),
    };
    for g in &window.gpus {
        let name = report.gpus.iter().find(|i| i.gpu == g.gpu).and_then(|i| i.name.clone()).unwrap_or_default();
        outln!("GPU {} {name} ({}), mean/min/max:", g.gpu, g.source);
        outln!("  power        {}", f(&g.power_w, 1.0, "W"));
        outln!(
            "  energy       {}",
            match (g.energy_j, &g.energy_method) {
                (Some(e), Some(m)) => format!("{e:.1} J ({m}), {:.1} W average", g.avg_power_w.unwrap_or(0.0)),
                _ => "N/A".into(),
            }
        );
        outln!(
            "  temperature  {} (hotspot {}, memory {})",
            f(&g.temp_c, 1.0, "°C"),
            f(&g.temp_hotspot_c, 1.0, "°C"),
            f(&g.temp_mem_c, 1.0, "°C")
        );
        outln!(
            "  clocks       gfx/SM {}, memory {}",
            f(&g.gfx_clock_mhz, 1.0, "MHz"),
            f(&g.mem_clock_mhz, 1.0, "MHz")
        );
        outln!("  utilisation  {} (memory {})", f(&g.util_pct, 1.0, "%"), f(&g.mem_util_pct, 1.0, "%"));
        outln!(
            "  memory       {} of {}",
            f(&g.mem_used_bytes, (1u64 << 30) as f64, "GiB"),
            g.mem_total_bytes.map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)).unwrap_or("N/A".into())
        );
        if let Some(l) = g.power_limit_w {
            outln!("  power limit  {l:.0} W");
        }
        if !g.throttle_reasons.is_empty() {
            outln!("  throttle     {}", g.throttle_reasons.join(", "));
        }
        for n in &g.notes {
            outln!("  note         {n}");
        }
    }
    if window.gpus.is_empty() {
        outln!("GPUs: none sampled");
    }
    let h = &window.host;
    outln!("host, mean/min/max:");
    outln!("  CPU          {}", f(&h.cpu_pct, 1.0, "%"));
    outln!("  memory used  {}", f(&h.mem_used_bytes, (1u64 << 30) as f64, "GiB"));
    match (h.cpu_energy_j, h.cpu_avg_power_w) {
        (Some(e), Some(p)) => outln!("  CPU packages {e:.1} J, {p:.1} W average (RAPL)"),
        _ => outln!("  CPU packages N/A ({})", h.cpu_energy_note.as_deref().unwrap_or("")),
    }
    Ok(())
}
