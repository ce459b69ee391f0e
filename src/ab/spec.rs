//! The speculative-decoding part of a comparison: acceptance rate and length
//! per matched point with their deltas (a draft-model or
//! `num_speculative_tokens` change is an A/B users run), and the lossless
//! check: under greedy decoding speculation must not change outputs, so the
//! perf requests' token ids of the two variants are compared request by
//! request (same seeds, so the same prompts).
//!
//! Token ids of perf requests are recorded only by `ab`, for its first repeat
//! (`requests.jsonl` `token_ids`); result folders from `run` have none and
//! get no lossless figure. When neither side speculates, the output
//! comparison is still made (a kernel or dtype change moves greedy tokens)
//! and printed under its own heading, not as speculative decoding.

use std::collections::BTreeMap;

use serde::Serialize;

use super::input::{Arm, Repeat, RequestRow};

/// Acceptance figures of one side at one point: means over its repeats of
/// the points' acceptance rate (0..1) and mean acceptance length (tokens per
/// draft step); `None` where that side did not speculate or never drafted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Acceptance {
    pub rate: Option<f64>,
    pub length: Option<f64>,
}

/// One matched point's acceptance figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecRow {
    pub isl: u32,
    pub osl: u32,
    pub tp: u32,
    pub conc: u32,
    pub baseline: Acceptance,
    pub candidate: Acceptance,
}

/// Greedy-output agreement over one point's perf requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointOutputs {
    pub isl: u32,
    pub osl: u32,
    pub tp: u32,
    pub conc: u32,
    /// Requests with token ids on both sides (paired by their index in the point).
    pub compared: usize,
    /// Of those, requests whose token ids differ.
    pub changed: usize,
    /// (request index, first differing token index, 0-based) of each changed
    /// request; the token index is the shorter length when one is a prefix.
    pub divergences: Vec<(usize, usize)>,
}

/// The speculative-decoding block of a comparison.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpecComparison {
    /// Points where either side speculated.
    pub rows: Vec<SpecRow>,
    /// Points with token ids on both sides.
    pub outputs: Vec<PointOutputs>,
}

impl SpecComparison {
    /// Either side speculated at some matched point.
    pub fn speculated(&self) -> bool {
        !self.rows.is_empty()
    }

    /// (changed, compared) over every point.
    pub fn outputs_total(&self) -> (usize, usize) {
        self.outputs.iter().fold((0, 0), |(c, n), p| (c + p.changed, n + p.compared))
    }
}

type Key = (u32, u32, u32, u32); // isl, osl, tp, conc

fn by_key(arm: &Arm) -> BTreeMap<Key, Vec<(&Repeat, usize)>> {
    let mut m: BTreeMap<Key, Vec<(&Repeat, usize)>> = BTreeMap::new();
    for r in &arm.repeats {
        for (pi, p) in r.job.points.iter().enumerate() {
            m.entry((p.isl, p.osl, r.tp(), p.conc)).or_default().push((r, pi));
        }
    }
    m
}

fn acceptance(list: &[(&Repeat, usize)]) -> Acceptance {
    let mean = |f: &dyn Fn(&crate::metrics::spec::SpecDecodeSummary) -> Option<f64>| {
        let v: Vec<f64> = list.iter().filter_map(|&(r, pi)| r.job.points[pi].spec_decode.as_ref().and_then(f)).collect();
        (!v.is_empty()).then(|| crate::metrics::stats::mean(&v))
    };
    Acceptance { rate: mean(&|s| s.acceptance_rate), length: mean(&|s| s.acceptance_length) }
}

/// The requests of the first repeat at this point that recorded token ids.
fn with_ids<'a>(list: &[(&'a Repeat, usize)]) -> Option<Vec<&'a RequestRow>> {
    list.iter().find_map(|&(r, pi)| {
        let rows: Vec<&RequestRow> = r.requests.iter().filter(|q| q.point == pi && !q.token_ids.is_empty()).collect();
        (!rows.is_empty()).then_some(rows)
    })
}

/// Compares outputs request by request: (compared, divergences).
pub fn output_agreement(base: &[&RequestRow], cand: &[&RequestRow]) -> (usize, Vec<(usize, usize)>) {
    let cand: BTreeMap<usize, &RequestRow> = cand.iter().map(|q| (q.request, *q)).collect();
    let mut compared = 0;
    let mut divergences = Vec::new();
    for b in base {
        let Some(c) = cand.get(&b.request) else { continue };
        compared += 1;
        if b.token_ids != c.token_ids {
            let first = b.token_ids.iter().zip(&c.token_ids).position(|(x, y)| x != y);
            divergences.push((b.request, first.unwrap_or(b.token_ids.len().min(c.token_ids.len()))));
        }
    }
    (compared, divergences)
}

/// The block for two arms; `None` when neither side speculated and no point
/// has token ids on both sides.
pub fn compare_spec(baseline: &Arm, candidate: &Arm) -> Option<SpecComparison> {
    let (base, cand) = (by_key(baseline), by_key(candidate));
    let mut out = SpecComparison::default();
    for (k, b_list) in &base {
        let Some(c_list) = cand.get(k) else { continue };
        let (b, c) = (acceptance(b_list), acceptance(c_list));
        let speculated = |l: &[(&Repeat, usize)]| l.iter().any(|&(r, pi)| r.job.points[pi].spec_decode.is_some());
        if speculated(b_list) || speculated(c_list) {
            out.rows.push(SpecRow { isl: k.0, osl: k.1, tp: k.2, conc: k.3, baseline: b, candidate: c });
        }
        if let (Some(bq), Some(cq)) = (with_ids(b_list), with_ids(c_list)) {
            let (compared, divergences) = output_agreement(&bq, &cq);
            out.outputs.push(PointOutputs {
                isl: k.0,
                osl: k.1,
                tp: k.2,
                conc: k.3,
                compared,
                changed: divergences.len(),
                divergences,
            });
        }
    }
    (!out.rows.is_empty() || !out.outputs.is_empty()).then_some(out)
}

fn pct_or_dash(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

fn len_or_dash(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn delta(b: Option<f64>, c: Option<f64>, scale: f64, unit: &str) -> String {
    match (b, c) {
        (Some(b), Some(c)) => format!("{:+.2}{unit}", (c - b) * scale),
        _ => "-".into(),
    }
}

/// "before → after (delta)" of the acceptance rate and of the acceptance
/// length, as both views print them.
fn changes(r: &SpecRow) -> (String, String) {
    let (b, c) = (&r.baseline, &r.candidate);
    (
        format!("{} → {} ({})", pct_or_dash(b.rate), pct_or_dash(c.rate), delta(b.rate, c.rate, 100.0, " points")),
        format!("{} → {} ({})", len_or_dash(b.length), len_or_dash(c.length), delta(b.length, c.length, 1.0, "")),
    )
}

/// One sentence on the lossless check, e.g. "Greedy outputs of the perf
/// requests: the candidate changed 0 of 20." plus where each diverged.
pub fn outputs_text(s: &SpecComparison) -> Option<String> {
    if s.outputs.is_empty() {
        return None;
    }
    let (changed, compared) = s.outputs_total();
    let mut t = format!("Greedy outputs of the perf requests (first repeat, same prompts): the candidate changed {changed} of {compared}");
    let where_: Vec<String> = s
        .outputs
        .iter()
        .flat_map(|p| {
            p.divergences.iter().map(move |(req, tok)| {
                format!("ISL/OSL {}/{} conc {} request {req} from token {tok}", p.isl, p.osl, p.conc)
            })
        })
        .take(10)
        .collect();
    if where_.is_empty() {
        t.push('.');
    } else {
        t.push_str(&format!(" ({}{}).", where_.join("; "), if changed > where_.len() { "; ..." } else { "" }));
        t.push_str(if s.speculated() {
            " Greedy speculative decoding is lossless in exact arithmetic; a divergence is either a vLLM bug or \
             floating-point nondeterminism (a verify step computes several positions in one batch, and a near-tie \
             between two tokens can flip)."
        } else {
            " Neither side speculates: a divergence comes from different arithmetic (a kernel, dtype or build \
             change) or floating-point nondeterminism flipping a near-tie between two tokens."
        });
    }
    Some(t)
}

/// The Markdown section: "Speculative decoding" (acceptance table and the
/// lossless sentence) when either side speculated, else "Greedy outputs of
/// the perf requests" with the agreement sentence alone.
pub fn markdown(s: &SpecComparison) -> String {
    let heading = if s.speculated() { "Speculative decoding" } else { "Greedy outputs of the perf requests" };
    let mut t = format!("### {heading}\n\n");
    if !s.rows.is_empty() {
        t.push_str(
            "Acceptance rate = accepted / draft tokens; acceptance length = 1 + accepted / drafts (vLLM's definitions).\n\n",
        );
        t.push_str("| ISL/OSL | TP | conc | acceptance rate before → after (delta) | acceptance length before → after (delta) |\n");
        t.push_str("|---|---:|---:|---:|---:|\n");
        for r in &s.rows {
            let (rate, length) = changes(r);
            t.push_str(&format!("| {}/{} | {} | {} | {rate} | {length} |\n", r.isl, r.osl, r.tp, r.conc));
        }
        t.push('\n');
    }
    if let Some(o) = outputs_text(s) {
        t.push_str(&o);
        t.push('\n');
    }
    t
}

/// Plain-text lines for the console view.
pub fn terminal(s: &SpecComparison) -> String {
    let mut t = String::new();
    for r in &s.rows {
        let (rate, length) = changes(r);
        t.push_str(&format!("spec decode {}/{} TP {} conc {}: acceptance rate {rate}, length {length}\n", r.isl, r.osl, r.tp, r.conc));
    }
    if let Some(o) = outputs_text(s) {
        t.push_str(&o);
        t.push('\n');
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(request: usize, ids: &[u32]) -> RequestRow {
        RequestRow {
            job: 0,
            point: 0,
            attempt: 0,
            input_tokens: 1,
            output_tokens: ids.len() as u32,
            ttft_ms: Some(1.0),
            tpot_ms: None,
            e2el_ms: Some(2.0),
            error: None,
            request,
            token_ids: ids.to_vec(),
        }
    }

    #[test]
    fn agreement_names_the_request_and_token() {
        let b = [row(0, &[1, 2, 3]), row(1, &[4, 5, 6]), row(2, &[7, 8])];
        let c = [row(0, &[1, 2, 3]), row(1, &[4, 9, 6]), row(2, &[7, 8, 0])];
        let (compared, div) = output_agreement(&b.iter().collect::<Vec<_>>(), &c.iter().collect::<Vec<_>>());
        assert_eq!(compared, 3);
        assert_eq!(div, vec![(1, 1), (2, 2)]);
        let s = SpecComparison {
            rows: vec![],
            outputs: vec![PointOutputs { isl: 64, osl: 16, tp: 1, conc: 2, compared, changed: 2, divergences: div }],
        };
        let text = outputs_text(&s).unwrap();
        assert!(text.contains("changed 2 of 3"), "{text}");
        assert!(text.contains("request 1 from token 1"), "{text}");
    }

    #[test]
    fn no_speculation_is_no_speculative_decoding_section() {
        let b = [row(0, &[1, 2, 3]), row(1, &[4, 5])];
        let c = [row(0, &[1, 2, 3]), row(1, &[4, 6])];
        let (compared, div) = output_agreement(&b.iter().collect::<Vec<_>>(), &c.iter().collect::<Vec<_>>());
        let s = SpecComparison {
            rows: vec![],
            outputs: vec![PointOutputs { isl: 64, osl: 16, tp: 1, conc: 2, compared, changed: 1, divergences: div }],
        };
        assert!(!s.speculated());
        let md = markdown(&s);
        assert!(md.starts_with("### Greedy outputs of the perf requests\n"), "{md}");
        assert!(!md.contains("peculative"), "{md}");
        assert!(md.contains("changed 1 of 2") && md.contains("Neither side speculates"), "{md}");
        assert!(!terminal(&s).contains("peculative"), "{}", terminal(&s));
    }

    #[test]
    fn identical_outputs_say_zero() {
        let b = [row(0, &[1, 2]), row(1, &[3])];
        let (compared, div) = output_agreement(&b.iter().collect::<Vec<_>>(), &b.iter().collect::<Vec<_>>());
        let s = SpecComparison {
            rows: vec![SpecRow {
                isl: 64,
                osl: 16,
                tp: 1,
                conc: 2,
                baseline: Acceptance::default(),
                candidate: Acceptance { rate: Some(0.25), length: Some(1.75) },
            }],
            outputs: vec![PointOutputs { isl: 64, osl: 16, tp: 1, conc: 2, compared, changed: 0, divergences: div }],
        };
        let md = markdown(&s);
        assert!(md.starts_with("### Speculative decoding\n"), "{md}");
        assert!(md.contains("changed 0 of 2."), "{md}");
        assert!(md.contains("- → 25.0% (-)"), "{md}");
        assert!(md.contains("- → 1.75 (-)"), "{md}");
    }
}
