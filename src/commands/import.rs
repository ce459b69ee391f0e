//! `enginebench import inferencex`: an InferenceX launcher (or checkout
//! entry) as a recipe.

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli;
use crate::{error, import};

/// Dispatches `import inferencex`.
pub fn run(c: cli::ImportCommand, _: &Global) -> Result<ExitStatus> {
    match c {
        cli::ImportCommand::Inferencex(a) => run_import(&a),
    }
}

fn run_import(a: &cli::ImportArgs) -> Result<ExitStatus> {
    let imported = match (&a.inferencex_checkout, &a.launcher, &a.master_config) {
        (Some(dir), _, _) => {
            import::checkout::import_key(dir, &a.key, a.scenario.as_deref(), &a.machine_fact, &a.sandbox.settings()).map_err(error::usage)?.1
        }
        (None, Some(launcher), Some(master)) => {
            return import::inferencex::run_import(
                launcher,
                (master, &a.key),
                a.scenario.as_deref(),
                &a.machine_fact,
                &a.sandbox.settings(),
                a.output.as_deref(),
            );
        }
        _ => return Err(error::usage("give LAUNCHER --master-config FILE --key KEY, or --inferencex-checkout DIR --key KEY")),
    };
    import::inferencex::write_out(&imported, a.output.as_deref())
}
