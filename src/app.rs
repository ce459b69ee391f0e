//! The command line: parses the arguments and dispatches to the command's
//! entry point in [`crate::commands`].

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::commands::{self, ExitStatus, Global};

/// Runs the command line `args` (program name first) and returns the exit
/// code ([`ExitStatus::code`]): 0 ok, 1 a point, job or gate failed, 2 bad
/// input, 3 an `ab`/`compare` gate INCONCLUSIVE, 130 interrupted.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitStatus::Usage } else { ExitStatus::Ok }.code();
        }
    };
    init_tracing(cli.verbose);
    let g = Global { verbose: cli.verbose, python: cli.python };
    let outcome = match cli.command {
        Command::Run(a) => commands::run::run(a, &g),
        Command::Eval(a) => commands::eval::run(a, &g),
        Command::Overhead(a) => commands::overhead::run(a, &g),
        Command::Recipe(c) => commands::recipe::run(c, &g),
        Command::Import(c) => commands::import::run(c, &g),
        Command::Export(a) => commands::export::run(a, &g),
        Command::Telemetry(a) => commands::telemetry::run(a, &g),
        Command::Compare(a) => commands::compare::run(a, &g),
        Command::Ab(a) => commands::ab::run(a, &g),
        Command::Doctor(a) => commands::doctor::run(a, &g),
        Command::Plot(a) => commands::plot::run(a, &g),
        Command::Status(a) => commands::status::run(a, &g),
        Command::Collect(a) => commands::collect::run(a, &g),
        Command::Task(a) => commands::task::run(a, &g),
        Command::Node => crate::orchestrate::nodes::group::run(),
    };
    let status = outcome.unwrap_or_else(|e| {
        errln!("error: {e:#}");
        ExitStatus::of_error(&e)
    });
    status.code()
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
