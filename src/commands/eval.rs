//! `enginebench eval`: only the recipe's eval (no sweep points).

use anyhow::Result;

use super::{ExitStatus, Global, options};
use crate::cli::EvalArgs;
use crate::orchestrate;
use crate::orchestrate::plan::RunOptions;
use crate::orchestrate::runner::ExecOptions;

/// Runs the eval of `a`'s recipe; see [`orchestrate::run::run`].
pub fn run(a: EvalArgs, g: &Global) -> Result<ExitStatus> {
    let (o, how) = eval_options(a, g);
    orchestrate::run::run(&o, &how)
}

fn eval_options(a: EvalArgs, g: &Global) -> (RunOptions, ExecOptions) {
    let mut variants: Vec<String> = a.variants.map(|l| l.0).unwrap_or_default();
    variants.extend(a.variant);
    let o = RunOptions { recipe: a.recipe, variants, only_eval: true, eval: a.eval, ..RunOptions::default() };
    let how = ExecOptions { output: a.output, ..options::exec_options(a.exec, g) };
    (o, how)
}
