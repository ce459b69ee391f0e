//! `enginebench recipe check`: everything that can be checked before a model
//! loads. The recipe's TOML and schema, placeholders and `--hf-overrides` JSON
//! are checked in Rust when the recipe is read; the flag lists go through
//! vLLM's own serve parser in one worker process (no engine is built, no
//! weights are read); then ISL + OSL against `--max-model-len`
//! ([`super::lengths`]) and TP against the visible GPUs.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::protocol::knobs::KnobRequest;
use crate::protocol::{CheckItem, CheckJob, FlagCheck, KnobReport, Message, Task};
use super::spawn::ask_worker;
use crate::error::{ExitStatus, usage};
use crate::install::{Install, resolve_model};
use crate::python::{self, Interpreter};
use crate::recipe::{EngineConfig, Recipe};
use crate::report::host::Host;

/// What the check found about one configuration.
#[derive(Debug, Default)]
pub struct Findings {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
}

/// Runs `recipe check` on each file: `variant`, or the base and every
/// variant. All flag lists go through one parser process. Returns the exit
/// code (0 clean or warnings only, 2 errors).
pub fn check(paths: &[PathBuf], variant: Option<&str>, python: Option<&std::path::Path>) -> Result<ExitStatus> {
    let install = Install::locate().ok();
    let python = python::default_interpreter(python)?;
    // The flags are checked by vLLM's own parser, in a worker.
    python::require_engine_packages(&python)?;
    let mut loaded = Vec::new();
    for path in paths {
        let recipe = Recipe::load(path)?;
        let configs = recipe.listed_configs(variant).map_err(|e| usage(format!("{}: {e}", path.display())))?;
        // The parser needs a model argument but reads nothing from it.
        let model = resolve_model(&recipe.model, install.as_ref()).unwrap_or_else(|_| recipe.model.clone());
        loaded.push((path, recipe, model, configs));
    }
    let items: Vec<(String, EngineConfig)> =
        loaded.iter().flat_map(|(_, _, m, cs)| cs.iter().map(move |c| (m.clone(), c.clone()))).collect();
    let mut checks = vllm_checks(&python, &items, Some(false))?.into_iter();
    let host = Host::detect();
    let mut errors = 0;
    for (path, recipe, model, configs) in &loaded {
        let flags: Vec<FlagCheck> = checks.by_ref().take(configs.len()).collect();
        errors += report(path, recipe, model, configs, &flags, &host);
    }
    if errors > 0 {
        errln!("error: {errors} problem(s)");
        Ok(ExitStatus::Usage)
    } else {
        Ok(ExitStatus::Ok)
    }
}

/// Prints one recipe's findings; returns the number of errors.
fn report(path: &Path, recipe: &Recipe, model: &str, configs: &[EngineConfig], checks: &[FlagCheck], host: &Host) -> usize {
    let mut errors = 0;
    outln!("recipe {} ({}): {} engine configuration(s)", recipe.name, path.display(), configs.len());
    if host.gpus.is_empty() && !recipe.is_cpu() {
        outln!("  note: no GPU on this host: flags are checked with the CPU build's parser (the same `vllm serve` parser), TP is not checked against devices");
    }
    for (config, flags) in configs.iter().zip(checks) {
        let f = findings(recipe, model, config, flags, host);
        errors += f.errors.len();
        let verdict = if f.errors.is_empty() { "ok" } else { "ERROR" };
        outln!("  {} [{verdict}] {} points", config.label(), config.points.len());
        for e in &f.errors {
            outln!("    error: {e}");
        }
        for w in &f.warnings {
            outln!("    warning: {w}");
        }
        for n in &f.notes {
            outln!("    note: {n}");
        }
        match (&flags.knobs, &flags.knobs_error) {
            (Some(k), _) => out!("{}", crate::knobs::render::block(k, "    knob ", true)),
            (None, Some(e)) => outln!("    note: no knob report: {e}"),
            (None, None) => {}
        }
    }
    errors
}

/// `VLLM_*` variables vLLM removed: the name, when ("in 0.33", "before
/// 0.23") and what replaces it. Read from each release's vllm/envs.py (the names
/// 0.32 reads and 0.33 / 0.34 do not) and the code that used them.
pub const REMOVED_ENV: [(&str, &str, &str); 12] = [
    ("VLLM_ATTENTION_BACKEND", "before 0.23", "use the flag --attention-backend NAME instead"),
    ("VLLM_USE_V1", "before 0.23", "V1 is vLLM's only engine now; remove the variable"),
    (
        "VLLM_CPU_MOE_PREPACK",
        "before 0.23 (its last mention, in the compile-hash list, went in 0.34)",
        "the CPU MoE layer prepacks its weights itself; remove the variable",
    ),
    (
        "VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE",
        "in 0.33",
        "Ray's compiled-graph executor was removed: --distributed-executor-backend ray runs RayExecutorV2, which has no such setting",
    ),
    (
        "VLLM_USE_RAY_COMPILED_DAG_OVERLAP_COMM",
        "in 0.33",
        "Ray's compiled-graph executor was removed: --distributed-executor-backend ray runs RayExecutorV2, which has no such setting",
    ),
    (
        "VLLM_USE_RAY_WRAPPED_PP_COMM",
        "in 0.33",
        "Ray's compiled-graph executor was removed: --distributed-executor-backend ray runs RayExecutorV2, which has no such setting",
    ),
    ("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", "in 0.33", "RayExecutorV2 is the only Ray executor (--distributed-executor-backend ray); remove the variable"),
    ("VLLM_ROCM_MONO_DECODE", "in 0.33", "use the flag --monokernel (KernelConfig.monokernel)"),
    (
        "VLLM_ROCM_AITER_MLA_DCP_VERIFY",
        "in 0.33",
        "chosen per shape: AITER's ASM verify on gfx950 where it applies, else the segmented or Triton path; remove the variable",
    ),
    (
        "VLLM_ROCM_AITER_MEGA_MOE_FUSE_SHARED_EXPERTS",
        "in 0.33",
        "with --moe-backend aiter_mega_moe the shared expert is fused per layer where the quantization allows; remove the variable",
    ),
    ("VLLM_ROCM_USE_AITER_FP4_ASM_GEMM", "in 0.33", "no setting: the dynamic-quant FP4 GEMM no longer reads one; remove the variable"),
    (
        "VLLM_USE_V2_MODEL_RUNNER",
        "in 0.34",
        "Model Runner V1 was removed and V2 is the only runner: unset it (0.34 refuses any value but 1 when the engine starts)",
    ),
];

/// When the recipe's image runs a vLLM release other than the one that
/// parsed its flags: how to check with that release's parser (flags come
/// and go between releases: srt-slurm's v0.21.0 recipes name
/// attention-config keys that 0.32 no longer has). Empty otherwise.
fn other_release_hint(recipe: &Recipe, flags: &FlagCheck) -> String {
    let Some(image) = recipe.image.as_deref() else { return String::new() };
    let Some(release) = python::releases::image_release(image) else { return String::new() };
    let checked = flags.vllm_version.as_deref().and_then(python::releases::release_of);
    if checked.is_some() && checked == python::releases::release_of(&release) {
        return String::new();
    }
    format!(
        "\n    the recipe's image {image} runs vLLM {release} and this is vLLM {}: check with that release's parser \
         (`ci/setup.sh --with-vllm-parser {release}`, then `recipe check --python .enginebench/vllm-parser-{release}/bin/python`)",
        flags.vllm_version.as_deref().unwrap_or("of unknown version")
    )
}

/// Judges one configuration from vLLM's parse and the host.
pub fn findings(recipe: &Recipe, model: &str, config: &EngineConfig, flags: &FlagCheck, host: &Host) -> Findings {
    let mut f = Findings::default();
    if let Some(e) = &flags.error {
        f.errors.push(format!("vLLM's serve parser rejects the flags: {e}{}", other_release_hint(recipe, flags)));
        return f;
    }
    if !flags.unknown_flags.is_empty() {
        let msg = format!(
            "{} not known to this vLLM ({}){}: checked the other flags without them",
            flags.unknown_flags.join(" "),
            flags.vllm_version.as_deref().unwrap_or("unknown version"),
            recipe.image.as_deref().map(|i| format!("; the recipe pins image {i}, whose vLLM may know them")).unwrap_or_default()
        );
        // A CPU recipe without a pinned image runs on this very vLLM: an
        // unknown flag there is a typo, not a newer or GPU-only flag.
        let runs_here = recipe.is_cpu() && recipe.image.is_none();
        if recipe.strict || runs_here { f.errors.push(msg) } else { f.warnings.push(msg) }
    }
    if let Some(e) = super::plan::missing_local_model(&recipe.model) {
        f.errors.push(e);
    }
    let version = flags.vllm_version.as_deref().unwrap_or("this vLLM");
    // A CPU recipe without a pinned image runs on this very vLLM: an
    // unknown name there is a typo, not a newer or GPU-only one.
    let runs_here = recipe.is_cpu() && recipe.image.is_none();
    for (name, hint) in &flags.removed_env {
        f.errors.push(format!("{name}: vLLM {version} lists it as removed and refuses it when the engine starts: {hint}"));
    }
    for name in flags.unknown_env.iter().filter(|n| !flags.removed_env.contains_key(*n)) {
        if let Some((_, when, instead)) = REMOVED_ENV.iter().find(|(n, _, _)| n == name) {
            let msg = format!("{name} was removed from vLLM: {instead} (removed {when})");
            // 0.34 refuses any value but 1 at engine start (vllm/platforms/interface.py validate_environ).
            let refused = *name == "VLLM_USE_V2_MODEL_RUNNER" && config.env.get(name.as_str()).is_some_and(|v| v != "1");
            if refused || recipe.strict || runs_here { f.errors.push(msg) } else { f.warnings.push(msg) }
        }
    }
    if flags.platform.is_none() {
        f.notes.push(format!(
            "vLLM {version} found no platform here (no GPU): its parser checked the flags; what needs a device is checked when the engine starts"
        ));
    }
    if !flags.ignored.is_empty() {
        f.notes.push(format!("ignored in-process (API-server flags): {}", flags.ignored.join(", ")));
    }
    let unexplained: Vec<&String> =
        flags.unknown_env.iter().filter(|n| !flags.removed_env.contains_key(*n) && !REMOVED_ENV.iter().any(|(r, _, _)| r == n)).collect();
    if !unexplained.is_empty() {
        let names: Vec<&str> = unexplained.iter().map(|n| n.as_str()).collect();
        let msg = format!("this vLLM does not know {} (removed or misspelled?)", names.join(", "));
        if recipe.strict || runs_here { f.errors.push(msg) } else { f.warnings.push(msg) }
    } else if flags.known_env_count == 0 {
        f.notes.push("could not read vLLM's list of environment variables".into());
    }
    // vLLM's own parse of --max-model-len, else the local model's config.
    let limit = match flags.max_model_len {
        Some(n) => Some((n, format!("--max-model-len {n}"))),
        None => super::lengths::context_limit(&[], model),
    };
    let specs = super::plan::point_specs(config);
    let longest = specs.iter().filter(|s| !s.workload.is_sessions()).max_by_key(|s| s.dataset.longest_request());
    match (limit, longest) {
        (Some((max, limit)), Some(s)) => match super::lengths::too_long(&s.dataset, max, &limit) {
            Some(e) => f.errors.push(e),
            None => f.notes.push(format!("longest request {} tokens fits max-model-len {max}", s.dataset.longest_request())),
        },
        (None, Some(_)) => f.notes.push("max-model-len not set and the model's config is not local: checked when the engine starts".into()),
        _ => {}
    }
    let tp = u64::from(config.tp.unwrap_or(0)).max(flags.tensor_parallel_size.unwrap_or(1));
    let visible = visible_gpus(config, host);
    if let Some(n) = visible.filter(|&n| tp > n as u64) {
        f.errors.push(format!("tensor parallel size {tp} exceeds the {n} visible GPU(s)"));
    }
    f
}

/// GPUs the engine would see: the host's, limited by *_VISIBLE_DEVICES in the
/// configuration's env. `None` on a host without GPUs.
fn visible_gpus(config: &EngineConfig, host: &Host) -> Option<usize> {
    if host.gpus.is_empty() {
        return None;
    }
    let limit = ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
        .iter()
        .filter_map(|k| config.env.get(*k).or(std::env::var(k).ok().as_ref()).cloned())
        .map(|v| v.split(',').filter(|s| !s.trim().is_empty()).count())
        .min();
    Some(limit.map_or(host.gpus.len(), |l| l.min(host.gpus.len())))
}

/// The knob report of each (model, configuration), made in one worker
/// process (vLLM's parser and config classes; no engine, no weights): the
/// report, or why it could not be made.
///
/// Errors: the worker could not start or answer.
pub fn knob_reports(python: &Interpreter, configs: &[(String, EngineConfig)]) -> Result<Vec<std::result::Result<KnobReport, String>>> {
    knob_reports_with(python, configs, false)
}

/// [`knob_reports`], with vLLM's quick all-reduce rule evaluated for every
/// configuration when `quick_reduce` (an `ab` where one arm sets it).
pub fn knob_reports_with(python: &Interpreter, configs: &[(String, EngineConfig)], quick_reduce: bool) -> Result<Vec<std::result::Result<KnobReport, String>>> {
    Ok(vllm_checks(python, configs, Some(quick_reduce))?
        .into_iter()
        .map(|c| match (c.knobs, c.knobs_error, c.error) {
            (Some(k), _, _) => Ok(k),
            (None, Some(e), _) | (None, None, Some(e)) => Err(e),
            (None, None, None) => Err("the worker made no knob report".into()),
        })
        .collect())
}

/// What the knob report of `config` needs besides its flags: the recipe's
/// environment and the sweep's concurrencies.
pub fn knob_request(config: &EngineConfig) -> KnobRequest {
    KnobRequest {
        env: config.env.clone(),
        env_unset: config.env_unset.clone(),
        concs: config.points.iter().map(|p| p.conc).collect(),
        quick_reduce: false,
    }
}

/// Parses every (model, configuration)'s flags in one worker process, with
/// the knob report of each when `knobs` is given (`Some(true)`: with the
/// quick all-reduce rule for every configuration).
fn vllm_checks(python: &Interpreter, configs: &[(String, EngineConfig)], knobs: Option<bool>) -> Result<Vec<FlagCheck>> {
    let items = configs
        .iter()
        .map(|(model, c)| {
            let mut argv = vec![model.clone()];
            argv.extend(c.args.iter().cloned());
            let knobs = knobs.map(|qr| KnobRequest { quick_reduce: qr, ..knob_request(c) });
            CheckItem { argv, env_names: c.env.keys().cloned().collect(), knobs }
        })
        .collect();
    let task = Task::Check(CheckJob { items });
    errln!("checking flags with vLLM's serve parser (imports vLLM, loads no weights)...");
    ask_worker(python, &task, "flag check", &Default::default(), |msg| match msg {
        Message::Checked { results } => Some(results),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(recipe_toml: &str, flags: FlagCheck) -> Findings {
        let recipe = Recipe::parse(recipe_toml, "test.toml").unwrap();
        let config = recipe.listed_configs(None).unwrap().remove(0);
        let host = Host { hostname: "h".into(), cpu: "c".into(), logical_cpus: 2, gpus: Vec::new() };
        findings(&recipe, "org/model", &config, &flags, &host)
    }

    const GPU: &str = "name = \"g\"\nmodel = \"org/model\"\nhardware = \"h200\"\n[engine]\nargs = [\"--max-model-len\", \"4096\"]\n[sweep]\nisl = 64\nosl = 8\nconc = [1]\n";

    fn known(flags: FlagCheck) -> FlagCheck {
        FlagCheck { known_env_count: 300, vllm_version: Some("0.34.0".into()), platform: Some("cuda".into()), ..flags }
    }

    #[test]
    fn a_rejection_names_the_images_release_parser_when_it_differs() {
        let rejected = || known(FlagCheck { error: Some("argument --attention-config/-ac: unexpected key".into()), ..FlagCheck::default() });
        let pinned = |image: &str| GPU.replace("hardware", &format!("image = \"{image}\"\nhardware"));
        let f = judge(&pinned("vllm/vllm-openai:v0.21.0"), rejected());
        assert_eq!(f.errors.len(), 1);
        assert!(f.errors[0].contains("runs vLLM 0.21.0 and this is vLLM 0.34.0"), "{}", f.errors[0]);
        assert!(f.errors[0].contains("--with-vllm-parser 0.21.0") && f.errors[0].contains(".enginebench/vllm-parser-0.21.0/bin/python"), "{}", f.errors[0]);
        // The same release, a nightly, or no image: the parser's message alone.
        for recipe in [pinned("vllm/vllm-openai:v0.34.0"), pinned("vllm/vllm-openai:nightly-5e35a6f"), GPU.to_string()] {
            let f = judge(&recipe, rejected());
            assert_eq!(f.errors, vec!["vLLM's serve parser rejects the flags: argument --attention-config/-ac: unexpected key".to_string()]);
        }
    }

    #[test]
    fn removed_variables_are_named_with_their_release_and_replacement() {
        let recipe = GPU.replace("[engine]", "[env]\nVLLM_USE_RAY_WRAPPED_PP_COMM = \"1\"\nVLLM_ROCM_MONO_DECODE = \"1\"\n[engine]");
        let flags = known(FlagCheck { unknown_env: vec!["VLLM_ROCM_MONO_DECODE".into(), "VLLM_USE_RAY_WRAPPED_PP_COMM".into()], ..FlagCheck::default() });
        let f = judge(&recipe, flags);
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        assert_eq!(f.warnings.len(), 2, "{:?}", f.warnings);
        assert!(f.warnings.iter().any(|w| w == "VLLM_ROCM_MONO_DECODE was removed from vLLM: use the flag --monokernel (KernelConfig.monokernel) (removed in 0.33)"));
        assert!(f.warnings.iter().any(|w| w.starts_with("VLLM_USE_RAY_WRAPPED_PP_COMM was removed from vLLM: Ray's compiled-graph executor")));

        // 0.34 refuses VLLM_USE_V2_MODEL_RUNNER=0 at engine start; =1 is only redundant.
        for (value, error) in [("0", true), ("1", false)] {
            let recipe = GPU.replace("[engine]", &format!("[env]\nVLLM_USE_V2_MODEL_RUNNER = \"{value}\"\n[engine]"));
            let flags = known(FlagCheck { unknown_env: vec!["VLLM_USE_V2_MODEL_RUNNER".into()], ..FlagCheck::default() });
            let f = judge(&recipe, flags);
            assert_eq!(f.errors.len(), usize::from(error), "{value}: {:?}", f.errors);
            assert_eq!(f.warnings.len(), usize::from(!error), "{value}: {:?}", f.warnings);
        }

        // A name vLLM itself lists as removed: its hint, and an error (it refuses it at start).
        let recipe = GPU.replace("[engine]", "[env]\nVLLM_MARLIN_INPUT_DTYPE = \"int8\"\n[engine]");
        let removed = [("VLLM_MARLIN_INPUT_DTYPE".to_string(), "Use --quantization humming.".to_string())].into();
        let flags = known(FlagCheck { unknown_env: vec!["VLLM_MARLIN_INPUT_DTYPE".into()], removed_env: removed, ..FlagCheck::default() });
        let f = judge(&recipe, flags);
        assert_eq!(f.errors, vec!["VLLM_MARLIN_INPUT_DTYPE: vLLM 0.34.0 lists it as removed and refuses it when the engine starts: Use --quantization humming.".to_string()]);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    }

    #[test]
    fn data_parallel_by_flag_or_environment_passes_and_no_platform_is_a_note() {
        // Data parallelism runs (one worker per rank, src/orchestrate/dp/):
        // recipe check has nothing against it.
        let env = GPU.replace("[engine]", "[env]\nVLLM_DP_SIZE = \"2\"\n[engine]");
        assert!(judge(&env, known(FlagCheck::default())).errors.is_empty());
        let flag = GPU.replace("\"4096\"]", "\"4096\", \"-dp\", \"4\"]");
        assert!(judge(&flag, known(FlagCheck::default())).errors.is_empty());

        let f = judge(GPU, FlagCheck { platform: None, ..known(FlagCheck::default()) });
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        assert!(f.notes.iter().any(|n| n.starts_with("vLLM 0.34.0 found no platform here (no GPU): its parser checked the flags")), "{:?}", f.notes);
    }
}
