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
        cli::RecipeCommand::Show(a) => show_recipe(&a, g),
    }
}

fn show_recipe(a: &cli::RecipeArgs, g: &Global) -> Result<ExitStatus> {
    let path = match from_checkout(&a.checkout)? {
        Some(p) => p.recipe,
        None => a.recipe.clone().ok_or_else(|| error::usage("give a recipe file or --inferencex-checkout DIR --key KEY"))?,
    };
    let recipe = recipe::Recipe::load(&path)?;
    let configs = recipe
        .listed_configs(a.variant.as_deref())
        .map_err(|e| error::usage(format!("{}: {e}", path.display())))?;
    let knobs = if a.no_knobs { Vec::new() } else { knob_blocks(&recipe, &configs, g)? };
    out!("{}", recipe::show::render(&recipe.name, &recipe.model, &configs, &knobs));
    Ok(ExitStatus::Ok)
}

/// Each configuration's knob report in words (crate::knobs), from vLLM's
/// own objects in one worker; one note instead when no interpreter with
/// vLLM is at hand.
fn knob_blocks(recipe: &recipe::Recipe, configs: &[recipe::EngineConfig], g: &Global) -> Result<Vec<String>> {
    let python = crate::python::default_interpreter(g.python.as_deref())?;
    if let Err(e) = crate::python::require_engine_packages(&python) {
        return Ok(vec![format!("knobs: not reported ({e:#}); --no-knobs skips them\n")]);
    }
    let install = crate::install::Install::locate().ok();
    let model = crate::install::resolve_model(&recipe.model, install.as_ref()).unwrap_or_else(|_| recipe.model.clone());
    let items: Vec<(String, recipe::EngineConfig)> = configs.iter().map(|c| (model.clone(), c.clone())).collect();
    errln!("making the knob report (imports vLLM, builds its config, loads no weights)...");
    Ok(orchestrate::check::knob_reports(&python, &items)?
        .into_iter()
        .map(|r| match r {
            Ok(k) => format!("knobs:\n{}", crate::knobs::render::block(&k, "  ", false)),
            Err(e) => format!("knobs: not reported: {e}\n"),
        })
        .collect())
}
