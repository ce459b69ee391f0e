//! From a recipe and command-line overrides to the worker's job: the points,
//! the engine's environment, the eval prompts. Everything here runs before any
//! engine starts, so bad input fails in a second, not after a model load.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;

use super::protocol::{EvalJob, PointSpec};
use crate::error::usage;
use crate::eval::gsm8k;
use crate::install::{Install, resolve_model};
use crate::recipe::sweep::{Goodput, ResolvedSweep};
use crate::recipe::{Recipe, default_recipe_path};
use crate::workload::lengths::LengthConvention;
use crate::workload::prompts::RandomDataset;

/// Options of `enginebench run` that override the recipe (see the CLI).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub recipe: Option<PathBuf>,
    pub conc: Option<Vec<u32>>,
    pub isl: Option<u32>,
    pub osl: Option<u32>,
    pub isl_osl: Option<Vec<[u32; 2]>>,
    pub num_prompts: Option<u32>,
    pub warmups: Option<u32>,
    pub inferencex: bool,
    pub length_convention: Option<LengthConvention>,
    pub range_ratio: Option<f64>,
    pub prefix_len: Option<u32>,
    pub request_rate: Option<f64>,
    pub burstiness: Option<f64>,
    pub percentiles: Option<Vec<f64>>,
    pub goodput: Option<Goodput>,
    pub eval_limit: Option<u32>,
    pub no_eval: bool,
    pub step_trace: bool,
    pub output: Option<PathBuf>,
    pub verbose: bool,
}

/// The eval questions, prepared before any engine starts.
pub struct EvalPlan {
    pub job: EvalJob,
    /// (doc id, gold answer) per prompt.
    pub golds: Vec<(usize, String)>,
    pub data_source: String,
}

/// Everything a run needs, checked.
pub struct Plan {
    pub recipe: Recipe,
    pub recipe_path: PathBuf,
    pub sweep: ResolvedSweep,
    pub install: Install,
    /// What vLLM is given as the model (a bundled name resolved to its folder).
    pub model_path: String,
    pub points: Vec<PointSpec>,
    pub env: BTreeMap<String, String>,
    pub eval: Option<EvalPlan>,
}

/// Loads the recipe, applies overrides, and prepares the job.
///
/// Errors (usage): bad recipe or override, missing set-up, missing eval data.
pub fn plan(opts: &RunOptions) -> Result<Plan> {
    let recipe_path = opts.recipe.clone().unwrap_or_else(default_recipe_path);
    let mut recipe = Recipe::load(&recipe_path)?;
    apply_overrides(&mut recipe, opts)?;
    let sweep = recipe
        .sweep
        .resolve()
        .map_err(|e| usage(format!("sweep of {} with the command-line overrides: {e}", recipe_path.display())))?;
    let install = Install::locate()?;
    let model_path = resolve_model(&recipe.model, &install)?;
    let points = point_specs(&sweep);
    let eval = match (&recipe.eval, opts.no_eval) {
        (Some(section), false) => Some(plan_gsm8k(&install, section.limit, section.concurrency)?),
        _ => None,
    };
    let env = engine_env(&recipe);
    Ok(Plan { recipe, recipe_path, sweep, install, model_path, points, env, eval })
}

fn apply_overrides(recipe: &mut Recipe, opts: &RunOptions) -> Result<()> {
    let s = &mut recipe.sweep;
    if let Some(conc) = &opts.conc {
        s.conc = Some(conc.clone());
        s.conc_range = None;
    }
    if opts.isl.is_some() || opts.osl.is_some() {
        // One flag alone keeps the recipe's other length (first pair if several).
        let first = s.isl_osl.as_ref().and_then(|p| p.first().copied());
        let isl = opts.isl.or(s.isl).or(first.map(|p| p[0]));
        let osl = opts.osl.or(s.osl).or(first.map(|p| p[1]));
        (s.isl, s.osl, s.isl_osl) = (isl, osl, None);
    }
    if let Some(pairs) = &opts.isl_osl {
        (s.isl, s.osl, s.isl_osl) = (None, None, Some(pairs.clone()));
    }
    if let Some(n) = opts.num_prompts {
        (s.num_prompts, s.prompts_per_conc) = (Some(n), None);
    }
    if let Some(n) = opts.warmups {
        (s.warmups, s.warmups_per_conc) = (Some(n), None);
    }
    s.inferencex |= opts.inferencex;
    if opts.length_convention.is_some() {
        s.length_convention = opts.length_convention;
    }
    if opts.range_ratio.is_some() {
        s.range_ratio = opts.range_ratio;
    }
    if let Some(p) = opts.prefix_len {
        s.prefix_len = p;
    }
    if opts.request_rate.is_some() {
        s.request_rate = opts.request_rate;
    }
    if opts.burstiness.is_some() {
        s.burstiness = opts.burstiness;
    }
    if opts.percentiles.is_some() {
        s.percentiles = opts.percentiles.clone();
    }
    if opts.goodput.is_some() {
        s.goodput = opts.goodput;
    }
    if let Some(limit) = opts.eval_limit {
        match recipe.eval.as_mut() {
            Some(e) => e.limit = Some(limit),
            None => return Err(usage("--eval-limit given but the recipe has no [eval] section")),
        }
    }
    Ok(())
}

fn point_specs(sweep: &ResolvedSweep) -> Vec<PointSpec> {
    sweep
        .points()
        .into_iter()
        .map(|point| PointSpec {
            point,
            dataset: RandomDataset {
                isl: point.isl,
                osl: point.osl,
                convention: sweep.length_convention,
                range_ratio: sweep.range_ratio,
                prefix_len: sweep.prefix_len,
                seed: sweep.point_seed(&point),
            },
            request_rate: sweep.request_rate,
            burstiness: sweep.burstiness,
            ignore_eos: sweep.ignore_eos,
        })
        .collect()
}

/// OMP_NUM_THREADS for the CPU backend when the recipe leaves it unset: one
/// thread per logical CPU. Without it a decode step was measured ~30x slower
/// (DESIGN.md); on the 2-CPU development machine 2 threads gave ~1.45x the
/// output tok/s of 1 thread (README, "Recipes").
fn default_omp_threads() -> String {
    std::thread::available_parallelism().map_or(1, |n| n.get()).to_string()
}

/// The engine process's environment: the recipe's, plus in-process mode and,
/// on the CPU backend, an OMP_NUM_THREADS default.
fn engine_env(recipe: &Recipe) -> BTreeMap<String, String> {
    let mut env = recipe.env.clone();
    if env.get("VLLM_ENABLE_V1_MULTIPROCESSING").is_some_and(|v| v != "0") {
        tracing::warn!("VLLM_ENABLE_V1_MULTIPROCESSING forced to 0: enginebench drives the engine in-process");
    }
    env.insert("VLLM_ENABLE_V1_MULTIPROCESSING".into(), "0".into());
    if recipe.is_cpu() && !env.contains_key("OMP_NUM_THREADS") {
        env.insert("OMP_NUM_THREADS".into(), default_omp_threads());
    }
    env
}

fn plan_gsm8k(install: &Install, limit: Option<u32>, concurrency: u32) -> Result<EvalPlan> {
    let path = gsm8k::olmo_split_path(&install.site_packages()?);
    let docs = gsm8k::load_olmo_split(&path)?;
    let prompts = gsm8k::test_only_prompts(&docs, gsm8k::NUM_FEWSHOT, limit.map(|l| l as usize));
    if prompts.is_empty() {
        return Err(usage(format!("GSM8K: no questions to score in {}", path.display())));
    }
    let golds = prompts.iter().map(|(i, d, _)| (*i, d.answer.clone())).collect();
    Ok(EvalPlan {
        job: EvalJob {
            prompts: prompts.into_iter().map(|(_, _, p)| p).collect(),
            max_tokens: gsm8k::MAX_NEW_TOKENS,
            stop: gsm8k::STOP.iter().map(|s| s.to_string()).collect(),
            concurrency,
        },
        golds,
        data_source: path.display().to_string(),
    })
}
