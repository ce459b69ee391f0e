//! The vocabulary the orchestrator and the worker share, at the bottom of
//! the crate: it imports no other module of enginebench, and every other
//! module may import it.
//!
//! - [`step`]: what one engine step is asked and gives back ([`Prompt`],
//!   [`Delta`], [`Completion`], [`StepStats`], [`EngineTiming`],
//!   [`SpecCounts`], [`StepOutput`]).
//! - [`records`]: what the harness records per request and per step
//!   ([`RequestRecord`], [`StepRecord`]) and a replayed request's place in
//!   its session ([`TurnInfo`]).
//! - [`engine_info`]: facts about a built engine ([`EngineInfo`]).
//! - [`knobs`]: what this vLLM build does with each of a configuration's
//!   knobs ([`KnobReport`]).
//! - [`doctor`]: what an interpreter's vLLM is, without an engine
//!   ([`DoctorReport`]), and why it cannot serve ([`CannotServe`]).
//! - [`point`]: a sweep point and its random dataset ([`Point`],
//!   [`RandomDataset`], [`LengthConvention`]).
//! - [`profile`]: a point's profiler window ([`ProfileTarget`], [`ProfileRaw`]).
//! - [`workload`]: what kind of requests a point sends ([`Workload`]).
//! - [`pd`]: a prefill/decode job's worker tasks, the lines between a
//!   decode worker and its prefill workers, a point's P/D figures.
//! - [`wire`]: the messages on the pipe ([`Task`] in, [`Message`] out, one
//!   JSON document / JSON lines).

pub mod doctor;
pub mod engine_info;
pub mod knobs;
pub mod pd;
pub mod point;
pub mod profile;
pub mod records;
pub mod step;
pub mod wire;
pub mod workload;

pub use doctor::{CannotServe, DoctorReport};
pub use engine_info::{CompatItem, CompatReport, EngineInfo};
pub use knobs::KnobReport;
pub use point::{LengthConvention, Point, RandomDataset};
pub use profile::{ProfileRaw, ProfileTarget, Window};
pub use records::{NOT_SENT, ReplayPhase, RequestRecord, StepRecord, TurnInfo};
pub use step::{ChatMessage, Completion, Delta, EngineTiming, Prompt, SpecCounts, StepOutput, StepStats};
pub use wire::*;
pub use workload::{ConversationSpec, StopReason, TraceFormat, TraceSpec, Workload};
