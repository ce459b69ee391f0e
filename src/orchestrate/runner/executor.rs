//! How jobs are executed: the [`Executor`] trait and the choice the command
//! line makes (`--parallel-jobs`, `--slurm`).

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::parallel::{Parallel, ParallelJobs};
use super::slurm::{Slurm, SlurmOptions};
use super::{Run, Sink};
use super::super::plan::Plan;
use crate::report::result::Execution;

/// Runs groups of a run's jobs and records what they did through the
/// runner's [`Sink`]. A group's jobs run one after another on one node (an
/// ABBA pair of `ab`); groups may run at once.
pub trait Executor {
    /// Runs every job of `groups` (indices into `run.plan.jobs`); on Ctrl-C
    /// stops as its kind allows and marks the sink interrupted.
    ///
    /// Errors: the run folder cannot be written, or the executor itself
    /// failed (e.g. `sbatch` refused the array). A failing *job* is not an
    /// error: it is recorded in the result.
    fn execute(&mut self, run: &Run<'_>, sink: &mut Sink, groups: &[Vec<usize>]) -> Result<()>;

    /// What the result records about this executor.
    fn describe(&self) -> Execution;
}

/// How a run is executed, as opposed to what it runs
/// ([`super::super::plan::RunOptions`]): where its folder goes, whether it
/// continues one, which executor, which interpreter, how much it says.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// `--output`: the run folder (default `results/<name>-<UTC time>`).
    pub output: Option<PathBuf>,
    /// `--resume`: continue an earlier run in this folder (only missing or failed points run).
    pub resume: Option<PathBuf>,
    /// `--force`, with `resume`: accept jobs whose configuration changed.
    pub force: bool,
    /// `--verbose`: the engine's log live, Python tracebacks on failure.
    pub verbose: bool,
    /// `--parallel-jobs`, `--slurm`, else local.
    pub exec: ExecChoice,
    /// `--python`: the interpreter jobs run in unless their variant names another.
    pub python: Option<PathBuf>,
}

/// The executor a command asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecChoice {
    /// One job after another on this machine (the default).
    #[default]
    Local,
    /// `--parallel-jobs N|auto` (`share_cpu`: `--share-cpu`).
    Parallel { jobs: ParallelJobs, share_cpu: bool },
    /// `--slurm ...`.
    Slurm(SlurmOptions),
}

/// The executor for `choice`, checked against the plan.
///
/// Errors (usage): `--parallel-jobs` on a machine without GPUs (unless
/// `--share-cpu`) or with jobs larger than the machine; Slurm tools missing.
pub fn executor_for(choice: &ExecChoice, plan: &Plan) -> Result<Box<dyn Executor>> {
    Ok(match choice {
        ExecChoice::Local => Box::new(super::local::Sequential::default()),
        ExecChoice::Parallel { jobs, share_cpu } => Box::new(Parallel::new(plan, *jobs, *share_cpu)?),
        ExecChoice::Slurm(o) => Box::new(Slurm::new(plan, o.clone())?),
    })
}
