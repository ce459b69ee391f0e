//! The charts of a comparison ([`crate::report::plot`] draws them): per
//! ISL/OSL, the baseline's and the candidate's curves.

use super::compare::{Comparison, Metric};
use crate::report::plot::{Charts, PlotPoint, Series};

/// The charts of a comparison: per ISL/OSL, the baseline's and the
/// candidate's curves (one per TP size), from the rows' figures.
pub fn from_comparison(c: &Comparison) -> Vec<Charts> {
    let mut out: Vec<Charts> = Vec::new();
    let multi_tp = {
        let mut tps: Vec<u32> = c.rows.iter().map(|r| r.tp).collect();
        tps.sort();
        tps.dedup();
        tps.len() > 1
    };
    for r in &c.rows {
        if out.last().is_none_or(|ch| (ch.isl, ch.osl) != (r.isl, r.osl)) {
            out.push(Charts { isl: r.isl, osl: r.osl, series: Vec::new() });
        }
        let charts = out.last_mut().expect("just pushed");
        for (side, label) in [(0, &c.baseline_label), (1, &c.candidate_label)] {
            let name = if multi_tp { format!("{label} tp={}", r.tp) } else { label.clone() };
            let pick = |m: Metric| {
                let f = r.figure(m);
                if side == 0 { f.baseline } else { f.candidate }
            };
            let p = PlotPoint {
                conc: r.conc,
                tput_per_gpu: pick(Metric::TputPerGpu),
                intvty: if side == 0 { r.intvty.0 } else { r.intvty.1 },
                tpot_ms: pick(Metric::MedianTpot),
            };
            match charts.series.iter_mut().find(|s| s.label == name) {
                Some(s) => s.points.push(p),
                None => charts.series.push(Series { label: name, points: vec![p] }),
            }
        }
    }
    out
}
