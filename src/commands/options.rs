//! The options the engine commands share: what to run ([`RunOptions`]) and
//! how ([`ExecOptions`]) from `run`'s flags (also `overhead`'s and `ab`'s),
//! the executor, the gate of `ab`/`compare`, and a recipe from an
//! InferenceX checkout. The flags themselves are declared once, in the
//! structs clap fills (where a new one goes: [`crate::recipe::overrides`]).

use crate::cli;
use crate::import;
use crate::orchestrate;
use crate::orchestrate::plan::RunOptions;
use crate::orchestrate::runner::ExecOptions;

use super::Global;
use crate::ab;

/// `--inferencex-checkout DIR --key K`: the imported recipe, or None without it.
pub fn from_checkout(c: &cli::CheckoutArgs) -> anyhow::Result<Option<import::checkout::Prepared>> {
    match (&c.inferencex_checkout, &c.key) {
        (Some(dir), Some(key)) => import::checkout::prepare(dir, key, c.scenario.as_deref(), &c.machine_fact, &c.sandbox.settings()).map(Some),
        _ => Ok(None),
    }
}

/// What to run and how, from `run`'s flags (and `overhead`'s, `ab`'s) and
/// the global ones: the recipe (or the checkout entry) and variants, the
/// profile window, trace and conversation files made absolute; every other
/// flag arrives in [`RunOptions`] as clap parsed it.
///
/// Errors (usage): an InferenceX entry that cannot be imported, the current
/// folder unreadable.
pub fn run_options(a: cli::RunArgs, g: &Global) -> anyhow::Result<(RunOptions, ExecOptions)> {
    let mut variants: Vec<String> = a.variants.map(|l| l.0).unwrap_or_default();
    variants.extend(a.variant);
    let mut recipe = a.recipe;
    if let Some(p) = from_checkout(&a.checkout)? {
        recipe = Some(p.recipe);
        // Every job of the entry unless some were picked.
        if variants.is_empty() {
            variants = p.variants;
        }
    }
    let mut o = RunOptions { recipe, variants, profile: a.profile.options(), ..a.options };
    o.sweep.workload = o.sweep.workload.absolute()?;
    let how = ExecOptions { output: a.output, resume: a.resume, force: a.force, ..exec_options(a.exec, g) };
    Ok((o, how))
}

/// How to run, from the executor flags and the global ones (no folder yet).
pub fn exec_options(a: cli::ExecArgs, g: &Global) -> ExecOptions {
    ExecOptions { verbose: g.verbose, exec: exec_choice(a), python: g.python.clone(), ..ExecOptions::default() }
}

/// The executor the command line asks for.
pub fn exec_choice(a: cli::ExecArgs) -> orchestrate::runner::ExecChoice {
    use orchestrate::runner::ExecChoice;
    use orchestrate::runner::slurm::SlurmOptions;
    if a.slurm {
        ExecChoice::Slurm(SlurmOptions {
            partition: a.partition,
            account: a.account,
            time: a.slurm_time,
            gpus_per_job: a.gpus_per_job.unwrap_or_default(),
            extra: a.slurm_arg,
            bin: a.slurm_bin,
            detach: a.detach,
        })
    } else if let Some(jobs) = a.parallel_jobs {
        ExecChoice::Parallel { jobs, share_cpu: a.share_cpu }
    } else {
        ExecChoice::Local
    }
}

/// The comparison's options from the gate flags of `ab` and `compare`.
pub fn ab_options(g: &cli::GateArgs) -> ab::Options {
    ab::Options {
        max_accuracy_drop: g.max_accuracy_drop,
        max_regression: g.max_regression,
        resamples: g.resamples,
        seed: g.seed,
        ..ab::Options::default()
    }
}
