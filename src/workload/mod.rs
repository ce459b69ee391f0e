//! What the engine is asked to do: random token-id prompts with lengths in
//! vLLM's or InferenceX's convention, arrival schedules, the driver that
//! keeps `conc` requests in flight and times every token, and replays of
//! multi-turn sessions.
//!
//! Session replays: a file is loaded and checked into a
//! [`sessions::SessionSet`] ([`trace`]: AgentX and timed traces;
//! [`conversation`]: ShareGPT files; an agent's recorded requests become
//! a tree's streams in [`trees`], parallel agents found by [`chains`]), then played by a
//! [`replay::SessionReplay`] (lanes of session trees, [`lanes::LanesReplay`],
//! or a timed trace, [`timed::TimedReplay`], both run as a
//! [`replay_config::ReplayConfig`] says) through the one driver loop;
//! prompts are token ids built at send time ([`synth`]).

pub mod arrivals;
pub mod chains;
pub mod chat;
pub mod conversation;
pub mod driver;
pub mod files;
pub mod hub;
pub mod lengths;
pub mod prefetch;
pub mod prompts;
pub mod lanes;
pub mod replay;
pub mod replay_config;
pub mod sessions;
pub mod synth;
pub mod timed;
pub mod trace;
pub mod trees;
#[cfg(test)]
mod agentx_shape;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod testkit;

pub use driver::{Pacing, Request, RequestIds, drive};
