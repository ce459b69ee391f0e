//! Replay prompts built ahead of their send, on a helper thread (issue 34).
//!
//! A trace turn's prompt (up to ~200k token ids on AgentX's shape, about a
//! millisecond to synthesise) is known as soon as the turn before it in its
//! stream is sent (a subagent's first turn: as soon as the root turn that
//! spawns it is), hundreds of engine steps before it is due. [`Prefetch::ask`]
//! hands its key to a builder thread then, and the send takes the finished
//! buffer ([`Prefetch::take`]) instead of building it between two engine
//! steps. The builder runs [`Synth::build`], the code the send would run, so
//! the prompt is the same token for token; one still being built is waited
//! for, one never asked for is built at the send as before.
//!
//! With an engine [`PromptStager`] (the vLLM engine's), the builder also
//! stages the prompt's engine form after building it (a Python list's item
//! array, allocated and filled without the GIL:
//! crate::engine::token_lists), and the send hands that over (issue 46).
//! The buffer and its claim travel together until the send. An ask costs
//! the driver's thread a channel send and nothing else.
//!
//! The builder takes asks one at a time, those for measured turns first
//! (a replay's handoff sends hundreds of them together, and warm-up turns,
//! due as soon as the turn before completes, are mostly built at their
//! send anyway), each kind in order. A send whose prompt is still queued
//! (not started) claims it and builds it itself: waiting would mean
//! waiting for every prompt ahead of it (up to 204 ms at 512 AgentX
//! sessions, one gap a GPU would idle through); the builder then skips it.
//! A prompt the builder has started is waited for: one build, about a
//! millisecond.
//!
//! Held buffers are bounded by a token budget (ready and being built): past
//! it a turn is built at its send. The builder lowers its priority (nice
//! 10): on a CPU engine it shares the cores with the engine's threads, on a
//! GPU host it takes an idle core.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::Scope;

use crate::engine::{PromptStager, Staged};

use super::sessions::SessionSet;
use super::synth::Synth;

/// Which prompt: turn `turn` of stream `stream` of session `session`, with
/// the session tree's cache-bust marker key (none without cache busting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PromptKey {
    pub session: u32,
    pub stream: u32,
    pub turn: u32,
    pub marker: Option<u64>,
}

/// Least budget of prompt tokens held ahead (ready or being built): 64 MiB
/// of token ids, a few hundred AgentX-sized prompts.
pub const DEFAULT_BUDGET_TOKENS: usize = 16 << 20;

/// Budget per lane ([`budget_for`]): one prompt a little over AgentX's
/// largest (~198k tokens) for each live session, 1 MiB of token ids.
pub const BUDGET_TOKENS_PER_LANE: usize = 1 << 18;

/// The budget of a replay of `lanes` live sessions: each live stream asks
/// for at most its next prompt, so what is held grows with the lanes; a
/// flat 16M tokens refused 792 asks of one AgentX replay at 256 sessions
/// (issue 46), and those prompts were built between two engine steps.
pub fn budget_for(lanes: usize) -> usize {
    DEFAULT_BUDGET_TOKENS.max(lanes.saturating_mul(BUDGET_TOKENS_PER_LANE))
}

/// How the prompts of a replay were had ([`Prefetch::stats`]): the counts
/// that say whether prompts were built off the driver's thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Taken ready at the send.
    pub taken: u64,
    /// Still being built at the send: the send waited for the builder.
    pub waited: u64,
    /// The longest of those waits, us.
    pub waited_max_us: u64,
    /// Built at the send: never asked for (primers, a recycled lane's first
    /// turn), refused for the budget, or still queued for the builder.
    pub inline: u64,
    /// Of `inline`: asked for but still queued behind other asks at the
    /// send, so claimed from the builder and built there.
    pub claimed: u64,
    /// Asks refused because the budget was spent.
    pub refused: u64,
}

/// A prompt built ahead: its token ids and, when the engine staged it, the
/// claim on its staged form (drop it after the send, before the buffer:
/// the buffer's address is the claim's key, and a freed buffer's address
/// can come back for another prompt of the same length).
pub struct Built {
    /// Declared first, so dropped first.
    pub staged: Option<Staged>,
    pub ids: Vec<u32>,
}

/// Set by whoever starts building an asked-for prompt first: the builder,
/// or a send that found it still queued (the other then leaves it).
type Claim = Arc<AtomicBool>;

/// An ask as the builder gets it: whose prompt, its claim, and whether its
/// turn goes in the measured phase ([`Prefetch::ask`]).
type Job = (PromptKey, Claim, bool);

/// The builder's asks not started yet: the measured phase's first, each
/// kind oldest first.
#[derive(Default)]
struct Queue {
    measured: VecDeque<(PromptKey, Claim)>,
    warmup: VecDeque<(PromptKey, Claim)>,
}

impl Queue {
    /// The next ask to build, after taking in every ask sent so far
    /// (waiting for one when none is queued); `None` once the driver's end
    /// is dropped.
    fn next(&mut self, todo: &Receiver<Job>) -> Option<(PromptKey, Claim)> {
        if self.measured.is_empty() && self.warmup.is_empty() {
            let job = todo.recv().ok()?;
            self.push(job);
        }
        while let Ok(job) = todo.try_recv() {
            self.push(job);
        }
        self.measured.pop_front().or_else(|| self.warmup.pop_front())
    }

    fn push(&mut self, (key, claim, measured): Job) {
        if measured { &mut self.measured } else { &mut self.warmup }.push_back((key, claim));
    }
}

/// The driver thread's end of the builder (see the module doc).
pub struct Prefetch {
    jobs: Sender<Job>,
    built: Receiver<(PromptKey, Built)>,
    /// Built and being built, with the tokens each was asked for.
    ready: HashMap<PromptKey, (Built, usize)>,
    /// Asked for and not back yet, with their tokens and claims.
    pending: HashMap<PromptKey, (usize, Claim)>,
    /// Tokens asked for of the ready buffers and of those being built.
    held_tokens: usize,
    budget_tokens: usize,
    stats: PrefetchStats,
}

impl Prefetch {
    /// Starts a builder in `scope` that synthesises prompts of `set` with
    /// `synth`, holding at most `budget_tokens` tokens ahead, and stages
    /// each with `stager` when given. The builder ends when the `Prefetch`
    /// is dropped (drop it before the scope ends).
    pub fn spawn<'scope, 'env>(
        scope: &'scope Scope<'scope, 'env>,
        set: &'env SessionSet,
        synth: Synth<'env>,
        budget_tokens: usize,
        stager: Option<Arc<dyn PromptStager>>,
    ) -> Prefetch {
        let (jobs, todo) = channel::<Job>();
        let (done, built) = channel();
        // Named so a per-thread profile of the worker tells it from vLLM's.
        // A thread that cannot start leaves every prompt to be built in line
        // (`take` then finds nothing pending).
        let _ = std::thread::Builder::new().name("eb-prefetch".into()).spawn_scoped(scope, move || {
            crate::telemetry::lower_thread_priority();
            let mut scratch = Vec::new();
            let mut queue = Queue::default();
            while let Some((key, claim)) = queue.next(&todo) {
                if claim.swap(true, Ordering::AcqRel) {
                    // Its send came first and built it.
                    continue;
                }
                let mut buf = Vec::new();
                let k = key.turn as usize;
                synth.build(set, key.session as usize, key.stream as usize, k, key.marker, &mut buf, &mut scratch);
                // Staging is an allocation and pointer stores, a fraction
                // of the build: every prompt the stager takes is staged.
                let staged = stager.as_ref().and_then(|s| s.stage(&buf));
                if done.send((key, Built { staged, ids: buf })).is_err() {
                    break;
                }
            }
        });
        Prefetch {
            jobs,
            built,
            ready: HashMap::new(),
            pending: HashMap::new(),
            held_tokens: 0,
            budget_tokens,
            stats: PrefetchStats::default(),
        }
    }

    /// Asks for `key`'s prompt (`tokens` long) to be built ahead, unless
    /// the budget is spent or it is asked for already. `measured`: its turn
    /// goes in the measured phase; the builder takes those before warm-up
    /// turns, which are due as soon as the turn before completes and are
    /// often built at their send anyway: the handoff sends hundreds of
    /// measured turns at once, and each not built ahead by then is built
    /// between two measured steps.
    pub fn ask(&mut self, key: PromptKey, tokens: usize, measured: bool) {
        if self.pending.contains_key(&key) || self.ready.contains_key(&key) {
            return;
        }
        if self.held_tokens + tokens > self.budget_tokens {
            self.stats.refused += 1;
            return;
        }
        let claim = Claim::default();
        if self.jobs.send((key, Arc::clone(&claim), measured)).is_ok() {
            self.held_tokens += tokens;
            self.pending.insert(key, (tokens, claim));
        }
    }

    /// `key`'s prompt if it was asked for (waiting for it if the builder
    /// has started it), else `None`: build it now (never asked for, or
    /// still queued: then claimed, and the builder will skip it).
    pub fn take(&mut self, key: &PromptKey) -> Option<Built> {
        self.collect();
        if let Some((buf, tokens)) = self.ready.remove(key) {
            self.held_tokens -= tokens;
            self.stats.taken += 1;
            return Some(buf);
        }
        let Some((tokens, claim)) = self.pending.get(key) else {
            self.stats.inline += 1;
            return None;
        };
        if !claim.swap(true, Ordering::AcqRel) {
            self.held_tokens -= *tokens;
            self.pending.remove(key);
            self.stats.inline += 1;
            self.stats.claimed += 1;
            return None;
        }
        self.stats.waited += 1;
        let waiting = std::time::Instant::now();
        let mut found = None;
        while let Ok((k, buf)) = self.built.recv() {
            let tokens = self.pending.remove(&k).map_or(0, |(t, _)| t);
            if k == *key {
                self.held_tokens -= tokens;
                found = Some(buf);
                break;
            }
            self.ready.insert(k, (buf, tokens));
        }
        self.stats.waited_max_us = self.stats.waited_max_us.max(waiting.elapsed().as_micros() as u64);
        found
    }

    /// Moves finished buffers into `ready` without waiting.
    fn collect(&mut self) {
        while let Ok((k, buf)) = self.built.try_recv() {
            let tokens = self.pending.remove(&k).map_or(0, |(t, _)| t);
            self.ready.insert(k, (buf, tokens));
        }
    }

    /// How the prompts taken so far were had.
    pub fn stats(&self) -> PrefetchStats {
        self.stats
    }

    /// Bytes of the buffers held ready.
    pub fn memory_bytes(&self) -> usize {
        // A staged list's item array holds a pointer per token.
        self.ready.values().map(|(b, _)| b.ids.capacity() * 4 + b.staged.as_ref().map_or(0, |_| b.ids.len() * 8)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::lanes::LanesReplay as Replay;
    use crate::workload::replay_config::ReplayConfig;
    use crate::workload::agentx_shape::Shape;
    use crate::workload::testkit::simulate;
    use crate::protocol::ReplayPhase;

    fn config() -> ReplayConfig {
        ReplayConfig {
            lanes: 3,
            seed: 5,
            run_id: 9,
            start_min_ratio: 0.25,
            start_max_ratio: 0.75,
            warmup_requests_per_lane: 2,
            tree_idle_cap_s: Some(300.0),
            system_idle_cap_s: Some(10.0),
            duration_s: None,
            max_requests: Some(40),
            time_scale: 1.0,
            cache_bust: true,
            ignore_eos: true,
        }
    }

    /// Six AgentX-shaped sessions with subagents, and the token ids to draw from.
    fn small_set() -> (crate::workload::sessions::SessionSet, Vec<u32>) {
        let shape = Shape { sessions: 6, root_turns: 8, subagents: 2, subagent_turns: 3, block_size: 16, compact_at: (30_000, 40_000) };
        (shape.build(7).unwrap(), (0..1000).collect())
    }

    #[test]
    fn prefetched_prompts_are_the_prompts_built_at_send() {
        let (set, allowed) = small_set();
        let plain = simulate(&mut Replay::new(&set, &allowed, config()).unwrap(), 0.05, &|_| false);
        for budget in [DEFAULT_BUDGET_TOKENS, 0] {
            let (ahead, stats, turns) = std::thread::scope(|scope| {
                let mut r = Replay::new(&set, &allowed, config()).unwrap();
                r.prefetch_in(scope, budget, None);
                let reqs = simulate(&mut r, 0.05, &|_| false);
                (reqs, r.stop_prefetch().unwrap(), r.turns().to_vec())
            });
            assert_eq!(plain, ahead, "budget {budget}: the same requests, prompts token for token");
            let PrefetchStats { taken, waited, inline, refused, claimed, .. } = stats;
            assert_eq!(taken + waited + inline, plain.len() as u64, "every send counted once: {stats:?}");
            assert!(claimed <= inline, "{stats:?}");
            if budget == 0 {
                assert_eq!(taken + waited, 0, "nothing held past the budget");
                assert!(refused > 0, "asks over the budget counted: {stats:?}");
            } else {
                // Asked for ahead: built by the builder, or still queued at
                // the send (this simulation gives the builder no time
                // between steps) and built there.
                let ahead = taken + waited + claimed;
                assert!(ahead > plain.len() as u64 / 2, "{stats:?}: {ahead} of {} asked for ahead", plain.len());
                assert_eq!(refused, 0, "{stats:?}");
                // Built at the send, at most: primers, recycled roots' first
                // turns, and subagents held since the mid-trace start (their
                // anchors went before it); a subagent spawned later was asked
                // for when its anchor root turn was sent.
                let count = |f: &dyn Fn(&crate::protocol::TurnInfo) -> bool| turns.iter().filter(|t| f(t)).count() as u64;
                let primers = count(&|t| t.phase == ReplayPhase::Primer);
                let roots = count(&|t| t.phase != ReplayPhase::Primer && t.stream == 0 && t.turn == 0);
                let held = count(&|t| t.phase == ReplayPhase::Warmup && t.stream > 0 && t.turn == 0);
                let spawned = count(&|t| t.phase == ReplayPhase::Measured && t.stream > 0 && t.turn == 0);
                assert!(spawned > 0, "the run has subagents spawned in the measured phase");
                let unasked = inline - claimed;
                assert!(unasked <= primers + roots + held, "{stats:?}: {primers} primers, {roots} roots, {held} held");
            }
        }
    }

    /// Counts stagings and dropped claims; stages every prompt.
    #[derive(Default)]
    struct Counting {
        staged: std::sync::atomic::AtomicUsize,
        dropped: Arc<std::sync::atomic::AtomicUsize>,
    }

    struct CountDrop(Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl PromptStager for Counting {
        fn report(&self) -> crate::engine::StageReport {
            crate::engine::StageReport { made: self.staged.load(std::sync::atomic::Ordering::SeqCst) as u64, ..Default::default() }
        }

        fn stage(&self, _prompt: &[u32]) -> Option<Staged> {
            self.staged.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(Staged(Box::new(CountDrop(Arc::clone(&self.dropped)))))
        }
    }

    /// Waits (at most 10 s) until every prompt asked for is built, as the
    /// hundreds of steps between a replay's ask and its send allow.
    fn settle(p: &mut Prefetch) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !p.pending.is_empty() && std::time::Instant::now() < until {
            p.collect();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn an_asked_prompt_is_built_and_staged_ahead_and_one_never_asked_at_the_send() {
        let (set, allowed) = small_set();
        let synth = Synth::new(&allowed, 3);
        let counting = Arc::new(Counting::default());
        let key = |turn| PromptKey { session: 0, stream: 0, turn, marker: None };
        let len = |turn: u32| {
            let (mut buf, mut scratch) = (Vec::new(), Vec::new());
            synth.build(&set, 0, 0, turn as usize, None, &mut buf, &mut scratch);
            buf.len()
        };
        let stats = std::thread::scope(|scope| {
            let mut p = Prefetch::spawn(scope, &set, synth, DEFAULT_BUDGET_TOKENS, Some(Arc::clone(&counting) as Arc<dyn PromptStager>));
            assert!(p.take(&key(1)).is_none(), "never asked for: built at the send");
            p.ask(key(2), len(2), true);
            settle(&mut p);
            let Built { staged, ids: buf } = p.take(&key(2)).expect("built ahead");
            assert_eq!(buf.len(), len(2));
            assert!(staged.is_some());
            assert_eq!(p.held_tokens, 0, "nothing held after both sends");
            p.stats()
        });
        assert_eq!((stats.inline, stats.claimed, stats.taken + stats.waited), (1, 0, 1), "{stats:?}");
        assert_eq!(counting.staged.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn the_builder_takes_measured_turns_first_each_kind_in_order() {
        let key = |turn| PromptKey { session: 0, stream: 0, turn, marker: None };
        let (jobs, todo) = channel::<Job>();
        for (turn, measured) in [(1, false), (2, true), (3, false), (4, true)] {
            jobs.send((key(turn), Claim::default(), measured)).unwrap();
        }
        let mut queue = Queue::default();
        let first = queue.next(&todo).map(|(k, _)| k.turn);
        jobs.send((key(5), Claim::default(), true)).unwrap();
        drop(jobs);
        let rest: Vec<u32> = std::iter::from_fn(|| queue.next(&todo).map(|(k, _)| k.turn)).collect();
        assert_eq!((first, rest), (Some(2), vec![4, 5, 1, 3]), "measured asks first, then warm-up ones, each oldest first; none after the driver's end is dropped");
    }

    /// Stages nothing; says when the builder is in `stage` and holds it
    /// there until the gate opens.
    struct Gate {
        entered: std::sync::Mutex<Sender<()>>,
        open: std::sync::Mutex<Receiver<()>>,
    }

    impl PromptStager for Gate {
        fn report(&self) -> crate::engine::StageReport {
            Default::default()
        }

        fn stage(&self, _prompt: &[u32]) -> Option<Staged> {
            let _ = self.entered.lock().unwrap().send(());
            // Bounded, so that a send that waits fails the test, not hangs it.
            let _ = self.open.lock().unwrap().recv_timeout(std::time::Duration::from_secs(2));
            None
        }
    }

    #[test]
    fn a_send_builds_a_prompt_still_queued_instead_of_waiting_for_the_builder() {
        let (set, allowed) = small_set();
        let synth = Synth::new(&allowed, 3);
        let (open, gate) = channel();
        let (entered_tx, entered) = channel();
        let key = |turn| PromptKey { session: 0, stream: 0, turn, marker: None };
        let stats = std::thread::scope(|scope| {
            let gate = Gate { entered: std::sync::Mutex::new(entered_tx), open: std::sync::Mutex::new(gate) };
            let stager = Arc::new(gate) as Arc<dyn PromptStager>;
            let mut p = Prefetch::spawn(scope, &set, synth, DEFAULT_BUDGET_TOKENS, Some(stager));
            // The builder is held on turn 1, so turn 2 stays queued behind it.
            p.ask(key(1), 100, true);
            p.ask(key(2), 100, true);
            entered.recv_timeout(std::time::Duration::from_secs(10)).expect("the builder started turn 1");
            let asked = std::time::Instant::now();
            assert!(p.take(&key(2)).is_none(), "a queued prompt is built at the send");
            assert!(asked.elapsed() < std::time::Duration::from_secs(1), "without waiting for the builder");
            assert_eq!(p.held_tokens, 100, "the claimed prompt leaves the budget");
            open.send(()).unwrap();
            assert!(p.take(&key(1)).is_some(), "a prompt the builder started is waited for");
            assert_eq!(p.held_tokens, 0);
            p.stats()
        });
        assert_eq!((stats.claimed, stats.inline, stats.waited + stats.taken), (1, 1, 1), "{stats:?}");
    }

    #[test]
    fn staged_prompts_change_nothing_sent_and_every_claim_is_dropped() {
        let (set, allowed) = small_set();
        let plain = simulate(&mut Replay::new(&set, &allowed, config()).unwrap(), 0.05, &|_| false);
        let counting = Arc::new(Counting::default());
        let (staged, stats) = std::thread::scope(|scope| {
            let mut r = Replay::new(&set, &allowed, config()).unwrap();
            r.prefetch_in(scope, DEFAULT_BUDGET_TOKENS, Some(Arc::clone(&counting) as Arc<dyn PromptStager>));
            let reqs = simulate(&mut r, 0.05, &|_| false);
            (reqs, r.stop_prefetch().unwrap())
        });
        assert_eq!(plain, staged, "the same requests, prompts token for token");
        let made = counting.staged.load(std::sync::atomic::Ordering::SeqCst);
        // Every prompt the builder built is staged: all but those built at
        // the send (never asked for, or claimed there still queued).
        let asked = made + stats.claimed as usize;
        assert!(asked > plain.len() / 2, "{made} staged and {} claimed of {}", stats.claimed, plain.len());
        assert_eq!(counting.dropped.load(std::sync::atomic::Ordering::SeqCst), made, "every claim dropped (sent or withdrawn)");
    }
}
