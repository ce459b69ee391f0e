//! The prefix-cache part of a comparison: per matched point, each side's
//! prefix-cache hit rate (cached / prompt tokens, vLLM's
//! `num_cached_tokens`), the theoretical rate of trace workloads, and the
//! median TTFT of each side, so a change aimed at long, cache-heavy sessions
//! (fp8 KV cache, cross-layer index sharing, KV offload) shows what it did
//! to the cache beside what it did to latency. Only points where a side's
//! engine hit the cache (or the workload is a session replay) are listed:
//! random prompts without a shared prefix never hit it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::input::{Arm, Repeat};
use crate::metrics::stats::mean;

/// One side at one point: means over its repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheSide {
    /// cached / prompt tokens, 0..1.
    pub hit_rate: Option<f64>,
    /// An infinite cache's rate (trace workloads).
    pub theoretical_hit_rate: Option<f64>,
    /// Median TTFT, ms.
    pub median_ttft_ms: f64,
}

/// One matched point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheRow {
    /// `ISL/OSL` or the session workload's name.
    pub shape: String,
    pub tp: u32,
    pub conc: u32,
    pub baseline: CacheSide,
    pub candidate: CacheSide,
}

type Key = (u32, u32, u32, u32); // isl, osl, tp, conc

fn side(list: &[(&Repeat, usize)]) -> CacheSide {
    let points: Vec<_> = list.iter().map(|&(r, pi)| &r.job.points[pi]).collect();
    let avg = |v: Vec<f64>| (!v.is_empty()).then(|| mean(&v));
    CacheSide {
        hit_rate: avg(points.iter().filter_map(|p| p.prefix_cache.as_ref()?.hit_rate).collect()),
        theoretical_hit_rate: avg(points.iter().filter_map(|p| p.prefix_cache.as_ref()?.theoretical_token_hit_rate).collect()),
        median_ttft_ms: mean(&points.iter().map(|p| p.figures.ms("median_ttft_ms")).collect::<Vec<_>>()),
    }
}

fn by_key(arm: &Arm) -> BTreeMap<Key, Vec<(&Repeat, usize)>> {
    let mut m: BTreeMap<Key, Vec<(&Repeat, usize)>> = BTreeMap::new();
    for r in &arm.repeats {
        for (pi, p) in r.job.points.iter().enumerate() {
            m.entry((p.isl, p.osl, r.tp(), p.conc)).or_default().push((r, pi));
        }
    }
    m
}

/// The rows of points where the cache mattered; empty when it never did.
pub fn compare_cache(baseline: &Arm, candidate: &Arm) -> Vec<CacheRow> {
    let (base, cand) = (by_key(baseline), by_key(candidate));
    let mut rows = Vec::new();
    for (k, b_list) in &base {
        let Some(c_list) = cand.get(k) else { continue };
        let (b, c) = (side(b_list), side(c_list));
        let sessions = b_list.iter().chain(c_list).any(|&(r, pi)| r.job.points[pi].workload.is_sessions());
        let hit = |s: &CacheSide| s.hit_rate.is_some_and(|h| h > 0.0);
        if sessions || hit(&b) || hit(&c) {
            let shape = b_list[0].0.job.points[b_list[0].1].shape();
            rows.push(CacheRow { shape, tp: k.2, conc: k.3, baseline: b, candidate: c });
        }
    }
    rows
}

fn rate(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// "before → after (delta)" of the hit rate and of the median TTFT.
fn changes(r: &CacheRow) -> (String, String) {
    let (b, c) = (&r.baseline, &r.candidate);
    let hit_delta = match (b.hit_rate, c.hit_rate) {
        (Some(x), Some(y)) => format!("{:+.1} points", (y - x) * 100.0),
        _ => "-".into(),
    };
    let ttft_delta = if b.median_ttft_ms > 0.0 { format!("{:+.1}%", (c.median_ttft_ms / b.median_ttft_ms - 1.0) * 100.0) } else { "-".into() };
    (
        format!("{} → {} ({hit_delta})", rate(b.hit_rate), rate(c.hit_rate)),
        format!("{:.1} → {:.1} ms ({ttft_delta})", b.median_ttft_ms, c.median_ttft_ms),
    )
}

/// The Markdown section ("Prefix cache").
pub fn markdown(rows: &[CacheRow]) -> String {
    let mut t = String::from(
        "### Prefix cache\n\nHit rate = prompt tokens served from the prefix cache / prompt tokens (vLLM's num_cached_tokens); theoretical = an infinite cache's hit tokens / prompt tokens (trace hash ids; the blocks figure is in result.json).\n\n\
         | point | TP | conc | hit rate before → after (delta) | theoretical | median TTFT before → after |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (hit, ttft) = changes(r);
        let theo = rate(r.baseline.theoretical_hit_rate.or(r.candidate.theoretical_hit_rate));
        t.push_str(&format!("| {} | {} | {} | {hit} | {theo} | {ttft} |\n", r.shape, r.tp, r.conc));
    }
    t
}

/// Plain-text lines for the console view.
pub fn terminal(rows: &[CacheRow]) -> String {
    rows.iter()
        .map(|r| {
            let (hit, ttft) = changes(r);
            format!("prefix cache {} TP {} conc {}: hit rate {hit}, median TTFT {ttft}\n", r.shape, r.tp, r.conc)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_render_deltas() {
        let row = CacheRow {
            shape: "trace".into(),
            tp: 1,
            conc: 4,
            baseline: CacheSide { hit_rate: Some(0.5), theoretical_hit_rate: Some(0.6), median_ttft_ms: 200.0 },
            candidate: CacheSide { hit_rate: Some(0.55), theoretical_hit_rate: Some(0.6), median_ttft_ms: 150.0 },
        };
        let md = markdown(std::slice::from_ref(&row));
        assert!(md.contains("| trace | 1 | 4 | 50.0% → 55.0% (+5.0 points) | 60.0% | 200.0 → 150.0 ms (-25.0%) |"), "{md}");
        assert!(terminal(&[row]).contains("prefix cache trace TP 1 conc 4: hit rate 50.0% → 55.0%"));
    }
}
