//! Tests of the session replays ([`LanesReplay`], `TimedReplay`) on the
//! written fixtures (tests/fixtures/traces/): on the virtual clock of
//! `testkit::simulate` for exact timing, and through the real driver loop
//! with the fake engine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::driver::{RequestIds, admission_budget, drive_schedule};
use super::lanes::LanesReplay;
use super::replay::SessionReplay;
use super::replay_config::{ReplayConfig, StopReason};
use super::sessions::{Arrival, Content, SessionSet, TurnRecord, common_prefix};
use super::synth::MARKER_TOKENS;
use super::testkit::{OneTokenPerStep, SimAdmission, SimRequest, simulate, simulate_admitting};
use super::trace::{load_agentx, load_timed};
use crate::error::UsageError;
use crate::protocol::{ReplayPhase, TurnInfo};

const M: usize = MARKER_TOKENS as usize;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces").join(name)
}

fn agentx() -> SessionSet {
    load_agentx(&fixture("agentx.jsonl"), 16, true).unwrap().0
}

/// The fixture's trace `id` alone.
fn only(id: &str) -> SessionSet {
    let text = std::fs::read_to_string(fixture("agentx.jsonl")).unwrap();
    let line = text.lines().find(|l| l.contains(&format!("\"id\":\"{id}\""))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.jsonl");
    std::fs::write(&path, line).unwrap();
    load_agentx(&path, 16, true).unwrap().0
}

fn allowed() -> Vec<u32> {
    (1000..30000).collect()
}

/// From turn 0, no warm-up, no caps, the pool once, markers on.
fn base(lanes: usize) -> ReplayConfig {
    ReplayConfig {
        lanes,
        seed: 7,
        run_id: 0,
        start_min_ratio: 0.0,
        start_max_ratio: 0.0,
        warmup_requests_per_lane: 0,
        tree_idle_cap_s: None,
        system_idle_cap_s: None,
        duration_s: None,
        max_requests: None,
        time_scale: 1.0,
        cache_bust: true,
        ignore_eos: true,
    }
}

struct Run {
    reqs: Vec<SimRequest>,
    turns: Vec<TurnInfo>,
    start: Option<f64>,
    stop: Option<StopReason>,
}

fn run_with(set: &SessionSet, cfg: ReplayConfig, step_s: f64, fails: &dyn Fn(usize) -> bool) -> Run {
    let allowed = allowed();
    let mut replay = LanesReplay::new(set, &allowed, cfg).unwrap();
    let reqs = simulate(&mut replay, step_s, fails);
    assert_eq!(reqs.len(), replay.turns().len(), "one TurnInfo per request");
    Run { start: replay.measure_start_s(), stop: replay.stop_reason(), turns: replay.into_turns(), reqs }
}

fn run(set: &SessionSet, cfg: ReplayConfig, step_s: f64) -> Run {
    run_with(set, cfg, step_s, &|_| false)
}

impl Run {
    /// Index of (session, stream, turn).
    fn find(&self, session: u32, stream: u32, turn: u32) -> usize {
        self.turns
            .iter()
            .position(|t| (t.session, t.stream, t.turn) == (session, stream, turn))
            .unwrap_or_else(|| panic!("no request ({session}, {stream}, {turn})"))
    }

    fn end(&self, i: usize) -> f64 {
        self.reqs[i].end_s.expect("every request finished")
    }

    fn sessions(&self) -> BTreeSet<u32> {
        self.turns.iter().map(|t| t.session).collect()
    }

    /// [first send, last end] of each session.
    fn spans(&self) -> BTreeMap<u32, (u32, f64, f64)> {
        let mut spans: BTreeMap<u32, (u32, f64, f64)> = BTreeMap::new();
        for (i, t) in self.turns.iter().enumerate() {
            let e = spans.entry(t.session).or_insert((t.lane, f64::INFINITY, f64::NEG_INFINITY));
            e.1 = e.1.min(self.reqs[i].send_s);
            e.2 = e.2.max(self.end(i));
        }
        spans
    }
}

/// Each lane holds one tree at a time, and there are at most `lanes` lanes.
fn assert_lanes_hold_one_tree(run: &Run, lanes: u32) {
    let mut by_lane: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for (lane, a, b) in run.spans().into_values() {
        assert!(lane < lanes, "lane {lane} of {lanes}");
        by_lane.entry(lane).or_default().push((a, b));
    }
    for (lane, mut spans) in by_lane {
        spans.sort_by(|x, y| x.0.total_cmp(&y.0));
        for w in spans.windows(2) {
            assert!(w[1].0 >= w[0].1, "lane {lane}: a tree started at {} before the last one ended at {}", w[1].0, w[0].1);
        }
    }
}

/// Every measured request of trees played from turn 0 (no idle caps) is
/// sent at its earliest allowed time, at most a step late: end-to-start
/// delays, spawn delays, and join turns after their subagents' end + gap.
fn assert_tree_timing(set: &SessionSet, run: &Run, scale: f64, step_s: f64) {
    for (i, t) in run.turns.iter().enumerate() {
        let streams = set.session_streams(t.trace as usize);
        let def = streams[t.stream as usize];
        let turns = set.stream_turns(&def);
        let earliest = if t.turn > 0 {
            let mut e = run.end(run.find(t.session, t.stream, t.turn - 1)) + turns[t.turn as usize].delay_s * scale;
            if t.stream == 0 {
                for (c, cdef) in streams.iter().enumerate().skip(1) {
                    if let Some(j) = cdef.join.filter(|j| j.turn == t.turn) {
                        let last = run.find(t.session, c as u32, cdef.n_turns - 1);
                        e = e.max(run.end(last) + j.gap_s * scale);
                    }
                }
            }
            e
        } else if t.stream > 0 {
            let sp = def.spawn.unwrap();
            run.end(run.find(t.session, 0, sp.anchor)) + sp.delay_s * scale
        } else {
            continue;
        };
        let sent = run.reqs[i].send_s;
        assert!(
            sent >= earliest - 1e-9 && sent <= earliest + step_s + 1e-9,
            "{:?}: sent at {sent}, earliest allowed {earliest}",
            (t.trace, t.stream, t.turn)
        );
    }
}

#[test]
fn one_pass_plays_every_turn_once_with_end_to_start_delays_spawns_and_joins() {
    let set = agentx();
    let step = 0.01;
    let run = run(&set, base(2), step);
    assert_eq!(run.reqs.len(), 17);
    assert_eq!(run.stop, Some(StopReason::Exhausted));
    assert_eq!(run.start, Some(0.0));
    let keys: BTreeSet<(u32, u32, u32)> = run.turns.iter().map(|t| (t.trace, t.stream, t.turn)).collect();
    assert_eq!(keys.len(), 17, "no turn twice");
    assert_eq!(run.sessions().len(), 4);
    for (i, t) in run.turns.iter().enumerate() {
        let def = set.session_streams(t.trace as usize)[t.stream as usize];
        let turn = set.stream_turns(&def)[t.turn as usize];
        assert_eq!(t.phase, ReplayPhase::Measured);
        assert_eq!(run.reqs[i].max_tokens, turn.max_tokens);
        assert_eq!(t.max_tokens, turn.max_tokens);
        assert_eq!(run.reqs[i].prompt.len(), turn.input as usize + M);
    }
    assert_lanes_hold_one_tree(&run, 2);
    assert_tree_timing(&set, &run, 1.0, step);
    // With think times scaled to 0 the join gates bind: alpha's root reaches
    // turn 3 after 5 steps, its subagent needs 7.
    let fast = run_fn(&set, ReplayConfig { time_scale: 0.0, ..base(2) });
    assert_tree_timing(&set, &fast, 0.0, step);
    let a = fast.turns.iter().find(|t| t.trace == 0).unwrap().session;
    assert!(fast.reqs[fast.find(a, 0, 3)].send_s > fast.end(fast.find(a, 0, 2)) + step / 2.0, "the join waited");
    // alpha's join turn (root 3) came after its subagent and its gap.
    let alpha = run.turns.iter().find(|t| t.trace == 0).unwrap().session;
    let join = run.find(alpha, 0, 3);
    let child_end = run.end(run.find(alpha, 1, 1));
    assert!(run.reqs[join].send_s >= child_end + 1.0 - 1e-9);
    // The background subagent kept its lane: the lane's next tree started after it.
    let bg_end = run.end(run.find(alpha, 2, 0));
    let lane = run.turns[join].lane;
    for (s, (l, start, _)) in run.spans() {
        if l == lane && s != alpha && start > run.reqs[join].send_s {
            assert!(start >= bg_end);
        }
    }
}

#[test]
fn parallel_chains_run_beside_the_main_agent() {
    // fanout (tests/fixtures/traces/agentx_chains.jsonl): root turn 1 asks
    // for 300 tokens (3 s at 10 ms a step); the worker chain forked at t 3
    // starts 2 s after root turn 0 ends, while root turn 1 is in flight.
    let path = fixture("agentx_chains.jsonl");
    let step = 0.01;
    let split = load_agentx(&path, 16, true).unwrap().0;
    let par = run(&split, base(1), step);
    assert_eq!(par.reqs.len(), 10);
    assert_tree_timing(&split, &par, 1.0, step);
    let (r1, w0) = (par.find(0, 0, 1), par.find(0, 3, 0));
    assert!(par.reqs[w0].send_s < par.end(r1), "the worker runs beside root turn 1");
    // The subagent's second chain is in flight beside its first.
    let (s0, s1) = (par.find(0, 1, 0), par.find(0, 2, 0));
    assert!((par.reqs[s1].send_s - par.reqs[s0].send_s - 0.5).abs() <= step + 1e-9);
    // One serial stream: the same request waits for root turn 1.
    let serial = load_agentx(&path, 16, false).unwrap().0;
    let one = run(&serial, base(1), step);
    assert_eq!(one.reqs.len(), 10);
    assert!(one.reqs[one.find(0, 0, 2)].send_s >= one.end(one.find(0, 0, 1)));
    let last_end = |r: &Run| (0..r.reqs.len()).map(|i| r.end(i)).fold(0.0, f64::max);
    assert!(last_end(&par) < last_end(&one), "the tree ends sooner with its agents in parallel");
}

#[test]
fn mid_trace_start_sends_primers_then_warmup_then_hands_off() {
    // alpha (span 0..14) entered at t* = 7: root turn 2 (t=8) and subagent
    // turn 1 (t=10) are next, so root turn 1 and subagent turn 0 are the
    // primers; the background subagent (t=7) spawns when the root primer ends.
    let set = only("alpha");
    let cfg = ReplayConfig { start_min_ratio: 0.5, start_max_ratio: 0.5, warmup_requests_per_lane: 2, ..base(1) };
    let run = run(&set, cfg, 0.01);
    let got: Vec<(u32, u32, ReplayPhase, u32)> =
        run.turns.iter().map(|t| (t.stream, t.turn, t.phase, t.max_tokens)).collect();
    use ReplayPhase::*;
    assert_eq!(
        got,
        vec![(0, 1, Primer, 1), (1, 0, Primer, 1), (2, 0, Warmup, 1), (0, 2, Warmup, 1), (1, 1, Measured, 3), (0, 3, Measured, 8)]
    );
    let sends: Vec<f64> = run.reqs.iter().map(|r| r.send_s).collect();
    let want = [0.0, 0.0, 0.01, 0.01, 0.02, 1.05];
    for (s, w) in sends.iter().zip(want) {
        assert!((s - w).abs() < 1e-9, "sends {sends:?}, want {want:?}");
    }
    // Primers carry their full prefix; the handoff fires the earliest
    // pending request at once; the join waits for the subagent's end + 1 s.
    assert_eq!(run.reqs[0].prompt.len(), 70 + M);
    assert_eq!(run.start, Some(0.02));
    assert!((run.reqs[5].send_s - (run.end(4) + 1.0)).abs() < 1e-9);
    assert_eq!(run.stop, Some(StopReason::Exhausted));
    // Entered at its very end (t* = 14), alpha primes root turn 2 and sends its last turn.
    let cfg = ReplayConfig { start_min_ratio: 1.0, start_max_ratio: 1.0, warmup_requests_per_lane: 2, ..base(1) };
    let end = run_fn(&set, cfg);
    let got: Vec<(u32, u32, ReplayPhase)> = end.turns.iter().map(|t| (t.stream, t.turn, t.phase)).collect();
    assert_eq!(got, vec![(0, 2, Primer), (0, 3, Warmup)]);
    assert_eq!(end.stop, Some(StopReason::Exhausted));
}

#[test]
fn warmup_quota_phases_and_consecutive_turns_per_lane() {
    let set = agentx();
    let cfg = ReplayConfig {
        start_min_ratio: 0.25,
        start_max_ratio: 0.75,
        warmup_requests_per_lane: 2,
        max_requests: Some(12),
        ..base(3)
    };
    let run = run(&set, cfg, 0.01);
    assert_eq!(run.stop, Some(StopReason::MaxRequests));
    let measured = run.turns.iter().filter(|t| t.phase == ReplayPhase::Measured).count();
    assert_eq!(measured, 12);
    let start = run.start.unwrap();
    let first_measured = run.turns.iter().position(|t| t.phase == ReplayPhase::Measured).unwrap();
    assert_eq!(run.reqs[first_measured].send_s, start, "the earliest pending request fires at the handoff");
    for lane in 0..3 {
        let phases: Vec<ReplayPhase> = run.turns.iter().filter(|t| t.lane == lane).map(|t| t.phase).collect();
        let mut sorted = phases.clone();
        sorted.sort_by_key(|p| *p as u8);
        assert_eq!(phases, sorted, "lane {lane}: primers, then warm-up, then measured");
        assert!(phases.iter().filter(|p| **p == ReplayPhase::Warmup).count() <= 2);
        assert!(phases.contains(&ReplayPhase::Primer), "every lane starts mid-trace");
    }
    for (i, t) in run.turns.iter().enumerate() {
        if t.phase == ReplayPhase::Measured {
            assert!(run.reqs[i].send_s >= start);
        } else {
            assert_eq!(t.max_tokens, 1, "primers and warm-up ask for one token");
            assert!(run.reqs[i].send_s < start);
        }
    }
    // Within a session, each stream's turns follow each other with no gap or repeat.
    let mut streams: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    for t in &run.turns {
        streams.entry((t.session, t.stream)).or_default().push(t.turn);
    }
    for (key, turns) in streams {
        assert!(turns.windows(2).all(|w| w[1] == w[0] + 1), "{key:?}: {turns:?}");
    }
    assert_lanes_hold_one_tree(&run, 3);
}

#[test]
fn tree_idle_cap_moves_a_trees_timers_up() {
    let set = only("alpha");
    let cap = 0.5;
    let run = run(&set, ReplayConfig { tree_idle_cap_s: Some(cap), ..base(1) }, 0.01);
    assert_eq!(run.reqs.len(), 7);
    // Root turn 1 waited 2.5 s in the recording; the idle tree waits 0.5 s.
    assert!((run.reqs[run.find(0, 0, 1)].send_s - (run.end(run.find(0, 0, 0)) + cap)).abs() < 1e-9);
    // Whenever the tree had nothing in flight, its next request came at most the cap later.
    for i in 1..run.reqs.len() {
        let sent = run.reqs[i].send_s;
        let busy = (0..run.reqs.len()).any(|j| j != i && run.reqs[j].send_s < sent && run.end(j) > sent);
        if !busy {
            let last_end = (0..run.reqs.len()).map(|j| run.end(j)).filter(|&e| e <= sent).fold(0.0, f64::max);
            assert!(sent - last_end <= cap + 1e-9, "request {i}: idle {} s", sent - last_end);
        }
    }
    // Without the cap the recorded delays hold.
    let plain = run_fn_alpha_plain();
    assert!(plain.reqs[plain.find(0, 0, 1)].send_s - plain.end(plain.find(0, 0, 0)) > 2.49);
}

fn run_fn_alpha_plain() -> Run {
    run(&only("alpha"), base(1), 0.01)
}

/// Two one-stream sessions: "long" (a 300-token turn, then one 20 s
/// later) and "short" (1 token, then one 2 s later).
fn long_and_short() -> SessionSet {
    let mut set = SessionSet::new(Content::Blocks { block_size: 4 }, Arrival::Lanes);
    for (name, out0, gap) in [("long", 300, 20.0), ("short", 1, 2.0)] {
        let mut b = set.begin(name, super::synth::name_key(name));
        b.turn(0, TurnRecord { t_s: 0.0, api_s: 0.0, input: 8, max_tokens: out0, ids: &[0, 1] }).unwrap();
        b.turn(0, TurnRecord { t_s: gap, api_s: 0.0, input: 12, max_tokens: 1, ids: &[0, 1, 2] }).unwrap();
        b.finish();
    }
    set
}

#[test]
fn system_idle_cap_applies_only_when_nothing_is_in_flight() {
    let set = long_and_short();
    let run = run(&set, ReplayConfig { system_idle_cap_s: Some(0.5), ..base(2) }, 0.01);
    let (long, short) = (run.turns.iter().find(|t| t.trace == 0).unwrap(), run.turns.iter().find(|t| t.trace == 1).unwrap());
    let (long, short) = (long.session, short.session);
    // short's 2 s gap ran while long's first turn (3 s) was in flight: kept.
    let s1 = run.reqs[run.find(short, 0, 1)].send_s;
    assert!((s1 - (run.end(run.find(short, 0, 0)) + 2.0)).abs() < 1e-9, "{s1}");
    // long's 20 s gap started with nothing in flight anywhere: capped at 0.5 s.
    let l0_end = run.end(run.find(long, 0, 0));
    assert!((l0_end - 3.0).abs() < 1e-9);
    assert!((run.reqs[run.find(long, 0, 1)].send_s - (l0_end + 0.5)).abs() < 1e-9);
}

#[test]
fn duration_stops_new_requests_drains_and_recycles_with_new_markers() {
    let set = agentx();
    let cfg = ReplayConfig { duration_s: Some(8.0), time_scale: 0.2, ..base(2) };
    let run = run(&set, cfg, 0.05);
    assert_eq!(run.stop, Some(StopReason::Duration));
    let start = run.start.unwrap();
    assert!(run.reqs.iter().all(|r| r.send_s < start + 8.0 && r.end_s.is_some()), "none sent after the deadline, all drained");
    assert!(run.sessions().len() > set.sessions.len(), "lanes recycled past the pool");
    assert_lanes_hold_one_tree(&run, 2);
    assert_tree_timing(&set, &run, 0.2, 0.05);
    // One marker per tree: shared by its requests, new when a trace comes back.
    let mut markers: BTreeMap<u32, (u32, Vec<u32>)> = BTreeMap::new();
    for (i, t) in run.turns.iter().enumerate() {
        let m = run.reqs[i].prompt[..M].to_vec();
        let e = markers.entry(t.session).or_insert((t.trace, m.clone()));
        assert_eq!(e.1, m, "session {} has one marker", t.session);
    }
    let mut by_trace: BTreeMap<u32, BTreeSet<Vec<u32>>> = BTreeMap::new();
    let mut trees_per_trace: BTreeMap<u32, usize> = BTreeMap::new();
    for (trace, m) in markers.into_values() {
        by_trace.entry(trace).or_default().insert(m);
        *trees_per_trace.entry(trace).or_default() += 1;
    }
    assert!(trees_per_trace.values().any(|&n| n > 1), "some trace was played twice");
    for (trace, n) in trees_per_trace {
        assert_eq!(by_trace[&trace].len(), n, "trace {trace}: every replay of it has its own marker");
    }
}

#[test]
fn budget_stops_after_max_requests() {
    let run = run(&agentx(), ReplayConfig { max_requests: Some(7), time_scale: 0.1, ..base(2) }, 0.01);
    assert_eq!(run.stop, Some(StopReason::MaxRequests));
    assert_eq!(run.reqs.len(), 7);
    assert!(run.reqs.iter().all(|r| r.end_s.is_some()));
}

#[test]
fn lanes_beyond_the_pool_wrap_around() {
    let run = run(&agentx(), ReplayConfig { max_requests: Some(40), time_scale: 0.1, ..base(6) }, 0.01);
    let mut first: BTreeMap<u32, u32> = BTreeMap::new();
    for t in &run.turns {
        first.entry(t.lane).or_insert(t.trace);
    }
    assert_eq!(first.len(), 6, "six lanes, six trees");
    let traces: BTreeSet<u32> = first.values().copied().collect();
    assert_eq!(traces.len(), 4, "the first four lanes take the whole pool, the rest wrap around");
    assert_lanes_hold_one_tree(&run, 6);
}

#[test]
fn same_seed_same_requests_and_seeds_change_tokens_not_counts() {
    let set = agentx();
    let cfg = ReplayConfig {
        start_min_ratio: 0.25,
        start_max_ratio: 0.75,
        warmup_requests_per_lane: 2,
        duration_s: Some(6.0),
        time_scale: 0.3,
        ..base(3)
    };
    let a = run(&set, cfg.clone(), 0.01);
    let b = run(&set, cfg.clone(), 0.01);
    assert_eq!(a.reqs, b.reqs);
    assert_eq!(a.turns, b.turns);
    let c = run(&set, ReplayConfig { seed: 8, ..cfg.clone() }, 0.01);
    assert_ne!(a.reqs, c.reqs);
    // Another run id: only the markers change.
    let d = run(&set, ReplayConfig { run_id: 1, ..cfg }, 0.01);
    assert_eq!(a.turns, d.turns);
    for (x, y) in a.reqs.iter().zip(&d.reqs) {
        assert_eq!((x.prompt.len(), x.max_tokens, x.send_s), (y.prompt.len(), y.max_tokens, y.send_s));
        assert_eq!(x.prompt[M..], y.prompt[M..]);
        assert_ne!(x.prompt[..M], y.prompt[..M]);
    }
}

#[test]
fn failed_requests_do_not_wedge_a_tree() {
    let run = run_with(&agentx(), base(2), 0.01, &|i| i % 3 == 1);
    assert_eq!(run.reqs.len(), 17, "every turn was still sent");
    assert_eq!(run.stop, Some(StopReason::Exhausted));
}

#[test]
fn prompts_share_exactly_the_recorded_prefixes_and_hits() {
    let set = only("alpha");
    let run = run(&set, base(1), 0.01);
    let p = |stream, turn| &run.reqs[run.find(0, stream, turn)].prompt;
    // r1 [0,1,3,4,5] vs r0 [0,1,2]: marker + 2 blocks.
    assert_eq!(common_prefix(p(0, 1), p(0, 0)), M + 32);
    // r2 (in 80: 5 full blocks) vs r1 (in 70: 4 blocks + a 6-token tail): marker + 4 blocks.
    assert_eq!(common_prefix(p(0, 2), p(0, 1)), M + 64);
    // r3 [.. 6, 7] (in 100: 6 blocks + 4) vs r2: marker + 5 blocks.
    assert_eq!(common_prefix(p(0, 3), p(0, 2)), M + 80);
    // Subagent: its own blocks; marker shared with the root.
    assert_eq!(common_prefix(p(1, 0), p(0, 0)), M);
    assert_eq!(common_prefix(p(1, 1), p(1, 0)), M + 32);
    // Theoretical hits, in recorded order over the whole tree.
    let hits = |stream: u32| -> Vec<(u32, u32, u32)> {
        run.turns
            .iter()
            .filter(|t| t.stream == stream)
            .map(|t| (t.blocks, t.hit_blocks, t.theoretical_hit_tokens))
            .collect()
    };
    assert_eq!(hits(0), vec![(3, 0, 0), (5, 2, 32), (5, 5, 80), (7, 5, 80)]);
    assert_eq!(hits(1), vec![(2, 0, 0), (3, 2, 32)]);
    assert_eq!(hits(2), vec![(1, 0, 0)]);
    assert!(run.turns.iter().all(|t| t.is_subagent() == (t.stream > 0)));
    // Without markers prompts are exactly `in` long, and another trace with
    // the same hash ids shares nothing (one namespace per trace).
    let bare = ReplayConfig { cache_bust: false, ..base(1) };
    let alpha = run_fn(&only("alpha"), bare.clone());
    let beta = run_fn(&only("beta"), bare);
    assert_eq!(alpha.reqs[0].prompt.len(), 40);
    assert_eq!(common_prefix(&alpha.reqs[0].prompt, &beta.reqs[0].prompt), 0);
}

fn run_fn(set: &SessionSet, cfg: ReplayConfig) -> Run {
    run(set, cfg, 0.01)
}

#[test]
fn conversations_replay_tokenized_turns() {
    let spec = crate::protocol::ConversationSpec {
        path: fixture("sharegpt.json"),
        max_turns: None,
        max_output_tokens: Some(5),
    };
    let (set, summary) = super::conversation::load_conversations(
        &spec,
        &mut super::conversation::tests::fake_tokenize,
        &mut super::conversation::tests::count_words,
    )
    .unwrap();
    assert_eq!((summary.conversations, summary.turns, summary.skipped), (2, 5, 1));
    let run = run(&set, ReplayConfig::for_conversations(2, 3), 0.01);
    assert_eq!(run.reqs.len(), 5);
    let mut ids = Vec::new();
    for (i, t) in run.turns.iter().enumerate() {
        let def = set.session_streams(t.trace as usize)[0];
        set.turn_ids(&def, t.turn as usize, &mut ids);
        assert_eq!(run.reqs[i].prompt, ids, "conversation prompts are sent as tokenized");
        assert!(run.reqs[i].max_tokens <= 5);
        if t.turn > 0 {
            let prev = run.find(t.session, 0, t.turn - 1);
            let shared = common_prefix(&run.reqs[i].prompt, &run.reqs[prev].prompt) as u32;
            assert_eq!(t.theoretical_hit_tokens, shared);
            assert!(run.reqs[i].send_s >= run.end(prev), "no think time, but after the previous reply");
        } else {
            assert_eq!(t.theoretical_hit_tokens, 0);
        }
    }
    assert_lanes_hold_one_tree(&run, 2);
}

#[test]
fn timed_replay_releases_at_timestamps_and_caps_in_flight() {
    let (set, _) = load_timed(&fixture("timed.jsonl"), 16).unwrap();
    let allowed = allowed();
    let sim = |cfg: ReplayConfig| {
        let mut r = SessionReplay::new(&set, &allowed, cfg).unwrap();
        let reqs = simulate(&mut r, 0.01, &|_| false);
        (reqs, r.turns().to_vec(), r.stop_reason())
    };
    // Timestamps in ms: released at 0, 0.02, 0.05, 0.12 s.
    let (reqs, turns, stop) = sim(ReplayConfig { time_scale: 0.001, ..base(8) });
    assert_eq!(stop, Some(StopReason::Exhausted));
    let sends: Vec<f64> = reqs.iter().map(|r| r.send_s).collect();
    for (s, w) in sends.iter().zip([0.0, 0.02, 0.05, 0.12]) {
        assert!((s - w).abs() < 1e-9, "{sends:?}");
    }
    let hit_tokens: Vec<u32> = turns.iter().map(|t| t.theoretical_hit_tokens).collect();
    assert_eq!(hit_tokens, vec![0, 0, 32, 48]);
    // Lines share blocks with each other (one namespace) behind one replay marker.
    assert_eq!(common_prefix(&reqs[2].prompt, &reqs[0].prompt), M + 32);
    assert_eq!(reqs[1].prompt[..M], reqs[0].prompt[..M]);
    // One in flight: line 2 (released at 0.02) waits for line 1 (4 steps).
    let (reqs, _, _) = sim(ReplayConfig { time_scale: 0.001, ..base(1) });
    assert!((reqs[1].send_s - 0.04).abs() < 1e-9);
    // In seconds with a 0.5 s system cap: gaps of 20, 30, 70 s shrink to 0.5 s of idleness.
    let (reqs, _, _) = sim(ReplayConfig { system_idle_cap_s: Some(0.5), ..base(8) });
    for w in reqs.windows(2) {
        assert!((w[1].send_s - (w[0].end_s.unwrap() + 0.5)).abs() < 1e-9, "{reqs:?}");
    }
    // Budget and duration.
    let (reqs, _, stop) = sim(ReplayConfig { time_scale: 0.001, max_requests: Some(2), ..base(8) });
    assert_eq!((reqs.len(), stop), (2, Some(StopReason::MaxRequests)));
    let (reqs, _, stop) = sim(ReplayConfig { time_scale: 0.001, duration_s: Some(0.05), ..base(8) });
    assert_eq!((reqs.len(), stop), (2, Some(StopReason::Duration)));
}

#[test]
fn through_the_driver_loop_on_the_real_clock() {
    let set = agentx();
    let allowed = allowed();
    let scale = 0.002;
    let mut engine = OneTokenPerStep::default();
    let mut replay = LanesReplay::new(&set, &allowed, ReplayConfig { time_scale: scale, ..base(2) }).unwrap();
    let out = drive_schedule(&mut engine, &mut replay, None, &mut RequestIds::default(), &mut |_| {}).unwrap();
    let turns = replay.turns();
    assert_eq!((out.records.len(), turns.len()), (17, 17));
    assert!(out.records.iter().all(|r| r.ok()));
    for (r, t) in out.records.iter().zip(turns) {
        let def = set.session_streams(t.trace as usize)[t.stream as usize];
        let turn = set.stream_turns(&def)[t.turn as usize];
        assert_eq!((r.input_tokens, r.output_tokens), (turn.input + MARKER_TOKENS, turn.max_tokens));
        // End-to-start delays hold on the real clock too (lower bound).
        if t.turn > 0 {
            let prev = turns.iter().position(|p| (p.session, p.stream, p.turn) == (t.session, t.stream, t.turn - 1)).unwrap();
            let prev_end = out.records[prev].last_token_s.unwrap();
            assert!(r.send_s >= prev_end + turn.delay_s * scale - 1e-9);
        }
    }
    // Trees per lane never overlap.
    let run = Run {
        reqs: out
            .records
            .iter()
            .map(|r| SimRequest {
                send_s: r.send_s,
                due_s: r.send_s,
                sent_at_s: r.send_s,
                end_s: r.last_token_s,
                prompt: Vec::new(),
                max_tokens: r.output_tokens,
            })
            .collect(),
        turns: turns.to_vec(),
        start: replay.measure_start_s(),
        stop: replay.stop_reason(),
    };
    assert_lanes_hold_one_tree(&run, 2);
    // With think times scaled to 0 the order depends only on completions:
    // two runs send the same prompts in the same order.
    let prompts = |seed| {
        let mut engine = OneTokenPerStep { keep_prompts: true, ..OneTokenPerStep::default() };
        let cfg = ReplayConfig { time_scale: 0.0, seed, start_min_ratio: 0.25, start_max_ratio: 0.75, warmup_requests_per_lane: 2, ..base(3) };
        let mut replay = LanesReplay::new(&set, &allowed, cfg).unwrap();
        let out = drive_schedule(&mut engine, &mut replay, None, &mut RequestIds::default(), &mut |_| {}).unwrap();
        let counts: Vec<(u32, u32)> = out.records.iter().map(|r| (r.input_tokens, r.output_tokens)).collect();
        (counts, engine.prompts)
    };
    let (a, b) = (prompts(5), prompts(5));
    assert_eq!(a, b);
    assert!(!a.0.is_empty());
    // A failed request (no token) does not stop the tree.
    let mut engine = OneTokenPerStep { fail: vec![1, 4], ..OneTokenPerStep::default() };
    let mut replay = LanesReplay::new(&set, &allowed, ReplayConfig { time_scale: 0.0, ..base(2) }).unwrap();
    let out = drive_schedule(&mut engine, &mut replay, None, &mut RequestIds::default(), &mut |_| {}).unwrap();
    assert_eq!(out.records.len(), 17);
    assert_eq!(out.records.iter().filter(|r| !r.ok()).count(), 2);
}

/// Mooncake's shape (tests/fixtures/traces/mooncake_shaped.jsonl, 512-token
/// blocks, ms): a hash id names the partial last block, so a repeated row is
/// the same prompt to the last token, and a partial block is the prefix of
/// the full block of its id. The theoretical hit rate by InferenceX's rule,
/// by hand: hit blocks 0 + 0 + 2 + 2 over blocks 2 + 1 + 2 + 3 = 4 / 8.
#[test]
fn mooncake_partial_blocks_are_shared_and_counted_as_blocks() {
    let (set, _) = load_timed(&fixture("mooncake_shaped.jsonl"), 512).unwrap();
    let allowed = allowed();
    let mut r = SessionReplay::new(&set, &allowed, ReplayConfig { time_scale: 0.001, ..base(8) }).unwrap();
    let reqs = simulate(&mut r, 0.01, &|_| false);
    let sends: Vec<f64> = reqs.iter().map(|r| r.send_s).collect();
    for (s, w) in sends.iter().zip([0.0, 0.6, 1.2, 1.8]) {
        assert!((s - w).abs() < 1e-9, "arrivals as recorded, in seconds: {sends:?}");
    }
    assert_eq!(reqs[2].prompt, reqs[0].prompt, "the repeated row, its 188-token partial block included");
    assert_eq!(common_prefix(&reqs[3].prompt, &reqs[0].prompt), M + 700, "block 9002 partial, then full");
    let turns = r.turns();
    let (hit, blocks): (u32, u32) = turns.iter().fold((0, 0), |(h, b), t| (h + t.hit_blocks, b + t.blocks));
    assert_eq!((hit, blocks), (4, 8));
    let hit_tokens: Vec<u32> = turns.iter().map(|t| t.theoretical_hit_tokens).collect();
    assert_eq!(hit_tokens, vec![0, 0, 700, 1024]);
}

#[test]
fn timed_trace_through_the_driver_loop() {
    let (set, _) = load_timed(&fixture("timed.jsonl"), 16).unwrap();
    let allowed = allowed();
    let mut engine = OneTokenPerStep::default();
    let mut replay = SessionReplay::new(&set, &allowed, ReplayConfig { time_scale: 0.001, ..base(1) }).unwrap();
    let out = drive_schedule(&mut engine, &mut replay, None, &mut RequestIds::default(), &mut |_| {}).unwrap();
    assert_eq!(out.records.len(), 4);
    assert_eq!(engine.max_seen_running, 1);
    for (r, release) in out.records.iter().zip([0.0, 0.02, 0.05, 0.12]) {
        assert!(r.send_s >= release && r.ok());
    }
}

#[test]
fn bad_configs_are_usage_errors() {
    let set = agentx();
    let allowed = allowed();
    let cases = [
        (ReplayConfig { lanes: 0, ..base(1) }, "concurrency of at least 1"),
        (ReplayConfig { start_min_ratio: 0.8, start_max_ratio: 0.5, ..base(1) }, "0 <= min <= max <= 1"),
        (ReplayConfig { time_scale: -1.0, ..base(1) }, "time_scale must be"),
        (ReplayConfig { tree_idle_cap_s: Some(0.0), ..base(1) }, "tree_idle_cap_s must be a positive"),
        (ReplayConfig { duration_s: Some(f64::NAN), ..base(1) }, "duration_s must be a positive"),
        (ReplayConfig { max_requests: Some(0), ..base(1) }, "max_requests must be at least 1"),
    ];
    for (cfg, want) in cases {
        let err = LanesReplay::new(&set, &allowed, cfg).err().expect("bad config");
        assert!(err.downcast_ref::<UsageError>().is_some());
        assert!(err.to_string().contains(want), "{err}");
    }
    let (timed, _) = load_timed(&fixture("timed.jsonl"), 16).unwrap();
    assert!(LanesReplay::new(&timed, &allowed, base(1)).is_err(), "a timed trace is not a lanes replay");
    assert!(LanesReplay::new(&set, &[], base(1)).is_err());
}

/// The admission budget on the virtual clock (the driver's budget: 1 ms
/// after a 5 ms step with sends of 0.4 ms, 10 ms after a 50 ms step with
/// sends of 4 ms): a
/// lanes replay whose turns are all due at once (think times scaled to 0,
/// primers and warm-ups included) and a timed trace released at once stop
/// part-way through a gap and send the rest after the next step. No gap
/// spends more than its budget plus the one send it started; every request
/// of the free run is sent; a held request keeps as its send time the start
/// of the gap it became due in.
#[test]
fn admission_budget_holds_the_rest_for_the_next_step() {
    let set = agentx();
    let allowed = allowed();
    let (timed, _) = load_timed(&fixture("timed.jsonl"), 16).unwrap();
    let lanes_cfg = ReplayConfig { time_scale: 0.0, start_min_ratio: 0.25, start_max_ratio: 0.75, warmup_requests_per_lane: 2, ..base(6) };
    // (set, config, step s, send s)
    let cases = [
        (&set, lanes_cfg.clone(), 0.005, 0.0004),
        (&set, lanes_cfg, 0.05, 0.004),
        (&timed, ReplayConfig { time_scale: 0.0, ..base(4) }, 0.005, 0.0004),
    ];
    for (set, cfg, step_s, send_s) in cases {
        let adm = SimAdmission { send_s, budget: admission_budget };
        let free = SimAdmission { send_s, budget: |_| f64::INFINITY };
        let key = |r: &SessionReplay| -> BTreeSet<(u32, u32, u32, u32)> {
            r.turns().iter().map(|t| (t.trace, t.stream, t.turn, t.max_tokens)).collect()
        };
        let mut budgeted = SessionReplay::new(set, &allowed, cfg.clone()).unwrap();
        let (reqs, gaps) = simulate_admitting(&mut budgeted, step_s, &|_| false, adm);
        let mut unbounded = SessionReplay::new(set, &allowed, cfg).unwrap();
        let (all, all_gaps) = simulate_admitting(&mut unbounded, step_s, &|_| false, free);
        assert_eq!(reqs.len(), all.len(), "every request is sent");
        assert_eq!(key(&budgeted), key(&unbounded));
        // The free run sends more than the budget allows in some gap; the budgeted one never.
        assert!(all_gaps.iter().any(|g| g.spent_s > admission_budget(step_s) + send_s));
        assert!(gaps.iter().any(|g| g.cut_short));
        for g in &gaps {
            let want = if g.start_s == 0.0 { admission_budget(0.0) } else { admission_budget(step_s) };
            assert_eq!(g.budget_s, want);
            assert!(g.spent_s <= g.budget_s + send_s + 1e-12, "{g:?}");
            if g.in_flight > 0 {
                assert!(g.sent as f64 <= (g.budget_s / send_s).ceil(), "{g:?}");
            }
        }
        let mut held = 0;
        for r in &reqs {
            // The gap it became due in, and whether it went there.
            let due_gap = gaps.iter().find(|g| g.start_s >= r.due_s).unwrap();
            let went_there = r.sent_at_s < due_gap.start_s + due_gap.spent_s;
            if went_there {
                assert_eq!(r.send_s, r.sent_at_s, "{r:?}");
            } else {
                held += 1;
                assert_eq!(r.send_s, due_gap.start_s, "held: {r:?}");
                assert!(r.sent_at_s > r.send_s);
            }
        }
        assert!(held > 0);
    }
}
