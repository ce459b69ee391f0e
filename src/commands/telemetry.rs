//! `enginebench telemetry`: the node's telemetry sources, sampled for a while.

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli::TelemetryArgs;
use crate::telemetry;

/// Samples for `a.seconds`; see [`telemetry::cli_main`].
pub fn run(a: TelemetryArgs, _: &Global) -> Result<ExitStatus> {
    telemetry::cli_main(a.seconds, a.interval_ms, a.json).map(|()| ExitStatus::Ok)
}
