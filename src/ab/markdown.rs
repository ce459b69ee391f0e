//! A comparison as text: the terminal table, the accuracy block and the gate
//! (for the console), and Markdown in the shape people post in a PR
//! (`| conc | before | after | delta |` per ISL/OSL and TP and figure, then
//! the gate: one row per gated figure with its PASS / FAIL / INCONCLUSIVE).

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};

use super::compare::{Accuracy, Comparison, Figure, GateResult, METRICS, PairedMetric, Row, TaskAccuracy};
use super::distributions::McNemarMethod;
use super::gate::{Needed, Outcome};
use super::numbers::{ci_text, num, p_text, pct, pct_abs, pct_unsigned};
use super::stats::{CONFIDENCE, Verdict};

/// A figure's verdict in words, with its resolution: a change within the
/// A/A noise floor reads "no significant change (within this machine's
/// noise of ±3.2%)", no change with a minimum detectable effect reads "no
/// significant change (no change larger than 4.1% at 3 repeats)".
pub fn verdict_text(f: &Figure, repeats: usize) -> String {
    match (f.verdict, f.noise_floor, f.mde) {
        (Verdict::WithinNoise, Some(n), _) => format!("no significant change (within this machine's noise of ±{})", pct_abs(n)),
        (Verdict::NoSignificantChange, _, Some(m)) => format!("{} ({})", f.verdict.text(), resolution_text(m, repeats)),
        (v, _, _) => v.text().into(),
    }
}

/// `no change larger than 4.1% at 3 repeats`.
pub fn resolution_text(mde: f64, repeats: usize) -> String {
    format!("no change larger than {} at {repeats} {}", pct_abs(mde), if repeats == 1 { "repeat" } else { "repeats" })
}

/// How the intervals were computed and what a verdict needs, in one sentence.
fn method_text(c: &Comparison) -> String {
    let mut s = format!(
        "Delta = after / before - 1 with its {:.0}% CI (paired t on the repeats' log ratios, R - 1 degrees of freedom; \
         with one repeat a side, a percentile bootstrap over requests, {} resamples, seed {}); a verdict needs the CI to exclude 0",
        CONFIDENCE * 100.0,
        c.options.resamples,
        c.options.seed
    );
    match &c.noise {
        Some(n) => s.push_str(&format!(
            " and |delta| to exceed this machine's noise floor, from the A/A `{}` ({} repeats: per point and figure the largest change its CI allowed).",
            n.file, n.repeats
        )),
        None => s.push('.'),
    }
    if c.baseline_source.is_some() || c.candidate_source.is_some() {
        s.push_str(
            " Against another tool's file: with its per-request arrays the CI is a bootstrap over that run's requests; \
             with summary figures only the delta has no CI; either way one foreign run is not gated (INCONCLUSIVE).",
        );
    }
    s
}

/// The A/A as a noise floor: per point and figure, the spread of the
/// repeat deltas seen (sample sd), the floor (largest change the CI allowed)
/// and the minimum detectable effect at these repeats.
pub fn noise_markdown(c: &Comparison) -> String {
    let mut s = String::from(
        "### Noise floor (A/A)\n\nThe same variant on both sides: any delta is this machine's noise. \
         Use this file with `ab --noise`.\n\n| ISL/OSL | TP | conc | figure | repeat deltas sd | noise floor | MDE (80% power) |\n|---|---:|---:|---|---:|---:|---:|\n",
    );
    for r in &c.rows {
        for f in &r.figures {
            let sd = if f.repeat_deltas.len() >= 2 {
                pct_abs(crate::metrics::stats::sample_variance(&f.repeat_deltas).sqrt())
            } else {
                "-".into()
            };
            let floor = f.ci.map_or("-".into(), |ci| format!("±{}", pct_abs(super::compare::floor_of(ci, f.delta))));
            s.push_str(&format!(
                "| {}/{} | {} | {} | {} | {sd} | {floor} | {} |\n",
                r.isl,
                r.osl,
                r.tp,
                r.conc,
                f.metric.short(),
                f.mde.map_or("-".into(), |m| format!("{} at {} repeats", pct_abs(m), r.repeats.0.min(r.repeats.1)))
            ));
        }
    }
    s
}

/// One paragraph per side that is another tool's file: what it is (tool,
/// engine and version where it says them, model, files), whether it holds
/// per-request arrays or summary figures only, the rules applied, and the
/// entries left out.
pub fn sources_text(c: &Comparison) -> Vec<String> {
    let mut out = Vec::new();
    for (s, role, label) in [(&c.baseline_source, "Before", &c.baseline_label), (&c.candidate_source, "After", &c.candidate_label)] {
        let Some(s) = s else { continue };
        let detail = match (s.points.is_empty(), s.summary_only(), s.points.iter().any(|p| p.per_request)) {
            (true, _, _) => "no performance figures",
            (false, true, _) => "summary figures only",
            (false, false, true) if s.points.iter().all(|p| p.per_request) => "per-request arrays",
            _ => "per-request arrays at some points, summary figures at others",
        };
        let mut t = format!("{role} (`{label}`) is another tool's file: {}", s.describe());
        if let Some(m) = &s.model {
            t.push_str(&format!(", model {m}"));
        }
        t.push_str(&format!("; {detail} ({}). Rules: {}.", s.files.join(", "), s.definitions.join("; ")));
        if !s.skipped.is_empty() {
            t.push_str(&format!(" Left out: {}.", s.skipped.join("; ")));
        }
        out.push(t);
    }
    out
}

/// A figure's delta cell: the delta with its interval and verdict, or why
/// there is none (not compared; summary figures only on a side).
fn delta_cell(f: &Figure, repeats: usize) -> String {
    match (&f.not_compared, f.method) {
        (Some(why), _) => format!("not compared: {why}"),
        (None, crate::ab::stats::IntervalMethod::SummaryOnly) => format!("{} (no CI: summary figures only on a side)", pct(f.delta)),
        _ => format!("{} {} {}", pct(f.delta), ci_text(f.ci), verdict_text(f, repeats)),
    }
}

/// The workload differences of a group's rows, each once: a phrase every
/// row has as it is, one only some rows have prefixed with their conc.
fn workload_text(rows: &[&Row]) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    let all: Vec<&String> = rows.iter().flat_map(|r| &r.workload_notes).collect();
    for n in &all {
        let at: Vec<u32> = rows.iter().filter(|r| r.workload_notes.contains(n)).map(|r| r.conc).collect();
        let phrase = if at.len() == rows.len() {
            (*n).clone()
        } else {
            format!("conc {}: {n}", at.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
        };
        if !out.contains(&phrase) {
            out.push(phrase);
        }
    }
    (!out.is_empty()).then(|| out.join("; "))
}

fn repeats_text(c: &Comparison) -> String {
    let b = c.rows.iter().map(|r| r.repeats.0).max().unwrap_or(0);
    let k = c.rows.iter().map(|r| r.repeats.1).max().unwrap_or(0);
    let word = |n: usize| if n == 1 { "repeat" } else { "repeats" };
    if b == k { format!("{b} {} each", word(b)) } else { format!("{b} baseline and {k} candidate {}", word(k)) }
}

/// (ISL, OSL, TP) and its rows.
type Group<'a> = ((u32, u32, u32), Vec<&'a Row>);

/// Rows grouped by (ISL, OSL, TP), in order.
fn groups(rows: &[Row]) -> Vec<Group<'_>> {
    let mut out: Vec<Group<'_>> = Vec::new();
    for r in rows {
        let k = (r.isl, r.osl, r.tp);
        match out.last_mut() {
            Some((last, list)) if *last == k => list.push(r),
            _ => out.push((k, vec![r])),
        }
    }
    out
}

/// With `--profile`: the kernels that appear or vanish, tied to the knob
/// that changed where only one did (the kernel diff cannot split several).
fn kernels_per_knob(c: &Comparison) -> String {
    let names = |pick: fn(&crate::profile::diff::KernelDiff) -> &Vec<crate::profile::diff::KernelChange>| -> Vec<String> {
        let mut v: Vec<String> = c.kernels.iter().flat_map(|k| pick(k).iter().map(|x| format!("`{}`", x.name))).collect();
        v.sort();
        v.dedup();
        v
    };
    let (appear, vanish) = (names(|k| &k.only_in_candidate), names(|k| &k.only_in_baseline));
    if appear.is_empty() && vanish.is_empty() {
        return String::new();
    }
    let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    let whom = match c.changes.as_slice() {
        [one] => format!("With `{one}`"),
        many => format!("With these {} changes together (the kernel diff cannot tie a kernel to one of them)", many.len()),
    };
    format!("\n{whom}: kernels that appear: {}; kernels that vanish: {}.\n", list(&appear), list(&vanish))
}

/// The whole comparison as Markdown: header, one `conc | before | after |
/// delta` table per ISL/OSL, TP and figure, the accuracy block, notes and
/// the gate.
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let r = &c.context.recipe;
    s.push_str(&format!("## A/B: `{}` vs `{}`\n\n", c.candidate_label, c.baseline_label));
    let mut facts = vec![r.model.clone()];
    facts.extend(r.hardware.clone());
    facts.extend(r.precision.clone());
    if c.rows.is_empty() {
        // Accuracy only (a side holds no performance figures).
        s.push_str(&format!("Recipe `{}` ({}). Before: `{}`, after: `{}`.\n", r.name, facts.join(", "), c.baseline_label, c.candidate_label));
    } else {
        s.push_str(&format!(
            "Recipe `{}` ({}). Before: `{}`, after: `{}`, {}. {}\n",
            r.name,
            facts.join(", "),
            c.baseline_label,
            c.candidate_label,
            repeats_text(c),
            method_text(c)
        ));
    }
    if !c.changes.is_empty() {
        s.push_str(&format!("\nChange (after vs before): {}.\n", c.changes.join("; ")));
    }
    if let Some(diffs) = &c.took_effect {
        s.push('\n');
        s.push_str(&crate::knobs::render::markdown(diffs, &c.baseline_label, &c.candidate_label));
        s.push_str(&kernels_per_knob(c));
    }
    for t in sources_text(c) {
        s.push_str(&format!("\n{t}\n"));
    }
    for ((isl, osl, tp), rows) in groups(&c.rows) {
        s.push_str(&format!("\n### ISL/OSL {isl}/{osl}, TP {tp}\n"));
        if let Some(w) = workload_text(&rows) {
            s.push_str(&format!("\nWorkload (before vs after): {w}.\n"));
        }
        for m in METRICS {
            let better = if m.higher_is_better() { "higher is better" } else { "lower is better" };
            s.push_str(&format!("\n{}, {better}:\n\n", m.title()));
            s.push_str("| conc | before | after | delta |\n|---:|---:|---:|:---|\n");
            for row in &rows {
                let f = row.figure(m);
                s.push_str(&format!(
                    "| {} | {} | {} | {} |\n",
                    row.conc,
                    num(f.baseline),
                    num(f.candidate),
                    delta_cell(f, row.repeats.0.min(row.repeats.1))
                ));
            }
        }
    }
    if let Some(sc) = &c.spec {
        s.push('\n');
        s.push_str(&super::spec::markdown(sc));
    }
    if !c.prefix_cache.is_empty() {
        s.push('\n');
        s.push_str(&super::prefix_cache::markdown(&c.prefix_cache));
    }
    if !c.kernels.is_empty() {
        s.push_str("\n### Kernels (torch profiler, --profile)\n");
        for d in &c.kernels {
            s.push_str(&d.markdown());
        }
    }
    if c.aa {
        s.push('\n');
        s.push_str(&noise_markdown(c));
    }
    if let Some(a) = &c.accuracy {
        s.push('\n');
        s.push_str(&accuracy_markdown(a));
    }
    if !c.tasks.is_empty() {
        s.push_str("\nAccuracy per task:\n\n");
        for line in task_lines(&c.tasks) {
            s.push_str(&format!("- {line}\n"));
        }
    }
    if !c.notes.is_empty() {
        s.push_str("\nNotes:\n\n");
        for n in &c.notes {
            s.push_str(&format!("- {n}\n"));
        }
    }
    let per_figure = gate_markdown(c);
    if !per_figure.is_empty() {
        s.push('\n');
        s.push_str(&per_figure);
    }
    s.push('\n');
    s.push_str(&gate_text(c));
    s
}

fn mcnemar_cell(m: &PairedMetric) -> String {
    match m.mcnemar {
        Some(t) => format!(
            "{} ({}, b={}, c={})",
            p_text(t.p_value),
            match t.method {
                McNemarMethod::ExactBinomial => "exact",
                McNemarMethod::ChiSquareCorrected => "chi2",
            },
            t.b,
            t.c
        ),
        None => "-".into(),
    }
}

fn held_text(a: &Accuracy) -> String {
    let d = a.max_accuracy_drop * 100.0;
    let kind = if a.unpaired { "unpaired" } else { "paired" };
    match a.outcome {
        Outcome::Pass => format!("**Accuracy held**: each {kind} 95% CI excludes a drop larger than {d:.2} points."),
        Outcome::Fail => format!("**Accuracy did not hold**: a {kind} 95% CI lies wholly beyond a {d:.2}-point drop."),
        Outcome::Inconclusive if a.strict.gate.ci.is_none() => {
            "**Accuracy not resolved**: no per-question samples to pair (gsm8k_samples.jsonl).".to_string()
        }
        Outcome::Inconclusive => format!("**Accuracy not resolved**: a {kind} 95% CI straddles the {d:.2}-point drop limit (see the gate)."),
    }
}

/// A paired accuracy interval in points: `[-0.70, +0.55]`, or `-`.
fn points_ci(m: &PairedMetric) -> String {
    m.gate.ci.map_or("-".into(), |(lo, hi)| format!("[{:+.2}, {:+.2}]", lo * 100.0, hi * 100.0))
}

fn agreement_text(a: &Accuracy) -> String {
    match a.agreement {
        Some(g) => {
            let mut t = format!(
                "Greedy-token agreement: {}/{} questions identical ({:.1}%)",
                g.identical,
                g.compared,
                g.fraction * 100.0
            );
            match g.mean_first_divergence {
                Some(d) => t.push_str(&format!("; the others first differ at token {d:.1} on average.")),
                None => t.push('.'),
            }
            t
        }
        None => "Greedy-token agreement: no token ids to compare.".into(),
    }
}

/// One line per task and metric: the arms' scores with the paired interval
/// of the change, the candidate's threshold, and the gate's outcome.
fn task_lines(tasks: &[TaskAccuracy]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| {
            let scores = match (t.baseline, t.candidate, t.diff) {
                (Some(b), Some(c), Some(d)) => {
                    let ci = t.gate.and_then(|g| g.ci).map_or(String::new(), |(lo, hi)| format!(" [{:+.2}, {:+.2}]", lo * 100.0, hi * 100.0));
                    format!("{:.2}% → {:.2}% ({:+.2} points{ci}, {} paired)", b * 100.0, c * 100.0, d * 100.0, t.paired)
                }
                (_, Some(c), _) => format!("candidate {:.2}%", c * 100.0),
                _ => "-".into(),
            };
            let threshold = match (t.threshold, t.meets_threshold) {
                (Some(th), Some(ok)) => format!("; threshold {th:.2} ({}): {}", t.source.as_deref().unwrap_or("?"), if ok { "met" } else { "NOT met" }),
                _ => String::new(),
            };
            format!("{} {}: {scores}{threshold}: {}", t.task, t.metric, t.outcome.text())
        })
        .collect()
}

/// The accuracy block in Markdown.
pub fn accuracy_markdown(a: &Accuracy) -> String {
    let mut s = format!("### Accuracy: {}, {}-shot ({})\n\n", a.task, a.num_fewshot, a.fewshot_mode);
    if !a.differences.is_empty() {
        s.push_str(&format!("Eval (before vs after): {}.\n\n", a.differences.join("; ")));
    }
    let kind = if a.unpaired { "unpaired" } else { "paired" };
    s.push_str(&format!("| exact_match | before | after | diff | 95% CI ({kind}) | McNemar p |\n|---|---:|---:|---:|---:|---:|\n"));
    for (name, m) in [("strict-match", &a.strict), ("flexible-extract", &a.flexible)] {
        s.push_str(&format!(
            "| {name} | {:.2}% | {:.2}% | {:+.2} pts | {} pts | {} |\n",
            m.baseline * 100.0,
            m.candidate * 100.0,
            m.diff * 100.0,
            points_ci(m),
            mcnemar_cell(m)
        ));
    }
    s.push_str(&format!(
        "\nn = {} before, {} after, {}. {}\n{}\n",
        a.baseline.n,
        a.candidate.n,
        if a.unpaired { "unpaired (Agresti-Caffo interval from the two scores and n)".to_string() } else { format!("{} paired by question", a.paired) },
        held_text(a),
        agreement_text(a)
    ));
    s
}

/// What would decide an INCONCLUSIVE gate, in one line: the repeats at the
/// observed spread (with the `--until-ci gate` that runs them) and the eval
/// questions; `None` when the gate decided or no estimate applies.
pub fn to_decide_text(g: &GateResult) -> Option<String> {
    if g.outcome != Outcome::Inconclusive {
        return None;
    }
    let mut parts = Vec::new();
    match g.repeats_needed {
        Some(Needed::About(n)) => parts.push(format!("about {n} repeats a side at the observed spread (`--until-ci gate --max-repeats {n}`)")),
        Some(Needed::MoreThan(n)) => parts.push(format!(
            "more than {n} repeats a side at the observed spread: too noisy for this limit here; a larger --max-regression or a quieter machine"
        )),
        None => {}
    }
    match g.questions_needed {
        Some(Needed::About(n)) => parts.push(format!("about {n} paired eval questions (`--eval-limit {n}`)")),
        Some(Needed::MoreThan(n)) => parts.push(format!("more than {n} eval questions at the observed disagreement: a larger --max-accuracy-drop")),
        None => {}
    }
    (!parts.is_empty()).then(|| format!("To decide: {}.", parts.join("; ")))
}

/// The gate's line, its failures and undecided figures, what would decide
/// them, and what it did not judge: "PASS (accuracy only)" or
/// "INCONCLUSIVE (nothing gated)" when no point had the repeats for a
/// performance gate.
fn gate_text(c: &Comparison) -> String {
    let perf_gated = c.rows.iter().any(|r| r.figures.iter().any(|f| f.gate.is_some()));
    let scope = match (perf_gated, c.accuracy.is_some() || !c.tasks.is_empty()) {
        (true, _) => "",
        (false, true) => " (accuracy only)",
        (false, false) => " (nothing gated)",
    };
    let mut s = format!(
        "Gate (max regression {}, max accuracy drop {:.2} points): {}{scope}\n",
        pct_unsigned(c.options.max_regression),
        c.options.max_accuracy_drop * 100.0,
        c.gate.outcome.text()
    );
    for f in c.gate.failures.iter().chain(&c.gate.inconclusive) {
        s.push_str(&format!("- {f}\n"));
    }
    if let Some(t) = to_decide_text(&c.gate) {
        s.push_str(&t);
        s.push('\n');
    }
    if let Some(why) = &c.gate.perf_not_gated {
        s.push_str(&format!("Note: {why}.\n"));
    }
    s
}

/// The gate per figure in Markdown: one row per gated performance figure
/// and accuracy metric with its interval, limit and outcome, and what the
/// outcomes mean; empty when nothing was gated.
pub fn gate_markdown(c: &Comparison) -> String {
    let mut lines = Vec::new();
    for r in &c.rows {
        for f in &r.figures {
            let Some(g) = f.gate else { continue };
            let sign = if f.metric.higher_is_better() { "-" } else { "+" };
            let floor = if g.margin > c.options.max_regression { " (A/A floor)" } else { "" };
            lines.push(format!(
                "| {} | {} | {} {} | {sign}{}{floor} | {} |",
                r.key_text(),
                f.metric.short(),
                pct(f.delta),
                ci_text(f.ci),
                pct_abs(g.margin),
                g.outcome.text()
            ));
        }
    }
    if let Some(a) = &c.accuracy {
        for (name, m) in [("strict-match", &a.strict), ("flexible-extract", &a.flexible)] {
            lines.push(format!(
                "| {} | exact_match {name} | {:+.2} pts {} | -{:.2} pts | {} |",
                a.task,
                m.diff * 100.0,
                points_ci(m),
                a.max_accuracy_drop * 100.0,
                m.gate.outcome.text()
            ));
        }
    }
    for t in &c.tasks {
        let change = match (t.diff, t.gate) {
            (Some(d), Some(g)) => {
                let ci = g.ci.map_or("-".into(), |(lo, hi)| format!("[{:+.2}, {:+.2}]", lo * 100.0, hi * 100.0));
                format!("{:+.2} pts {ci}", d * 100.0)
            }
            _ => t.candidate.map_or("-".into(), |v| format!("{:.2}%", v * 100.0)),
        };
        let limit = match (t.gate, t.threshold) {
            (Some(_), Some(th)) => format!("-{:.2} pts; ≥ {th:.2}", c.options.max_accuracy_drop * 100.0),
            (Some(_), None) => format!("-{:.2} pts", c.options.max_accuracy_drop * 100.0),
            (None, Some(th)) => format!("≥ {th:.2}"),
            (None, None) => "-".into(),
        };
        lines.push(format!("| {} | {} | {change} | {limit} | {} |", t.task, t.metric, t.outcome.text()));
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "### Gate per figure\n\nPASS: the 95% CI excludes a regression beyond the limit; FAIL: the whole CI lies beyond it; \
         INCONCLUSIVE: the CI straddles it (exit code 3).\n\n| point | figure | delta [95% CI] | limit | outcome |\n|---|---|---|---:|---|\n{}\n",
        lines.join("\n")
    )
}

/// The console view: one row per point with before → after, delta and CI
/// for each figure and the row's verdict; then the accuracy block (plain
/// text), notes and the gate.
pub fn terminal(c: &Comparison) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["ISL/OSL".to_string(), "TP".into(), "conc".into()];
    header.extend(METRICS.iter().map(|m| format!("{}\nbefore → after\ndelta [95% CI]", m.short())));
    header.push("verdict".into());
    table.set_header(header);
    for r in &c.rows {
        let mut cells = vec![format!("{}/{}", r.isl, r.osl), r.tp.to_string(), r.conc.to_string()];
        for m in METRICS {
            let f = r.figure(m);
            let delta = match (&f.not_compared, f.method) {
                (Some(_), _) => "not compared".to_string(),
                (None, crate::ab::stats::IntervalMethod::SummaryOnly) => format!("{} [no CI]", pct(f.delta)),
                _ => format!("{} {}", pct(f.delta), ci_text(f.ci)),
            };
            cells.push(format!("{} → {}\n{delta}", num(f.baseline), num(f.candidate)));
        }
        let mut verdict = r.verdict.text().to_string();
        let floors: Vec<f64> = r.figures.iter().filter_map(|f| f.noise_floor).collect();
        if r.verdict == Verdict::WithinNoise && !floors.is_empty() {
            verdict = format!("no significant change\n(within noise ±{})", pct_abs(floors.iter().copied().fold(0.0, f64::max)));
        } else if let (false, Some((metric, m))) = (r.verdict.is_change(), r.mde()) {
            // The row's verdict covers every figure: its resolution is the
            // least resolved figure's, named.
            verdict.push_str(&format!(
                "\n({} in {}, the least resolved figure)",
                resolution_text(m, r.repeats.0.min(r.repeats.1)),
                metric.short()
            ));
        }
        cells.push(verdict);
        table.add_row(cells);
    }
    for col in table.column_iter_mut().skip(1) {
        col.set_cell_alignment(CellAlignment::Right);
    }
    let method = if c.rows.iter().all(|r| r.repeats.0 >= 2 && r.repeats.1 >= 2) {
        "95% CI: paired t over repeats"
    } else {
        "95% CI: paired t over repeats, request bootstrap where a side has one repeat"
    };
    let mut s = if c.rows.is_empty() {
        format!("A/B: {} (after) vs {} (before)\n", c.candidate_label, c.baseline_label)
    } else {
        format!("A/B: {} (after) vs {} (before), {}; {method}\n", c.candidate_label, c.baseline_label, repeats_text(c))
    };
    if let Some(n) = &c.noise {
        s.push_str(&format!("noise floor: A/A {} ({} repeats); a verdict needs |delta| above it\n", n.file, n.repeats));
    }
    if !c.changes.is_empty() {
        s.push_str(&format!("change: {}\n", c.changes.join("; ")));
    }
    for t in sources_text(c) {
        s.push_str(&format!("{t}\n"));
    }
    if !c.rows.is_empty() {
        s.push_str(&table.to_string());
        s.push('\n');
    }
    for ((isl, osl, tp), rows) in groups(&c.rows) {
        if let Some(w) = workload_text(&rows) {
            s.push_str(&format!("workload ISL/OSL {isl}/{osl} TP {tp} (before vs after): {w}\n"));
        }
        for r in rows.iter().filter(|r| r.figures.iter().any(|f| f.not_compared.is_some())) {
            for f in r.figures.iter().filter_map(|f| f.not_compared.as_ref().map(|w| (f.metric, w))) {
                s.push_str(&format!("not compared at {}: {} ({})\n", r.key_text(), f.0.short(), f.1));
            }
        }
    }
    if let Some(sc) = &c.spec {
        s.push_str(&super::spec::terminal(sc));
    }
    s.push_str(&super::prefix_cache::terminal(&c.prefix_cache));
    for d in &c.kernels {
        s.push_str(&d.terminal());
    }
    if c.aa {
        s.push_str(&noise_markdown(c));
    }
    for line in task_lines(&c.tasks) {
        s.push_str(&format!("{line}\n"));
    }
    if let Some(a) = &c.accuracy {
        s.push_str(&format!("{}, {}-shot ({}):\n", a.task, a.num_fewshot, a.fewshot_mode));
        if !a.differences.is_empty() {
            s.push_str(&format!("  eval (before vs after): {}\n", a.differences.join("; ")));
        }
        for (name, m) in [("strict-match", &a.strict), ("flexible-extract", &a.flexible)] {
            s.push_str(&format!(
                "  exact_match {name}: {:.2}% → {:.2}% ({:+.2} points, 95% CI {} points {}), McNemar p = {}\n",
                m.baseline * 100.0,
                m.candidate * 100.0,
                m.diff * 100.0,
                points_ci(m),
                if a.unpaired { "unpaired" } else { "paired" },
                mcnemar_cell(m)
            ));
        }
        let paired = if a.unpaired { "unpaired".to_string() } else { format!("{} paired", a.paired) };
        s.push_str(&format!("  n = {} / {}, {paired}; {}\n", a.baseline.n, a.candidate.n, held_text(a).replace("**", "")));
        s.push_str(&format!("  {}\n", agreement_text(a)));
    }
    for n in &c.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s.push_str(&gate_text(c));
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::compare::{Context, Figure, Metric, Options, Scores, TokenAgreement};
    use super::super::distributions::McNemar;
    use super::super::stats::Verdict;
    use super::*;
    use crate::report::result::RecipeInfo;

    /// A hand-made comparison: one ISL/OSL and TP, two concurrencies, three
    /// repeats; the gate as [`super::super::compare::gate`] decides it (a
    /// FAIL: TTFT at conc 64 rose by more than 5%, the whole CI).
    pub fn fixture() -> Comparison {
        let fig = |metric, b: f64, c: f64, ci: Option<(f64, f64)>, verdict| Figure {
            metric,
            baseline: b,
            candidate: c,
            delta: c / b - 1.0,
            ci,
            method: crate::ab::stats::IntervalMethod::PairedT,
            mde: None,
            // What a paired t interval on 3 repeats with this CI had.
            se_log: ci.map(|(lo, hi)| (hi.ln_1p() - lo.ln_1p()) / 2.0 / crate::ab::distributions::student_t_quantile(0.975, 2.0)),
            df: Some(2.0),
            repeat_deltas: vec![],
            bootstrap_ci: ci,
            noise_floor: None,
            verdict,
            gate: None,
            not_compared: None,
        };
        let row = |conc, figures: Vec<Figure>, intvty, verdict| Row {
            isl: 1024,
            osl: 1024,
            tp: 8,
            conc,
            repeats: (3, 3),
            figures,
            intvty,
            verdict,
            workload_notes: Vec::new(),
            undecidable: None,
        };
        let mut rows = vec![
            row(
                4,
                vec![
                    fig(Metric::TputPerGpu, 80.0, 84.7, Some((0.031, 0.084)), Verdict::Faster),
                    fig(Metric::OutputTput, 320.0, 338.8, Some((0.031, 0.084)), Verdict::Faster),
                    fig(Metric::MedianTpot, 12.5, 11.9, Some((-0.071, -0.025)), Verdict::Faster),
                    fig(Metric::MedianTtft, 150.0, 151.0, Some((-0.02, 0.035)), Verdict::NoSignificantChange),
                ],
                (80.0, 84.0),
                Verdict::Faster,
            ),
            row(
                64,
                vec![
                    fig(Metric::TputPerGpu, 365.1, 429.0, Some((0.12, 0.23)), Verdict::Faster),
                    fig(Metric::OutputTput, 1460.4, 1716.0, Some((0.12, 0.23)), Verdict::Faster),
                    fig(Metric::MedianTpot, 40.2, 35.0, Some((-0.16, -0.09)), Verdict::Faster),
                    fig(Metric::MedianTtft, 900.0, 1000.0, Some((0.06, 0.17)), Verdict::Slower),
                ],
                (24.9, 28.6),
                Verdict::Mixed,
            ),
        ];
        let pm = |b: f64, c: f64, m: McNemar| PairedMetric {
            baseline: b,
            candidate: c,
            diff: c - b,
            mcnemar: Some(m),
            gate: crate::ab::gate::judge_accuracy(m.b, m.c, 1319, 0.01, Some(1319)),
        };
        // 9 lost and 8 gained of 1319: held; 20 and 19: a CI of [-1.01,
        // +0.86] points straddles the 1-point limit.
        let strict = pm(0.959, 0.9583, crate::ab::distributions::mcnemar(9, 8));
        let flexible = pm(0.96, 0.9598, crate::ab::distributions::mcnemar(20, 19));
        let accuracy = Accuracy {
            task: "gsm8k".into(),
            num_fewshot: 5,
            fewshot_mode: "train-random-seed-1234".into(),
            baseline: Scores { n: 1319, strict: 0.959, flexible: 0.96 },
            candidate: Scores { n: 1319, strict: 0.9583, flexible: 0.9598 },
            paired: 1319,
            outcome: Outcome::combine([strict.gate.outcome, flexible.gate.outcome]).unwrap(),
            strict,
            flexible,
            max_accuracy_drop: 0.01,
            questions_available: Some(1319),
            agreement: Some(TokenAgreement {
                compared: 1319,
                identical: 1200,
                fraction: 1200.0 / 1319.0,
                mean_first_divergence: Some(41.3),
                without_token_ids: 0,
            }),
            unpaired: false,
            differences: Vec::new(),
        };
        let gate = crate::ab::compare::gate(&mut rows, Some(&accuracy), &[], &Options::default());
        Comparison {
            baseline_label: "before".into(),
            candidate_label: "aiter".into(),
            context: Context {
                recipe: RecipeInfo {
                    name: "minimax-m3-mxfp8-mi300x".into(),
                    file: "recipes/amd/minimax-m3-mxfp8-mi300x.toml".into(),
                    model: "MiniMaxAI/MiniMax-M3".into(),
                    hardware: Some("mi300x".into()),
                    precision: Some("fp8".into()),
                    model_path: "MiniMaxAI/MiniMax-M3".into(),
                },
                config_key: Some("minimaxm3-fp8-mi300x-vllm".into()),
            },
            options: Options::default(),
            changes: vec![],
            took_effect: None,
            rows,
            accuracy: Some(accuracy),
            tasks: Vec::new(),
            notes: vec!["ISL/OSL 1024/1024 TP 8 conc 128 ran only in the baseline: not compared".into()],
            gate,
            spec: None,
            prefix_cache: Vec::new(),
            noise: None,
            aa: false,
            kernels: vec![],
            baseline_source: None,
            candidate_source: None,
        }
    }

    #[test]
    fn markdown_exact_text() {
        let expected = "\
## A/B: `aiter` vs `before`

Recipe `minimax-m3-mxfp8-mi300x` (MiniMaxAI/MiniMax-M3, mi300x, fp8). Before: `before`, after: `aiter`, 3 repeats each. Delta = after / before - 1 with its 95% CI (paired t on the repeats' log ratios, R - 1 degrees of freedom; with one repeat a side, a percentile bootstrap over requests, 2000 resamples, seed 0); a verdict needs the CI to exclude 0.

### ISL/OSL 1024/1024, TP 8

Total throughput per GPU (tok/s/gpu), higher is better:

| conc | before | after | delta |
|---:|---:|---:|:---|
| 4 | 80.0 | 84.7 | +5.9% [+3.1%, +8.4%] faster |
| 64 | 365 | 429 | +17.5% [+12.0%, +23.0%] faster |

Output throughput (tok/s), higher is better:

| conc | before | after | delta |
|---:|---:|---:|:---|
| 4 | 320 | 339 | +5.9% [+3.1%, +8.4%] faster |
| 64 | 1460 | 1716 | +17.5% [+12.0%, +23.0%] faster |

Median TPOT (ms), lower is better:

| conc | before | after | delta |
|---:|---:|---:|:---|
| 4 | 12.5 | 11.9 | -4.8% [-7.1%, -2.5%] faster |
| 64 | 40.2 | 35.0 | -12.9% [-16.0%, -9.0%] faster |

Median TTFT (ms), lower is better:

| conc | before | after | delta |
|---:|---:|---:|:---|
| 4 | 150 | 151 | +0.7% [-2.0%, +3.5%] no significant change |
| 64 | 900 | 1000 | +11.1% [+6.0%, +17.0%] slower |

### Accuracy: gsm8k, 5-shot (train-random-seed-1234)

| exact_match | before | after | diff | 95% CI (paired) | McNemar p |
|---|---:|---:|---:|---:|---:|
| strict-match | 95.90% | 95.83% | -0.07 pts | [-0.71, +0.55] pts | 1.00 (exact, b=9, c=8) |
| flexible-extract | 96.00% | 95.98% | -0.02 pts | [-1.01, +0.86] pts | 1.00 (chi2, b=20, c=19) |

n = 1319 before, 1319 after, 1319 paired by question. **Accuracy not resolved**: a paired 95% CI straddles the 1.00-point drop limit (see the gate).
Greedy-token agreement: 1200/1319 questions identical (91.0%); the others first differ at token 41.3 on average.

Notes:

- ISL/OSL 1024/1024 TP 8 conc 128 ran only in the baseline: not compared

### Gate per figure

PASS: the 95% CI excludes a regression beyond the limit; FAIL: the whole CI lies beyond it; INCONCLUSIVE: the CI straddles it (exit code 3).

| point | figure | delta [95% CI] | limit | outcome |
|---|---|---|---:|---|
| ISL/OSL 1024/1024 TP 8 conc 4 | tok/s/gpu | +5.9% [+3.1%, +8.4%] | -5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 4 | out tok/s | +5.9% [+3.1%, +8.4%] | -5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 4 | TPOT ms (median) | -4.8% [-7.1%, -2.5%] | +5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 4 | TTFT ms (median) | +0.7% [-2.0%, +3.5%] | +5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 64 | tok/s/gpu | +17.5% [+12.0%, +23.0%] | -5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 64 | out tok/s | +17.5% [+12.0%, +23.0%] | -5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 64 | TPOT ms (median) | -12.9% [-16.0%, -9.0%] | +5.0% | PASS |
| ISL/OSL 1024/1024 TP 8 conc 64 | TTFT ms (median) | +11.1% [+6.0%, +17.0%] | +5.0% | FAIL |
| gsm8k | exact_match strict-match | -0.07 pts [-0.71, +0.55] | -1.00 pts | PASS |
| gsm8k | exact_match flexible-extract | -0.02 pts [-1.01, +0.86] | -1.00 pts | INCONCLUSIVE |

Gate (max regression 5%, max accuracy drop 1.00 points): FAIL
- ISL/OSL 1024/1024 TP 8 conc 64: Median TTFT (ms) +11.1% [+6.0%, +17.0%]: the whole CI is a regression beyond 5%
- accuracy not resolved: flexible-extract 96.00% -> 95.98% (-0.02 points [-1.01, +0.86], McNemar p = 1.00) straddles the 1.00-point drop limit: more than 1319 paired questions would be needed at the observed disagreement, more than the task has
";
        let got = render(&fixture());
        if got != expected {
            for (i, (a, b)) in got.lines().zip(expected.lines()).enumerate() {
                assert_eq!(a, b, "line {}", i + 1);
            }
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn terminal_view_has_every_row_and_the_gate() {
        let t = terminal(&fixture());
        assert!(t.contains("1024/1024"));
        assert!(t.contains("80.0 → 84.7"));
        assert!(t.contains("+17.5% [+12.0%, +23.0%]"));
        assert!(t.contains("mixed"));
        assert!(t.contains("McNemar p = 1.00 (exact, b=9, c=8)"));
        assert!(t.contains("Accuracy not resolved: a paired 95% CI straddles"));
        assert!(t.contains("(-0.07 points, 95% CI [-0.71, +0.55] points paired)"));
        assert!(t.contains("points): FAIL\n- ISL/OSL 1024/1024 TP 8 conc 64: Median TTFT (ms) +11.1% [+6.0%, +17.0%]: the whole CI"));
        assert!(!t.contains("To decide"), "a FAIL is decided");
    }

    #[test]
    fn a_row_without_a_change_names_the_figure_its_resolution_is_of() {
        // One repeat: each figure has its own minimum detectable effect; the
        // row's verdict quotes the largest and says whose it is.
        let mut c = fixture();
        let row = &mut c.rows[0];
        row.verdict = Verdict::NoSignificantChange;
        row.repeats = (1, 1);
        for (f, mde) in row.figures.iter_mut().zip([0.05, 0.04, 0.08, 25.577]) {
            f.verdict = Verdict::NoSignificantChange;
            f.mde = Some(mde);
        }
        let t = terminal(&c);
        assert!(t.contains("(no change larger than 2557.7% at 1 repeat in TTFT ms (median), the least resolved figure)"), "{t}");
    }
}
