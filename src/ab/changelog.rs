//! A perf-changelog entry in InferenceX's `perf-changelog.yaml` format, ready
//! to paste into a PR: `config-keys` (list), `description` (list of lines),
//! `pr-link` (InferenceX's `ChangelogEntry` in `utils/matrix_logic/validation.py`
//! requires these three; `utils/validate_perf_changelog.py` accepts the
//! `.../pull/XXX` placeholder on PR runs). The description says what changed
//! (engine flags and environment), the measured uplift range per ISL/OSL and
//! TP with the 95% intervals at its ends, the accuracy line with the paired
//! intervals, and the gate's outcome.
//!
//! An entry is written only when the gate decided (PASS or FAIL): an
//! INCONCLUSIVE comparison can claim neither an uplift nor a regression, so
//! its `changelog.yaml` holds only a YAML comment saying why and what would
//! decide it.

use std::collections::BTreeMap;

use super::compare::{Comparison, Metric};
use super::gate::Outcome;
use super::numbers::{ci_text, p_text, pct, pct_unsigned};
use super::stats::Verdict;

/// The `pr-link` placeholder InferenceX's validator accepts on PR runs.
pub const PR_LINK_PLACEHOLDER: &str = "https://github.com/SemiAnalysisAI/InferenceX/pull/XXX";

/// A YAML double-quoted scalar.
fn q(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn range_line(c: &Comparison, metric: Metric, name: &str) -> Vec<String> {
    let mut groups: BTreeMap<(u32, u32, u32), Vec<&super::compare::Row>> = BTreeMap::new();
    for r in &c.rows {
        groups.entry((r.isl, r.osl, r.tp)).or_default().push(r);
    }
    groups
        .iter()
        .map(|((isl, osl, tp), rows)| {
            let figs: Vec<_> = rows.iter().map(|r| r.figure(metric)).collect();
            let by_delta = |a: &&&super::compare::Figure, b: &&&super::compare::Figure| a.delta.total_cmp(&b.delta);
            let lo = figs.iter().min_by(by_delta).expect("a group has a row");
            let hi = figs.iter().max_by(by_delta).expect("a group has a row");
            let concs: Vec<u32> = rows.iter().map(|r| r.conc).collect();
            let conc = if concs.len() == 1 {
                format!("conc {}", concs[0])
            } else {
                format!("conc {}-{}", concs[0], concs[concs.len() - 1])
            };
            let count = |v: Verdict| figs.iter().filter(|f| f.verdict == v).count();
            let (faster, slower) = (count(Verdict::Faster), count(Verdict::Slower));
            let sig = match (faster, slower) {
                (0, 0) => "no significant change at any point".to_string(),
                (f, 0) => format!("significantly better at {f} of {} points", figs.len()),
                (0, s) => format!("significantly worse at {s} of {} points", figs.len()),
                (f, s) => format!("better at {f}, worse at {s} of {} points", figs.len()),
            };
            let with_ci = |f: &super::compare::Figure| format!("{} {}", pct(f.delta), ci_text(f.ci));
            let span = if figs.len() == 1 { with_ci(lo) } else { format!("{} to {}", with_ci(lo), with_ci(hi)) };
            format!("isl={isl}/osl={osl} tp={tp}: {name} {span} across {conc} ({sig}, 95% CI)")
        })
        .collect()
}

/// The gate's outcome in one description line.
fn gate_line(c: &Comparison) -> String {
    let limits = format!(
        "max regression {}, max accuracy drop {:.2} points, 95% CIs",
        pct_unsigned(c.options.max_regression),
        c.options.max_accuracy_drop * 100.0
    );
    match c.gate.failures.as_slice() {
        [] => format!("enginebench gate {} ({limits})", c.gate.outcome.text()),
        f => format!("enginebench gate {} ({limits}): {}", c.gate.outcome.text(), f.join("; ")),
    }
}

/// One line per side that is another tool's file: its tool, engine and
/// version as the file says them, and its model.
fn source_lines(c: &Comparison) -> Vec<String> {
    [(&c.baseline_source, "before", &c.baseline_label), (&c.candidate_source, "after", &c.candidate_label)]
        .into_iter()
        .filter_map(|(s, role, label)| {
            let s = s.as_ref()?;
            let model = s.model.as_ref().map_or(String::new(), |m| format!(", model {m}"));
            Some(format!("{role} ({label}): {}{model}", s.describe()))
        })
        .collect()
}

/// The file for an INCONCLUSIVE gate: YAML comments only (no entry).
fn no_entry(c: &Comparison) -> String {
    let mut s = format!(
        "# enginebench: no perf-changelog entry for {} vs {}: the gate was INCONCLUSIVE\n\
         # (max regression {}, max accuracy drop {:.2} points): a 95% CI straddles a limit,\n\
         # so neither an uplift nor a regression can be claimed.\n",
        c.candidate_label,
        c.baseline_label,
        pct_unsigned(c.options.max_regression),
        c.options.max_accuracy_drop * 100.0
    );
    if !c.changes.is_empty() {
        s.push_str(&format!("# change: {}\n", c.changes.join("; ")));
    }
    for line in source_lines(c) {
        s.push_str(&format!("# {line}\n"));
    }
    if let Some(t) = super::markdown::to_decide_text(&c.gate) {
        s.push_str(&format!("# {}\n", t.replace('`', "")));
    }
    s
}

/// The changelog entry (YAML, ending with a newline, no tabs); for an
/// INCONCLUSIVE gate, comments saying why there is none.
pub fn render(c: &Comparison) -> String {
    if c.gate.outcome == Outcome::Inconclusive {
        return no_entry(c);
    }
    let key = c.context.config_key.clone().unwrap_or_else(|| c.context.recipe.name.clone());
    let mut desc = Vec::new();
    let foreign = source_lines(c);
    let changes = match (c.changes.is_empty(), foreign.is_empty()) {
        (false, _) => c.changes.join("; "),
        (true, true) => "no engine flag or env difference".to_string(),
        (true, false) => "against another tool's published figures".to_string(),
    };
    desc.push(format!("{} vs {}: {changes}", c.candidate_label, c.baseline_label));
    desc.extend(foreign);
    desc.extend(range_line(c, Metric::TputPerGpu, "total tok/s/gpu"));
    desc.extend(range_line(c, Metric::MedianTpot, "median TPOT"));
    if let Some(a) = &c.accuracy {
        let p = |m: &super::compare::PairedMetric| m.mcnemar.map_or("-".to_string(), |t| p_text(t.p_value));
        let metric = |name: &str, m: &super::compare::PairedMetric| {
            let ci = m.gate.ci.map_or(String::new(), |(lo, hi)| format!(" [{:+.2}, {:+.2}]", lo * 100.0, hi * 100.0));
            format!("{name} {:.2}% -> {:.2}% ({:+.2} points{ci})", m.baseline * 100.0, m.candidate * 100.0, m.diff * 100.0)
        };
        let mut line = format!(
            "{} ({}-shot, n={}): {}, {} (McNemar p {} / {}); {}",
            a.task,
            a.num_fewshot,
            a.candidate.n,
            metric("strict-match", &a.strict),
            metric("flexible-extract", &a.flexible),
            p(&a.strict),
            p(&a.flexible),
            match a.outcome {
                Outcome::Pass => "accuracy held",
                Outcome::Fail => "accuracy did NOT hold",
                Outcome::Inconclusive => "accuracy not resolved",
            }
        );
        if let Some(g) = a.agreement {
            line.push_str(&format!("; greedy tokens identical on {:.1}% of questions", g.fraction * 100.0));
        }
        desc.push(line);
    }
    desc.extend(c.kernels.iter().map(|d| d.changelog_line()));
    desc.push(gate_line(c));
    let mut s = format!("- config-keys:\n    - {}\n  description:\n", q(&key));
    for d in desc {
        s.push_str(&format!("    - {}\n", q(&d)));
    }
    s.push_str(&format!("  pr-link: {PR_LINK_PLACEHOLDER}\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_for_the_fixture_with_its_intervals_and_gate() {
        let mut c = crate::ab::markdown::tests::fixture();
        c.changes = vec!["set VLLM_ROCM_USE_AITER=1".into()];
        let y = render(&c);
        let expected = "\
- config-keys:
    - \"minimaxm3-fp8-mi300x-vllm\"
  description:
    - \"aiter vs before: set VLLM_ROCM_USE_AITER=1\"
    - \"isl=1024/osl=1024 tp=8: total tok/s/gpu +5.9% [+3.1%, +8.4%] to +17.5% [+12.0%, +23.0%] across conc 4-64 (significantly better at 2 of 2 points, 95% CI)\"
    - \"isl=1024/osl=1024 tp=8: median TPOT -12.9% [-16.0%, -9.0%] to -4.8% [-7.1%, -2.5%] across conc 4-64 (significantly better at 2 of 2 points, 95% CI)\"
    - \"gsm8k (5-shot, n=1319): strict-match 95.90% -> 95.83% (-0.07 points [-0.71, +0.55]), flexible-extract 96.00% -> 95.98% (-0.02 points [-1.01, +0.86]) (McNemar p 1.00 / 1.00); accuracy not resolved; greedy tokens identical on 91.0% of questions\"
    - \"enginebench gate FAIL (max regression 5%, max accuracy drop 1.00 points, 95% CIs): ISL/OSL 1024/1024 TP 8 conc 64: Median TTFT (ms) +11.1% [+6.0%, +17.0%]: the whole CI is a regression beyond 5%\"
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/XXX
";
        assert_eq!(y, expected);
        assert!(!y.contains('\t') && y.ends_with('\n'));
        // It is YAML: a list of one mapping with the three keys.
        let docs = yaml_rust2::YamlLoader::load_from_str(&y).unwrap();
        let entry = &docs[0][0];
        assert_eq!(entry["config-keys"][0].as_str(), Some("minimaxm3-fp8-mi300x-vllm"));
        assert_eq!(entry["description"].as_vec().unwrap().len(), 5);
        assert_eq!(entry["pr-link"].as_str(), Some(PR_LINK_PLACEHOLDER));
    }
}
