//! The charts of a comparison ([`crate::report::plot`] draws them): per
//! ISL/OSL, the baseline's and the candidate's curves, each point the mean
//! of its repeats (the legend says how many), and on each candidate point
//! the 95% interval of the change the gate reads, drawn as bars in the
//! figure's own unit (`baseline x (1 + interval)`): a wide interval, an
//! INCONCLUSIVE gate, shows as a long bar, not as two clean points.

use super::compare::{Comparison, Figure, Metric, Row};
use crate::report::plot::{Charts, PlotPoint, Series};

/// The charts of a comparison: per ISL/OSL, the baseline's and the
/// candidate's curves (one per TP size), from the rows' figures.
pub fn from_comparison(c: &Comparison) -> Vec<Charts> {
    let multi_tp = {
        let mut tps: Vec<u32> = c.rows.iter().map(|r| r.tp).collect();
        tps.sort();
        tps.dedup();
        tps.len() > 1
    };
    charts_of(&c.rows, &c.baseline_label, &c.candidate_label, multi_tp)
}

/// [`from_comparison`] on the rows themselves.
fn charts_of(rows: &[Row], baseline: &str, candidate: &str, multi_tp: bool) -> Vec<Charts> {
    // Per ISL/OSL, its curves: (name, candidate side, points, repeats per point).
    type Curve = (String, bool, Vec<PlotPoint>, Vec<usize>);
    let mut groups: Vec<((u32, u32), Vec<Curve>)> = Vec::new();
    for r in rows {
        if groups.last().is_none_or(|(shape, _)| *shape != (r.isl, r.osl)) {
            groups.push(((r.isl, r.osl), Vec::new()));
        }
        let curves = &mut groups.last_mut().expect("just pushed").1;
        for (side, label) in [(0, baseline), (1, candidate)] {
            let name = if multi_tp { format!("{label} tp={}", r.tp) } else { label.to_string() };
            let pick = |m: Metric| {
                let f = r.figure(m);
                if side == 0 { f.baseline } else { f.candidate }
            };
            // The interval of the change, on the candidate's point.
            let range = |m: Metric| (side == 1).then(|| interval(r.figure(m))).flatten();
            let p = PlotPoint {
                conc: r.conc,
                tput_per_gpu: pick(Metric::TputPerGpu),
                intvty: if side == 0 { r.intvty.0 } else { r.intvty.1 },
                tpot_ms: pick(Metric::MedianTpot),
                tput_range: range(Metric::TputPerGpu),
                tpot_range: range(Metric::MedianTpot),
            };
            let repeats = if side == 0 { r.repeats.0 } else { r.repeats.1 };
            match curves.iter_mut().find(|c| c.0 == name) {
                Some(c) => {
                    c.2.push(p);
                    c.3.push(repeats);
                }
                None => curves.push((name, side == 1, vec![p], vec![repeats])),
            }
        }
    }
    groups
        .into_iter()
        .map(|((isl, osl), curves)| Charts {
            isl,
            osl,
            series: curves.into_iter().map(|(name, cand, points, repeats)| Series { label: legend(&name, &repeats, cand), points }).collect(),
        })
        .collect()
}

/// The figure's 95% interval of the change in its own unit: the baseline's
/// mean times (1 + each bound); `None` without an interval.
fn interval(f: &Figure) -> Option<(f64, f64)> {
    f.ci.map(|(lo, hi)| (f.baseline * (1.0 + lo), f.baseline * (1.0 + hi)))
}

/// A curve's legend: its name, how many repeats each point averages and,
/// for the candidate, what its bars are.
fn legend(name: &str, repeats: &[usize], candidate: bool) -> String {
    let lo = repeats.iter().copied().min().unwrap_or(0);
    let hi = repeats.iter().copied().max().unwrap_or(0);
    let n = if lo == hi { format!("{lo}") } else { format!("{lo}-{hi}") };
    let each = if hi == 1 { "1 run per point".to_string() } else { format!("mean of {n} repeats per point") };
    if candidate { format!("{name} ({each}; bars: 95% CI of the change)") } else { format!("{name} ({each})") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ab::compare::METRICS;
    use crate::ab::stats::{IntervalMethod, Verdict};

    /// A row whose figures are `base` and `cand` (per metric in METRICS
    /// order: tok/s/gpu, output tok/s, TPOT ms, TTFT ms) with the interval `ci`.
    fn row(conc: u32, base: [f64; 4], cand: [f64; 4], ci: (f64, f64), repeats: usize) -> Row {
        let figures = METRICS
            .iter()
            .enumerate()
            .map(|(i, &metric)| Figure {
                metric,
                baseline: base[i],
                candidate: cand[i],
                delta: cand[i] / base[i] - 1.0,
                ci: Some(ci),
                method: IntervalMethod::PairedT,
                mde: None,
                se_log: None,
                df: Some(1.0),
                repeat_deltas: Vec::new(),
                bootstrap_ci: None,
                noise_floor: None,
                verdict: Verdict::NoSignificantChange,
                gate: None,
                not_compared: None,
            })
            .collect();
        Row {
            isl: 64,
            osl: 16,
            tp: 1,
            conc,
            repeats: (repeats, repeats),
            figures,
            intvty: (1000.0 / base[2], 1000.0 / cand[2]),
            verdict: Verdict::NoSignificantChange,
            workload_notes: Vec::new(),
            undecidable: None,
        }
    }

    #[test]
    fn the_candidate_carries_the_gates_interval_and_the_legend_counts_repeats() {
        // The case: 2 repeats, 10.5 vs 52.4 tok/s/gpu, an interval of [-100%, +6,925,173%].
        let r = row(4, [10.5, 5.0, 95.0, 300.0], [52.4, 25.0, 19.0, 60.0], (-1.0, 69_251.73), 2);
        let charts = charts_of(&[r], "base", "knob", false);
        let [base, knob] = &charts[0].series[..] else { panic!("two curves") };
        assert_eq!(base.label, "base (mean of 2 repeats per point)");
        assert_eq!(knob.label, "knob (mean of 2 repeats per point; bars: 95% CI of the change)");
        assert_eq!((base.points[0].tput_range, base.points[0].tpot_range), (None, None), "the baseline has no bar");
        let (lo, hi) = knob.points[0].tput_range.unwrap();
        assert_eq!(lo, 0.0);
        assert!((hi - 10.5 * 69_252.73).abs() < 1e-6, "{hi}");

        // Drawn: the legend's text, and the candidate's bar reaching the top of the chart.
        let dir = tempfile::tempdir().unwrap();
        let files = crate::report::plot::write_all(&charts, dir.path(), "ab_").unwrap();
        let svg = files.iter().find(|f| f.to_string_lossy().ends_with("tput_vs_intvty_isl64_osl16.svg")).unwrap();
        let texts = crate::report::plot::tests::svg_texts(&std::fs::read_to_string(svg).unwrap());
        assert!(texts.iter().any(|t| t == "knob (mean of 2 repeats per point; bars: 95% CI of the change)"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "base (mean of 2 repeats per point)"), "{texts:?}");

        // One run a side: said so.
        let one = charts_of(&[row(1, [1.0; 4], [1.0; 4], (-0.1, 0.1), 1)], "base", "knob", false);
        assert_eq!(one[0].series[0].label, "base (1 run per point)");
    }
}
