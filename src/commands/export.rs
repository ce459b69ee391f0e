//! `enginebench export`: a result in another tool's shape (InferenceX, `vllm bench serve`, AgentX).

use anyhow::Result;

use super::{ExitStatus, Global, print_files};
use crate::cli::ExportArgs;
use crate::report;

/// Writes `a`'s result in `a.format` and prints the files; see [`report::export::run_export`].
pub fn run(a: ExportArgs, _: &Global) -> Result<ExitStatus> {
    report::export::run_export(&a.result, a.format, a.output.as_deref()).map(print_files)
}
