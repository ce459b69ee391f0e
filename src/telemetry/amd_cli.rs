//! Second AMD fallback: run `amd-smi metric ... --json` or `rocm-smi ... --json`
//! (std::process::Command, no shell) on a helper thread and parse the output
//! (`amd_json`). Both tools are Python programs that take around a second per
//! call, so this source samples at most once a second, each reading stamped
//! with the middle of its call on the monotonic clock. The tools' own CPU time
//! is not in the sampler thread's CPU figure.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::amd_json::{parse_amd_smi_metric, parse_rocm_smi};
use super::clock::mono_now_s;
use super::{GpuInfo, GpuReading, GpuSource, select_gpus};

/// Which command-line tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CliTool {
    AmdSmi,
    RocmSmi,
}

impl CliTool {
    pub fn name(self) -> &'static str {
        match self {
            CliTool::AmdSmi => "amd-smi",
            CliTool::RocmSmi => "rocm-smi",
        }
    }
    /// The arguments: only the metric groups used (power, usage, temperature,
    /// clocks, energy, VRAM), JSON out.
    pub fn args(self) -> &'static [&'static str] {
        match self {
            CliTool::AmdSmi => &["metric", "-p", "-u", "-t", "-c", "-E", "-m", "--json"],
            CliTool::RocmSmi => &[
                "--showpower",
                "--showtemp",
                "--showuse",
                "--showmemuse",
                "--showmeminfo",
                "vram",
                "--showclocks",
                "--showenergycounter",
                "--json",
            ],
        }
    }
    fn parse(self, text: &str) -> Result<Vec<GpuReading>, String> {
        match self {
            CliTool::AmdSmi => parse_amd_smi_metric(text),
            CliTool::RocmSmi => parse_rocm_smi(text),
        }
    }
}

/// Run `program args` with a time limit; stdout on success, a reason otherwise.
pub fn run_with_timeout(program: &str, args: &[&str], limit: Duration) -> Result<String, String> {
    run_capturing(program, args, limit).map(|(stdout, _)| stdout)
}

/// As [`run_with_timeout`], with the tool's stderr too (its own message when
/// it exits 0 without the JSON asked for, as rocm-smi does with no driver).
pub fn run_capturing(program: &str, args: &[&str], limit: Duration) -> Result<(String, String), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("{program} not found on PATH")
            } else {
                format!("{program}: {e}")
            }
        })?;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > limit => {
                child.kill().ok();
                child.wait().ok();
                return Err(format!("{program} took over {} s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{program}: {e}")),
        }
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let first = stderr.lines().chain(stdout.lines()).find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("{program} exited with {status}: {}", first.trim()));
    }
    Ok((stdout, stderr))
}

type Slot = Arc<Mutex<Option<(f64, Vec<GpuReading>)>>>;

/// A CLI tool polled on its own thread.
pub struct CliSource {
    slot: Slot,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Longest time from a reading's own timestamp to its hand-over.
    lag: Duration,
}

/// Run the tool once; when it gives GPU readings, start polling it every
/// `max(interval, 1.5 x the first call's duration, 1 s)`.
pub fn probe_cli(
    tool: CliTool,
    visible: Option<&[u32]>,
    hint: Option<u32>,
    interval: Duration,
) -> Result<(CliSource, Vec<GpuInfo>, String), String> {
    probe_cli_program(tool, tool.name(), visible, hint, interval)
}

/// [`probe_cli`] running `program` (the tool's name on PATH, or a path) with
/// the tool's arguments and parser.
pub fn probe_cli_program(
    tool: CliTool,
    program: &str,
    visible: Option<&[u32]>,
    hint: Option<u32>,
    interval: Duration,
) -> Result<(CliSource, Vec<GpuInfo>, String), String> {
    let limit = Duration::from_secs(15);
    let t0 = Instant::now();
    let (text, stderr) = run_capturing(program, tool.args(), limit)?;
    let took = t0.elapsed();
    let readings = tool.parse(&text).map_err(|e| {
        // Carry the tool's own words: they say why (driver not loaded, ...).
        let said: Vec<&str> = stderr.lines().chain(text.lines()).map(str::trim).filter(|l| !l.is_empty()).collect();
        if said.is_empty() { e } else { format!("{e}; {} said: {}", tool.name(), said.join(" | ")) }
    })?;
    let count = readings.iter().map(|r| r.gpu + 1).max().unwrap_or(0);
    let (selected, notes) = select_gpus(count, visible, hint);
    let selected: Vec<u32> = selected.into_iter().filter(|i| readings.iter().any(|r| r.gpu == *i)).collect();
    if selected.is_empty() {
        return Err(format!("{} gave no selected GPU ({})", tool.name(), notes.join("; ")));
    }
    let period = interval.max(took.mul_f64(1.5)).max(Duration::from_secs(1));
    let slot: Slot = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, st2, sel2) = (slot.clone(), stop.clone(), selected.clone());
    let program = program.to_owned();
    let handle = std::thread::Builder::new()
        .name(format!("telemetry-{}", tool.name()))
        .spawn(move || {
            while !st2.load(Ordering::Relaxed) {
                let next = Instant::now() + period;
                let a = mono_now_s();
                if let Ok(text) = run_with_timeout(&program, tool.args(), limit) {
                    let t = (a + mono_now_s()) / 2.0;
                    if let Ok(rs) = tool.parse(&text) {
                        let rs = rs.into_iter().filter(|r| sel2.contains(&r.gpu)).collect();
                        *s2.lock().unwrap() = Some((t, rs));
                    }
                }
                while Instant::now() < next && !st2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let gpus = selected.iter().map(|&i| GpuInfo::new(i, None, tool.name())).collect();
    let mut detail = format!(
        "`{} {}` every {:.1} s (one call took {:.2} s), sampling {:?}",
        tool.name(),
        tool.args().join(" "),
        period.as_secs_f64(),
        took.as_secs_f64(),
        selected
    );
    if !notes.is_empty() {
        detail.push_str(&format!(" ({})", notes.join("; ")));
    }
    // A reading is stamped with the middle of its call and handed over at
    // the call's end; the next call starts up to a period later. Twice the
    // first call's time leaves room for slower calls.
    let lag = period + took * 2;
    Ok((CliSource { slot, stop, handle: Some(handle), lag }, gpus, detail))
}

impl GpuSource for CliSource {
    fn read(&mut self) -> Vec<GpuReading> {
        match self.slot.lock().unwrap().take() {
            Some((t, rs)) => rs.into_iter().map(|r| GpuReading { t: Some(t), ..r }).collect(),
            None => vec![],
        }
    }

    fn reading_lag(&self) -> Duration {
        self.lag
    }
}

impl Drop for CliSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_give_reasons() {
        let e = run_with_timeout("enginebench-no-such-tool", &[], Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("not found on PATH"), "{e}");
        let e = run_with_timeout("false", &[], Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("exited"), "{e}");
        let e = run_with_timeout("sleep", &["5"], Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("took over"), "{e}");
        assert_eq!(run_with_timeout("echo", &["hi"], Duration::from_secs(5)).unwrap(), "hi\n");
    }
}
