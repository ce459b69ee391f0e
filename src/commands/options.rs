//! The options the engine commands share: what to run ([`RunOptions`]) and
//! how ([`ExecOptions`]) from `run`'s flags (also `overhead`'s and `ab`'s),
//! the executor, the eval flags, the gate of `ab`/`compare`, and a recipe
//! from an InferenceX checkout.

use crate::cli;
use crate::error;
use crate::import;
use crate::orchestrate;
use crate::orchestrate::plan::RunOptions;
use crate::orchestrate::runner::ExecOptions;

use super::Global;
use crate::{ab, recipe};

/// `--inferencex-checkout DIR --key K`: the imported recipe, or None without it.
pub fn from_checkout(c: &cli::CheckoutArgs) -> anyhow::Result<Option<import::checkout::Prepared>> {
    match (&c.inferencex_checkout, &c.key) {
        (Some(dir), Some(key)) => import::checkout::prepare(dir, key, c.scenario.as_deref()).map(Some),
        _ => Ok(None),
    }
}

/// What to run and how, from `run`'s flags (and `overhead`'s, `ab`'s) and
/// the global ones.
///
/// Errors (usage): a bad `--goodput`, an InferenceX entry that cannot be
/// imported, the current folder unreadable.
pub fn run_options(a: cli::RunArgs, g: &Global) -> anyhow::Result<(RunOptions, ExecOptions)> {
    let goodput = match &a.goodput {
        Some(items) => Some(recipe::sweep::parse_goodput(items).map_err(error::usage)?),
        None => None,
    };
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
    let mut o = RunOptions {
        recipe,
        variants,
        conc: a.conc.map(|l| l.0),
        isl: a.isl,
        osl: a.osl,
        isl_osl: a.isl_osl.map(|l| l.0),
        num_prompts: a.num_prompts,
        warmups: a.warmups,
        inferencex: a.inferencex,
        length_convention: a.length_convention,
        range_ratio: a.range_ratio,
        prefix_len: a.prefix_len,
        request_rate: a.request_rate,
        burstiness: a.burstiness,
        percentiles: a.percentiles,
        goodput,
        no_eval: a.no_eval,
        step_trace: a.step_trace,
        point_timeout: a.point_timeout.map(std::time::Duration::from_secs_f64),
        start_timeout: a.start_timeout.map(std::time::Duration::from_secs_f64),
        telemetry_interval: Some(std::time::Duration::from_millis(a.telemetry_interval_ms)),
        profile: a.profile.options(),
        workload: a.workload.absolute()?,
        ..RunOptions::default()
    };
    apply_eval_flags(&mut o, a.eval);
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

/// The eval flags (`--task`, `--eval-limit`, ...) into `o`.
pub fn apply_eval_flags(o: &mut RunOptions, e: cli::EvalFlags) {
    o.tasks = e.task;
    o.task_files = e.task_file;
    o.eval_max_tokens = e.eval_max_tokens;
    o.thresholds = e.thresholds;
    o.model_prefix = e.model_prefix;
    o.eval_limit = e.eval_limit;
    o.gsm8k_data = e.gsm8k_data;
    o.num_fewshot = e.num_fewshot;
    o.chat = if e.chat { Some(true) } else if e.no_chat { Some(false) } else { None };
    o.eval_concurrency = e.eval_concurrency;
    o.min_accuracy = e.min_accuracy;
}
