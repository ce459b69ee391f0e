//! Builds the top-kernels table of one profiled point from a trace's totals
//! (the table itself and its rendering: [`crate::report::kernels`]).

use std::collections::BTreeMap;

use super::groups::Groups;
use super::trace::TraceTotals;
use crate::report::kernels::{GroupRow, KernelRow, TopKernels};

/// The table of `totals` over `steps` profiled steps whose mean wall time
/// was `step_ms`, grouped by `groups`.
pub fn top_kernels(totals: &TraceTotals, steps: u32, step_ms: f64, groups: &Groups) -> TopKernels {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::kernels::Source;
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
        let k = top_kernels(&t, 4, 10.0, crate::profile::groups::builtin());
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
