//! A perf-changelog entry in InferenceX's `perf-changelog.yaml` format, ready
//! to paste into a PR: `config-keys` (list), `description` (list of lines),
//! `pr-link` (InferenceX's `ChangelogEntry` in `utils/matrix_logic/validation.py`
//! requires these three; `utils/validate_perf_changelog.py` accepts the
//! `.../pull/XXX` placeholder on PR runs). The description says what changed
//! (engine flags and environment), the measured uplift range per ISL/OSL and
//! TP, and the accuracy line.

use std::collections::BTreeMap;

use super::compare::{Comparison, Metric};
use super::numbers::{p_text, pct};
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
            let lo = figs.iter().map(|f| f.delta).fold(f64::INFINITY, f64::min);
            let hi = figs.iter().map(|f| f.delta).fold(f64::NEG_INFINITY, f64::max);
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
            let span = if figs.len() == 1 { pct(lo) } else { format!("{} to {}", pct(lo), pct(hi)) };
            format!("isl={isl}/osl={osl} tp={tp}: {name} {span} across {conc} ({sig}, 95% CI)")
        })
        .collect()
}

/// The changelog entry (YAML, ending with a newline, no tabs).
pub fn render(c: &Comparison) -> String {
    let key = c.context.config_key.clone().unwrap_or_else(|| c.context.recipe.name.clone());
    let mut desc = Vec::new();
    let changes = if c.changes.is_empty() { "no engine flag or env difference".to_string() } else { c.changes.join("; ") };
    desc.push(format!("{} vs {}: {changes}", c.candidate_label, c.baseline_label));
    desc.extend(range_line(c, Metric::TputPerGpu, "total tok/s/gpu"));
    desc.extend(range_line(c, Metric::MedianTpot, "median TPOT"));
    if let Some(a) = &c.accuracy {
        let p = |m: &super::compare::PairedMetric| m.mcnemar.map_or("-".to_string(), |t| p_text(t.p_value));
        let mut line = format!(
            "{} ({}-shot, n={}): strict-match {:.2}% -> {:.2}%, flexible-extract {:.2}% -> {:.2}% (McNemar p {} / {}); {}",
            a.task,
            a.num_fewshot,
            a.candidate.n,
            a.strict.baseline * 100.0,
            a.strict.candidate * 100.0,
            a.flexible.baseline * 100.0,
            a.flexible.candidate * 100.0,
            p(&a.strict),
            p(&a.flexible),
            if a.held { "accuracy held" } else { "accuracy did NOT hold" }
        );
        if let Some(g) = a.agreement {
            line.push_str(&format!("; greedy tokens identical on {:.1}% of questions", g.fraction * 100.0));
        }
        desc.push(line);
    }
    desc.extend(c.kernels.iter().map(|d| d.changelog_line()));
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
    fn entry_for_the_fixture() {
        let mut c = crate::ab::markdown::tests::fixture();
        c.changes = vec!["set VLLM_ROCM_USE_AITER=1".into()];
        let y = render(&c);
        let expected = "\
- config-keys:
    - \"minimaxm3-fp8-mi300x-vllm\"
  description:
    - \"aiter vs before: set VLLM_ROCM_USE_AITER=1\"
    - \"isl=1024/osl=1024 tp=8: total tok/s/gpu +5.9% to +17.5% across conc 4-64 (significantly better at 2 of 2 points, 95% CI)\"
    - \"isl=1024/osl=1024 tp=8: median TPOT -12.9% to -4.8% across conc 4-64 (significantly better at 2 of 2 points, 95% CI)\"
    - \"gsm8k (5-shot, n=1319): strict-match 95.90% -> 95.83%, flexible-extract 96.00% -> 95.98% (McNemar p 1.00 / 1.00); accuracy held; greedy tokens identical on 91.0% of questions\"
  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/XXX
";
        assert_eq!(y, expected);
        assert!(!y.contains('\t') && y.ends_with('\n'));
        // It is YAML: a list of one mapping with the three keys.
        let docs = yaml_rust2::YamlLoader::load_from_str(&y).unwrap();
        let entry = &docs[0][0];
        assert_eq!(entry["config-keys"][0].as_str(), Some("minimaxm3-fp8-mi300x-vllm"));
        assert_eq!(entry["description"].as_vec().unwrap().len(), 4);
        assert_eq!(entry["pr-link"].as_str(), Some(PR_LINK_PLACEHOLDER));
    }
}
