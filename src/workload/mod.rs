//! What the engine is asked to do: random token-id prompts with lengths in
//! vLLM's or InferenceX's convention, arrival schedules, and the driver that
//! keeps `conc` requests in flight and times every token.

pub mod arrivals;
pub mod chat;
pub mod driver;
pub mod lengths;
pub mod prompts;

pub use driver::{Pacing, Request, RequestIds, drive};
