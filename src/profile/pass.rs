//! The profile pass of one point: a batch of the point's requests, driven
//! through the one driver loop ([`drive_stepwise`]) to steady-state decode,
//! then the [`Window`](crate::protocol::Window): warm-up steps, unprofiled reference steps, and the
//! profiled steps with the profiler on only around them (turned on and off
//! between two steps by the driver's step hook). The pass ends the loop
//! once the window is over: the driver aborts what is left of its requests,
//! so nothing of it reaches into the next point.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Result, bail};

use crate::engine::{Profiler, StepEngine};
use crate::protocol::{ProfileRaw, ProfileTarget};
use crate::workload::RequestIds;
use crate::workload::driver::{AfterStep, ListSchedule, Request, drive_stepwise};

/// Most steps a pass may take to get every request its first token.
const MAX_PREFILL_STEPS: u32 = 100_000;

/// Runs the pass: `prompts` (the batch) start together with `max_tokens`
/// each (`ignore_eos`); once every request has its first token, the
/// target's window runs. Returns `None` when `stop` was set (Ctrl-C); the
/// requests are aborted either way.
///
/// Errors: the engine failed, or a request finished before the window was
/// over (the window does not fit its output length).
pub fn run_pass<E: StepEngine + Profiler>(
    engine: &mut E,
    prompts: &[&[u32]],
    max_tokens: u32,
    target: &ProfileTarget,
    ids: &mut RequestIds,
    stop: Option<&AtomicBool>,
) -> Result<Option<ProfileRaw>> {
    if prompts.is_empty() {
        bail!("a profile pass needs at least one request");
    }
    let requests: Vec<Request<'_>> = prompts.iter().map(|&prompt| Request::Tokens { prompt, max_tokens, ignore_eos: true }).collect();
    let mut schedule = ListSchedule::new(&requests, requests.len(), None);
    let mut pass = Pass::new(target, prompts.len() as u32, stop);
    let looped = drive_stepwise(engine, &mut schedule, stop, ids, &mut |_| {}, &mut |e, after| Ok(pass.after_step(e, after)));
    // Stop the profiler whatever happened, so it never outlives the window.
    if pass.profiling {
        engine.profile_stop(&target.trace)?;
    }
    looped?;
    if let Some(e) = pass.failure {
        return Err(e);
    }
    match pass.state {
        State::Done => Ok(Some(pass.raw)),
        _ if stop.is_some_and(|s| s.load(Ordering::Relaxed)) => Ok(None),
        _ => bail!("profile pass: the requests finished before the window was over: the window does not fit the requests' output length"),
    }
}

/// Where the pass stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Some request has no first token yet.
    Prefill,
    /// `n` decode steps of the window taken.
    Window(u32),
    Done,
}

/// Which part of the window a decode step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warm,
    Reference,
    Profiled,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Warm => "warm-up",
            Phase::Reference => "reference",
            Phase::Profiled => "profiled",
        }
    }
}

/// The pass's step hook: counts the steps, times the window's steps, and
/// turns the profiler on before the first profiled step and off after the
/// last. A problem ends the loop and is kept in `failure`.
struct Pass<'a> {
    target: &'a ProfileTarget,
    stop: Option<&'a AtomicBool>,
    raw: ProfileRaw,
    state: State,
    profiling: bool,
    failure: Option<anyhow::Error>,
}

impl<'a> Pass<'a> {
    fn new(target: &'a ProfileTarget, batch: u32, stop: Option<&'a AtomicBool>) -> Self {
        let raw = ProfileRaw { point: target.point, trace: target.trace.clone(), window: target.window, batch, ..ProfileRaw::default() };
        Pass { target, stop, raw, state: State::Prefill, profiling: false, failure: None }
    }

    /// The phase of decode step `k` of the window: warm-up steps, half the
    /// reference steps (rounded up), the profiled steps, the other half: a
    /// machine that speeds up or slows down meanwhile moves both sides alike.
    fn phase(&self, k: u32) -> Phase {
        let w = self.raw.window;
        let before = w.warm + w.reference.div_ceil(2);
        if k < w.warm {
            Phase::Warm
        } else if k < before || k >= before + w.profiled {
            Phase::Reference
        } else {
            Phase::Profiled
        }
    }

    /// After each step: whether the loop goes on.
    fn after_step<E: Profiler>(&mut self, engine: &mut E, after: &AfterStep<'_>) -> bool {
        match self.step_taken(engine, after) {
            Ok(go_on) => go_on,
            Err(e) => {
                self.failure = Some(e);
                false
            }
        }
    }

    fn step_taken<E: Profiler>(&mut self, engine: &mut E, after: &AfterStep<'_>) -> Result<bool> {
        let total = self.raw.window.decode_steps();
        let taken = match self.state {
            State::Prefill => {
                self.raw.prefill_steps += 1;
                if after.awaiting_first_token > 0 {
                    if self.raw.prefill_steps >= MAX_PREFILL_STEPS {
                        bail!("profile pass: the requests did not all get a first token within {MAX_PREFILL_STEPS} steps");
                    }
                    return Ok(true);
                }
                0
            }
            State::Window(k) => {
                let phase = self.phase(k);
                match phase {
                    Phase::Warm => {}
                    Phase::Reference => self.raw.reference_ms.push(after.step.dur_ms),
                    Phase::Profiled => self.raw.profiled_ms.push(after.step.dur_ms),
                }
                // Every step of the window runs at the full batch: a request
                // may only finish in the last one.
                if k + 1 < total && after.finished > 0 {
                    bail!(
                        "profile pass: a request finished during the {} steps: the window does not fit the requests' output length",
                        phase.name()
                    );
                }
                if phase == Phase::Profiled && (k + 1 == total || self.phase(k + 1) != Phase::Profiled) {
                    self.profiling = false;
                    let stopped = engine.profile_stop(&self.target.trace)?;
                    self.raw.stop_s = stopped.stop_s;
                    self.raw.export_s = stopped.export_s;
                    self.raw.rank_traces = stopped.other_ranks;
                }
                k + 1
            }
            State::Done => unreachable!("the loop ends when the window is over"),
        };
        if taken == total {
            self.state = State::Done;
            return Ok(false);
        }
        self.state = State::Window(taken);
        if self.phase(taken) == Phase::Profiled && !self.profiling {
            if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Ok(false);
            }
            let t = Instant::now();
            self.raw.activities = engine.profile_start()?;
            self.raw.start_s = t.elapsed().as_secs_f64();
            self.profiling = true;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::engine::{Delta, ProfileStop, Prompt, StepOutput};
    use crate::protocol::Window;

    /// A fake engine: a request's prefill takes `prefill_steps[i]` steps
    /// (its first token comes with the last), then one token per step. It
    /// logs whether the profiler was on during each step and how many
    /// requests ran.
    #[derive(Default)]
    struct Fake {
        prefill: Vec<u32>,
        running: Vec<(u64, u32, u32, u32)>, // rid, prefill steps left, tokens, max
        profiling: bool,
        log: Vec<(bool, usize, bool)>,      // profiler on, running, all decoding
        traces: Vec<std::path::PathBuf>,
    }

    impl StepEngine for Fake {
        fn add_tokens(&mut self, rid: u64, _p: &[u32], max_tokens: u32, _e: bool) -> Result<()> {
            let pf = self.prefill.get(self.running.len()).copied().unwrap_or(1);
            self.running.push((rid, pf, 0, max_tokens));
            Ok(())
        }
        fn add_text(&mut self, _r: u64, _p: &Prompt, _m: u32, _s: &[String]) -> Result<()> {
            unreachable!()
        }
        fn abort(&mut self, rids: &[u64]) -> Result<()> {
            self.running.retain(|r| !rids.contains(&r.0));
            Ok(())
        }
        fn step(&mut self, out: &mut StepOutput) -> Result<()> {
            out.clear();
            let all_decoding = self.running.iter().all(|r| r.1 == 0);
            self.log.push((self.profiling, self.running.len(), all_decoding));
            for r in &mut self.running {
                if r.1 > 0 {
                    r.1 -= 1;
                    if r.1 > 0 {
                        continue;
                    }
                }
                r.2 += 1;
                out.deltas.push(Delta { rid: r.0, new_tokens: 1, finished: r.2 == r.3 });
            }
            self.running.retain(|r| r.2 < r.3);
            Ok(())
        }
    }

    impl Profiler for Fake {
        fn profile_start(&mut self) -> Result<Vec<String>> {
            assert!(!self.profiling);
            self.profiling = true;
            Ok(vec!["CPU".into()])
        }
        fn profile_stop(&mut self, trace: &Path) -> Result<ProfileStop> {
            self.profiling = false;
            self.traces.push(trace.to_path_buf());
            Ok(ProfileStop::default())
        }
    }

    fn target(warm: u32, n: u32) -> ProfileTarget {
        ProfileTarget { point: 3, window: Window { warm, reference: n, profiled: n }, trace: "/t/trace-x.json.gz".into() }
    }

    #[test]
    fn window_is_steady_state_decode_and_profiler_brackets_exactly_it() {
        // Three requests; the last one's prefill takes 3 steps (chunked).
        let mut e = Fake { prefill: vec![1, 2, 3], ..Fake::default() };
        let p: Vec<u32> = vec![1, 2, 3];
        let prompts: Vec<&[u32]> = vec![&p, &p, &p];
        let mut ids = RequestIds::default();
        let raw = run_pass(&mut e, &prompts, 32, &target(2, 4), &mut ids, None).unwrap().unwrap();
        assert_eq!(raw.prefill_steps, 3);
        assert_eq!((raw.reference_ms.len(), raw.profiled_ms.len()), (4, 4));
        assert_eq!(raw.batch, 3);
        assert_eq!(raw.point, 3);
        assert_eq!(e.traces, vec![std::path::PathBuf::from("/t/trace-x.json.gz")]);
        // The log: 3 prefill steps, 2 warm, 2 reference, 4 profiled, 2 reference.
        assert_eq!(e.log.len(), 13);
        let on: Vec<usize> = (0..e.log.len()).filter(|&i| e.log[i].0).collect();
        assert_eq!(on, vec![7, 8, 9, 10], "the profiler is on for exactly the profiled steps");
        for (i, &(_, running, all_decoding)) in e.log.iter().enumerate().skip(3) {
            assert!(all_decoding && running == 3, "step {i}: steady-state decode at the full batch");
        }
        // The pass leaves nothing behind for the next point.
        assert!(e.running.is_empty());
        assert!(!e.profiling);
        // Ids continue after the pass.
        assert_eq!(ids.reserve(1), 3);
    }

    #[test]
    fn a_window_longer_than_the_requests_fails_and_stops_the_profiler() {
        let mut e = Fake::default();
        let p: Vec<u32> = vec![1];
        // max_tokens 6: first token + 5 decode steps, but the window needs 2 + 2 + 3 (+ 1 after).
        let err = run_pass(&mut e, &[&p], 6, &target(2, 3), &mut RequestIds::default(), None).unwrap_err();
        assert!(format!("{err}").contains("finished during the profiled steps"), "{err}");
        assert!(!e.profiling, "the profiler was stopped");
        assert!(e.running.is_empty());
    }

    #[test]
    fn stop_returns_nothing_and_aborts() {
        let mut e = Fake::default();
        let p: Vec<u32> = vec![1];
        let stop = AtomicBool::new(true);
        assert!(run_pass(&mut e, &[&p, &p], 40, &target(2, 2), &mut RequestIds::default(), Some(&stop)).unwrap().is_none());
        assert!(e.running.is_empty() && e.traces.is_empty());
    }
}

/// The profile pass of point `spec`: its batch is the first
/// `min(conc, num_prompts)` measured prompts of the point's workload (the
/// same seeded draw), each asking for the point's shortest output length.
/// See [`run_pass`].
///
/// Errors: as [`run_pass`].
pub fn profile_point<E: StepEngine + Profiler>(
    engine: &mut E,
    spec: &crate::protocol::PointSpec,
    target: &ProfileTarget,
    allowed_token_ids: &[u32],
    ids: &mut RequestIds,
    stop: Option<&AtomicBool>,
) -> Result<Option<ProfileRaw>> {
    let p = &spec.point;
    let total = (p.warmups + p.num_prompts) as usize;
    let workload = spec.dataset.draw(total, allowed_token_ids);
    let batch = p.conc.min(p.num_prompts).max(1) as usize;
    let prompts: Vec<&[u32]> = workload.prompts.iter().skip(p.warmups as usize).take(batch).map(|v| v.as_slice()).collect();
    let d = &spec.dataset;
    let max_tokens = d.convention.bounds(d.osl, d.range_ratio).0.max(target.window.max_tokens());
    run_pass(engine, &prompts, max_tokens, target, ids, stop)
}
