//! Reading a torch profiler Chrome trace (`trace-*.json.gz`, the
//! `traceEvents` array of the Chrome trace event format that Perfetto and
//! chrome://tracing open) back into time per kernel or op name.
//!
//! Where the trace holds device kernels (CUDA/ROCm: events of category
//! `kernel`, `gpu_memcpy`, `gpu_memset`), those are counted, each with its
//! duration. On a CPU-only engine there are no kernels: the CPU ops
//! (`cpu_op`) are counted by their *self* time (duration minus that of the
//! ops nested directly inside them on the same thread), so a step's op
//! times add up to at most its wall time and nothing is counted twice. A
//! trace of a profiler that recorded a device activity (CUDA) but holds no
//! device kernel is an error, never a CPU-op table: its kernels ran in a
//! process the profiler did not see.
//!
//! The file is streamed: one event at a time is decoded from the
//! decompressing reader and folded into running totals (device kernels by
//! name; CPU ops as compact records until a device kernel shows up), so a
//! GPU trace of a large model (around 1 GB of JSON) is never held in memory.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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

/// One trace event; every other field (`args`, ...) is skipped unread.
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

/// Reads a trace file (`.json.gz` or plain `.json`) and totals it, one
/// event at a time. `expect_device`: the profiler recorded a device
/// activity, so device kernels must be there.
///
/// Errors: unreadable file, bad gzip, not a JSON trace with `traceEvents`,
/// or no device kernel in a trace that should hold them.
pub fn read(path: &Path, expect_device: bool) -> Result<TraceTotals> {
    let file = std::fs::File::open(path).with_context(|| format!("opening trace {}", path.display()))?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::GzDecoder::new(BufReader::new(file))))
    } else {
        Box::new(BufReader::new(file))
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    totals_from(&mut de, expect_device).with_context(|| format!("trace {}", path.display()))
}

/// Totals a trace given as JSON text (as [`read`]).
///
/// Errors: not JSON, no `traceEvents` array, or (with `expect_device`) no
/// device kernel.
pub fn totals_of(json: &str, expect_device: bool) -> Result<TraceTotals> {
    totals_from(&mut serde_json::Deserializer::from_str(json), expect_device)
}

fn totals_from<'de, R: serde_json::de::Read<'de>>(de: &mut serde_json::Deserializer<R>, expect_device: bool) -> Result<TraceTotals> {
    let mut acc = Totals::default();
    TraceSeed(&mut acc).deserialize(&mut *de).context("not a JSON trace")?;
    de.end().context("not a JSON trace")?;
    if !acc.saw_events {
        bail!("no traceEvents array: not a Chrome trace");
    }
    acc.finish(expect_device)
}

/// Running totals while the events stream by.
#[derive(Default)]
struct Totals {
    saw_events: bool,
    events: usize,
    /// Device kernels by name: (calls, total us).
    device: BTreeMap<String, (u64, f64)>,
    /// CPU ops, kept (compactly) only while no device kernel was seen.
    ops: Vec<Op>,
    op_names: Vec<String>,
    op_name_ids: HashMap<String, u32>,
    threads: HashMap<String, u32>,
}

/// A CPU op: name and thread as indices into [`Totals`]' tables, times in us.
struct Op {
    name: u32,
    thread: u32,
    ts: f64,
    dur: f64,
}

impl Totals {
    fn add(&mut self, e: Event) {
        self.events += 1;
        if e.ph != "X" {
            return;
        }
        if DEVICE_CATEGORIES.iter().any(|c| e.cat.eq_ignore_ascii_case(c)) {
            if self.device.is_empty() {
                // Kernels decide the table: the CPU ops are not needed any more.
                self.ops = Vec::new();
                self.op_names = Vec::new();
                self.op_name_ids = HashMap::new();
                self.threads = HashMap::new();
            }
            let t = self.device.entry(e.name).or_default();
            t.0 += 1;
            t.1 += e.dur.max(0.0);
        } else if e.cat == "cpu_op" && self.device.is_empty() {
            let name = match self.op_name_ids.get(&e.name) {
                Some(&i) => i,
                None => {
                    let i = self.op_names.len() as u32;
                    self.op_names.push(e.name.clone());
                    self.op_name_ids.insert(e.name, i);
                    i
                }
            };
            let key = format!("{}/{}", e.pid, e.tid);
            let n = self.threads.len() as u32;
            let thread = *self.threads.entry(key).or_insert(n);
            self.ops.push(Op { name, thread, ts: e.ts, dur: e.dur });
        }
    }

    fn finish(self, expect_device: bool) -> Result<TraceTotals> {
        let (source, by_name) = if !self.device.is_empty() {
            (Source::DeviceKernels, self.device)
        } else if expect_device {
            bail!(
                "the profiler recorded a device activity but the trace holds no device kernel ({} events, {} CPU ops): the model ran in a process this profiler did not see",
                self.events,
                self.ops.len()
            );
        } else {
            let mut by_name: BTreeMap<String, (u64, f64)> = BTreeMap::new();
            for (name, us) in self_times(&self.ops) {
                let t = by_name.entry(self.op_names[name as usize].clone()).or_default();
                t.0 += 1;
                t.1 += us;
            }
            (Source::CpuOpsSelfTime, by_name)
        };
        let mut names: Vec<NameTotal> =
            by_name.into_iter().map(|(name, (calls, total_us))| NameTotal { name, calls, total_us }).collect();
        names.sort_by(|a, b| b.total_us.total_cmp(&a.total_us).then_with(|| a.name.cmp(&b.name)));
        Ok(TraceTotals { source, names, events: self.events })
    }
}

/// The top-level object: `traceEvents` is streamed, every other key skipped.
struct TraceSeed<'a>(&'a mut Totals);

impl<'de> DeserializeSeed<'de> for TraceSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TraceSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "traceEvents" {
                map.next_value_seed(EventsSeed(&mut *self.0))?;
                self.0.saw_events = true;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The `traceEvents` array, folded event by event.
struct EventsSeed<'a>(&'a mut Totals);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a traceEvents array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<Event>()? {
            self.0.add(e);
        }
        Ok(())
    }
}

/// (name, self time us) of each op: its duration minus the durations of the
/// ops directly inside it on the same thread (nesting from the timestamps).
fn self_times(ops: &[Op]) -> Vec<(u32, f64)> {
    let mut by_thread: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for e in ops {
        by_thread.entry(e.thread).or_default().push(e);
    }
    let mut out: Vec<(u32, f64)> = Vec::with_capacity(ops.len());
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
            out.push((e.name, e.dur.max(0.0)));
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
        let t = totals_of(&trace.to_string(), false).unwrap();
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
        let t = totals_of(&trace.to_string(), false).unwrap();
        assert_eq!(t.source, Source::DeviceKernels);
        assert_eq!(t.names.len(), 2);
        assert_eq!((t.names[0].name.as_str(), t.names[0].calls, t.names[0].total_us), ("Cijk_gemm", 2, 42.0));
    }

    #[test]
    fn a_device_profile_without_kernels_is_an_error() {
        // TP > 1: a profiler in the engine-core process records the CPU side
        // only; the kernels ran in the worker processes.
        let trace = serde_json::json!({"traceEvents": [
            ev("aten::mm", "cpu_op", 1, 0.0, 30.0),
            ev("cudaLaunchKernel", "cuda_runtime", 1, 2.0, 3.0),
        ]});
        let e = totals_of(&trace.to_string(), true).unwrap_err();
        assert!(format!("{e:#}").contains("holds no device kernel"), "{e:#}");
        // A worker's (rank 0's) trace of the same window has them.
        let worker = serde_json::json!({"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "pid": 0, "tid": 7, "ts": 5.0, "dur": 20.0, "args": {"device": 0, "stream": 7}},
            ev("aten::mm", "cpu_op", 4242, 0.0, 30.0),
        ], "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]});
        let t = totals_of(&worker.to_string(), true).unwrap();
        assert_eq!((t.source, t.names.len(), t.names[0].name.as_str()), (Source::DeviceKernels, 1, "nvjet_gemm"));
        // A CPU engine's trace keeps its CPU-op table.
        assert_eq!(totals_of(&trace.to_string(), false).unwrap().source, Source::CpuOpsSelfTime);
    }

    #[test]
    fn events_are_read_from_a_stream() {
        // The reader sees the bytes a little at a time, the events after
        // other keys, and keeps no event: the totals are the same as from text.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let events: Vec<serde_json::Value> = (0..2000).map(|i| ev(if i % 2 == 0 { "a" } else { "b" }, "kernel", 7, i as f64 * 10.0, 1.5)).collect();
        let text = serde_json::json!({"schemaVersion": 1, "deviceProperties": [{"x": [1, 2, {"y": null}]}], "traceEvents": events, "traceName": "t"}).to_string();
        let mut de = serde_json::Deserializer::from_reader(Trickle(text.as_bytes()));
        let streamed = totals_from(&mut de, true).unwrap();
        assert_eq!(streamed, totals_of(&text, true).unwrap());
        assert_eq!(streamed.events, 2000);
        assert_eq!(streamed.names[0].calls, 1000);
        assert!((streamed.names[0].total_us - 1500.0).abs() < 1e-9);
    }

    #[test]
    fn not_a_trace_is_an_error_and_gzip_reads_back() {
        assert!(totals_of("{\"x\": 1}", false).is_err());
        assert!(totals_of("nope", false).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json.gz");
        let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, serde_json::json!({"traceEvents": [ev("a", "cpu_op", 1, 0.0, 5.0)]}).to_string().as_bytes()).unwrap();
        gz.finish().unwrap();
        let t = read(&path, false).unwrap();
        assert_eq!(t.names[0].total_us, 5.0);
        assert!(read(&dir.path().join("missing.json.gz"), false).is_err());
    }
}
