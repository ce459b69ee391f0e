//! The kernel diff of a comparison: for each point profiled on both sides,
//! the kernels only the candidate ran, the ones only the baseline ran, and
//! the biggest changes in time per step of the ones both ran, plus group
//! totals ("AITER MoE replaced the generic fused MoE and took 31% less time
//! per step" or "quick_reduce never ran" at one glance).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::kernels::TopKernels;

/// Rows per list in the terminal, Markdown and JSON.
pub const LIST: usize = 10;

/// One kernel or op name across the two sides (ms per step; 0 where absent).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelChange {
    pub name: String,
    pub group: String,
    pub baseline_ms: f64,
    pub candidate_ms: f64,
    /// candidate - baseline, ms per step.
    pub delta_ms: f64,
    /// candidate / baseline - 1; absent when the baseline had none.
    pub ratio: Option<f64>,
}

/// A group's time per step on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupChange {
    pub group: String,
    pub baseline_ms: f64,
    pub candidate_ms: f64,
    pub delta_ms: f64,
    pub ratio: Option<f64>,
}

/// The diff at one point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelDiff {
    pub isl: u32,
    pub osl: u32,
    pub tp: u32,
    pub conc: u32,
    /// Mean wall time of a profiled step, ms.
    pub baseline_step_ms: f64,
    pub candidate_step_ms: f64,
    /// Names only the candidate ran, largest time first.
    pub only_in_candidate: Vec<KernelChange>,
    /// Names only the baseline ran, largest time first.
    pub only_in_baseline: Vec<KernelChange>,
    /// Names both ran, largest |delta| first.
    pub changed: Vec<KernelChange>,
    pub groups: Vec<GroupChange>,
    /// Set when the two traces count different things (device kernels vs CPU ops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Kernel or op name -> (group, ms per step), of one side's table.
type Names<'a> = BTreeMap<&'a str, (&'a str, f64)>;

fn ratio(b: f64, c: f64) -> Option<f64> {
    (b > 0.0).then(|| c / b - 1.0)
}

fn change(name: &str, group: &str, b: f64, c: f64) -> KernelChange {
    KernelChange { name: name.into(), group: group.into(), baseline_ms: b, candidate_ms: c, delta_ms: c - b, ratio: ratio(b, c) }
}

fn names_of(t: &TopKernels) -> Names<'_> {
    t.rows.iter().map(|r| (r.name.as_str(), (r.group.as_str(), r.ms_per_step))).collect()
}

/// Largest `key` first (then by name), cut to [`LIST`] rows.
fn by_time(v: &mut Vec<KernelChange>, key: fn(&KernelChange) -> f64) {
    v.sort_by(|x, y| key(y).total_cmp(&key(x)).then_with(|| x.name.cmp(&y.name)));
    v.truncate(LIST);
}

/// What `one` side ran and `other` did not, with its time on its own side,
/// largest first.
fn only_in(one: &Names, other: &Names, one_is_candidate: bool) -> Vec<KernelChange> {
    let mut v: Vec<KernelChange> = one
        .iter()
        .filter(|(n, _)| !other.contains_key(*n))
        .map(|(n, (g, ms))| if one_is_candidate { change(n, g, 0.0, *ms) } else { change(n, g, *ms, 0.0) })
        .collect();
    by_time(&mut v, |k| k.baseline_ms + k.candidate_ms);
    v
}

/// The diff of two tables of the same point (`key` = ISL, OSL, TP, conc).
pub fn diff(key: PointKey, base: &TopKernels, cand: &TopKernels) -> KernelDiff {
    let (b, c) = (names_of(base), names_of(cand));
    let (only_c, only_b) = (only_in(&c, &b, true), only_in(&b, &c, false));
    let mut changed: Vec<KernelChange> =
        b.iter().filter_map(|(n, (g, bms))| c.get(n).map(|(_, cms)| change(n, g, *bms, *cms))).collect();
    by_time(&mut changed, |k| k.delta_ms.abs());
    let mut groups: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for g in &base.groups {
        groups.entry(&g.group).or_default().0 = g.ms_per_step;
    }
    for g in &cand.groups {
        groups.entry(&g.group).or_default().1 = g.ms_per_step;
    }
    let mut groups: Vec<GroupChange> = groups
        .into_iter()
        .map(|(g, (b, c))| GroupChange { group: g.into(), baseline_ms: b, candidate_ms: c, delta_ms: c - b, ratio: ratio(b, c) })
        .collect();
    groups.sort_by(|x, y| y.delta_ms.abs().total_cmp(&x.delta_ms.abs()));
    let note = (base.source != cand.source).then(|| {
        format!("the baseline's trace counts {} and the candidate's {}: times are not like for like", base.source.text(), cand.source.text())
    });
    KernelDiff {
        isl: key.0,
        osl: key.1,
        tp: key.2,
        conc: key.3,
        baseline_step_ms: base.step_ms,
        candidate_step_ms: cand.step_ms,
        only_in_candidate: only_c,
        only_in_baseline: only_b,
        changed,
        groups,
        note,
    }
}

/// A point of a comparison: (ISL, OSL, TP, conc).
pub type PointKey = (u32, u32, u32, u32);

/// One side's profiled tables, by point (the first profiled repeat of each).
pub type Tables<'a> = BTreeMap<PointKey, &'a TopKernels>;

/// The diffs of every point profiled on both sides, sorted by point.
pub fn compare(b: &Tables, c: &Tables) -> Vec<KernelDiff> {
    b.iter().filter_map(|(k, bt)| c.get(k).map(|ct| diff(*k, bt, ct))).collect()
}

/// Notes for points profiled on one side only (the comparison's notes).
pub fn one_sided(b: &Tables, c: &Tables) -> Vec<String> {
    let text = |k: &PointKey| format!("ISL/OSL {}/{} TP {} conc {}", k.0, k.1, k.2, k.3);
    let mut out: Vec<String> = b.keys().filter(|k| !c.contains_key(*k)).map(|k| format!("{}: profiled in the baseline only: no kernel diff", text(k))).collect();
    out.extend(c.keys().filter(|k| !b.contains_key(*k)).map(|k| format!("{}: profiled in the candidate only: no kernel diff", text(k))));
    out
}

fn pct(r: Option<f64>) -> String {
    r.map_or("new".into(), |r| format!("{:+.1}%", r * 100.0))
}

fn names(v: &[KernelChange], ms: fn(&KernelChange) -> f64) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(|k| format!("{} ({}, {:.3} ms/step)", k.name, k.group, ms(k))).collect::<Vec<_>>().join(", ")
}

impl KernelDiff {
    fn title(&self) -> String {
        format!(
            "ISL/OSL {}/{} TP {} conc {}: profiled step {:.2} ms → {:.2} ms ({})",
            self.isl,
            self.osl,
            self.tp,
            self.conc,
            self.baseline_step_ms,
            self.candidate_step_ms,
            pct(ratio(self.baseline_step_ms, self.candidate_step_ms))
        )
    }

    /// Plain text for the terminal.
    pub fn terminal(&self) -> String {
        let mut s = format!("kernel diff, {}\n", self.title());
        if let Some(n) = &self.note {
            s.push_str(&format!("  note: {n}\n"));
        }
        s.push_str(&format!("  only in candidate: {}\n", names(&self.only_in_candidate, |k| k.candidate_ms)));
        s.push_str(&format!("  only in baseline:  {}\n", names(&self.only_in_baseline, |k| k.baseline_ms)));
        s.push_str("  biggest changes (ms/step, before → after):\n");
        for k in self.changed.iter().take(5) {
            s.push_str(&format!("    {:<48} {:>9.3} → {:>9.3}  {:+.3} ({})\n", k.name, k.baseline_ms, k.candidate_ms, k.delta_ms, pct(k.ratio)));
        }
        let groups: Vec<String> =
            self.groups.iter().map(|g| format!("{} {:.2} → {:.2} ({})", g.group, g.baseline_ms, g.candidate_ms, pct(g.ratio))).collect();
        s.push_str(&format!("  groups (ms/step): {}\n", groups.join(" · ")));
        s
    }

    /// A Markdown section.
    pub fn markdown(&self) -> String {
        let mut s = format!("\n#### Kernel diff, {}\n\n", self.title());
        if let Some(n) = &self.note {
            s.push_str(&format!("Note: {n}.\n\n"));
        }
        s.push_str(&format!("Only in the candidate: {}.\n\n", names(&self.only_in_candidate, |k| k.candidate_ms)));
        s.push_str(&format!("Only in the baseline: {}.\n\n", names(&self.only_in_baseline, |k| k.baseline_ms)));
        s.push_str("| kernel / op | group | before ms/step | after ms/step | delta ms/step | delta |\n|:---|:---|---:|---:|---:|---:|\n");
        for k in &self.changed {
            s.push_str(&format!(
                "| `{}` | {} | {:.3} | {:.3} | {:+.3} | {} |\n",
                k.name.replace('|', "\\|"),
                k.group,
                k.baseline_ms,
                k.candidate_ms,
                k.delta_ms,
                pct(k.ratio)
            ));
        }
        s.push_str("\n| group | before ms/step | after ms/step | delta |\n|:---|---:|---:|---:|\n");
        for g in &self.groups {
            s.push_str(&format!("| {} | {:.3} | {:.3} | {} |\n", g.group, g.baseline_ms, g.candidate_ms, pct(g.ratio)));
        }
        s
    }

    /// One changelog line: what appeared, what vanished, the biggest change.
    pub fn changelog_line(&self) -> String {
        let first = |v: &[KernelChange]| v.iter().take(3).map(|k| k.name.clone()).collect::<Vec<_>>();
        let mut parts = Vec::new();
        let (c, b) = (first(&self.only_in_candidate), first(&self.only_in_baseline));
        if !c.is_empty() {
            parts.push(format!("only in candidate: {}", c.join(", ")));
        }
        if !b.is_empty() {
            parts.push(format!("only in baseline: {}", b.join(", ")));
        }
        if let Some(k) = self.changed.first() {
            parts.push(format!("biggest change {} {:.3} -> {:.3} ms/step ({})", k.name, k.baseline_ms, k.candidate_ms, pct(k.ratio)));
        }
        if parts.is_empty() {
            parts.push("the same kernels, no change".into());
        }
        format!("kernels isl={}/osl={} tp={} conc={}: {}", self.isl, self.osl, self.tp, self.conc, parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::groups::builtin;
    use crate::profile::trace::{NameTotal, TraceTotals};
    use crate::report::kernels::Source;

    fn table(names: &[(&str, f64)], step_ms: f64) -> TopKernels {
        let t = TraceTotals {
            source: Source::CpuOpsSelfTime,
            names: names.iter().map(|&(n, ms)| NameTotal { name: n.into(), calls: 2, total_us: ms * 1000.0 }).collect(),
            events: names.len(),
        };
        crate::profile::table::top_kernels(&t, 1, step_ms, builtin())
    }

    #[test]
    fn diff_orders_only_in_lists_by_time_and_changes_by_size() {
        let b = table(&[("_C::onednn_mm", 30.0), ("aten::silu", 2.0), ("aten::add", 1.0), ("gone_small", 0.1), ("gone_big", 3.0)], 40.0);
        let c = table(&[("aten::mm", 90.0), ("aten::copy_", 5.0), ("aten::silu", 1.5), ("aten::add", 4.0), ("new_small", 0.2)], 110.0);
        let d = diff((64, 16, 1, 2), &b, &c);
        let n = |v: &[KernelChange]| v.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
        assert_eq!(n(&d.only_in_candidate), vec!["aten::mm", "aten::copy_", "new_small"]);
        assert_eq!(n(&d.only_in_baseline), vec!["_C::onednn_mm", "gone_big", "gone_small"]);
        // Both sides: |+3.0| before |-0.5|.
        assert_eq!(n(&d.changed), vec!["aten::add", "aten::silu"]);
        assert_eq!(d.changed[0].delta_ms, 3.0);
        assert!((d.changed[0].ratio.unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(d.only_in_candidate[0].ratio, None);
        // Groups: GEMM moved most (30 -> 90).
        assert_eq!(d.groups[0].group, "GEMM");
        assert_eq!((d.groups[0].baseline_ms, d.groups[0].candidate_ms), (30.0, 90.0));
        let line = d.changelog_line();
        assert!(line.starts_with("kernels isl=64/osl=16 tp=1 conc=2: only in candidate: aten::mm, aten::copy_, new_small; only in baseline: _C::onednn_mm"), "{line}");
        assert!(line.contains("biggest change aten::add 1.000 -> 4.000 ms/step (+300.0%)"), "{line}");
        let t = d.terminal();
        assert!(t.contains("profiled step 40.00 ms → 110.00 ms (+175.0%)"), "{t}");
        let md = d.markdown();
        assert!(md.contains("| `aten::add` | other | 1.000 | 4.000 | +3.000 | +300.0% |"), "{md}");
        assert!(d.note.is_none());
    }

    #[test]
    fn identical_tables_have_an_empty_diff() {
        let b = table(&[("x", 1.0), ("y", 2.0)], 5.0);
        let d = diff((1, 1, 1, 1), &b, &b);
        assert!(d.only_in_candidate.is_empty() && d.only_in_baseline.is_empty());
        assert!(d.changed.iter().all(|k| k.delta_ms == 0.0));
        assert!(d.changelog_line().contains("biggest change"));
    }

    #[test]
    fn lists_are_capped() {
        let many: Vec<(String, f64)> = (0..30).map(|i| (format!("k{i:02}"), i as f64)).collect();
        let refs: Vec<(&str, f64)> = many.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let d = diff((1, 1, 1, 1), &table(&[], 1.0), &table(&refs, 1.0));
        assert_eq!(d.only_in_candidate.len(), LIST);
        assert_eq!(d.only_in_candidate[0].name, "k29");
    }
}
