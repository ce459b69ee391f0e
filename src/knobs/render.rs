//! The knob report in words: a block for `recipe show` / `recipe check`, one
//! line for `run`'s header, and the "What took effect" section of `ab.md`.

use super::diff::Difference;
use super::verdict::{Effect, verdicts};
use super::quick_reduce::quick_reduce_line;
use crate::protocol::knobs::KnobReport;

/// The report as indented lines, one per knob (`[read] VLLM_X=1: why`),
/// then the quick all-reduce line and the notes. `only_doubtful`: only the
/// knobs with no effect or an unknown one, without the unknown and removed
/// `VLLM_*` names (`recipe check` names those itself).
pub fn block(report: &KnobReport, indent: &str, only_doubtful: bool) -> String {
    let mut out = String::new();
    if let Some(e) = &report.config_error {
        out.push_str(&format!("{indent}note: vLLM could not build this config here, so flags are not judged: {e}\n"));
    }
    let checked_elsewhere: Vec<String> = report
        .env
        .iter()
        .filter(|e| only_doubtful && (e.status == "unknown" || e.status == "removed"))
        .map(|e| format!("{}={}", e.name, e.value))
        .collect();
    // Flags left unjudged for want of a config: the note above says why, once.
    let unjudged = |v: &super::verdict::Verdict| report.config_error.is_some() && v.why.ends_with("not judged: vLLM could not build this config here");
    for v in verdicts(report) {
        if only_doubtful && (v.effect == Effect::Read || checked_elsewhere.contains(&v.knob) || unjudged(&v)) {
            continue;
        }
        out.push_str(&format!("{indent}[{}] {}: {}\n", v.effect.tag(), v.knob, v.why));
    }
    if let Some(q) = &report.quick_reduce {
        out.push_str(&format!("{indent}quick all-reduce: {}\n", quick_reduce_line(q)));
        for n in &q.notes {
            out.push_str(&format!("{indent}  ({n})\n"));
        }
    }
    for n in &report.notes {
        out.push_str(&format!("{indent}note: {n}\n"));
    }
    out
}

/// One line for `run`'s header: counts per effect and the no-ops by name,
/// e.g. `knobs: 6 read, 2 with no effect (VLLM_CPU_KVCACHE_SPCE, hf-override foo), 1 unknown`.
pub fn summary(report: &KnobReport) -> String {
    let all = verdicts(report);
    let count = |e: Effect| all.iter().filter(|v| v.effect == e).count();
    let noops: Vec<String> = all
        .iter()
        .filter(|v| v.effect == Effect::NoOp)
        .map(|v| v.knob.split('=').next().unwrap_or(&v.knob).to_string())
        .collect();
    let mut parts = vec![format!("{} read", count(Effect::Read))];
    if !noops.is_empty() {
        parts.push(format!("{} with no effect ({})", noops.len(), noops.join(", ")));
    }
    if count(Effect::Unknown) > 0 {
        parts.push(format!("{} unknown", count(Effect::Unknown)));
    }
    let mut line = format!("knobs: {}", parts.join(", "));
    if let Some(q) = &report.quick_reduce {
        line.push_str(&format!("; quick all-reduce: {}", quick_reduce_line(q)));
    }
    line
}

/// The "What took effect" section of `ab.md`: each difference between the
/// arms with its effect, and the verdict in one sentence.
pub fn markdown(diffs: &[Difference], baseline: &str, candidate: &str) -> String {
    let mut out = String::from("## What took effect\n\n");
    if diffs.is_empty() {
        out.push_str(&format!("`{baseline}` and `{candidate}` build the same engine config here: nothing differs.\n"));
        return out;
    }
    let verdict = match super::diff::overall(diffs) {
        Effect::Read => "at least one difference takes effect in this vLLM build.",
        Effect::Unknown => "no difference is known to take effect; some cannot be judged here.",
        Effect::NoOp => "every difference is a no-op in this vLLM build: this comparison measures noise.",
    };
    out.push_str(&format!("`{baseline}` -> `{candidate}`: {verdict}\n\n| difference | effect | why |\n|---|---|---|\n"));
    for d in diffs {
        out.push_str(&format!("| `{}` | {} | {} |\n", d.what.replace('|', "\\|"), d.effect.tag(), d.why.replace('|', "\\|")));
    }
    out
}

/// The no-op refusal of `ab`, one screen: every difference and why.
pub fn refusal(diffs: &[Difference], baseline: &str, candidate: &str) -> String {
    let mut out = if diffs.is_empty() {
        format!("`{candidate}` builds the same engine as `{baseline}` in this vLLM: nothing differs.")
    } else {
        format!("every difference between `{baseline}` and `{candidate}` is a no-op in this vLLM:")
    };
    for d in diffs {
        out.push_str(&format!("\n  {}: {}", d.what, d.why));
    }
    out.push_str(
        "\nan A/B of these measures noise only; nothing was run. To run it anyway: --allow-noop (or `expect_noop = true` in the variant, for a deliberate null comparison; `--aa` for a noise floor)",
    );
    out
}
