//! `enginebench doctor`: whether a run can start here, and what is missing.

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli::DoctorArgs;
use crate::orchestrate;

/// Runs the checks; see [`orchestrate::doctor::doctor`]. `--releases`
/// prints the table of vLLM releases checked instead.
pub fn run(a: DoctorArgs, g: &Global) -> Result<ExitStatus> {
    if let Some(file) = &a.releases {
        return orchestrate::doctor::print_releases(file.as_deref());
    }
    orchestrate::doctor::doctor(a.json, g.python.as_deref())
}
