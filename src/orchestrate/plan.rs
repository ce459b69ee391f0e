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
use crate::recipe::sweep::{Goodput, Sweep};
use crate::recipe::{EngineConfig, Recipe, default_recipe_path};
use crate::workload::lengths::LengthConvention;
use crate::workload::prompts::RandomDataset;

/// Options of `enginebench run` that override the recipe (see the CLI).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub recipe: Option<PathBuf>,
    /// Variants to run (empty: the base recipe).
    pub variants: Vec<String>,
    pub min_accuracy: Option<f64>,
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

/// One engine configuration ready to run.
pub struct PlannedJob {
    pub config: EngineConfig,
    /// The engine process's environment additions (config env + enginebench defaults).
    pub env: BTreeMap<String, String>,
    pub specs: Vec<PointSpec>,
    /// Run the eval on this engine: the first job of each variant.
    pub run_eval: bool,
}

/// Everything a run needs, checked.
pub struct Plan {
    pub recipe: Recipe,
    pub recipe_path: PathBuf,
    pub install: Install,
    /// What vLLM is given as the model (a bundled name resolved to its folder).
    pub model_path: String,
    pub jobs: Vec<PlannedJob>,
    pub eval: Option<EvalPlan>,
    pub min_accuracy: Option<f64>,
}

/// Loads the recipe, applies overrides, and prepares the jobs.
///
/// Errors (usage): bad recipe, variant or override, missing set-up, missing eval data.
pub fn plan(opts: &RunOptions) -> Result<Plan> {
    let recipe_path = opts.recipe.clone().unwrap_or_else(default_recipe_path);
    let mut recipe = Recipe::load(&recipe_path)?;
    if let Some(limit) = opts.eval_limit {
        match recipe.eval.as_mut() {
            Some(e) => e.limit = Some(limit),
            None => return Err(usage("--eval-limit given but the recipe has no [eval] section")),
        }
    }
    if let Some(a) = opts.min_accuracy {
        if !(0.0..=1.0).contains(&a) {
            return Err(usage(format!("--min-accuracy {a}: give a fraction in [0, 1], e.g. 0.90")));
        }
        if recipe.eval.is_none() || opts.no_eval {
            return Err(usage("--min-accuracy needs the eval: the recipe has no [eval] section or --no-eval is set"));
        }
    }
    let configs = recipe
        .engine_configs(&opts.variants, &cli_sweep(opts))
        .map_err(|e| usage(format!("{}: {e}", recipe_path.display())))?;
    let install = Install::locate()?;
    let model_path = resolve_model(&recipe.model, &install)?;
    let eval = match (&recipe.eval, opts.no_eval) {
        (Some(section), false) => Some(plan_gsm8k(&install, section.limit, section.concurrency)?),
        _ => None,
    };
    let mut seen_variants = Vec::new();
    let jobs = configs
        .into_iter()
        .map(|config| {
            let run_eval = eval.is_some() && !seen_variants.contains(&config.variant);
            seen_variants.push(config.variant.clone());
            PlannedJob { env: engine_env(&recipe, &config), specs: point_specs(&config), config, run_eval }
        })
        .collect();
    let min_accuracy = opts.min_accuracy.or(recipe.eval.as_ref().and_then(|e| e.min_accuracy));
    Ok(Plan { recipe, recipe_path, install, model_path, jobs, eval, min_accuracy })
}

/// The command line's sweep settings as an overlay on the recipe's sweep.
fn cli_sweep(opts: &RunOptions) -> Sweep {
    Sweep {
        isl: opts.isl,
        osl: opts.osl,
        isl_osl: opts.isl_osl.clone(),
        conc: opts.conc.clone(),
        num_prompts: opts.num_prompts,
        warmups: opts.warmups,
        inferencex: opts.inferencex,
        length_convention: opts.length_convention,
        range_ratio: opts.range_ratio,
        prefix_len: opts.prefix_len.unwrap_or(0),
        request_rate: opts.request_rate,
        burstiness: opts.burstiness,
        percentiles: opts.percentiles.clone(),
        goodput: opts.goodput,
        ..Sweep::default()
    }
}

fn point_specs(config: &EngineConfig) -> Vec<PointSpec> {
    let sweep = &config.sweep;
    config
        .points
        .iter()
        .map(|&point| PointSpec {
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

/// The engine process's environment: the configuration's, plus in-process
/// mode and, on the CPU backend, an OMP_NUM_THREADS default.
fn engine_env(recipe: &Recipe, config: &EngineConfig) -> BTreeMap<String, String> {
    let mut env = config.env.clone();
    if env.get("VLLM_ENABLE_V1_MULTIPROCESSING").is_some_and(|v| v != "0") {
        tracing::warn!("VLLM_ENABLE_V1_MULTIPROCESSING forced to 0: enginebench drives the engine in-process");
    }
    env.insert("VLLM_ENABLE_V1_MULTIPROCESSING".into(), "0".into());
    let unset = config.env_unset.iter().any(|k| k == "OMP_NUM_THREADS");
    if recipe.is_cpu() && !env.contains_key("OMP_NUM_THREADS") && !unset {
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
