//! Per-session figures of a session-workload point (trace replay,
//! conversations), from the request records and what the replay said of
//! each (`TurnInfo`: session, stream, turn, phase).
//!
//! Only measured requests count. A session's duration runs from its first
//! measured request's send to its last measured token. TTFT is split into
//! the first turn of a session's root stream (its prompt is new to the
//! cache, bar the cache-bust marker) and every later turn (which resends a
//! growing context the prefix cache may hold): the gap between the two is
//! what prefix caching buys a multi-turn workload.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{mean, percentile_sorted};
use crate::protocol::{ReplayPhase, RequestRecord, TurnInfo};

/// Mean, median and 90th percentile of one figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
}

impl Dist {
    /// `None` for no values.
    fn of(values: &mut [f64]) -> Option<Dist> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        Some(Dist { mean: mean(values), median: percentile_sorted(values, 50.0), p90: percentile_sorted(values, 90.0) })
    }
}

/// The sessions of one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Session trees with at least one measured request.
    pub sessions: u32,
    /// Measured requests, and of them subagent ones.
    pub measured_requests: u32,
    pub subagent_requests: u32,
    /// Primers and warm-up requests (run before the measured phase).
    pub warmup_requests: u32,
    /// Measured requests per session (mean).
    pub requests_per_session: f64,
    /// TTFT of completed measured first turns of a root stream, and of
    /// every later turn, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_turn_ttft_ms: Option<Dist>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub later_turn_ttft_ms: Option<Dist>,
    /// Per session: first measured send to last measured token, s; absent
    /// when every session is one request (a timed trace without session
    /// keys), whose span would only repeat its E2EL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_duration_s: Option<Dist>,
    /// What stopped the replay: `max_requests` (the measured-request budget,
    /// `num_prompts`), `duration` (`duration_s`), `exhausted` (the end of
    /// the file); absent when Ctrl-C stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<crate::protocol::StopReason>,
    /// Requests (turns) the file holds in all: with the requests sent, how
    /// much of the file the point replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_requests: Option<u32>,
}

/// Summarises the sessions of a point; `turns` is parallel to `records`.
pub fn summarize_sessions(records: &[RequestRecord], turns: &[TurnInfo]) -> SessionSummary {
    let measured = |t: &TurnInfo| t.phase == ReplayPhase::Measured;
    let mut first = Vec::new();
    let mut later = Vec::new();
    // session -> (first send, last token)
    let mut spans: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
    for (r, t) in records.iter().zip(turns).filter(|(_, t)| measured(t)) {
        *counts.entry(t.session).or_default() += 1;
        let span = spans.entry(t.session).or_insert((f64::INFINITY, f64::NEG_INFINITY));
        span.0 = span.0.min(r.send_s);
        if let Some(last) = r.last_token_s {
            span.1 = span.1.max(last);
        }
        if let (true, Some(ttft)) = (r.ok(), r.ttft_s()) {
            if t.stream == 0 && t.turn == 0 { first.push(ttft * 1000.0) } else { later.push(ttft * 1000.0) }
        }
    }
    // One-request sessions have no span of their own (it is the request's E2EL).
    let multi_request = counts.values().any(|&n| n > 1);
    let mut durations: Vec<f64> =
        if multi_request { spans.values().filter(|(a, b)| b >= a).map(|(a, b)| b - a).collect() } else { Vec::new() };
    let measured_requests = turns.iter().filter(|t| measured(t)).count() as u32;
    SessionSummary {
        sessions: counts.len() as u32,
        measured_requests,
        subagent_requests: turns.iter().filter(|t| measured(t) && t.is_subagent()).count() as u32,
        warmup_requests: turns.len() as u32 - measured_requests,
        requests_per_session: if counts.is_empty() { 0.0 } else { f64::from(measured_requests) / counts.len() as f64 },
        first_turn_ttft_ms: Dist::of(&mut first),
        later_turn_ttft_ms: Dist::of(&mut later),
        session_duration_s: Dist::of(&mut durations),
        stopped_by: None,
        file_requests: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(session: u32, stream: u32, turn: u32, phase: ReplayPhase) -> TurnInfo {
        TurnInfo {
            trace: 0,
            session,
            lane: 0,
            stream,
            turn,
            phase,
            max_tokens: 2,
            blocks: 1,
            hit_blocks: 0,
            theoretical_hit_tokens: 0,
        }
    }

    fn record(send: f64, first: f64, last: f64) -> RequestRecord {
        let mut r = RequestRecord { send_s: send, ..Default::default() };
        r.on_tokens(first, 1);
        r.on_tokens(last, 1);
        r
    }

    #[test]
    fn first_and_later_turns_and_session_spans() {
        let records = [record(0.0, 0.5, 0.6), record(1.0, 1.4, 1.5), record(1.0, 1.1, 1.2), record(2.0, 2.05, 2.5), record(3.0, 3.02, 3.1)];
        let turns = [
            turn(0, 0, 3, ReplayPhase::Warmup),
            turn(0, 0, 0, ReplayPhase::Measured),
            turn(1, 1, 0, ReplayPhase::Measured),
            turn(0, 0, 1, ReplayPhase::Measured),
            turn(1, 0, 2, ReplayPhase::Measured),
        ];
        let s = summarize_sessions(&records, &turns);
        assert_eq!((s.sessions, s.measured_requests, s.subagent_requests, s.warmup_requests), (2, 4, 1, 1));
        assert_eq!(s.requests_per_session, 2.0);
        let first = s.first_turn_ttft_ms.unwrap();
        assert!((first.mean - 400.0).abs() < 1e-9, "only the root stream's turn 0: {first:?}");
        let later = s.later_turn_ttft_ms.unwrap();
        assert!((later.median - 50.0).abs() < 1e-9, "{later:?}");
        let d = s.session_duration_s.unwrap();
        // Session 0: 1.0 -> 2.5; session 1: 1.0 -> 3.1.
        assert!((d.mean - (1.5 + 2.1) / 2.0).abs() < 1e-9, "{d:?}");
        // One request per session (a timed trace without keys): no session span.
        let single = summarize_sessions(&records[1..3], &[turn(0, 0, 0, ReplayPhase::Measured), turn(1, 0, 0, ReplayPhase::Measured)]);
        assert_eq!((single.sessions, single.session_duration_s), (2, None));
        let empty = summarize_sessions(&[], &[]);
        assert_eq!((empty.sessions, empty.first_turn_ttft_ms), (0, None));
    }
}
