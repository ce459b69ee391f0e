//! The profile pass of one point: a batch of the point's requests, driven to
//! steady-state decode, then the [`Window`]: warm-up steps, unprofiled
//! reference steps, and the profiled steps with the profiler on only around
//! them. The pass ends by aborting what is left of its requests, so nothing
//! of it reaches into the next point.


use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Result, bail};

use crate::protocol::{ProfileRaw, ProfileTarget};
use crate::engine::{Profiler, StepEngine, StepOutput};
use crate::workload::RequestIds;

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
    let n = prompts.len();
    if n == 0 {
        bail!("a profile pass needs at least one request");
    }
    let base = ids.reserve(n);
    for (i, p) in prompts.iter().enumerate() {
        engine.add_tokens(base + i as u64, p, max_tokens, true)?;
    }
    let mut pass = Pass { tokens: vec![0; n], finished: vec![false; n], base, out: StepOutput::default() };
    let result = pass.window(engine, target, stop);
    let left: Vec<u64> = (0..n).filter(|&i| !pass.finished[i]).map(|i| base + i as u64).collect();
    if !left.is_empty() {
        engine.abort(&left)?;
    }
    result
}

struct Pass {
    tokens: Vec<u32>,
    finished: Vec<bool>,
    base: u64,
    out: StepOutput,
}

impl Pass {
    /// One step; returns its wall time, ms.
    fn step<E: StepEngine>(&mut self, engine: &mut E) -> Result<f64> {
        let t = Instant::now();
        engine.step(&mut self.out)?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        for d in &self.out.deltas {
            let Some(i) = d.rid.checked_sub(self.base).map(|i| i as usize).filter(|&i| i < self.tokens.len()) else {
                bail!("engine returned unknown request id {} in the profile pass", d.rid);
            };
            self.tokens[i] += d.new_tokens;
            self.finished[i] |= d.finished;
        }
        Ok(ms)
    }

    fn any_finished(&self) -> bool {
        self.finished.iter().any(|&f| f)
    }

    fn window<E: StepEngine + Profiler>(&mut self, engine: &mut E, target: &ProfileTarget, stop: Option<&AtomicBool>) -> Result<Option<ProfileRaw>> {
        let stopped = || stop.is_some_and(|s| s.load(Ordering::Relaxed));
        let w = target.window;
        let mut raw = ProfileRaw { point: target.point, trace: target.trace.clone(), window: w, batch: self.tokens.len() as u32, ..ProfileRaw::default() };
        while self.tokens.iter().any(|&t| t == 0) {
            if stopped() {
                return Ok(None);
            }
            if raw.prefill_steps >= MAX_PREFILL_STEPS {
                bail!("profile pass: the requests did not all get a first token within {MAX_PREFILL_STEPS} steps");
            }
            self.step(engine)?;
            raw.prefill_steps += 1;
        }
        // Every step of the window runs at the full batch: a request may only
        // finish in the last profiled step.
        let total = w.decode_steps();
        let mut done = 0u32;
        let mut timed = |p: &mut Pass, e: &mut E, phase: &str| -> Result<f64> {
            let ms = p.step(e)?;
            done += 1;
            if done < total && p.any_finished() {
                bail!("profile pass: a request finished during the {phase} steps: the window does not fit the requests' output length");
            }
            Ok(ms)
        };
        for _ in 0..w.warm {
            timed(self, engine, "warm-up")?;
        }
        // Half the reference steps (rounded up) before the window, the rest
        // after it: a machine that speeds up or slows down meanwhile moves
        // both sides alike.
        let before = w.reference.div_ceil(2);
        for _ in 0..before {
            raw.reference_ms.push(timed(self, engine, "reference")?);
        }
        if stopped() {
            return Ok(None);
        }
        let t = Instant::now();
        raw.activities = engine.profile_start()?;
        raw.start_s = t.elapsed().as_secs_f64();
        let mut steps = Ok(());
        for _ in 0..w.profiled {
            match timed(self, engine, "profiled") {
                Ok(ms) => raw.profiled_ms.push(ms),
                Err(e) => {
                    steps = Err(e);
                    break;
                }
            }
        }
        // Stop the profiler whatever happened, so it never outlives the window.
        let stopped = engine.profile_stop(&target.trace)?;
        steps?;
        for _ in before..w.reference {
            raw.reference_ms.push(timed(self, engine, "reference")?);
        }
        raw.stop_s = stopped.stop_s;
        raw.export_s = stopped.export_s;
        raw.rank_traces = stopped.other_ranks;
        Ok(Some(raw))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::engine::{Delta, ProfileStop, Prompt};
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
