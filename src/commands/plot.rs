//! `enginebench plot`: the charts of one result.

use anyhow::Result;

use super::{ExitStatus, Global, print_files};
use crate::cli::PlotArgs;
use crate::report;

/// Draws `a`'s result and prints the files; see [`report::plot::run_plot`].
pub fn run(a: PlotArgs, _: &Global) -> Result<ExitStatus> {
    report::plot::run_plot(&a.result, a.output.as_deref()).map(print_files)
}
