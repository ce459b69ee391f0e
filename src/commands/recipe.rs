//! `enginebench recipe check` and `recipe show`: a recipe's configurations
//! checked against vLLM, or listed.

use anyhow::Result;

use super::{ExitStatus, Global, options::from_checkout};
use crate::cli;
use crate::{error, orchestrate, recipe};

/// Dispatches `recipe check` and `recipe show`.
pub fn run(c: cli::RecipeCommand, g: &Global) -> Result<ExitStatus> {
    match c {
        cli::RecipeCommand::Check(a) => from_checkout(&a.checkout).and_then(|ix| match ix {
            Some(p) => orchestrate::check::check(&[p.recipe], a.variant.as_deref(), g.python.as_deref()),
            None => orchestrate::check::check(&a.recipes, a.variant.as_deref(), g.python.as_deref()),
        }),
        cli::RecipeCommand::Show(a) => show_recipe(&a),
    }
}

fn show_recipe(a: &cli::RecipeArgs) -> Result<ExitStatus> {
    let path = match from_checkout(&a.checkout)? {
        Some(p) => p.recipe,
        None => a.recipe.clone().ok_or_else(|| error::usage("give a recipe file or --inferencex-checkout DIR --key KEY"))?,
    };
    let recipe = recipe::Recipe::load(&path)?;
    let configs = recipe
        .listed_configs(a.variant.as_deref())
        .map_err(|e| error::usage(format!("{}: {e}", path.display())))?;
    out!("{}", recipe::show::render(&recipe.name, &recipe.model, &configs));
    Ok(ExitStatus::Ok)
}
