//! Which rank a data-parallel job's failure names when several ranks
//! report trouble at once.
//!
//! A rank that dies (SIGKILL, the OOM killer, a node lost) makes its peers
//! fail too: vLLM's ranks meet in collectives (the DP all-reduce of
//! `has_unfinished_dp`, a MoE forward's sync), so a survivor raises "peer
//! gone" or a collective's error. Both reports race to the orchestrator
//! over different pipes (another node's group, another reader thread), and
//! the first to arrive used to be the failure: a survivor's error could
//! name rank 0 for a rank killed on node 1. So a rank's *error* waits
//! [`GRACE`] for a *death* of another rank; a death that comes in that
//! time is the failure, with the error quoted after it. A death, or an
//! error of the user's input, is the failure at once.
//!
//! Not a death for this: the end of a rank that reported an error itself
//! (a worker exits after reporting), and the end of a process of no rank
//! (a spanning engine's follower, which ends with the engine it serves):
//! while an error waits, these are taken as its consequences. Among ranks
//! that all reported errors, the first report stands: which of them is
//! the cause cannot be told from the order they arrive in.

use std::time::{Duration, Instant};

use crate::report::result::RunError;

/// How long a rank's error waits for another rank's death to be seen.
/// A killed rank's death reaches the orchestrator within milliseconds of
/// its peers' errors (one pipe or one node group's `waitpid` away); two
/// seconds cover a loaded machine and delay ending the job by no more.
pub const GRACE: Duration = Duration::from_secs(2);

/// A rank's error waiting out [`GRACE`].
#[derive(Debug)]
struct Suspect {
    rank: usize,
    error: RunError,
    at: Instant,
}

/// The failure the job ends with: the rank it names and why.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    pub rank: usize,
    pub error: RunError,
}

/// The blame of one job's ranks ([module doc](self)).
#[derive(Debug, Default)]
pub struct Blame {
    suspect: Option<Suspect>,
    /// Ranks that reported an error (the suspect's among them).
    reported: std::collections::BTreeSet<usize>,
}

impl Blame {
    /// Rank `rank` reported `error` at `now`: a verdict at once for bad
    /// input, else `None` (the error waits; a later error of another rank
    /// changes nothing: the first one stays the suspect).
    pub fn on_error(&mut self, rank: usize, error: RunError, now: Instant) -> Option<Verdict> {
        if error.bad_input {
            return Some(Verdict { rank, error });
        }
        self.reported.insert(rank);
        if self.suspect.is_none() {
            self.suspect = Some(Suspect { rank, error, at: now });
        }
        None
    }

    /// Rank `rank` (`None`: a process of no rank, a node's headless
    /// follower) ended before finishing, `message` saying how, seen at
    /// `now`. While an error waits, the end of a rank that reported one or
    /// of a process of no rank is its consequence: `None`, the error keeps
    /// waiting. Any other death is the verdict, quoting the waiting error.
    pub fn on_death(&mut self, rank: Option<usize>, message: String, now: Instant) -> Option<Verdict> {
        match self.suspect.take() {
            Some(s) if rank.is_none_or(|r| self.reported.contains(&r)) => {
                self.suspect = Some(s);
                None
            }
            Some(s) => {
                let before_ms = now.saturating_duration_since(s.at).as_millis();
                let message = format!("{message} (reported {before_ms} ms before that death was seen: {})", s.error.message);
                Some(Verdict { rank: rank.unwrap_or(0), error: RunError { message, traceback: s.error.traceback, ..RunError::default() } })
            }
            None => Some(Verdict { rank: rank.unwrap_or(0), error: RunError { message, ..RunError::default() } }),
        }
    }

    /// The suspect's error once it has waited [`GRACE`] by `now` (or at
    /// once with `now = None`: the job is over, nothing more will come).
    pub fn due(&mut self, now: Option<Instant>) -> Option<Verdict> {
        let ready = self.suspect.as_ref().is_some_and(|s| now.is_none_or(|n| n.saturating_duration_since(s.at) >= GRACE));
        ready.then(|| self.suspect.take().expect("checked")).map(|s| Verdict { rank: s.rank, error: s.error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(message: &str) -> RunError {
        RunError { message: message.into(), traceback: Some("tb".into()), ..RunError::default() }
    }

    #[test]
    fn a_death_after_a_peers_error_is_the_failure() {
        let t0 = Instant::now();
        let mut b = Blame::default();
        assert_eq!(b.on_error(0, err("data-parallel rank 0: a peer rank is gone"), t0), None);
        // Rank 0's own worker exits after its error: not a verdict.
        assert_eq!(b.on_death(Some(0), "rank 0 ended".into(), t0 + Duration::from_millis(5)), None);
        assert_eq!(b.due(Some(t0 + Duration::from_millis(100))), None, "still within the grace");
        let v = b.on_death(Some(1), "data-parallel rank 1 (node 1) ended unexpectedly (signal 9)".into(), t0 + Duration::from_millis(40)).unwrap();
        assert_eq!(v.rank, 1);
        assert!(v.error.message.starts_with("data-parallel rank 1 (node 1) ended unexpectedly"), "{}", v.error.message);
        assert!(v.error.message.contains("40 ms before") && v.error.message.contains("a peer rank is gone"), "{}", v.error.message);
        assert_eq!(b.due(None), None, "decided once");
    }

    #[test]
    fn ends_of_reporting_ranks_and_followers_are_consequences() {
        let t0 = Instant::now();
        let mut b = Blame::default();
        b.on_error(0, err("data-parallel rank 0: a genuine error"), t0);
        // Rank 1 noticed the loss of its peer, reported it and exited.
        b.on_error(1, err("data-parallel rank 1: a peer rank is gone"), t0);
        assert_eq!(b.on_death(Some(1), "rank 1 ended".into(), t0), None);
        assert_eq!(b.on_death(None, "node 1's headless follower ended".into(), t0), None);
        assert_eq!(b.due(None).unwrap().error.message, "data-parallel rank 0: a genuine error");
    }

    #[test]
    fn an_error_alone_is_the_failure_after_the_grace() {
        let t0 = Instant::now();
        let mut b = Blame::default();
        assert_eq!(b.on_error(1, err("first"), t0), None);
        assert_eq!(b.on_error(0, err("second"), t0 + Duration::from_millis(1)), None);
        assert_eq!(b.due(Some(t0 + GRACE - Duration::from_millis(1))), None);
        let v = b.due(Some(t0 + GRACE)).unwrap();
        assert_eq!((v.rank, v.error.message.as_str(), v.error.traceback.as_deref()), (1, "first", Some("tb")));
        // A job over before the grace: the waiting error at once.
        let mut b = Blame::default();
        b.on_error(2, err("x"), t0);
        assert_eq!(b.due(None).unwrap().rank, 2);
    }

    #[test]
    fn deaths_and_bad_input_decide_at_once() {
        let t0 = Instant::now();
        let mut b = Blame::default();
        let v = b.on_death(None, "node 1's headless follower ended".into(), t0).unwrap();
        assert_eq!((v.rank, v.error.message.as_str()), (0, "node 1's headless follower ended"));
        let bad = RunError { message: "unknown flag".into(), bad_input: true, ..RunError::default() };
        assert_eq!(Blame::default().on_error(3, bad, t0).unwrap().rank, 3);
    }
}
