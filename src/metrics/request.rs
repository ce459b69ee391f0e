//! One request's timeline, on the harness's monotonic clock.

use serde::{Deserialize, Serialize};

/// A request as the closed loop saw it. Times are seconds since the start of
/// the point. In-process, a token "arrives" when the `step()` that produced it
/// returns to Rust; all tokens of one step arrive together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Prompt length, tokens.
    pub input_tokens: u32,
    /// Tokens generated.
    pub output_tokens: u32,
    /// When the request was handed to the engine (`add_request` called), s.
    pub send_s: f64,
    /// When the step that produced the first token returned, s.
    pub first_token_s: Option<f64>,
    /// When the step that produced the last token returned, s.
    pub last_token_s: Option<f64>,
    /// Gaps between successive token arrivals, s (one per step that delivered
    /// tokens after the first, as bench serve records one per stream chunk).
    pub itl_s: Vec<f64>,
    /// Set when the request did not finish normally.
    pub error: Option<String>,
}

impl RequestRecord {
    /// Succeeded: finished with at least one token and no error.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.last_token_s.is_some()
    }

    /// Time to first token, s.
    pub fn ttft_s(&self) -> Option<f64> {
        self.first_token_s.map(|t| t - self.send_s)
    }

    /// End-to-end latency, s.
    pub fn e2el_s(&self) -> Option<f64> {
        self.last_token_s.map(|t| t - self.send_s)
    }

    /// Time per output token after the first, s: (E2EL - TTFT) / (output_len - 1),
    /// only for output_len > 1 (bench serve's definition).
    pub fn tpot_s(&self) -> Option<f64> {
        match (self.ttft_s(), self.e2el_s()) {
            (Some(ttft), Some(e2el)) if self.output_tokens > 1 => {
                Some((e2el - ttft) / f64::from(self.output_tokens - 1))
            }
            _ => None,
        }
    }

    /// Records tokens arriving at `now_s`.
    pub fn on_tokens(&mut self, now_s: f64, new_tokens: u32) {
        if new_tokens == 0 {
            return;
        }
        match self.last_token_s {
            None => self.first_token_s = Some(now_s),
            Some(last) => self.itl_s.push(now_s - last),
        }
        self.last_token_s = Some(now_s);
        self.output_tokens += new_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_figures() {
        let mut r = RequestRecord { input_tokens: 8, send_s: 1.0, ..Default::default() };
        r.on_tokens(1.5, 1);
        r.on_tokens(1.6, 1);
        r.on_tokens(1.6, 0); // a step that gave this request nothing
        r.on_tokens(1.8, 2);
        assert_eq!(r.output_tokens, 4);
        assert_eq!(r.ttft_s(), Some(0.5));
        assert!((r.e2el_s().unwrap() - 0.8).abs() < 1e-12);
        // (0.8 - 0.5) / (4 - 1)
        assert!((r.tpot_s().unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(r.itl_s.len(), 2);
        assert!((r.itl_s[0] - 0.1).abs() < 1e-12 && (r.itl_s[1] - 0.2).abs() < 1e-12);
        assert!(r.ok());
    }

    #[test]
    fn single_token_has_no_tpot() {
        let mut r = RequestRecord::default();
        r.on_tokens(0.25, 1);
        assert_eq!(r.tpot_s(), None);
        assert_eq!(r.ttft_s(), r.e2el_s());
    }
}
