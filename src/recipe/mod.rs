//! Recipes: what InferenceX-style launchers hold (environment, `vllm serve`
//! flags, a sweep, an eval), as TOML.
//!
//! ```toml
//! name = "smollm2-135m-cpu"
//! model = "bundled:smollm2-135m-instruct"   # or a hub id / local path
//! hardware = "cpu"
//! [env]
//! VLLM_CPU_KVCACHE_SPACE = "2"
//! [engine]
//! args = ["--dtype", "float32", "--enforce-eager"]
//! [sweep]
//! isl = 256
//! osl = 128
//! conc = [1, 4, 16]
//! [eval]
//! task = "gsm8k"
//! limit = 50
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::usage;

pub mod args;
pub mod config;
pub mod layout;
pub mod overrides;
pub mod parallel;
pub mod roles;
pub mod show;
pub mod sweep;
pub mod variant;
pub mod workload;

pub use config::EngineConfig;
pub use sweep::Sweep;
pub use variant::Variant;

/// Engine start deadline unless the recipe or `--start-timeout` says
/// otherwise, s: generous, since a large model's load, compile and graph
/// capture take tens of minutes (InferenceX's launchers give the server
/// `VLLM_ENGINE_READY_TIMEOUT_S=3600`).
pub const DEFAULT_START_TIMEOUT_S: f64 = 3600.0;

/// The default recipe, used when `run` gets no recipe path.
pub const DEFAULT_RECIPE: &str = "recipes/cpu/smollm2-135m.toml";

/// A parsed recipe. Unknown keys are errors.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub name: String,
    /// Hub id, local path, or `bundled:NAME` for a model prepared by set-up.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// e.g. "cpu", "h200", "mi300x", "mi355x".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    #[serde(default = "default_framework")]
    pub framework: String,
    /// The container image the recipe's reference numbers come from
    /// (InferenceX's pinned image); named when this vLLM differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Unknown `VLLM_*` environment names are errors instead of warnings.
    #[serde(default)]
    pub strict: bool,
    /// The most one point (warm-up included) or the eval may take, s
    /// (`--point-timeout` overrides); then the worker is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_timeout_s: Option<f64>,
    /// The most engine start (import, weights, compile, graph capture) may
    /// take, s (`--start-timeout` overrides; default
    /// [`DEFAULT_START_TIMEOUT_S`]); then the worker is killed and the job
    /// recorded as failed, to be resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_s: Option<f64>,
    /// Values for `${NAME}` placeholders in args and env (`${TP}` comes from the sweep).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Environment variables set before the interpreter starts.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables removed from the engine's environment.
    #[serde(default)]
    pub env_unset: Vec<String>,
    #[serde(default)]
    pub engine: EngineSection,
    /// A disaggregated prefill/decode recipe's two sides, each with its own
    /// flags and environment over the shared ones ([`roles::Roles`]);
    /// absent: an aggregated recipe (one engine configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<roles::Roles>,
    /// Where the engine's processes run when its job spans nodes
    /// ([`layout::NodeLayout`]; absent: one node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<layout::NodeLayout>,
    pub sweep: Sweep,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<EvalSection>,
    /// Named overlays for before/after comparisons (`--variant NAME`).
    #[serde(default)]
    pub variants: BTreeMap<String, Variant>,
}

fn default_framework() -> String {
    "vllm".into()
}

/// `[engine]`: the `vllm serve` flag list, exactly as on the command line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    #[serde(default)]
    pub args: Vec<String>,
    /// Serialised to the `--hf-overrides` JSON (giving `--hf-overrides` in
    /// `args` as well is an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_overrides: Option<toml::Table>,
}

/// `[eval]`: the accuracy check run on the same engine after the sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    /// Task: `gsm8k` (lm-eval's 5-shot), `gsm8k_cot`, `gsm8k_inferencex`
    /// (InferenceX's chat mode), or a path to a task TOML (see `evals/`);
    /// any other name is an lm-eval task (see `tasks`).
    #[serde(default = "default_task")]
    pub task: String,
    /// Several tasks in one run (when given, `task` is not used): at most
    /// one built-in task, plus lm-eval tasks by name (`lm-eval:NAME` for a
    /// name a built-in task has) or task YAML path, run through lm-eval
    /// itself ([`crate::eval::lmeval`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<String>,
    /// lm-eval task YAML files, or folders of them (relative to the recipe).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_files: Vec<PathBuf>,
    /// Chat template on or off for every task (lm-eval's
    /// `--apply_chat_template`); absent: a built-in task's own setting, off
    /// for lm-eval tasks (lm-eval's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<bool>,
    /// Max new tokens of every eval request: a number, or "inferencex"
    /// (context - 4096, or context / 2 up to 4096, at most 16384, as
    /// InferenceX's run_lm_eval); absent: each task's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<EvalMaxTokens>,
    /// Minimum score per task (0..1), e.g. `{ gpqa_diamond_cot_n_shot = 0.30 }`;
    /// a thresholds file's entries win over these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thresholds: BTreeMap<String, f64>,
    /// A thresholds file in InferenceX's shape (`utils/evals/thresholds.yaml`,
    /// relative to the recipe): see [`crate::eval::thresholds`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds_file: Option<PathBuf>,
    /// The model prefix whose entries of the thresholds file apply
    /// (InferenceX's `model-prefix`, e.g. "dsv4").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_prefix: Option<String>,
    /// Questions scored; all of the split when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Eval requests kept in flight.
    #[serde(default = "default_eval_conc")]
    pub concurrency: u32,
    /// Accuracy gate: the run fails (exit 1) when `gate_metric` is below this
    /// (0..1; InferenceX uses 0.90 for GPU recipes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_accuracy: Option<f64>,
    /// Which exact_match the gate reads: "all" (both filters, as InferenceX's
    /// validate_scores.py checks every exact_match metric), "strict" or "flexible".
    #[serde(default)]
    pub gate_metric: GateMetric,
}

/// `[eval] max_tokens`: a fixed number or InferenceX's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EvalMaxTokens {
    Tokens(u32),
    /// `"inferencex"`.
    Policy(crate::protocol::MaxTokensPolicy),
}

impl std::str::FromStr for EvalMaxTokens {
    type Err = String;

    /// `N` (> 0) or `inferencex`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "inferencex" => Ok(EvalMaxTokens::Policy(crate::protocol::MaxTokensPolicy::Inferencex)),
            n => match n.parse::<u32>() {
                Ok(v) if v > 0 => Ok(EvalMaxTokens::Tokens(v)),
                _ => Err(format!("{s:?}: give a number of tokens > 0 or \"inferencex\"")),
            },
        }
    }
}

/// The filter(s) whose exact_match the accuracy gate reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GateMetric {
    #[default]
    All,
    Strict,
    Flexible,
}

fn default_task() -> String {
    "gsm8k".into()
}
fn default_eval_conc() -> u32 {
    64
}

impl Default for EvalSection {
    /// What an empty `[eval]` section means.
    fn default() -> Self {
        EvalSection {
            task: default_task(),
            tasks: Vec::new(),
            task_files: Vec::new(),
            chat: None,
            max_tokens: None,
            thresholds: BTreeMap::new(),
            thresholds_file: None,
            model_prefix: None,
            limit: None,
            concurrency: default_eval_conc(),
            min_accuracy: None,
            gate_metric: GateMetric::default(),
        }
    }
}

impl Recipe {
    /// Reads and checks a recipe file.
    ///
    /// Errors (usage): unreadable file; TOML syntax or schema errors, with the
    /// file, line and column; values out of range.
    pub fn load(path: &Path) -> Result<Recipe> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("cannot read recipe {}: {e}", path.display())))?;
        let mut recipe = Recipe::parse(&text, &path.display().to_string())?;
        // Workload files named in the recipe are relative to the recipe's folder.
        let dir = path.parent().unwrap_or(Path::new("."));
        recipe.sweep.anchor_files(dir);
        for v in recipe.variants.values_mut() {
            if let Some(s) = v.sweep.as_mut() {
                s.anchor_files(dir);
            }
        }
        if let Some(e) = recipe.eval.as_mut() {
            for f in e.task_files.iter_mut().chain(e.thresholds_file.as_mut()) {
                if f.is_relative() {
                    *f = dir.join(&*f);
                }
            }
        }
        Ok(recipe)
    }

    /// Parses recipe text; `origin` names it in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Recipe> {
        let error = |e: &toml::de::Error, field: Option<String>| {
            let at = e
                .span()
                .map(|s| {
                    let (line, col) = line_col(text, s.start);
                    format!(":{line}:{col}")
                })
                .unwrap_or_default();
            // The key whose value is wrong (`env.VLLM_CPU_KVCACHE_SPACE`), when serde knows it.
            let field = field.filter(|f| f != "." && !f.is_empty()).map(|f| format!("`{f}`: ")).unwrap_or_default();
            usage(format!("recipe {origin}{at}: {field}{}", e.message()))
        };
        let de = toml::Deserializer::parse(text).map_err(|e| error(&e, None))?;
        let recipe: Recipe = serde_path_to_error::deserialize(de).map_err(|e| error(e.inner(), Some(e.path().to_string())))?;
        recipe.validate(origin)?;
        Ok(recipe)
    }

    fn validate(&self, origin: &str) -> Result<()> {
        let bad = |what: String| Err(usage(format!("recipe {origin}: {what}")));
        if self.point_timeout_s.is_some_and(|t| !(t > 0.0)) {
            return bad("point_timeout_s must be > 0 seconds".into());
        }
        if self.start_timeout_s.is_some_and(|t| !(t > 0.0 && t.is_finite())) {
            return bad("start_timeout_s must be > 0 seconds".into());
        }
        if self.framework != "vllm" {
            return bad(format!("framework = {:?} is not supported; use \"vllm\"", self.framework));
        }
        if self.variants.contains_key(config::BASE) {
            return bad("[variants.base]: \"base\" is reserved for the recipe without a variant; rename it".into());
        }
        if let Err(e) = self.engine_configs(&[], &Sweep::default()) {
            return bad(e);
        }
        for name in self.variants.keys() {
            if let Err(e) = self.engine_configs(std::slice::from_ref(name), &Sweep::default()) {
                return bad(format!("variant {name}: {e}"));
            }
        }
        if let Some(eval) = &self.eval {
            if eval.concurrency == 0 {
                return bad("eval.concurrency must be at least 1".into());
            }
            if eval.min_accuracy.is_some_and(|a| !(0.0..=1.0).contains(&a)) {
                return bad("eval.min_accuracy must be a fraction in [0, 1], e.g. 0.90".into());
            }
            if let Some((task, v)) = eval.thresholds.iter().find(|(_, v)| !(0.0..=1.0).contains(*v)) {
                return bad(format!("eval.thresholds.{task} = {v} must be a fraction in [0, 1], e.g. 0.30"));
            }
            if matches!(eval.max_tokens, Some(EvalMaxTokens::Tokens(0) | EvalMaxTokens::Policy(crate::protocol::MaxTokensPolicy::Fixed))) {
                return bad("eval.max_tokens: give a number of tokens > 0 or \"inferencex\"".into());
            }
        }
        let roles = self.roles.iter().flat_map(|r| r.prefill.iter().chain(&r.decode));
        let names = self
            .env
            .keys()
            .chain(&self.env_unset)
            .chain(self.variants.values().flat_map(|v| v.env.keys().chain(&v.env_unset)))
            .chain(roles.flat_map(|r| r.env.keys().chain(&r.env_unset)));
        for k in names {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return bad(format!("env: {k:?} is not a valid environment variable name"));
            }
        }
        Ok(())
    }

    /// True for a disaggregated prefill/decode recipe (`[roles]`).
    pub fn is_pd(&self) -> bool {
        self.roles.is_some()
    }

    /// True when the recipe targets the CPU backend.
    pub fn is_cpu(&self) -> bool {
        self.hardware.as_deref().is_some_and(|h| h.eq_ignore_ascii_case("cpu"))
    }
}

/// Finds the default recipe next to the binary's clone or in the current directory.
pub fn default_recipe_path() -> PathBuf {
    let candidates = std::env::current_exe()
        .ok()
        .into_iter()
        .flat_map(|exe| exe.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
        .chain(std::env::current_dir().ok());
    for dir in candidates {
        let p = dir.join(DEFAULT_RECIPE);
        if p.exists() {
            return p;
        }
    }
    PathBuf::from(DEFAULT_RECIPE)
}

/// 1-based line and column of byte offset `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(before.len(), |nl| before.len() - nl - 1) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "t"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
[engine]
args = ["--dtype", "float32"]
[sweep]
isl = 64
osl = 16
conc = [1, 4]
"#;

    #[test]
    fn parses_with_defaults() {
        let r = Recipe::parse(GOOD, "t.toml").unwrap();
        let points = r.sweep.resolve().unwrap().points();
        assert_eq!(points.iter().map(|p| p.conc).collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(points[1].num_prompts, 40);
        assert_eq!(points[1].warmups, 8);
        assert!(r.is_cpu());
        assert!(r.eval.is_none());
    }

    #[test]
    fn unknown_key_names_key_and_position() {
        let text = GOOD.replace("osl = 16", "osl = 16\nconcurrency = 3");
        let err = Recipe::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(err.contains("t.toml:10:1"), "{err}");
        assert!(err.contains("concurrency"), "{err}");
        assert!(err.contains("conc_range"), "lists valid keys: {err}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let text = GOOD.replace("[engine]", "[env]\nVLLM_CPU_KVCACHE_SPACE = 2\n[engine]");
        let err = Recipe::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(err.starts_with("recipe t.toml:6:"), "{err}");
        assert!(err.contains("`env.VLLM_CPU_KVCACHE_SPACE`: invalid type: integer"), "{err}");
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let text = GOOD.replace("conc = [1, 4]", "conc = []");
        let err = Recipe::parse(&text, "t.toml").unwrap_err();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(err.to_string().contains("[sweep]: conc"), "{err}");
    }
}
