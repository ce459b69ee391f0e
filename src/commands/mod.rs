//! One file per subcommand, each with its thin entry point: it turns the
//! parsed arguments ([`crate::cli`]) into the request of the module that
//! does the work and returns how the command ended ([`ExitStatus`]).
//! The binary's `app::main` only parses and dispatches here.
//!
//! | command | file | does the work |
//! |---|---|---|
//! | `run`, `eval`, `overhead`, `ab` | [`run`], [`eval`], [`overhead`], [`ab`] | [`crate::orchestrate`] |
//! | `compare`, `plot`, `export` | [`compare`], [`plot`], [`export`] | [`crate::ab`], [`crate::report`] |
//! | `recipe check`/`show`, `import` | [`recipe`], [`import`] | [`crate::orchestrate::check`], [`crate::recipe`], [`crate::import`] |
//! | `doctor`, `telemetry` | [`doctor`], [`telemetry`] | [`crate::orchestrate::doctor`], [`crate::telemetry`] |
//! | `status`, `collect`, hidden `__task` | [`status`], [`collect`], [`task`] | [`crate::orchestrate::runner`] |
//! | the worker process (no subcommand; the `python` feature) | `worker` | `orchestrate::worker` |
//!
//! [`options`] builds the run options the engine commands share.

use std::path::PathBuf;

pub use crate::error::ExitStatus;

pub mod ab;
pub mod collect;
pub mod compare;
pub mod doctor;
pub mod eval;
pub mod export;
pub mod import;
pub mod options;
pub mod overhead;
pub mod plot;
pub mod recipe;
pub mod run;
pub mod status;
pub mod task;
pub mod telemetry;
#[cfg(feature = "python")]
pub mod worker;

/// The global flags, given to every command.
#[derive(Debug, Clone, Default)]
pub struct Global {
    /// `--verbose`: the engine's log live, Python tracebacks on failure.
    pub verbose: bool,
    /// `--python`: the interpreter engines run in unless a variant names its own.
    pub python: Option<PathBuf>,
}

/// Prints the files a command wrote, one path per line on stdout.
fn print_files(files: Vec<PathBuf>) -> ExitStatus {
    for f in files {
        outln!("{}", f.display());
    }
    ExitStatus::Ok
}
