//! Sampler tests on this machine (no GPU, no NVML, no AMD SMI): the missing
//! sources are reported with reasons and the host is sampled for real.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn visible_devices_from_env() {
    assert_eq!(visible_gpus_from_env(&env(&[])), None);
    assert_eq!(visible_gpus_from_env(&env(&[("CUDA_VISIBLE_DEVICES", "2,3")])), Some(vec![2, 3]));
    assert_eq!(visible_gpus_from_env(&env(&[("CUDA_VISIBLE_DEVICES", "")])), Some(vec![]));
    assert_eq!(visible_gpus_from_env(&env(&[("CUDA_VISIBLE_DEVICES", "GPU-1a2b")])), None);
    assert_eq!(visible_gpus_from_env(&env(&[("HIP_VISIBLE_DEVICES", "1, 0")])), Some(vec![1, 0]));
    // ROCR selects physical devices, HIP indexes into them.
    assert_eq!(
        visible_gpus_from_env(&env(&[("ROCR_VISIBLE_DEVICES", "4,5,6,7"), ("HIP_VISIBLE_DEVICES", "1,3")])),
        Some(vec![5, 7])
    );
    assert_eq!(visible_gpus_from_env(&env(&[("ROCR_VISIBLE_DEVICES", "4,5")])), Some(vec![4, 5]));
    assert_eq!(visible_gpus_from_env(&env(&[("ROCR_VISIBLE_DEVICES", "GPU-abc"), ("HIP_VISIBLE_DEVICES", "0")])), None);
    // HIP wins over CUDA when both are set.
    assert_eq!(
        visible_gpus_from_env(&env(&[("HIP_VISIBLE_DEVICES", "1"), ("CUDA_VISIBLE_DEVICES", "0")])),
        Some(vec![1])
    );
}

#[test]
fn gpu_selection() {
    assert_eq!(select_gpus(8, None, None).0, (0..8).collect::<Vec<_>>());
    assert_eq!(select_gpus(8, None, Some(2)).0, vec![0, 1]);
    assert_eq!(select_gpus(8, Some(&[6, 7, 2]), Some(2)).0, vec![6, 7]);
    let (v, notes) = select_gpus(2, Some(&[1, 5]), Some(2));
    assert_eq!(v, vec![1]);
    assert_eq!(notes.len(), 2, "{notes:?}");
}

#[test]
fn sample_line_is_compact_json() {
    let s = Sample {
        t: 12.5,
        gpus: vec![GpuReading { gpu: 0, power_w: Some(301.25), energy_j: Some(1.5), ..Default::default() }],
        host: HostReading { cpu_pct: Some(3.0), rapl_uj: vec![Some(7), None], ..Default::default() },
    };
    let line = s.to_json_line();
    assert!(!line.contains('\n') && !line.contains(": "), "{line}");
    assert_eq!(
        line,
        r#"{"t":12.5,"gpus":[{"gpu":0,"power_w":301.25,"energy_j":1.5}],"host":{"cpu_pct":3.0,"rapl_uj":[7,null]}}"#
    );
    let back: Sample = serde_json::from_str(&line).unwrap();
    assert_eq!(back, s);
}

#[test]
fn missing_gpu_libraries_are_reported_and_host_is_sampled() {
    if std::path::Path::new("/dev/nvidiactl").exists() || std::path::Path::new("/dev/kfd").exists() {
        eprintln!("a GPU is present; the missing-library path is not what this machine has");
        return;
    }
    let tel = Telemetry::start(TelemetryConfig { interval: Duration::from_millis(50), ..Default::default() });
    let names: Vec<&str> = tel.sources().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["nvml", "amd_smi", "rocm_smi", "amd-smi", "rocm-smi", "host", "rapl"]);
    for s in tel.sources() {
        eprintln!("source {:<9} used={:<5} {}", s.name, s.used, s.reason);
    }
    let by = |n: &str| tel.sources().iter().find(|s| s.name == n).unwrap().clone();
    for n in ["nvml", "amd_smi", "rocm_smi"] {
        let s = by(n);
        assert!(!s.used);
        assert!(
            s.reason.contains("not found")
                || s.reason.contains("no AMD GPU")
                || s.reason.contains("driver")
                || s.reason.contains("init failed"), // a real library on a machine without the GPU
            "{n}: {}",
            s.reason
        );
    }
    for n in ["amd-smi", "rocm-smi"] {
        assert!(!by(n).used && !by(n).reason.is_empty());
    }
    assert!(by("host").used);
    assert!(tel.gpus().is_empty());
    // CPU utilisation needs two readings some 200 ms apart (sysinfo's
    // minimum), so the window spans more than that.
    std::thread::sleep(Duration::from_millis(800));
    let t1 = mono_now_s();
    let w = tel.window(t1 - 0.6, t1, 10, 20);
    assert!(!w.power_valid);
    assert!(w.power_invalid_reasons[0].starts_with("no_gpu_telemetry"), "{:?}", w.power_invalid_reasons);
    assert!(w.host.cpu_pct.is_some() && w.host.mem_used_bytes.is_some());
    let r = tel.stop();
    assert!(r.samples.len() >= 5);
    assert!(r.samples.iter().all(|s| s.gpus.is_empty() && s.host.mem_total_bytes.is_some()));
}

/// Host sampling for real: a busy child as the engine; RSS and CPU appear,
/// timestamps are monotonic, markers land in order; the sampler's own CPU
/// cost at 100 ms is measured and printed.
#[test]
fn host_sampling_of_a_real_engine_process() {
    let mut child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn a busy child");
    let tel = Telemetry::start(TelemetryConfig::default());
    let start = mono_now_s();
    tel.mark("engine load");
    tel.set_engine_pid(child.id());
    std::thread::sleep(Duration::from_millis(1500));
    tel.mark("point 1");
    let t0 = mono_now_s();
    std::thread::sleep(Duration::from_millis(1500));
    let t1 = mono_now_s();
    let w = tel.window(t0, t1, 100, 300);
    tel.mark("eval");
    std::thread::sleep(Duration::from_millis(1000));
    let report = tel.stop();
    child.kill().ok();
    child.wait().ok();

    let ts: Vec<f64> = report.samples.iter().map(|s| s.t).collect();
    assert!(ts.windows(2).all(|p| p[1] > p[0]), "timestamps not increasing");
    assert!(ts[0] <= start, "first sample precedes start() returning");
    let wall = report.sampler_wall_seconds;
    assert!(report.samples.len() as f64 >= wall / 0.1 * 0.7, "{} samples in {wall:.2} s", report.samples.len());
    let with_engine: Vec<&Sample> = report.samples.iter().filter(|s| s.host.engine_rss_bytes.is_some()).collect();
    assert!(with_engine.len() >= 20, "{} samples with the engine", with_engine.len());
    assert!(with_engine.iter().all(|s| s.host.engine_rss_bytes.unwrap() > 0));
    // The child spins on one CPU; on a loaded machine it still gets a good share.
    let cpu: Vec<f64> = with_engine.iter().filter_map(|s| s.host.engine_cpu_pct).collect();
    let mean_cpu = cpu.iter().sum::<f64>() / cpu.len() as f64;
    assert!(cpu.len() + 1 >= with_engine.len(), "CPU figures in {} of {} samples", cpu.len(), with_engine.len());
    assert!(mean_cpu > 10.0, "engine CPU {mean_cpu:.0} % over {} samples", cpu.len());
    assert_eq!(
        report.markers.iter().map(|m| m.label.as_str()).collect::<Vec<_>>(),
        vec!["engine load", "point 1", "eval"]
    );
    assert!(report.markers.windows(2).all(|m| m[1].t >= m[0].t));

    // The window of the point: host figures present, engine busy.
    assert!(w.host.samples >= 10, "{:?}", w.host);
    let cpu = w.host.engine_cpu_pct.as_ref().unwrap();
    assert!(cpu.mean > 10.0, "{cpu:?}");
    assert!(w.host.engine_rss_bytes.as_ref().unwrap().max > 0.0);
    assert_eq!(report.window(t0, t1, 100, 300).host, w.host);

    // telemetry.jsonl: one compact line per sample.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("telemetry.jsonl");
    report.write_jsonl(&p).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), report.samples.len());
    let first: Sample = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first, report.samples[0]);
    serde_json::to_string(&report).unwrap();

    let steady = report.sampler_cpu_seconds - report.sampler_probe_cpu_seconds;
    eprintln!(
        "sampler CPU cost at 100 ms: {:.4} s CPU over {:.2} s wall = {:.3} % of one CPU; probing the sources {:.4} s, \
         then {:.4} s for {} samples = {:.3} % of one CPU, {:.3} ms per sample",
        report.sampler_cpu_seconds,
        wall,
        report.sampler_cpu_fraction() * 100.0,
        report.sampler_probe_cpu_seconds,
        steady,
        report.samples.len(),
        report.sampler_steady_cpu_fraction() * 100.0,
        steady / report.samples.len() as f64 * 1000.0
    );
    assert!(
        report.sampler_cpu_fraction() < 0.05,
        "sampler uses {:.1} % of a CPU",
        report.sampler_cpu_fraction() * 100.0
    );
}

#[test]
fn window_waits_for_a_sample_after_its_end() {
    let tel = Telemetry::start(TelemetryConfig { interval: Duration::from_millis(200), ..Default::default() });
    let t1 = mono_now_s();
    let _ = tel.window(t1 - 0.1, t1, 0, 0);
    assert!(tel.samples().last().unwrap().t >= t1);
    let r = tel.stop();
    assert!(r.sampler_wall_seconds > 0.0);
}

#[test]
fn unreadable_rapl_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let tel = Telemetry::start_with_rapl_root(TelemetryConfig::default(), &d.path().join("nope"));
    let rapl = tel.sources().iter().find(|s| s.name == "rapl").unwrap().clone();
    assert!(!rapl.used && rapl.reason.contains("nope"), "{rapl:?}");
    let t = mono_now_s();
    std::thread::sleep(Duration::from_millis(250));
    let w = tel.window(t, mono_now_s(), 1, 1);
    assert!(w.host.cpu_energy_j.is_none() && w.host.cpu_energy_note.is_some());
    tel.stop();
}

#[test]
fn engine_env_carries_inherited_visibility() {
    // `CUDA_VISIBLE_DEVICES=4,5,6,7 enginebench run tp4.toml`: the variable
    // is this process's, not the recipe's. The recipe alone says nothing
    // (the sampler then took GPUs 0-3); the engine's environment says 4-7.
    let inherited = env(&[("CUDA_VISIBLE_DEVICES", "4,5,6,7"), ("PATH", "/usr/bin")]);
    let recipe = env(&[("VLLM_ROCM_USE_AITER", "1")]);
    assert_eq!(visible_gpus_from_env(&recipe), None, "the recipe alone");
    let e = engine_env(inherited.clone(), &recipe, &[]);
    assert_eq!(visible_gpus_from_env(&e), Some(vec![4, 5, 6, 7]));
    // The recipe's own value wins; an unset name is gone.
    let e = engine_env(inherited.clone(), &env(&[("CUDA_VISIBLE_DEVICES", "1")]), &[]);
    assert_eq!(visible_gpus_from_env(&e), Some(vec![1]));
    let e = engine_env(inherited, &recipe, &["CUDA_VISIBLE_DEVICES".to_string()]);
    assert_eq!(visible_gpus_from_env(&e), None);
    // Slurm's ROCR_VISIBLE_DEVICES with HIP indices relative to it.
    let e = engine_env(env(&[("ROCR_VISIBLE_DEVICES", "4,5,6,7")]), &env(&[("HIP_VISIBLE_DEVICES", "2,3")]), &[]);
    assert_eq!(visible_gpus_from_env(&e), Some(vec![6, 7]));
}

#[test]
fn engine_gpus_follow_the_workers_visible_ordinals() {
    // A TP2 engine under CUDA_VISIBLE_DEVICES=4,5,6,7 runs on 4 and 5.
    assert_eq!(engine_gpus_from_ordinals(Some(&[4, 5, 6, 7]), &[0, 1]), Ok(vec![4, 5]));
    // `--device-ids 2,3` makes the ordinals 2 and 3.
    assert_eq!(engine_gpus_from_ordinals(Some(&[4, 5, 6, 7]), &[2, 3]), Ok(vec![6, 7]));
    assert_eq!(engine_gpus_from_ordinals(None, &[0, 1, 2]), Ok(vec![0, 1, 2]));
    let e = engine_gpus_from_ordinals(Some(&[4]), &[0, 1]).unwrap_err();
    assert!(e.contains("visible device 1"), "{e}");
}

/// A stand-in for `amd-smi metric ... --json`: each call takes 0.4 s and
/// reports 300 W and an energy counter of 300 J per second of wall time.
fn fake_amd_smi(dir: &std::path::Path) -> String {
    let path = dir.join("amd-smi");
    std::fs::write(
        &path,
        r#"#!/bin/sh
sleep 0.4
now=$(date +%s.%N)
e=$(echo "$now" | awk '{printf "%.3f", ($1 % 100000) * 300}')
echo "{\"gpu_data\": [{\"gpu\": 0, \"power\": {\"socket_power\": {\"value\": 300, \"unit\": \"W\"}}, \"energy\": {\"total_energy_consumption\": {\"value\": $e, \"unit\": \"J\"}}, \"usage\": {\"gfx_activity\": {\"value\": 90, \"unit\": \"%\"}}}]}"
"#,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn cli_fallback_brackets_a_point_with_its_own_timestamps() {
    // Readings at >= 1 s, stamped with the middle of a 0.4 s call and handed
    // over at its end: a window must wait for a reading past its end.
    let dir = tempfile::tempdir().unwrap();
    let program = fake_amd_smi(dir.path());
    let cfg = TelemetryConfig { interval: Duration::from_millis(100), ..Default::default() };
    let probe: ProbeGpus = Box::new(move |cfg: &TelemetryConfig| {
        match amd_cli::probe_cli_program(amd_cli::CliTool::AmdSmi, &program, None, None, cfg.interval) {
            Ok((src, gpus, detail)) => (
                Some(Box::new(src) as Box<dyn GpuSource>),
                gpus,
                vec![SourceStatus { name: "amd-smi".into(), used: true, reason: detail }],
            ),
            Err(e) => panic!("fake amd-smi: {e}"),
        }
    });
    let tel = Telemetry::start_with(cfg, Path::new("/nonexistent"), probe);
    assert_eq!(tel.gpus().len(), 1);
    std::thread::sleep(Duration::from_millis(1600));
    let t0 = mono_now_s();
    std::thread::sleep(Duration::from_millis(1500));
    let t1 = mono_now_s();
    let w = tel.window(t0, t1, 100, 200);
    assert!(w.power_valid, "{:?}", w.power_invalid_reasons);
    let g = &w.gpus[0];
    assert_eq!(g.energy_method.as_deref(), Some("counter"));
    assert!((g.energy_j.unwrap() / (t1 - t0) - 300.0).abs() < 15.0, "{:?} J over {:.2} s", g.energy_j, t1 - t0);
    tel.stop();
}

#[test]
fn source_list_names_the_sources_to_try() {
    assert!(source_listed("amd-smi,rocm-smi", "rocm-smi"));
    assert!(source_listed(" nvml ", "nvml"));
    assert!(!source_listed("amd-smi", "amd_smi"), "the library and the tool are different sources");
}
