//! `enginebench run` (and `eval`): plan the jobs from a recipe, run each in
//! its own worker (through the executor the command line chose), stream
//! results to disk, print the table. `--resume` continues an earlier run folder.

use anyhow::Result;

use super::plan::{RunOptions, plan};
use super::runner::{ExecOptions, Folder, Runner, executor_for};

/// Runs a recipe end to end: every job (variant x TP) in its own worker.
/// Returns the exit code: 0 all points ok and every accuracy gate passed;
/// 1 a point, a job or a gate failed; 2 the engine rejected the input (and
/// nothing else failed); 130 interrupted.
///
/// Errors (usage, exit 2): unreadable or invalid recipe, bad overrides,
/// missing set-up or data, unusable output folder, a `--resume` folder that
/// does not match, an executor that cannot run this plan. Engine failures
/// are not errors here: they are recorded in the result, and the next job
/// still runs.
pub fn run(opts: &RunOptions, how: &ExecOptions) -> Result<crate::error::ExitStatus> {
    let plan = plan(opts, how.python.as_deref())?;
    let mut exec = executor_for(&how.exec, &plan)?;
    let name = plan.recipe.name.clone();
    let folder = match &how.resume {
        Some(dir) => Folder::Resume(dir),
        None => Folder::New { name: &name },
    };
    let mut runner = Runner::open(plan, opts, how, folder)?;
    announce(&runner);
    let n = runner.plan.jobs.len();
    let groups: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    let heading = |r: &crate::report::result::RunResult, i: usize| (n > 1).then(|| format!("job {}/{n}: {}", i + 1, r.jobs[i].label));
    runner.run_jobs(exec.as_mut(), &groups, &heading)?;
    runner.finish()
}

/// The first lines of a run: the folder, the eval, remote code.
fn announce(runner: &Runner) {
    let plan = &runner.plan;
    errln!("enginebench: recipe {} -> {}", plan.recipe.name, runner.dir().display());
    if let Some(e) = plan.eval.as_ref().and_then(|e| e.builtin.as_ref()) {
        errln!(
            "eval: {} ({}): {} questions, few-shot {}, data {}",
            e.task.name,
            e.task.description,
            e.plan.requests.len(),
            e.plan.fewshot_mode.label(),
            e.plan.data_kind.as_str()
        );
    }
    if let Some(p) = plan.eval.as_ref().and_then(|e| e.lm_eval.as_ref()) {
        for t in &p.tasks {
            let shots = t.num_fewshot.map_or(String::new(), |k| format!(", {k}-shot"));
            errln!("eval: {} through lm-eval {}: {} documents{shots}, data {}", t.name, p.lm_eval.as_deref().unwrap_or("?"), t.docs, t.dataset);
        }
    }
    if runner.result().jobs.iter().any(|j| j.trust_remote_code) {
        errln!("note: --trust-remote-code is ON (the recipe asks for it): the model's own Python code runs");
    }
}
