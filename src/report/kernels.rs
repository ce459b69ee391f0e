//! A profiled point as `result.json` keeps it ([`PointProfile`]): the
//! profiler's overhead and the top-kernels table ([`TopKernels`]: per kernel
//! or op name its group, calls per step, time per step (ms), mean time per
//! call (us) and share of the measured step time; with totals per group),
//! rendered for the terminal, as Markdown, and as JSON (the struct itself).
//! The profile module measures and builds them.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};
use serde::{Deserialize, Serialize};

use crate::protocol::Window;

/// What a trace's times are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Device kernels (and memcpy/memset), each its own duration.
    DeviceKernels,
    /// CPU ops, self time (no device activity in the trace).
    CpuOpsSelfTime,
}

impl Source {
    pub fn text(self) -> &'static str {
        match self {
            Source::DeviceKernels => "device kernels",
            Source::CpuOpsSelfTime => "CPU ops, self time",
        }
    }
}

/// The profiler's cost, measured on the pass's own steps: the wall time of
/// the profiled steps against the unprofiled reference steps around them
/// (half before, half after; same requests, same batch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// Mean wall time of a profiled step, ms.
    pub profiled_step_ms: f64,
    /// Mean wall time of an unprofiled reference step, ms.
    pub reference_step_ms: f64,
    /// Median wall time of a profiled / a reference step, ms (0 in results
    /// written before the medians were kept).
    #[serde(default)]
    pub profiled_median_ms: f64,
    #[serde(default)]
    pub reference_median_ms: f64,
    /// Of the medians (less moved by a neighbour's burst on a shared
    /// machine): profiled / reference - 1 (0.05 = profiled steps took 5% longer).
    pub fraction: f64,
    /// Profiler start, stop and trace export, s: paid outside any step.
    pub start_s: f64,
    pub stop_s: f64,
    pub export_s: f64,
}

/// A profiled point, as `result.json` holds it (`points[i].profile`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointProfile {
    /// The trace file (relative to the result folder when it is inside it).
    pub trace: String,
    /// Where the profiled steps were (the profile module's `PLACEMENT`).
    pub placement: String,
    pub window: Window,
    pub batch: u32,
    pub prefill_steps: u32,
    pub activities: Vec<String>,
    pub overhead: Overhead,
    /// The top-kernels table (every name, largest first).
    pub kernels: TopKernels,
    /// The table's Markdown and JSON files.
    pub files: Vec<String>,
    /// The same window's traces of the other ranks (TP/PP > 1), for a look
    /// in Perfetto; the table is rank 0's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_ranks: Vec<String>,
}

/// Rows shown in the terminal and Markdown (the JSON has all).
pub const SHOWN: usize = 15;

/// One kernel or op name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelRow {
    pub name: String,
    /// GEMM, attention, MoE, communication, norm or other (`groups.toml`).
    pub group: String,
    pub calls_per_step: f64,
    /// Time per step, ms (self time for CPU ops).
    pub ms_per_step: f64,
    /// Mean time per call, us.
    pub mean_us: f64,
    /// ms_per_step / the mean wall time of a profiled step.
    pub share: f64,
}

/// One group's total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRow {
    pub group: String,
    pub ms_per_step: f64,
    pub share: f64,
}

/// The table of one profiled point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopKernels {
    /// What the times are (device kernels, or CPU ops' self time).
    pub source: Source,
    /// Profiled steps the totals are divided by.
    pub steps: u32,
    /// Mean wall time of a profiled step on the harness's clock, ms.
    pub step_ms: f64,
    /// Sum of every row's ms_per_step: at most `step_ms` for CPU ops; with
    /// device kernels on several streams it can exceed it.
    pub kernel_ms_per_step: f64,
    /// Every name, largest time first.
    pub rows: Vec<KernelRow>,
    /// Per group, largest first (groups with no time left out).
    pub groups: Vec<GroupRow>,
}

impl TopKernels {
    /// One line: what was counted, over how many steps, and the coverage.
    pub fn caption(&self) -> String {
        format!(
            "{} over {} profiled step(s) of {:.2} ms mean wall time; counted ops {:.2} ms/step ({:.1}% of the step)",
            self.source.text(),
            self.steps,
            self.step_ms,
            self.kernel_ms_per_step,
            pct(self.kernel_ms_per_step / self.step_ms.max(f64::MIN_POSITIVE))
        )
    }

    /// Group totals in one line: `GEMM 61.2% · attention 12.0% · ...`.
    pub fn groups_line(&self) -> String {
        self.groups.iter().map(|g| format!("{} {:.1}%", g.group, pct(g.share))).collect::<Vec<_>>().join(" · ")
    }

    fn cells(&self, limit: usize) -> Vec<[String; 6]> {
        self.rows
            .iter()
            .take(limit)
            .map(|r| {
                [
                    r.name.clone(),
                    r.group.clone(),
                    num(r.calls_per_step),
                    format!("{:.3}", r.ms_per_step),
                    num(r.mean_us),
                    format!("{:.1}%", pct(r.share)),
                ]
            })
            .collect()
    }

    /// The terminal table (the `limit` largest rows), caption and groups.
    pub fn terminal(&self, limit: usize) -> String {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(HEADER);
        for row in self.cells(limit) {
            t.add_row(row);
        }
        for col in t.column_iter_mut().skip(2) {
            col.set_cell_alignment(CellAlignment::Right);
        }
        format!("{}\n{t}\ngroups: {}\n", self.caption(), self.groups_line())
    }

    /// The Markdown table (the `limit` largest rows), caption and group totals.
    pub fn markdown(&self, limit: usize) -> String {
        let mut s = format!("{}.\n\n| {} |\n|:---|:---|---:|---:|---:|---:|\n", self.caption(), HEADER.join(" | "));
        for row in self.cells(limit) {
            s.push_str(&format!("| `{}` | {} |\n", row[0].replace('|', "\\|"), row[1..].join(" | ")));
        }
        if self.rows.len() > limit {
            s.push_str(&format!("\n({} more names in the JSON.)\n", self.rows.len() - limit));
        }
        s.push_str("\n| group | ms/step | share of step |\n|:---|---:|---:|\n");
        for g in &self.groups {
            s.push_str(&format!("| {} | {:.3} | {:.1}% |\n", g.group, g.ms_per_step, pct(g.share)));
        }
        s
    }
}

const HEADER: [&str; 6] = ["kernel / op", "group", "calls/step", "ms/step", "mean us", "share of step"];

pub(crate) fn pct(x: f64) -> f64 {
    x * 100.0
}

/// 3 significant digits, no exponent.
fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
