//! `enginebench eval`: only the recipe's eval (no sweep points).

use anyhow::Result;

use super::{ExitStatus, Global, options};
use crate::cli::EvalArgs;
use crate::orchestrate;
use crate::orchestrate::plan::RunOptions;

/// Runs the eval of `a`'s recipe; see [`orchestrate::run::run`].
pub fn run(a: EvalArgs, g: &Global) -> Result<ExitStatus> {
    orchestrate::run::run(&eval_options(a, g.verbose))
}

fn eval_options(a: EvalArgs, verbose: bool) -> RunOptions {
    let mut variants: Vec<String> = a.variants.map(|l| l.0).unwrap_or_default();
    variants.extend(a.variant);
    let mut o = RunOptions { recipe: a.recipe, variants, only_eval: true, output: a.output, verbose, exec: options::exec_choice(a.exec), ..RunOptions::default() };
    options::apply_eval_flags(&mut o, a.eval);
    o
}
