//! [`TimedReplay`]: the [`Schedule`] of a timed trace (vLLM's
//! `timed_trace` dataset, Mooncake's traces): each line is a one-turn
//! session released at `timestamp * time_scale` seconds after the start
//! (absolute offsets, as vLLM's `--self-timed` sends them,
//! notes/agentx.md 7), in timestamp order; at most `lanes` requests are in
//! flight (a released request waits for a free slot, as vLLM's
//! `--max-concurrency` semaphore; its due time, for the driver's admission
//! budget, is the later of its release and its slot's freeing); a line of a trace with a session key is
//! reported as a turn of its conversation (the arrivals stay the recorded
//! ones). No warm-up, no mid-trace start. Stops
//! after `duration_s` or `max_requests`, or at the end of the file. With
//! `system_idle_cap_s`, when nothing is in flight and the next release is
//! more than the cap away, the rest of the trace moves up so it is released
//! at the cap (a trace whose timestamps start late starts at once). All
//! lines share one hash-id namespace; with cache busting one marker for
//! the whole replay goes before every prompt, so lines still share their
//! blocks with each other but nothing with an earlier replay.

use anyhow::Result;

use super::driver::{Admit, Request, Schedule, Slots};
use super::replay_config::{ReplayConfig, StopReason};
use super::sessions::{Arrival, Content, SessionSet};
use super::synth::{Synth, covered_blocks};
use crate::error::usage;
use crate::protocol::{ReplayPhase, TurnInfo};

pub struct TimedReplay<'a> {
    set: &'a SessionSet,
    synth: Synth<'a>,
    cfg: ReplayConfig,
    marker: Option<u64>,
    next: usize,
    in_flight: usize,
    /// The `lanes` slots, with when each freed (a request's due time).
    slots: Slots,
    /// Seconds the idle cap has moved the rest of the trace up.
    shift_s: f64,
    stopped: Option<StopReason>,
    turns: Vec<TurnInfo>,
    buf: Vec<u32>,
    scratch: Vec<u32>,
}

impl<'a> TimedReplay<'a> {
    /// A replay of the timed `set`. Of `cfg`, `lanes` (most requests in
    /// flight), `seed`, `run_id`, `time_scale`, `system_idle_cap_s`,
    /// `duration_s`, `max_requests`, `cache_bust` and `ignore_eos` apply.
    ///
    /// Errors (usage): see [`ReplayConfig::check`]; an empty or a lanes set,
    /// an empty `allowed`.
    pub fn new(set: &'a SessionSet, allowed: &'a [u32], cfg: ReplayConfig) -> Result<Self> {
        cfg.check()?;
        if set.sessions.is_empty() || set.arrival != Arrival::Timed {
            return Err(usage("a timed replay needs a non-empty timed trace"));
        }
        if allowed.is_empty() {
            return Err(usage("the tokenizer left no token ids to build prompts from"));
        }
        let synth = Synth::new(allowed, cfg.seed);
        let slots = Slots::new(cfg.lanes);
        let marker = cfg.cache_bust.then(|| synth.marker_key(cfg.run_id, 0, 0, set.sessions[0].ns_key));
        Ok(TimedReplay {
            set,
            synth,
            cfg,
            marker,
            next: 0,
            in_flight: 0,
            slots,
            shift_s: 0.0,
            stopped: None,
            turns: Vec::new(),
            buf: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// One entry per request sent, in send order.
    pub fn turns(&self) -> &[TurnInfo] {
        &self.turns
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stopped
    }

    /// When line `i` (in timestamp order) is released, s.
    fn release(&self, i: usize) -> f64 {
        let first = self.set.session_streams(i)[0].first_turn as usize;
        self.set.turns[first].t_s * self.cfg.time_scale - self.shift_s
    }

    fn stop(&mut self, why: StopReason) {
        self.stopped.get_or_insert(why);
    }

    /// Sends line `next`, released at `release` s.
    fn send_next(&mut self, release: f64, admit: &mut dyn Admit) -> Result<()> {
        let (set, i) = (self.set, self.next);
        let turn = set.turns[set.session_streams(i)[0].first_turn as usize];
        self.synth.build(set, i, 0, 0, self.marker, &mut self.buf, &mut self.scratch);
        let freed = self.slots.take().expect("a slot is free");
        let request = Request::Tokens { prompt: &self.buf, max_tokens: turn.max_tokens, ignore_eos: self.cfg.ignore_eos };
        admit.send(request, release.max(freed))?;
        let hit_tokens = match set.content {
            // A hit partial block counts its tokens.
            Content::Blocks { block_size } if set.named_partial_block => (turn.hit * block_size).min(turn.input),
            Content::Blocks { block_size } => {
                turn.hit.min(covered_blocks(turn.ids_len(), turn.input, block_size)) * block_size
            }
            Content::Tokens => turn.hit,
        };
        // A line of a keyed trace is a turn of its conversation.
        let (session, k) = set.timed_sessions.get(i).copied().unwrap_or((i as u32, 0));
        self.turns.push(TurnInfo {
            trace: i as u32,
            session,
            lane: 0,
            stream: 0,
            turn: k,
            phase: ReplayPhase::Measured,
            max_tokens: turn.max_tokens,
            blocks: turn.ids_len(),
            hit_blocks: turn.hit,
            theoretical_hit_tokens: hit_tokens,
        });
        self.next += 1;
        self.in_flight += 1;
        if self.cfg.max_requests.is_some_and(|m| self.turns.len() >= m as usize) {
            self.stop(StopReason::MaxRequests);
        } else if self.next == self.set.sessions.len() {
            self.stop(StopReason::Exhausted);
        }
        Ok(())
    }
}

impl Schedule for TimedReplay<'_> {
    fn poll(&mut self, now_s: f64, _in_flight: usize, admit: &mut dyn Admit) -> Result<()> {
        if self.cfg.duration_s.is_some_and(|d| now_s >= d) {
            self.stop(StopReason::Duration);
        }
        while self.stopped.is_none() && self.slots.any() && self.release(self.next) <= now_s && admit.open() {
            self.send_next(self.release(self.next), admit)?;
        }
        if let Some(cap) = self.cfg.system_idle_cap_s {
            if self.stopped.is_none() && self.in_flight == 0 {
                let at = self.release(self.next);
                if at > now_s + cap {
                    self.shift_s += at - (now_s + cap);
                }
            }
        }
        Ok(())
    }

    fn finished(&mut self, _record: usize, now_s: f64, _ok: bool) {
        self.in_flight -= 1;
        self.slots.release(now_s);
    }

    fn next_due(&self) -> Option<f64> {
        if self.stopped.is_some() {
            return None;
        }
        let at = self.release(self.next);
        Some(self.cfg.duration_s.map_or(at, |d| at.min(d)))
    }

    fn done(&self) -> bool {
        self.stopped.is_some()
    }
}
