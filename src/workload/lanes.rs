//! [`LanesReplay`]: the [`Schedule`] that replays session trees (AgentX traces,
//! conversations) with AgentX's rules (notes/agentx.md 5e-5f).
//!
//! - **Lanes.** `lanes` (the concurrency) session trees are live at once.
//!   A lane holds its tree until the root and every subagent have ended,
//!   then takes its next trace. Lane l's j-th trace is entry `l + j*lanes`
//!   of a seeded shuffle of the trace pool, reshuffled (seed, epoch) on each
//!   wrap-around, so a lane's traces do not depend on completion order.
//!   With neither `duration_s` nor `max_requests` the pool is played once.
//! - **Timing.** Delays run from the completion of the previous turn of a
//!   stream (end-to-start, `sessions`); a subagent starts its recorded delay
//!   after its anchor root turn completes; a join turn waits for its own
//!   delay and for each of its subagents' end plus the recorded gap; a
//!   background subagent is waited for by nobody but keeps its lane. All
//!   recorded times are multiplied by `time_scale`.
//! - **Mid-trace start.** Each lane's first tree starts at a seeded t* in
//!   `[start + min_ratio*D, start + max_ratio*D]` (D: the tree's recorded
//!   span; seed (seed, trace, lane)). Every stream live at t* (started,
//!   not ended) sends its last turn before t* with its full prefix (a
//!   primer); after a lane's primers complete it sends
//!   `warmup_requests_per_lane` more requests continuing its tree with all
//!   delays removed. Primers and warm-up requests ask for 1 output token
//!   (the newest AgentX fork's `_WARMUP_MAX_TOKENS = 1`): they exist to
//!   fill the prefix cache, and the next prompts use the recorded outputs,
//!   not the generated ones. Primers are due together at the start (AgentX
//!   spreads them so lanes reach t* together; all of it is warm-up here);
//!   the driver's admission budget per gap spreads their sends over the
//!   first steps (`driver::ADMISSION_BUDGET`).
//! - **Handoff.** When every lane is done warming up and nothing is in
//!   flight, each pending stream's next request is placed at its recorded
//!   offset from its lane's recorded clock (the latest recorded end of what
//!   the lane sent, at least t*; negative offsets are 0), and one global
//!   minimum offset is subtracted so the earliest fires at once. The
//!   measured phase starts there ([`LanesReplay::measure_start_s`]).
//! - **Idle caps.** When a tree has nothing in flight and its next timer is
//!   more than `tree_idle_cap_s` away, all its timers move up uniformly so
//!   the next fires at the cap. When nothing is in flight anywhere and the
//!   next timer is more than `system_idle_cap_s` away, every timer moves
//!   up so it fires at the cap. Spacing, order and gates are kept.
//! - **Recycling.** In the measured phase a lane whose tree ended takes its
//!   next trace from turn 0, at once, with a new cache-bust marker
//!   (per-trace pass counter).
//! - **Stop.** No measured request is sent after `duration_s` from the
//!   handoff or once `max_requests` were sent; those in flight drain.
//! - **Failures.** A request that finished with an error counts as
//!   completed for the schedule: its stream goes on (the next prompt is
//!   built from recorded data, not from the reply), so a failure never
//!   wedges a tree; the record carries the error.
//!
//! Determinism: the same set, seed, lanes and completion order give the
//! same requests (prompt lengths, max_tokens, token ids) in the same order.
//! Ties between timers break by the order they were set.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use anyhow::Result;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::driver::{Admit, Request, Schedule};
use super::replay_config::{ReplayConfig, StopReason};
use super::sessions::{Arrival, Content, SessionSet};
use super::prefetch::{Prefetch, PrefetchStats, PromptKey};
use super::synth::{MARKER_TOKENS, Synth, covered_blocks, key};
use crate::error::usage;
use crate::protocol::{ReplayPhase, TurnInfo};

/// Output tokens of primers and warm-up requests.
pub const WARMUP_MAX_TOKENS: u32 = 1;

/// A stream's state.
#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    /// A subagent whose anchor has not completed.
    Unspawned,
    /// Its next turn fires at `at` (exactly one heap entry).
    Due { at: f64, seq: u64 },
    /// Its next turn waits for the warm-up stage or the handoff.
    Held,
    /// A join turn waiting for subagents; not before `not_before`.
    Join { not_before: f64 },
    InFlight,
    /// Ended at `at` (-inf: before the mid-trace start).
    Done { at: f64 },
}

#[derive(Debug, Clone)]
struct StreamRt {
    next: u32,
    st: St,
}

#[derive(Debug, Clone)]
struct Tree {
    session: u32,
    id: u32,
    marker: Option<u64>,
    streams: Vec<StreamRt>,
    in_flight: u32,
    /// Streams not done.
    live: u32,
    /// Latest recorded end (t + api) of what the lane sent, at least t*.
    clock_rec: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Primers in flight.
    Priming,
    /// Sending warm-up requests.
    Warming,
    /// Done warming up; waits for the handoff.
    Ready,
    Measured,
}

#[derive(Debug, Clone)]
struct Lane {
    tree: Option<Tree>,
    draws: u32,
    stage: Stage,
    warmup_left: u32,
}

#[derive(Debug, Clone, Copy)]
struct Timer {
    at: f64,
    seq: u64,
    lane: u32,
    stream: u32,
}

impl PartialEq for Timer {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timer {
    fn cmp(&self, o: &Self) -> Ordering {
        self.at.total_cmp(&o.at).then(self.seq.cmp(&o.seq))
    }
}

/// Key domains of the replay's own draws.
const PERM: u64 = 11;
const TSTAR: u64 = 12;

/// The lanes-of-trees replay.
pub struct LanesReplay<'a> {
    set: &'a SessionSet,
    synth: Synth<'a>,
    cfg: ReplayConfig,
    lanes: Vec<Lane>,
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    perms: Vec<Vec<u32>>,
    passes: Vec<u32>,
    trees: u32,
    in_flight: usize,
    measure_start_s: Option<f64>,
    measured_sent: u32,
    stopped: Option<StopReason>,
    /// A warm-up stage may move on (checked at the next poll).
    lanes_changed: bool,
    turns: Vec<TurnInfo>,
    buf: Vec<u32>,
    scratch: Vec<u32>,
    /// Builds each stream's next prompt ahead of its send ([`LanesReplay::prefetch_in`]).
    prefetch: Option<Prefetch>,
}

impl<'a> LanesReplay<'a> {
    /// A replay of `set` (lanes arrival) drawing prompt tokens from `allowed`.
    ///
    /// Errors (usage): see [`ReplayConfig::check`]; an empty set or a timed
    /// one (use [`super::replay::SessionReplay::new`]), an empty `allowed`.
    pub fn new(set: &'a SessionSet, allowed: &'a [u32], cfg: ReplayConfig) -> Result<Self> {
        cfg.check()?;
        if set.sessions.is_empty() || set.arrival != Arrival::Lanes {
            return Err(usage("a lanes replay needs a non-empty set of session traces"));
        }
        if allowed.is_empty() {
            return Err(usage("the tokenizer left no token ids to build prompts from"));
        }
        let warm = cfg.warmup_requests_per_lane;
        let lanes = (0..cfg.lanes).map(|_| Lane { tree: None, draws: 0, stage: Stage::Priming, warmup_left: warm });
        let mut r = LanesReplay {
            set,
            synth: Synth::new(allowed, cfg.seed),
            lanes: lanes.collect(),
            heap: BinaryHeap::new(),
            seq: 0,
            perms: Vec::new(),
            passes: vec![0; set.sessions.len()],
            trees: 0,
            in_flight: 0,
            measure_start_s: None,
            measured_sent: 0,
            stopped: None,
            lanes_changed: true,
            turns: Vec::new(),
            buf: Vec::new(),
            scratch: Vec::new(),
            prefetch: None,
            cfg,
        };
        for lane in 0..r.lanes.len() {
            if let Some(session) = r.draw(lane) {
                let tree = r.mid_trace_tree(lane, session);
                r.lanes[lane].tree = Some(tree);
            }
        }
        r.rebuild_heap();
        Ok(r)
    }

    /// One entry per request sent, in send order.
    pub fn turns(&self) -> &[TurnInfo] {
        &self.turns
    }

    /// From now on, each stream's next prompt is built ahead on a helper
    /// thread in `scope` as soon as its predecessor is sent, holding at most
    /// `budget_tokens` ahead ([`super::prefetch`]); the prompts sent are the
    /// same. Call [`LanesReplay::stop_prefetch`] before the scope ends.
    pub fn prefetch_in<'scope>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, 'a>,
        budget_tokens: usize,
        stager: Option<std::sync::Arc<dyn crate::engine::PromptStager>>,
    ) {
        self.prefetch = Some(Prefetch::spawn(scope, self.set, self.synth, budget_tokens, stager));
    }

    /// Ends the helper thread of [`LanesReplay::prefetch_in`]; returns how
    /// the prompts sent were had.
    pub fn stop_prefetch(&mut self) -> Option<PrefetchStats> {
        self.prefetch.take().map(|p| p.stats())
    }

    pub fn into_turns(self) -> Vec<TurnInfo> {
        self.turns
    }

    /// When the measured phase started (the handoff), s on the driver's clock.
    pub fn measure_start_s(&self) -> Option<f64> {
        self.measure_start_s
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stopped
    }

    /// Bytes held by the replay's own state (not the set).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let trees: usize = self
            .lanes
            .iter()
            .filter_map(|l| l.tree.as_ref())
            .map(|t| t.streams.capacity() * size_of::<StreamRt>())
            .sum();
        self.lanes.capacity() * size_of::<Lane>()
            + trees
            + self.heap.capacity() * size_of::<Timer>()
            + self.perms.iter().map(|p| p.capacity() * 4).sum::<usize>()
            + self.passes.capacity() * 4
            + self.turns.capacity() * size_of::<TurnInfo>()
            + (self.buf.capacity() + self.scratch.capacity()) * 4
            + self.prefetch.as_ref().map_or(0, Prefetch::memory_bytes)
    }

    /// The next trace of `lane`, if any.
    fn draw(&mut self, lane: usize) -> Option<u32> {
        let pool = self.set.sessions.len();
        let l = &mut self.lanes[lane];
        let g = lane + l.draws as usize * self.cfg.lanes;
        l.draws += 1;
        if self.cfg.one_pass() && g >= pool {
            return None;
        }
        let epoch = g / pool;
        while self.perms.len() <= epoch {
            let mut rng = ChaCha8Rng::seed_from_u64(key(&[PERM, self.cfg.seed, self.perms.len() as u64]));
            let mut p: Vec<u32> = (0..pool as u32).collect();
            p.shuffle(&mut rng);
            self.perms.push(p);
        }
        Some(self.perms[epoch][g % pool])
    }

    /// A tree of `session` at turn 0 of every stream: the root held (the
    /// caller arms it), subagents waiting for their anchors.
    fn fresh_tree(&mut self, lane: usize, session: u32) -> Tree {
        let ses = self.set.sessions[session as usize];
        let pass = self.passes[session as usize];
        self.passes[session as usize] += 1;
        let marker = self.cfg.cache_bust.then(|| self.synth.marker_key(self.cfg.run_id, lane as u32, pass, ses.ns_key));
        let mut streams = vec![StreamRt { next: 0, st: St::Unspawned }; ses.n_streams as usize];
        streams[0].st = St::Held;
        let root0 = self.set.session_streams(session as usize)[0].first_turn;
        let tree = Tree {
            session,
            id: self.trees,
            marker,
            live: ses.n_streams,
            streams,
            in_flight: 0,
            clock_rec: self.set.turns[root0 as usize].t_s,
        };
        self.trees += 1;
        tree
    }

    /// A lane's first tree, entered at its seeded t*: streams ended before
    /// t* are done, live ones get a primer (their last turn before t*, due
    /// at once), subagents whose anchor lies before t* are held.
    fn mid_trace_tree(&mut self, lane: usize, session: u32) -> Tree {
        let set = self.set;
        let mut tree = self.fresh_tree(lane, session);
        let ses = set.sessions[session as usize];
        let mut rng = ChaCha8Rng::seed_from_u64(key(&[TSTAR, self.cfg.seed, ses.ns_key, lane as u64]));
        let (lo, hi) = (self.cfg.start_min_ratio, self.cfg.start_max_ratio);
        let span = ses.end_s - ses.start_s;
        // At most the last start, which rounding could pass: some turn is always left.
        let t_star = (ses.start_s + span * (lo + rng.random::<f64>() * (hi - lo))).min(ses.end_s);
        let streams = set.session_streams(session as usize);
        let first_at = |s: usize| {
            let turns = set.stream_turns(&streams[s]);
            turns.iter().position(|t| t.t_s >= t_star).unwrap_or(turns.len()) as u32
        };
        let r = first_at(0);
        let root_n = streams[0].n_turns;
        let root_primed = r >= 1 && r < root_n;
        for (s, def) in streams.iter().enumerate() {
            let next = first_at(s);
            let st = &mut tree.streams[s];
            if next == def.n_turns {
                st.st = St::Done { at: f64::NEG_INFINITY };
                tree.live -= 1;
            } else if next >= 1 {
                st.next = next - 1;
                st.st = St::Due { at: 0.0, seq: 0 };
            } else if s == 0 {
                st.st = St::Held;
            } else {
                let anchor = def.spawn.expect("subagents have a spawn").anchor;
                let anchor_done = anchor < r && !(root_primed && anchor == r - 1);
                st.st = if anchor_done { St::Held } else { St::Unspawned };
            }
        }
        for st in &mut tree.streams {
            if let St::Due { seq, .. } = &mut st.st {
                *seq = self.seq;
                self.seq += 1;
            }
        }
        tree.clock_rec = t_star;
        tree
    }

    /// Sets stream `s` of `lane`'s tree to fire its next turn at `at`: a
    /// join turn waits for its subagents, a lane warming up holds it.
    fn arm(&mut self, lane: usize, s: usize, at: f64) {
        let set = self.set;
        let warm = self.lanes[lane].stage != Stage::Measured;
        let scale = if warm { 0.0 } else { self.cfg.time_scale };
        let l = &mut self.lanes[lane];
        let tree = l.tree.as_mut().expect("armed streams belong to a live tree");
        let mut at = at;
        if s == 0 {
            let j = tree.streams[0].next;
            let streams = set.session_streams(tree.session as usize);
            for (c, def) in streams.iter().enumerate().skip(1) {
                let Some(join) = def.join.filter(|j2| j2.turn == j) else { continue };
                match tree.streams[c].st {
                    St::Done { at: ended } => at = at.max(ended + join.gap_s * scale),
                    _ => {
                        tree.streams[0].st = St::Join { not_before: at };
                        return;
                    }
                }
            }
        }
        let holding = match l.stage {
            Stage::Priming | Stage::Ready => true,
            Stage::Warming => l.warmup_left == 0,
            Stage::Measured => false,
        };
        if holding {
            tree.streams[s].st = St::Held;
            return;
        }
        let seq = self.seq;
        self.seq += 1;
        tree.streams[s].st = St::Due { at, seq };
        self.heap.push(Reverse(Timer { at, seq, lane: lane as u32, stream: s as u32 }));
    }

    /// Sends the due turn of stream `s` of `lane`'s tree, due at `at` (or
    /// holds it when the lane's warm-up quota is spent).
    fn fire(&mut self, lane: usize, s: usize, at: f64, admit: &mut dyn Admit) -> Result<()> {
        let set = self.set;
        let l = &mut self.lanes[lane];
        let tree = l.tree.as_mut().expect("timers belong to live trees");
        let phase = match l.stage {
            Stage::Priming => ReplayPhase::Primer,
            Stage::Warming if l.warmup_left > 0 => ReplayPhase::Warmup,
            Stage::Measured => ReplayPhase::Measured,
            Stage::Warming | Stage::Ready => {
                tree.streams[s].st = St::Held;
                return Ok(());
            }
        };
        let session = tree.session as usize;
        let def = set.session_streams(session)[s];
        let k = tree.streams[s].next as usize;
        let turns = set.stream_turns(&def);
        let turn = turns[k];
        let pkey = PromptKey { session: session as u32, stream: s as u32, turn: k as u32, marker: tree.marker };
        // A staged prompt's claim lives to the end of the send: the buffer
        // is built into again only after it is dropped.
        let staged = match self.prefetch.as_mut().and_then(|p| p.take(&pkey)) {
            Some(built) => {
                self.buf = built.ids;
                built.staged
            }
            None => {
                self.synth.build(set, session, s, k, tree.marker, &mut self.buf, &mut self.scratch);
                None
            }
        };
        let max_tokens = if phase == ReplayPhase::Measured { turn.max_tokens } else { WARMUP_MAX_TOKENS };
        let index = admit.send(Request::Tokens { prompt: &self.buf, max_tokens, ignore_eos: self.cfg.ignore_eos }, at)?;
        drop(staged);
        if let Some(p) = self.prefetch.as_mut() {
            // The prompts this send makes known are built off this thread:
            // the stream's next turn, and the first turn of each subagent
            // this root turn's completion spawns.
            let marker = if tree.marker.is_some() { MARKER_TOKENS as usize } else { 0 };
            // Whether the turns asked for go in the measured phase: a
            // warming lane's go there once this send spends its quota.
            let measured = match phase {
                ReplayPhase::Measured => true,
                ReplayPhase::Warmup => l.warmup_left <= 1,
                ReplayPhase::Primer => l.warmup_left == 0,
            };
            if let Some(next) = turns.get(k + 1) {
                p.ask(PromptKey { turn: pkey.turn + 1, ..pkey }, next.input as usize + marker, measured);
            }
            if s == 0 {
                for (c, cdef) in set.session_streams(session).iter().enumerate().skip(1) {
                    if cdef.spawn.is_some_and(|sp| sp.anchor == k as u32) && tree.streams[c].st == St::Unspawned {
                        let first = set.stream_turns(cdef)[0];
                        p.ask(PromptKey { stream: c as u32, turn: 0, ..pkey }, first.input as usize + marker, measured);
                    }
                }
            }
        }
        debug_assert_eq!(index, self.turns.len(), "records are numbered in send order");
        let hit_tokens = match set.content {
            Content::Blocks { block_size } => {
                turn.hit.min(covered_blocks(turn.ids_len(), turn.input, block_size)) * block_size
            }
            Content::Tokens => turn.hit,
        };
        self.turns.push(TurnInfo {
            trace: tree.session,
            session: tree.id,
            lane: lane as u32,
            stream: s as u32,
            turn: k as u32,
            phase,
            max_tokens,
            blocks: turn.ids_len(),
            hit_blocks: turn.hit,
            theoretical_hit_tokens: hit_tokens,
        });
        tree.streams[s].next += 1;
        tree.streams[s].st = St::InFlight;
        tree.in_flight += 1;
        tree.clock_rec = tree.clock_rec.max(turn.t_s + turn.api_s);
        self.in_flight += 1;
        match phase {
            ReplayPhase::Warmup => l.warmup_left -= 1,
            ReplayPhase::Measured => {
                self.measured_sent += 1;
                if self.cfg.max_requests.is_some_and(|m| self.measured_sent >= m) {
                    self.stop(StopReason::MaxRequests);
                }
            }
            ReplayPhase::Primer => {}
        }
        Ok(())
    }

    /// Fires the timers due at `now` while `admit` has room; returns
    /// whether every due timer fired (`false`: the gap's budget ran out and
    /// the rest stay due).
    fn fire_due(&mut self, now: f64, admit: &mut dyn Admit) -> Result<bool> {
        while let Some(&Reverse(t)) = self.heap.peek() {
            if t.at > now || self.stopped.is_some() {
                break;
            }
            if !admit.open() {
                return Ok(false);
            }
            self.heap.pop();
            self.fire(t.lane as usize, t.stream as usize, t.at, admit)?;
        }
        Ok(true)
    }

    /// Moves warm-up stages on (primed lanes start warming up, idle
    /// warming lanes are ready); hands off to the measured phase when every
    /// lane is ready. Returns whether any stage moved (the caller fires
    /// again and asks again until nothing moves).
    fn advance_warmup(&mut self, now: f64) -> bool {
        if !std::mem::take(&mut self.lanes_changed) {
            return false;
        }
        let mut moved = false;
        for lane in 0..self.lanes.len() {
            let l = &self.lanes[lane];
            if l.tree.as_ref().is_some_and(|t| t.in_flight > 0) {
                continue;
            }
            match l.stage {
                Stage::Priming if l.tree.is_some() && l.warmup_left > 0 => {
                    self.lanes[lane].stage = Stage::Warming;
                    self.release_held(lane, now);
                }
                Stage::Priming | Stage::Warming => self.lanes[lane].stage = Stage::Ready,
                Stage::Ready | Stage::Measured => continue,
            }
            moved = true;
        }
        if self.lanes.iter().all(|l| l.stage == Stage::Ready) {
            self.handoff(now);
            return true;
        }
        self.lanes_changed = moved;
        moved
    }

    /// Arms `lane`'s held streams at `now`, in recorded order of their next turns.
    fn release_held(&mut self, lane: usize, now: f64) {
        let set = self.set;
        let Some(tree) = self.lanes[lane].tree.as_ref() else { return };
        let streams = set.session_streams(tree.session as usize);
        let mut held: Vec<(f64, usize)> = tree
            .streams
            .iter()
            .enumerate()
            .filter(|(_, st)| st.st == St::Held)
            .map(|(s, st)| (set.stream_turns(&streams[s])[st.next as usize].t_s, s))
            .collect();
        held.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, s) in held {
            self.arm(lane, s, now);
        }
    }

    /// Starts the measured phase at `now`: held streams fire at their
    /// recorded offsets from their lane's clock, less the global minimum;
    /// empty lanes take their next trace from turn 0.
    fn handoff(&mut self, now: f64) {
        let set = self.set;
        self.measure_start_s = Some(now);
        let mut pending: Vec<(usize, usize, f64)> = Vec::new();
        for lane in 0..self.lanes.len() {
            self.lanes[lane].stage = Stage::Measured;
            if self.lanes[lane].tree.is_none() {
                if let Some(session) = self.draw(lane) {
                    let tree = self.fresh_tree(lane, session);
                    self.lanes[lane].tree = Some(tree);
                }
            }
            let Some(tree) = self.lanes[lane].tree.as_ref() else { continue };
            let streams = set.session_streams(tree.session as usize);
            for (s, st) in tree.streams.iter().enumerate() {
                if st.st == St::Held {
                    let t = set.stream_turns(&streams[s])[st.next as usize].t_s;
                    pending.push((lane, s, (t - tree.clock_rec).max(0.0)));
                }
            }
        }
        let min = pending.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
        for (lane, s, off) in pending {
            self.arm(lane, s, now + (off - min) * self.cfg.time_scale);
        }
        if self.cfg.tree_idle_cap_s.is_some() {
            for lane in 0..self.lanes.len() {
                self.cap_tree_idle(lane, now);
            }
        }
        if self.lanes.iter().all(|l| l.tree.is_none()) {
            self.stop(StopReason::Exhausted);
        }
    }

    /// Stream `s` of `lane`'s tree completed a turn at `now`.
    fn complete(&mut self, lane: usize, s: usize, now: f64) {
        let set = self.set;
        let scale = if self.lanes[lane].stage == Stage::Measured { self.cfg.time_scale } else { 0.0 };
        let tree = self.lanes[lane].tree.as_mut().expect("completions belong to live trees");
        let session = tree.session as usize;
        let streams = set.session_streams(session);
        let def = streams[s];
        let next = tree.streams[s].next;
        if next < def.n_turns {
            let delay = set.stream_turns(&def)[next as usize].delay_s * scale;
            self.arm(lane, s, now + delay);
        } else {
            tree.streams[s].st = St::Done { at: now };
            tree.live -= 1;
            if let Some(join) = def.join {
                let root = &tree.streams[0];
                if let (St::Join { not_before }, true) = (root.st, root.next == join.turn) {
                    self.arm(lane, 0, not_before);
                }
            }
        }
        if s == 0 {
            let done = next - 1;
            for (c, cdef) in streams.iter().enumerate().skip(1) {
                let tree = self.lanes[lane].tree.as_ref().expect("live tree");
                let spawn = cdef.spawn.expect("subagents have a spawn");
                if spawn.anchor == done && tree.streams[c].st == St::Unspawned {
                    self.arm(lane, c, now + spawn.delay_s * scale);
                }
            }
        }
    }

    /// When `lane`'s tree is idle and its next timer is more than the cap
    /// away, moves all its times up so that timer fires at `now + cap`.
    fn cap_tree_idle(&mut self, lane: usize, now: f64) {
        let Some(cap) = self.cfg.tree_idle_cap_s else { return };
        let Some(tree) = self.lanes[lane].tree.as_mut() else { return };
        if tree.in_flight > 0 {
            return;
        }
        let earliest = tree
            .streams
            .iter()
            .filter_map(|s| if let St::Due { at, .. } = s.st { Some(at) } else { None })
            .fold(f64::INFINITY, f64::min);
        if earliest.is_finite() && earliest > now + cap {
            shift_tree(tree, earliest - (now + cap));
            self.rebuild_heap();
        }
    }

    /// When nothing is in flight and the next timer is more than the
    /// system cap away, moves every timer up so it fires at `now + cap`.
    fn cap_system_idle(&mut self, now: f64) {
        let Some(cap) = self.cfg.system_idle_cap_s else { return };
        if self.in_flight > 0 || self.measure_start_s.is_none() || self.stopped.is_some() {
            return;
        }
        let Some(&Reverse(top)) = self.heap.peek() else { return };
        if top.at > now + cap {
            let by = top.at - (now + cap);
            for tree in self.lanes.iter_mut().filter_map(|l| l.tree.as_mut()) {
                shift_tree(tree, by);
            }
            self.rebuild_heap();
        }
    }

    fn rebuild_heap(&mut self) {
        let mut timers = Vec::new();
        for (lane, l) in self.lanes.iter().enumerate() {
            for (s, st) in l.tree.iter().flat_map(|t| t.streams.iter().enumerate()) {
                if let St::Due { at, seq } = st.st {
                    timers.push(Reverse(Timer { at, seq, lane: lane as u32, stream: s as u32 }));
                }
            }
        }
        self.heap = BinaryHeap::from(timers);
    }

    fn stop(&mut self, why: StopReason) {
        if self.stopped.is_none() {
            self.stopped = Some(why);
        }
        self.heap.clear();
    }

    fn deadline(&self) -> Option<f64> {
        Some(self.measure_start_s? + self.cfg.duration_s?)
    }
}

/// Moves every time of `tree` `by` seconds earlier.
fn shift_tree(tree: &mut Tree, by: f64) {
    for s in &mut tree.streams {
        match &mut s.st {
            St::Due { at, .. } | St::Done { at } => *at -= by,
            St::Join { not_before } => *not_before -= by,
            _ => {}
        }
    }
}

impl Schedule for LanesReplay<'_> {
    fn poll(&mut self, now_s: f64, _in_flight: usize, admit: &mut dyn Admit) -> Result<()> {
        loop {
            if self.deadline().is_some_and(|d| now_s >= d) {
                self.stop(StopReason::Duration);
            }
            if self.stopped.is_some() {
                return Ok(());
            }
            // Cut short by the budget: warm-up stages wait for the rest to
            // go (a lane with a due turn unsent is not idle).
            if !self.fire_due(now_s, admit)? {
                return Ok(());
            }
            if self.measure_start_s.is_some() || !self.advance_warmup(now_s) {
                break;
            }
        }
        self.cap_system_idle(now_s);
        Ok(())
    }

    fn finished(&mut self, record: usize, now_s: f64, _ok: bool) {
        let info = self.turns[record];
        let lane = info.lane as usize;
        self.in_flight -= 1;
        let tree = self.lanes[lane].tree.as_mut().expect("a request's tree lives until it finished");
        debug_assert_eq!(tree.id, info.session);
        tree.in_flight -= 1;
        if self.stopped.is_some() {
            return;
        }
        self.complete(lane, info.stream as usize, now_s);
        let tree = self.lanes[lane].tree.as_ref().expect("live tree");
        let (live, idle) = (tree.live, tree.in_flight == 0);
        if live == 0 {
            self.lanes[lane].tree = None;
            if self.lanes[lane].stage == Stage::Measured {
                if let Some(session) = self.draw(lane) {
                    let tree = self.fresh_tree(lane, session);
                    self.lanes[lane].tree = Some(tree);
                    self.arm(lane, 0, now_s);
                } else if self.lanes.iter().all(|l| l.tree.is_none()) {
                    self.stop(StopReason::Exhausted);
                }
            }
        } else if idle && self.lanes[lane].stage == Stage::Measured {
            self.cap_tree_idle(lane, now_s);
        }
        if self.lanes[lane].stage != Stage::Measured && (live == 0 || idle) {
            self.lanes_changed = true;
        }
    }

    fn next_due(&self) -> Option<f64> {
        if self.stopped.is_some() {
            return None;
        }
        let top = self.heap.peek().map(|t| t.0.at);
        match (top, self.deadline()) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        }
    }

    fn done(&self) -> bool {
        self.stopped.is_some()
    }
}
