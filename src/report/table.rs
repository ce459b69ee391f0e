//! The terminal summary: one row per point, then the GSM8K line.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};

use super::result::{Gsm8kResult, PointResult};

/// Renders the per-point table. Latency cells are "mean / median / p99" in ms.
/// When any point speculated, two more columns: acceptance rate (%) and mean
/// acceptance length (tokens per draft step), "-" where nothing was drafted.
pub fn points_table(points: &[PointResult]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let speculates = points.iter().any(|p| p.spec_decode.is_some());
    let mut header = vec![
        "ISL/OSL",
        "conc",
        "done",
        "req/s",
        "out tok/s",
        "total tok/s",
        "TTFT ms\nmean/med/p99",
        "TPOT ms\nmean/med/p99",
        "ITL ms\nmean/med/p99",
        "E2EL ms\nmean/med/p99",
        "steps",
        "step ms\nmean",
    ];
    if speculates {
        header.extend(["spec accept\nrate %", "spec accept\nlength"]);
    }
    table.set_header(header);
    for p in points {
        let f = &p.figures;
        let lat = |m: &str| {
            format!(
                "{} / {} / {}",
                fmt(f.ms(&format!("mean_{m}_ms"))),
                fmt(f.ms(&format!("median_{m}_ms"))),
                fmt(f.ms(&format!("p99_{m}_ms")))
            )
        };
        let mut done = format!("{}/{}", f.completed, p.num_prompts);
        for (n, what) in [(f.failed, "failed"), (f.not_sent, "not sent")] {
            if n > 0 {
                done.push_str(&format!(" ({n} {what})"));
            }
        }
        // "-" where no request completed (the figure is undefined).
        let rate = |v: f64, digits: usize| if v.is_finite() { format!("{v:.digits$}") } else { "-".into() };
        let mut row = vec![
            p.shape(),
            p.conc.to_string(),
            done,
            rate(f.request_throughput, 2),
            rate(f.output_throughput, 1),
            rate(f.total_token_throughput, 1),
            lat("ttft"),
            lat("tpot"),
            lat("itl"),
            lat("e2el"),
            p.step_stats.steps.to_string(),
            fmt(p.step_stats.mean_step_ms),
        ];
        if speculates {
            let s = p.spec_decode.as_ref();
            let or_dash = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
            row.push(or_dash(s.and_then(|s| s.acceptance_rate).map(|r| r * 100.0), 1));
            row.push(or_dash(s.and_then(|s| s.acceptance_length), 2));
        }
        table.add_row(row);
    }
    for col in table.column_iter_mut().skip(1) {
        col.set_cell_alignment(CellAlignment::Right);
    }
    table.to_string()
}

/// One line for GSM8K.
pub fn gsm8k_line(g: &Gsm8kResult) -> String {
    format!(
        "{}{} ({}-shot, shots: {}): n = {}, exact_match strict-match = {:.2}% ± {:.2}, flexible-extract = {:.2}% ± {:.2}, {:.1} s ({:.1} output tok/s)",
        g.task,
        if g.chat { ", chat" } else { "" },
        g.num_fewshot,
        g.fewshot_mode,
        g.n,
        100.0 * g.exact_match_strict,
        100.0 * g.exact_match_strict_stderr,
        100.0 * g.exact_match_flexible,
        100.0 * g.exact_match_flexible_stderr,
        g.duration_s,
        if g.duration_s > 0.0 { g.output_tokens as f64 / g.duration_s } else { 0.0 },
    )
}

/// One line per lm-eval task: its metrics with standard errors, then the
/// generation's wall time and output tok/s.
pub fn lm_eval_lines(r: &super::result::LmEvalResult) -> Vec<String> {
    let mut lines: Vec<String> = r
        .tasks
        .iter()
        .map(|t| {
            let metrics: Vec<String> = t
                .metrics
                .iter()
                .map(|m| match m.stderr {
                    Some(se) => format!("{} = {:.2}% ± {:.2}", m.name, 100.0 * m.value, 100.0 * se),
                    None => format!("{} = {:.2}%", m.name, 100.0 * m.value),
                })
                .collect();
            let n = t.n.map_or(String::new(), |n| format!("n = {n}, "));
            let shots = t.num_fewshot.map_or(String::new(), |k| format!(" ({k}-shot)"));
            format!("{} (lm-eval){shots}: {n}{}", t.task, metrics.join(", "))
        })
        .collect();
    lines.push(format!(
        "lm-eval {}{}: {} requests generated in {:.1} s ({:.1} output tok/s), {:.1} s in lm-eval in all",
        r.lm_eval_version.as_deref().unwrap_or("?"),
        if r.chat { ", chat" } else { "" },
        r.requests,
        r.duration_s,
        r.output_throughput(),
        r.wall_s
    ));
    lines
}

/// The accuracy gate's verdict: one line per check (task, metric, score ±
/// stderr, threshold and its source), then the verdict.
pub fn gate_lines(g: &super::result::Gate) -> Vec<String> {
    let mut lines: Vec<String> = g
        .checks
        .iter()
        .map(|c| {
            let se = c.stderr.map_or(String::new(), |se| format!(" ± {:.4}", se));
            format!(
                "gate {}: {} {} = {:.4}{se} {} {:.2} ({})",
                if c.passed { "ok" } else { "FAILED" },
                c.task,
                c.metric,
                c.value,
                if c.passed { ">=" } else { "<" },
                c.threshold,
                c.source
            )
        })
        .collect();
    if !g.ungated.is_empty() {
        lines.push(format!("gate: no threshold for {}", g.ungated.join(", ")));
    }
    let verdict = if g.checks.is_empty() { "FAIL (no task has a threshold)" } else if g.passed { "PASS" } else { "FAIL" };
    lines.push(format!("accuracy gate {verdict}"));
    lines
}

/// Milliseconds with precision that suits their size.
fn fmt(ms: f64) -> String {
    if !ms.is_finite() {
        "-".into()
    } else if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{FigureSpec, point_figures};
    use crate::protocol::RequestRecord;

    #[test]
    fn table_has_a_row_per_point() {
        let mut r = RequestRecord { input_tokens: 4, ..Default::default() };
        r.on_tokens(0.010, 1);
        r.on_tokens(0.020, 1);
        let spec = crate::metrics::FigureSpec { percentiles: &[99.0], gpus: 1, goodput: None };
        let figures = point_figures(&[r], 0.02, spec);
        let p = PointResult { isl: 4, osl: 2, ..PointResult::fixture(1, 1, figures) };
        let t = points_table(&[p.clone(), PointResult { conc: 4, ..p }]);
        assert!(t.contains("4/2"));
        assert!(t.contains("10.0 / 10.0 / 10.0"), "{t}"); // TTFT 10 ms
        assert_eq!(t.lines().filter(|l| l.contains("1/1")).count(), 2);
        assert!(!t.contains("accept"), "no speculative columns without speculation");
    }

    #[test]
    fn speculative_columns_when_a_point_speculates() {
        use crate::metrics::spec::summarize_spec;
        use crate::protocol::SpecCounts;
        let spec = FigureSpec { percentiles: &[99.0], gpus: 1, goodput: None };
        let p = PointResult::fixture(1, 1, point_figures(&[], 1.0, spec));
        let step = SpecCounts { drafts: 4, draft_tokens: 12, accepted_tokens: 6, accepted_per_pos: vec![3, 2, 1] };
        let with = PointResult { spec_decode: summarize_spec([Some(&step)], Some(3), None), ..p.clone() };
        let t = points_table(&[with, p]);
        assert!(t.contains("accept"), "{t}");
        assert!(t.contains("50.0") && t.contains("2.50"), "{t}");
    }
}
