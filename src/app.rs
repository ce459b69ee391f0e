//! The command line: parses arguments and dispatches to each command.

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{self, Cli, Command};
use crate::{ab, error, import, orchestrate, recipe, report, telemetry};
use crate::error::{UsageError, exit};
use crate::orchestrate::plan::RunOptions;

/// Runs the command line `args` (program name first) and returns the exit
/// code: 0 ok, 1 a point, job or gate failed, 2 bad input, 130 interrupted.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { exit::USAGE } else { exit::OK };
        }
    };
    crate::python::set_cli_choice(cli.python.clone());
    init_tracing(cli.verbose);
    let outcome = match cli.command {
        Command::Run(a) => run_options(a, cli.verbose).and_then(|o| orchestrate::run::run(&o)),
        Command::Eval(a) => orchestrate::run::run(&eval_options(a, cli.verbose)),
        Command::Overhead(a) if a.profile.profile => {
            Err(error::usage("overhead does not take --profile: profile with `run --profile` (the engine in-process)"))
        }
        Command::Overhead(a) => run_options(a, cli.verbose).and_then(|o| orchestrate::overhead::overhead(&o)),
        Command::Recipe(cli::RecipeCommand::Check(a)) => from_checkout(&a.checkout).and_then(|ix| match ix {
            Some(p) => orchestrate::check::check(&[p.recipe], a.variant.as_deref()),
            None => orchestrate::check::check(&a.recipes, a.variant.as_deref()),
        }),
        Command::Recipe(cli::RecipeCommand::Show(a)) => show_recipe(&a),
        Command::Import(cli::ImportCommand::Inferencex(a)) => run_import(&a),
        Command::Export(a) => report::export::run_export(&a.result, a.format, a.output.as_deref()).map(|files| {
            for f in files {
                outln!("{}", f.display());
            }
            exit::OK
        }),
        Command::Telemetry(a) => telemetry::cli_main_opts(a.seconds, a.interval_ms, a.json).map(|()| exit::OK),
        Command::Compare(a) => ab::run_compare(&ab::CompareRequest {
            baseline: a.baseline,
            candidate: a.candidate,
            baseline_label: a.baseline_label,
            candidate_label: a.candidate_label,
            options: ab_options(&a.gate),
            config_key: a.gate.config_key.clone(),
            output: a.output,
        }),
        Command::Ab(a) => {
            let req = orchestrate::ab::AbRequest {
                baseline: a.baseline.clone(),
                candidate: a.candidate.clone(),
                repeats: a.repeats,
                options: ab_options(&a.gate),
                config_key: a.gate.config_key.clone(),
                noise: a.noise.clone(),
                calibrate: a.calibrate,
                until_ci: a.until_ci,
                max_repeats: a.max_repeats,
                baseline_python: a.baseline_python.clone(),
                candidate_python: a.candidate_python.clone(),
            };
            run_options(a.run, cli.verbose).and_then(|o| orchestrate::ab::ab(&o, &req))
        }
        Command::Doctor(a) => orchestrate::doctor::doctor(a.json),
        Command::Plot(a) => ab::run_plot(&a.result, a.output.as_deref()).map(|files| {
            for f in files {
                outln!("{}", f.display());
            }
            exit::OK
        }),
        Command::Status(a) => orchestrate::runner::slurm::status(&a.dir),
        Command::Collect(a) => orchestrate::runner::slurm::collect(&a.dir),
        Command::Task(a) => orchestrate::runner::task::run_task(&a.dir, a.key, a.probe.as_deref()),
    };
    let code = match outcome {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() { exit::USAGE } else { exit::FAILED }
        }
    };
    code
}

/// `--inferencex-checkout DIR --key K`: the imported recipe, or None without it.
fn from_checkout(c: &cli::CheckoutArgs) -> anyhow::Result<Option<import::checkout::Prepared>> {
    match (&c.inferencex_checkout, &c.key) {
        (Some(dir), Some(key)) => import::checkout::prepare(dir, key, c.scenario.as_deref()).map(Some),
        _ => Ok(None),
    }
}

fn run_import(a: &cli::ImportArgs) -> anyhow::Result<i32> {
    let imported = match (&a.inferencex_checkout, &a.launcher, &a.master_config) {
        (Some(dir), _, _) => import::checkout::import_key(dir, &a.key, a.scenario.as_deref()).map_err(error::usage)?.1,
        (None, Some(launcher), Some(master)) => {
            return import::inferencex::run_import(launcher, (master, &a.key), a.scenario.as_deref(), a.output.as_deref());
        }
        _ => return Err(error::usage("give LAUNCHER --master-config FILE --key KEY, or --inferencex-checkout DIR --key KEY")),
    };
    import::inferencex::write_out(&imported, a.output.as_deref())
}

fn show_recipe(a: &cli::RecipeArgs) -> anyhow::Result<i32> {
    let path = match from_checkout(&a.checkout)? {
        Some(p) => p.recipe,
        None => a.recipe.clone().ok_or_else(|| error::usage("give a recipe file or --inferencex-checkout DIR --key KEY"))?,
    };
    let recipe = recipe::Recipe::load(&path)?;
    let configs = recipe
        .listed_configs(a.variant.as_deref())
        .map_err(|e| error::usage(format!("{}: {e}", path.display())))?;
    out!("{}", recipe::show::render(&recipe.name, &recipe.model, &configs));
    Ok(exit::OK)
}

fn run_options(a: cli::RunArgs, verbose: bool) -> anyhow::Result<RunOptions> {
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
        resume: a.resume,
        force: a.force,
        output: a.output,
        verbose,
        exec: exec_choice(a.exec),
        profile: a.profile.options(),
        workload: a.workload.absolute()?,
        ..RunOptions::default()
    };
    apply_eval_flags(&mut o, a.eval);
    Ok(o)
}

/// The executor the command line asks for.
fn exec_choice(a: cli::ExecArgs) -> orchestrate::runner::ExecChoice {
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

fn ab_options(g: &cli::GateArgs) -> ab::Options {
    ab::Options {
        max_accuracy_drop: g.max_accuracy_drop,
        max_regression: g.max_regression,
        resamples: g.resamples,
        seed: g.seed,
        ..ab::Options::default()
    }
}

fn eval_options(a: cli::EvalArgs, verbose: bool) -> RunOptions {
    let mut variants: Vec<String> = a.variants.map(|l| l.0).unwrap_or_default();
    variants.extend(a.variant);
    let mut o = RunOptions { recipe: a.recipe, variants, only_eval: true, output: a.output, verbose, exec: exec_choice(a.exec), ..RunOptions::default() };
    apply_eval_flags(&mut o, a.eval);
    o
}

fn apply_eval_flags(o: &mut RunOptions, e: cli::EvalFlags) {
    o.task = e.task;
    o.eval_limit = e.eval_limit;
    o.gsm8k_data = e.gsm8k_data;
    o.num_fewshot = e.num_fewshot;
    o.chat = if e.chat { Some(true) } else if e.no_chat { Some(false) } else { None };
    o.eval_concurrency = e.eval_concurrency;
    o.min_accuracy = e.min_accuracy;
}

fn init_tracing(verbose: bool) {
    let default = if verbose { "enginebench=debug" } else { "enginebench=warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("ENGINEBENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
}
