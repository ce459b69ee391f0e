//! enginebench: drive vLLM's engine in-process from Rust and measure it.

mod cli;
mod engine;
mod error;
mod eval;
mod install;
mod metrics;
mod orchestrate;
mod recipe;
mod report;
mod workload;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::{UsageError, exit};
use crate::orchestrate::run::RunOptions;

fn main() {
    let cli = Cli::parse();
    if let Command::Worker = cli.command {
        std::process::exit(orchestrate::worker::main());
    }
    init_tracing(cli.verbose);
    let outcome = match cli.command {
        Command::Run(a) => orchestrate::run::run(&RunOptions {
            recipe: a.recipe,
            conc: a.conc,
            isl: a.isl,
            osl: a.osl,
            num_prompts: a.num_prompts,
            eval_limit: a.eval_limit,
            no_eval: a.no_eval,
            output: a.output,
            verbose: cli.verbose,
        }),
        Command::Worker => unreachable!(),
    };
    let code = match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() { exit::USAGE } else { exit::FAILED }
        }
    };
    std::process::exit(code);
}

fn init_tracing(verbose: bool) {
    let default = if verbose { "enginebench=debug" } else { "enginebench=warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("ENGINEBENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).without_time().init();
}
