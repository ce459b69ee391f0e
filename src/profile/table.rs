//! The top-kernels table of one profiled point: per kernel or op name its
//! group, calls per step, time per step (ms), mean time per call (us) and
//! share of the measured step time; with totals per group. Rendered for the
//! terminal, as Markdown, and as JSON (the struct itself).

use std::collections::BTreeMap;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};
use serde::{Deserialize, Serialize};

use super::groups::Groups;
use super::trace::{Source, TraceTotals};

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
    /// The table of `totals` over `steps` profiled steps whose mean wall time
    /// was `step_ms`, grouped by `groups`.
    pub fn build(totals: &TraceTotals, steps: u32, step_ms: f64, groups: &Groups) -> TopKernels {
        let n = f64::from(steps.max(1));
        let share = |ms: f64| if step_ms > 0.0 { ms / step_ms } else { 0.0 };
        let rows: Vec<KernelRow> = totals
            .names
            .iter()
            .map(|t| {
                let ms = t.total_us / 1000.0 / n;
                KernelRow {
                    name: t.name.clone(),
                    group: groups.classify(&t.name).to_string(),
                    calls_per_step: t.calls as f64 / n,
                    ms_per_step: ms,
                    mean_us: if t.calls > 0 { t.total_us / t.calls as f64 } else { 0.0 },
                    share: share(ms),
                }
            })
            .collect();
        let mut by_group: BTreeMap<&str, f64> = BTreeMap::new();
        for r in &rows {
            *by_group.entry(r.group.as_str()).or_default() += r.ms_per_step;
        }
        let mut group_rows: Vec<GroupRow> = groups
            .names()
            .into_iter()
            .filter_map(|g| by_group.get(g).map(|&ms| GroupRow { group: g.to_string(), ms_per_step: ms, share: share(ms) }))
            .filter(|g| g.ms_per_step > 0.0)
            .collect();
        group_rows.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step));
        let kernel_ms_per_step = rows.iter().map(|r| r.ms_per_step).sum();
        TopKernels { source: totals.source, steps, step_ms, kernel_ms_per_step, rows, groups: group_rows }
    }

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

fn pct(x: f64) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::trace::NameTotal;

    pub fn totals(names: &[(&str, u64, f64)]) -> TraceTotals {
        TraceTotals {
            source: Source::CpuOpsSelfTime,
            names: names.iter().map(|&(n, c, us)| NameTotal { name: n.into(), calls: c, total_us: us }).collect(),
            events: names.len(),
        }
    }

    #[test]
    fn per_step_figures_groups_and_rendering() {
        // 4 steps of 10 ms: onednn_mm 24 ms in 96 calls, attention 4 ms, silu 2 ms.
        let t = totals(&[("_C::onednn_mm", 96, 24_000.0), ("_C::cpu_attention_with_kv_cache", 120, 4_000.0), ("aten::silu", 120, 2_000.0)]);
        let k = TopKernels::build(&t, 4, 10.0, crate::profile::groups::builtin());
        let r = &k.rows[0];
        assert_eq!((r.group.as_str(), r.calls_per_step, r.ms_per_step, r.mean_us), ("GEMM", 24.0, 6.0, 250.0));
        assert!((r.share - 0.6).abs() < 1e-12);
        assert!((k.kernel_ms_per_step - 7.5).abs() < 1e-12);
        assert_eq!(k.groups.iter().map(|g| g.group.as_str()).collect::<Vec<_>>(), vec!["GEMM", "attention", "other"]);
        let term = k.terminal(2);
        assert!(term.contains("_C::onednn_mm") && !term.contains("aten::silu"), "{term}");
        assert!(term.contains("75.0% of the step") && term.contains("GEMM 60.0%"), "{term}");
        let md = k.markdown(2);
        assert!(md.contains("| `_C::onednn_mm` | GEMM | 24.0 | 6.000 | 250 | 60.0% |"), "{md}");
        assert!(md.contains("(1 more names in the JSON.)") && md.contains("| other | 0.500 | 5.0% |"), "{md}");
        let json: serde_json::Value = serde_json::to_value(&k).unwrap();
        assert_eq!(json["rows"].as_array().unwrap().len(), 3);
        assert_eq!(json["source"], "cpu_ops_self_time");
    }
}
