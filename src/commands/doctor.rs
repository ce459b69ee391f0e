//! `enginebench doctor`: whether a run can start here, and what is missing.

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli::DoctorArgs;
use crate::orchestrate;

/// Runs the checks; see [`orchestrate::doctor::doctor`].
pub fn run(a: DoctorArgs, g: &Global) -> Result<ExitStatus> {
    orchestrate::doctor::doctor(a.json, g.python.as_deref())
}
