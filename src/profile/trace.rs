//! Reading a torch profiler Chrome trace (`trace-*.json.gz`, the
//! `traceEvents` array of the Chrome trace event format that Perfetto and
//! chrome://tracing open) back into time per kernel or op name.
//!
//! Where the trace holds device kernels (CUDA/ROCm: events of category
//! `kernel`, `gpu_memcpy`, `gpu_memset`), those are counted, each with its
//! duration. On a CPU-only engine there are no kernels: the CPU ops
//! (`cpu_op`) are counted by their *self* time (duration minus that of the
//! ops nested directly inside them on the same thread), so a step's op
//! times add up to at most its wall time and nothing is counted twice.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::report::kernels::Source;

/// Calls and total time of one name over the whole trace.
#[derive(Debug, Clone, PartialEq)]
pub struct NameTotal {
    pub name: String,
    pub calls: u64,
    /// Total time, us.
    pub total_us: f64,
}

/// A trace reduced to time per name, largest first.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceTotals {
    pub source: Source,
    pub names: Vec<NameTotal>,
    /// Events read from the trace (all kinds).
    pub events: usize,
}

#[derive(Deserialize)]
struct TraceFile {
    #[serde(rename = "traceEvents", default)]
    events: Vec<Event>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    ph: String,
    #[serde(default)]
    cat: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    ts: f64,
    #[serde(default)]
    dur: f64,
    #[serde(default)]
    pid: serde_json::Value,
    #[serde(default)]
    tid: serde_json::Value,
}

const DEVICE_CATEGORIES: [&str; 3] = ["kernel", "gpu_memcpy", "gpu_memset"];

/// Reads a trace file (`.json.gz` or plain `.json`) and totals it.
///
/// Errors: unreadable file, bad gzip, not a JSON trace with `traceEvents`.
pub fn read(path: &Path) -> Result<TraceTotals> {
    let file = std::fs::File::open(path).with_context(|| format!("opening trace {}", path.display()))?;
    let mut text = String::new();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file).read_to_string(&mut text)
    } else {
        std::io::BufReader::new(file).read_to_string(&mut text)
    }
    .with_context(|| format!("reading trace {}", path.display()))?;
    totals_of(&text).with_context(|| format!("trace {}", path.display()))
}

/// Totals a trace given as JSON text.
///
/// Errors: not JSON, or no `traceEvents` array.
pub fn totals_of(json: &str) -> Result<TraceTotals> {
    let v: serde_json::Value = serde_json::from_str(json).context("not JSON")?;
    if !v.get("traceEvents").is_some_and(|e| e.is_array()) {
        anyhow::bail!("no traceEvents array: not a Chrome trace");
    }
    let trace: TraceFile = serde_json::from_value(v).context("traceEvents")?;
    let events = trace.events.len();
    let complete: Vec<&Event> = trace.events.iter().filter(|e| e.ph == "X").collect();
    let device: Vec<&Event> = complete
        .iter()
        .copied()
        .filter(|e| DEVICE_CATEGORIES.contains(&e.cat.to_ascii_lowercase().as_str()))
        .collect();
    let (source, timed) = if device.is_empty() {
        let ops: Vec<&Event> = complete.into_iter().filter(|e| e.cat == "cpu_op").collect();
        (Source::CpuOpsSelfTime, self_times(&ops))
    } else {
        (Source::DeviceKernels, device.iter().map(|e| (e.name.as_str(), e.dur.max(0.0))).collect())
    };
    let mut by_name: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    for (name, us) in timed {
        let t = by_name.entry(name).or_default();
        t.0 += 1;
        t.1 += us;
    }
    let mut names: Vec<NameTotal> =
        by_name.into_iter().map(|(n, (calls, total_us))| NameTotal { name: n.to_string(), calls, total_us }).collect();
    names.sort_by(|a, b| b.total_us.total_cmp(&a.total_us).then_with(|| a.name.cmp(&b.name)));
    Ok(TraceTotals { source, names, events })
}

/// (name, self time us) of each op: its duration minus the durations of the
/// ops directly inside it on the same thread (nesting from the timestamps).
fn self_times<'a>(ops: &[&'a Event]) -> Vec<(&'a str, f64)> {
    let mut by_thread: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    for e in ops {
        by_thread.entry(format!("{}/{}", e.pid, e.tid)).or_default().push(e);
    }
    let mut out: Vec<(&str, f64)> = Vec::with_capacity(ops.len());
    for (_, mut evs) in by_thread {
        // Parents first: earlier start, and the longer one at equal starts.
        evs.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.dur.total_cmp(&a.dur)));
        // Open ops: (index into `out`, end time).
        let mut stack: Vec<(usize, f64)> = Vec::new();
        for e in evs {
            let end = e.ts + e.dur.max(0.0);
            while stack.last().is_some_and(|&(_, top_end)| top_end <= e.ts) {
                stack.pop();
            }
            if let Some(&(parent, parent_end)) = stack.last() {
                // A child that outlives its parent (clock rounding) counts up to the parent's end.
                let inside = end.min(parent_end) - e.ts;
                out[parent].1 -= inside.max(0.0);
            }
            out.push((e.name.as_str(), e.dur.max(0.0)));
            stack.push((out.len() - 1, end));
        }
    }
    for t in &mut out {
        t.1 = t.1.max(0.0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, cat: &str, tid: u32, ts: f64, dur: f64) -> serde_json::Value {
        serde_json::json!({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {"x": 1}})
    }

    #[test]
    fn cpu_ops_count_self_time_per_thread() {
        // linear [0,100) holds addmm [10,70) which holds copy_ [20,30);
        // another thread's op overlaps in time but is not nested.
        let trace = serde_json::json!({"traceEvents": [
            ev("aten::linear", "cpu_op", 1, 0.0, 100.0),
            ev("aten::addmm", "cpu_op", 1, 10.0, 60.0),
            ev("aten::copy_", "cpu_op", 1, 20.0, 10.0),
            ev("aten::addmm", "cpu_op", 1, 100.0, 50.0),
            ev("aten::silu", "cpu_op", 2, 5.0, 40.0),
            ev("execute_model", "user_annotation", 1, 0.0, 200.0),
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        ]});
        let t = totals_of(&trace.to_string()).unwrap();
        assert_eq!(t.source, Source::CpuOpsSelfTime);
        assert_eq!(t.events, 7);
        let get = |n: &str| t.names.iter().find(|x| x.name == n).unwrap().clone();
        assert_eq!((get("aten::addmm").calls, get("aten::addmm").total_us), (2, 100.0)); // 50 self + 50
        assert_eq!(get("aten::linear").total_us, 40.0);
        assert_eq!(get("aten::copy_").total_us, 10.0);
        assert_eq!(get("aten::silu").total_us, 40.0);
        assert!(t.names.iter().all(|n| n.name != "execute_model"), "annotations are not ops");
        // Largest first.
        assert_eq!(t.names[0].name, "aten::addmm");
        // Self times of thread 1 add up to its outermost ops' wall time.
        let thread1: f64 = ["aten::linear", "aten::addmm", "aten::copy_"].iter().map(|n| get(n).total_us).sum();
        assert_eq!(thread1, 150.0);
    }

    #[test]
    fn device_kernels_win_over_cpu_ops() {
        let trace = serde_json::json!({"traceEvents": [
            ev("aten::mm", "cpu_op", 1, 0.0, 30.0),
            ev("Cijk_gemm", "kernel", 7, 5.0, 20.0),
            ev("Cijk_gemm", "kernel", 7, 40.0, 22.0),
            ev("Memcpy HtoD", "gpu_memcpy", 8, 1.0, 2.0),
        ]});
        let t = totals_of(&trace.to_string()).unwrap();
        assert_eq!(t.source, Source::DeviceKernels);
        assert_eq!(t.names.len(), 2);
        assert_eq!((t.names[0].name.as_str(), t.names[0].calls, t.names[0].total_us), ("Cijk_gemm", 2, 42.0));
    }

    #[test]
    fn not_a_trace_is_an_error_and_gzip_reads_back() {
        assert!(totals_of("{\"x\": 1}").is_err());
        assert!(totals_of("nope").is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json.gz");
        let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, serde_json::json!({"traceEvents": [ev("a", "cpu_op", 1, 0.0, 5.0)]}).to_string().as_bytes()).unwrap();
        gz.finish().unwrap();
        let t = read(&path).unwrap();
        assert_eq!(t.names[0].total_us, 5.0);
        assert!(read(&dir.path().join("missing.json.gz")).is_err());
    }
}
