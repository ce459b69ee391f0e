//! [`SessionReplay`]: the schedule of a loaded [`SessionSet`], picked by
//! how its sessions arrive: lanes of session trees ([`LanesReplay`], AgentX
//! traces and conversations) or a timed trace ([`TimedReplay`]); both run
//! as a [`ReplayConfig`] says and play through the one driver loop.

use anyhow::Result;

use super::driver::{Admit, Schedule};
use super::lanes::LanesReplay;
use super::replay_config::{ReplayConfig, StopReason};
use super::sessions::{Arrival, SessionSet};
use super::timed::TimedReplay;
use crate::protocol::TurnInfo;

/// The schedule of a loaded set: lanes of trees, or a timed trace.
pub enum SessionReplay<'a> {
    Lanes(LanesReplay<'a>),
    Timed(TimedReplay<'a>),
}

impl<'a> SessionReplay<'a> {
    /// Picks the schedule by how `set`'s sessions arrive.
    ///
    /// Errors: see [`LanesReplay::new`] and [`TimedReplay::new`].
    pub fn new(set: &'a SessionSet, allowed: &'a [u32], cfg: ReplayConfig) -> Result<Self> {
        Ok(match set.arrival {
            Arrival::Lanes => SessionReplay::Lanes(LanesReplay::new(set, allowed, cfg)?),
            Arrival::Timed => SessionReplay::Timed(TimedReplay::new(set, allowed, cfg)?),
        })
    }

    /// One entry per request sent, in send order.
    pub fn turns(&self) -> &[TurnInfo] {
        match self {
            SessionReplay::Lanes(r) => r.turns(),
            SessionReplay::Timed(r) => r.turns(),
        }
    }

    /// Start of the measured phase, s on the driver's clock.
    pub fn measure_start_s(&self) -> Option<f64> {
        match self {
            SessionReplay::Lanes(r) => r.measure_start_s(),
            SessionReplay::Timed(_) => Some(0.0),
        }
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        match self {
            SessionReplay::Lanes(r) => r.stop_reason(),
            SessionReplay::Timed(r) => r.stop_reason(),
        }
    }

    /// [`LanesReplay::prefetch_in`] for a lanes replay (a timed trace's
    /// prompts are built at their send).
    pub fn prefetch_in<'scope>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, 'a>,
        budget_tokens: usize,
        stager: Option<std::sync::Arc<dyn crate::engine::PromptStager>>,
    ) {
        if let SessionReplay::Lanes(r) = self {
            r.prefetch_in(scope, budget_tokens, stager);
        }
    }

    /// [`LanesReplay::stop_prefetch`].
    pub fn stop_prefetch(&mut self) -> Option<super::prefetch::PrefetchStats> {
        match self {
            SessionReplay::Lanes(r) => r.stop_prefetch(),
            SessionReplay::Timed(_) => None,
        }
    }

    fn schedule(&mut self) -> &mut dyn Schedule {
        match self {
            SessionReplay::Lanes(r) => r,
            SessionReplay::Timed(r) => r,
        }
    }

    fn schedule_ref(&self) -> &dyn Schedule {
        match self {
            SessionReplay::Lanes(r) => r,
            SessionReplay::Timed(r) => r,
        }
    }
}

impl Schedule for SessionReplay<'_> {
    fn poll(&mut self, now_s: f64, in_flight: usize, admit: &mut dyn Admit) -> Result<()> {
        self.schedule().poll(now_s, in_flight, admit)
    }
    fn finished(&mut self, record: usize, now_s: f64, ok: bool) {
        self.schedule().finished(record, now_s, ok)
    }
    fn next_due(&self) -> Option<f64> {
        self.schedule_ref().next_due()
    }
    fn done(&self) -> bool {
        self.schedule_ref().done()
    }
}
