//! Test helpers for schedules: [`OneTokenPerStep`], a fake engine that gives
//! every running request one token per step, and [`simulate`], the driver
//! loop's logic on a virtual clock (each step takes `step_s`, idle time is
//! skipped to the next due time), so a schedule's timing is checked exactly;
//! [`simulate_admitting`] adds the driver's admission budget per gap, each
//! send costing a fixed virtual time.

use anyhow::Result;

use super::driver::{Admit, Backlog, Request, Schedule};
use crate::engine::{Completion, Delta, StepEngine};
use crate::protocol::{Prompt, StepOutput};

/// A unit-test engine: every step gives one token to each running request.
#[derive(Default)]
pub struct OneTokenPerStep {
    pub running: Vec<(u64, u32, bool)>, // rid, tokens left, is text
    pub max_seen_running: usize,
    /// Keep each token request's prompt in `prompts` (by request id).
    pub keep_prompts: bool,
    pub prompts: Vec<(u64, Vec<u32>)>,
    /// Request ids that fail: they finish at their first step with no token.
    pub fail: Vec<u64>,
    /// The number of requests of each `prepare_tokens` call, in order.
    pub prepared: Vec<usize>,
}

impl StepEngine for OneTokenPerStep {
    fn add_tokens(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, _e: bool) -> Result<()> {
        if self.keep_prompts {
            self.prompts.push((rid, prompt.to_vec()));
        }
        self.running.push((rid, max_tokens, false));
        Ok(())
    }
    fn add_text(&mut self, rid: u64, _p: &Prompt, max_tokens: u32, _s: &[String]) -> Result<()> {
        self.running.push((rid, max_tokens, true));
        Ok(())
    }
    fn abort(&mut self, rids: &[u64]) -> Result<()> {
        self.running.retain(|r| !rids.contains(&r.0));
        Ok(())
    }
    fn prepare_tokens(&mut self, requests: &[(&[u32], u32, bool)]) -> Result<()> {
        self.prepared.push(requests.len());
        Ok(())
    }
    fn step(&mut self, out: &mut StepOutput) -> Result<()> {
        out.clear();
        self.max_seen_running = self.max_seen_running.max(self.running.len());
        for r in &mut self.running {
            if self.fail.contains(&r.0) {
                r.1 = 0;
                out.deltas.push(Delta { rid: r.0, new_tokens: 0, finished: true });
                continue;
            }
            r.1 -= 1;
            let finished = r.1 == 0;
            out.deltas.push(Delta { rid: r.0, new_tokens: 1, finished });
            if finished && r.2 {
                out.completions.push(Completion { rid: r.0, text: format!("done {}", r.0), token_ids: vec![7] });
            }
        }
        self.running.retain(|r| r.1 > 0);
        Ok(())
    }
}

/// A request as [`simulate`] saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    /// Its send time as the driver records it (held back by the budget:
    /// the start of the gap it was first due in).
    pub send_s: f64,
    /// When the schedule said it became due.
    pub due_s: f64,
    /// When it actually went (the virtual clock at its send).
    pub sent_at_s: f64,
    pub end_s: Option<f64>,
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
}

/// The driver's admission budget on the virtual clock: each send takes
/// `send_s`, and while anything is in flight a gap admits no more once it
/// has spent `budget(last step's time)` (the driver's rule:
/// [`super::driver::admission_budget`]).
#[derive(Debug, Clone, Copy)]
pub struct SimAdmission {
    pub send_s: f64,
    pub budget: fn(f64) -> f64,
}

/// One gap between two steps (or before an idle wait) as [`simulate_admitting`] ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimGap {
    pub start_s: f64,
    /// Its admission budget, s.
    pub budget_s: f64,
    /// Requests in flight when it started.
    pub in_flight: usize,
    pub sent: usize,
    /// Virtual time spent sending, s.
    pub spent_s: f64,
    /// The budget held a due request back.
    pub cut_short: bool,
}

/// [`Admit`] on the virtual clock.
struct SimAdmit<'a> {
    now: f64,
    adm: SimAdmission,
    budget_s: f64,
    spent: f64,
    sent: usize,
    closed: bool,
    backlog: &'a Backlog,
    reqs: &'a mut Vec<SimRequest>,
    running: &'a mut Vec<(usize, u32)>,
}

impl Admit for SimAdmit<'_> {
    fn open(&mut self) -> bool {
        if !self.running.is_empty() && self.spent >= self.budget_s {
            self.closed = true;
        }
        !self.closed
    }

    fn send(&mut self, req: Request<'_>, due_s: f64) -> Result<usize> {
        let Request::Tokens { prompt, max_tokens, .. } = req else { panic!("replays send token prompts") };
        let idx = self.reqs.len();
        let at = self.now + self.spent;
        let send_s = self.backlog.send_s(due_s, at);
        self.reqs.push(SimRequest { send_s, due_s, sent_at_s: at, end_s: None, prompt: prompt.to_vec(), max_tokens });
        self.running.push((idx, max_tokens));
        self.spent += self.adm.send_s;
        self.sent += 1;
        Ok(idx)
    }
}

/// Runs `schedule` on a virtual clock: a step takes `step_s` and gives one
/// token to every running request; `fails(i)` makes request i finish with
/// an error at its first step. Sends take no time and no budget applies.
/// Panics if the schedule would make the driver spin (due now, sends
/// nothing, twice in a row) or wait forever.
pub fn simulate(schedule: &mut dyn Schedule, step_s: f64, fails: &dyn Fn(usize) -> bool) -> Vec<SimRequest> {
    let free = SimAdmission { send_s: 0.0, budget: |_| f64::INFINITY };
    simulate_admitting(schedule, step_s, fails, free).0
}

/// [`simulate`] with the admission budget `adm`: each send takes
/// `adm.send_s` of the gap, and the gaps are returned too.
pub fn simulate_admitting(
    schedule: &mut dyn Schedule,
    step_s: f64,
    fails: &dyn Fn(usize) -> bool,
    adm: SimAdmission,
) -> (Vec<SimRequest>, Vec<SimGap>) {
    let mut now = 0.0;
    let mut reqs: Vec<SimRequest> = Vec::new();
    let mut running: Vec<(usize, u32)> = Vec::new();
    let mut gaps: Vec<SimGap> = Vec::new();
    let mut backlog = Backlog::default();
    let mut stalls = 0;
    let mut last_step_s = 0.0;
    for _ in 0..10_000_000 {
        let before = reqs.len();
        let in_flight = running.len();
        let mut admit = SimAdmit {
            now,
            adm,
            budget_s: (adm.budget)(last_step_s),
            spent: 0.0,
            sent: 0,
            closed: false,
            backlog: &backlog,
            reqs: &mut reqs,
            running: &mut running,
        };
        schedule.poll(now, in_flight, &mut admit).unwrap();
        let (spent, sent, cut_short, budget_s) = (admit.spent, admit.sent, admit.closed, admit.budget_s);
        backlog.gap_ended(now, cut_short);
        gaps.push(SimGap { start_s: now, budget_s, in_flight, sent, spent_s: spent, cut_short });
        now += spent;
        if running.is_empty() {
            if schedule.done() {
                return (reqs, gaps);
            }
            let at = schedule.next_due().expect("nothing in flight, nothing due and not done");
            if at <= now && reqs.len() == before {
                stalls += 1;
                assert!(stalls < 3, "the schedule spins: due at {at} <= now {now} but sends nothing");
            } else {
                stalls = 0;
            }
            now = f64::max(now, at);
            continue;
        }
        stalls = 0;
        now += step_s;
        last_step_s = step_s;
        let mut done = Vec::new();
        for r in &mut running {
            r.1 -= 1;
            if r.1 == 0 || fails(r.0) {
                done.push(r.0);
            }
        }
        running.retain(|r| !done.contains(&r.0));
        for idx in done {
            reqs[idx].end_s = Some(now);
            schedule.finished(idx, now, !fails(idx));
        }
    }
    panic!("the schedule did not finish");
}
