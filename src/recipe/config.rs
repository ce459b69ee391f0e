//! From a recipe (plus variant and command-line overlays) to the engine
//! configurations to run: one per variant and TP size, each with its final
//! flag list, environment and points.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::args::{has_flag, remove_flag, set_flag, substitute};
use super::sweep::{ResolvedSweep, Sweep};
use crate::protocol::Point;
use super::variant::merge_tables;
use super::Recipe;

/// The name of the recipe without a variant overlay (reserved: no
/// `[variants.base]`).
pub const BASE: &str = "base";

/// Flags that fix the tensor-parallel size.
const TP_FLAGS: [&str; 2] = ["--tensor-parallel-size", "-tp"];

/// One engine to build: everything a worker needs except the resolved model path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// The variant, or `None` for the base recipe.
    pub variant: Option<String>,
    /// The sweep's TP size for this engine, if the sweep sets one.
    pub tp: Option<u32>,
    /// `vllm serve` flags (after the model), placeholders filled, with
    /// `--hf-overrides` JSON appended when the recipe has overrides.
    pub args: Vec<String>,
    /// Variables set for the engine process.
    pub env: BTreeMap<String, String>,
    /// Variables removed from the engine process's environment.
    pub env_unset: Vec<String>,
    /// The variant's whole sweep (recipe + variant + command line).
    pub sweep: ResolvedSweep,
    /// The points this engine runs.
    pub points: Vec<Point>,
    /// The variant's own interpreter (`python = "..."`), if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<std::path::PathBuf>,
    /// Where its processes run (`[layout]`), checked against its parallel
    /// shape ([`super::layout::Placement`]).
    #[serde(default)]
    pub layout: super::layout::NodeLayout,
}

impl EngineConfig {
    /// "base", "aiter", "aiter tp=8", ... for messages and tables.
    pub fn label(&self) -> String {
        let v = self.variant.as_deref().unwrap_or("base");
        match self.tp {
            Some(tp) => format!("{v} tp={tp}"),
            None => v.to_string(),
        }
    }
}

impl Recipe {
    /// The engine configurations for `variants` (empty: the base recipe), with
    /// `cli` laid over each variant's sweep.
    ///
    /// Errors: an unknown variant (with the known ones), `--hf-overrides` both
    /// in args and in `hf_overrides`, a placeholder without a value, a TP
    /// sweep against a fixed TP flag, an env variable both set and unset, or
    /// an invalid sweep.
    pub fn engine_configs(&self, variants: &[String], cli: &Sweep) -> Result<Vec<EngineConfig>, String> {
        if variants.is_empty() {
            return self.variant_configs(None, cli);
        }
        let mut out = Vec::new();
        for name in variants {
            // "base" names the recipe without any overlay.
            let name = Some(name).filter(|n| n.as_str() != BASE);
            out.extend(self.variant_configs(name, cli)?);
        }
        Ok(out)
    }

    /// `variant`'s configurations, or (None) the base's and every variant's:
    /// what `recipe check` and `recipe show` look at.
    pub fn listed_configs(&self, variant: Option<&str>) -> Result<Vec<EngineConfig>, String> {
        match variant {
            Some(v) => self.engine_configs(&[v.to_string()], &Sweep::default()),
            None => {
                let mut all = self.engine_configs(&[], &Sweep::default())?;
                for name in self.variants.keys() {
                    all.extend(self.variant_configs(Some(name), &Sweep::default())?);
                }
                Ok(all)
            }
        }
    }

    fn variant_configs(&self, name: Option<&String>, cli: &Sweep) -> Result<Vec<EngineConfig>, String> {
        let empty = super::Variant::default();
        let v = match name {
            None => &empty,
            Some(n) => self.variants.get(n).ok_or_else(|| {
                let known: Vec<&str> = self.variants.keys().map(String::as_str).collect();
                format!(
                    "unknown variant {n:?}; this recipe has: base (the recipe itself){}",
                    known.iter().map(|k| format!(", {k}")).collect::<String>()
                )
            })?,
        };

        let mut env = self.env.clone();
        env.extend(v.env.clone());
        let mut env_unset: Vec<String> = self.env_unset.clone();
        env_unset.extend(v.env_unset.iter().cloned());
        for k in &v.env_unset {
            if v.env.contains_key(k) {
                return Err(format!("env variable {k} is both set and unset"));
            }
            env.remove(k);
        }
        for k in &env_unset {
            if env.contains_key(k) {
                return Err(format!("env variable {k} is both set and unset"));
            }
        }
        env_unset.sort();
        env_unset.dedup();

        let mut args = self.engine.args.clone();
        for flag in &v.args_remove {
            if !remove_flag(&mut args, flag) {
                return Err(format!("args_remove: {flag} is not in the base args"));
            }
        }
        for (flag, value) in &v.args_replace {
            set_flag(&mut args, flag, value);
        }
        args.extend(v.args_add.iter().cloned());
        if let Some(t) = &self.tokenizer {
            if !has_flag(&args, &["--tokenizer"]) {
                set_flag(&mut args, "--tokenizer", t);
            }
        }

        let mut hf = self.engine.hf_overrides.clone().unwrap_or_default();
        if let Some(over) = &v.hf_overrides {
            merge_tables(&mut hf, over);
        }
        if !hf.is_empty() {
            if has_flag(&args, &["--hf-overrides"]) {
                return Err("--hf-overrides is given in args and in hf_overrides: keep one".into());
            }
            let json = serde_json::to_string(&hf).map_err(|e| format!("hf_overrides: {e}"))?;
            args.push("--hf-overrides".into());
            args.push(json);
        }

        check_json_flags(&args)?;

        let mut sweep = self.sweep.clone();
        if let Some(s) = &v.sweep {
            sweep = sweep.overlay(s);
        }
        let sweep = sweep.overlay(cli).resolve().map_err(|e| format!("[sweep]: {e}"))?;

        let mut vars = self.vars.clone();
        vars.extend(v.vars.clone());
        let uses_tp = args.iter().any(|a| a.contains("${TP}"));
        let fixed_tp = has_flag(&args, &TP_FLAGS);
        let points = sweep.points();
        sweep
            .tps()
            .into_iter()
            .map(|tp| {
                let mut vars = vars.clone();
                if let Some(tp) = tp {
                    if fixed_tp && !uses_tp {
                        return Err(format!(
                            "sweep sets tp = {tp} but the args fix --tensor-parallel-size: use \"${{TP}}\" there"
                        ));
                    }
                    vars.insert("TP".into(), tp.to_string());
                }
                let mut args: Vec<String> =
                    args.iter().map(|a| substitute(a, &vars)).collect::<Result<_, _>>()?;
                if let (Some(tp), false) = (tp, uses_tp) {
                    set_flag(&mut args, "--tensor-parallel-size", &tp.to_string());
                }
                let env: BTreeMap<String, String> = env
                    .iter()
                    .map(|(k, val)| Ok((k.clone(), substitute(val, &vars)?)))
                    .collect::<Result<_, String>>()?;
                let layout = v.layout.clone().or_else(|| self.layout.clone()).unwrap_or_default();
                super::layout::Placement::of(&layout, &args, tp, env.get(super::parallel::DP_SIZE_VAR).map(String::as_str))?;
                Ok(EngineConfig {
                    variant: name.cloned(),
                    tp,
                    args,
                    env,
                    env_unset: env_unset.clone(),
                    sweep: sweep.clone(),
                    points: points.iter().filter(|p| p.tp == tp).copied().collect(),
                    python: v.python.clone(),
                    layout,
                })
            })
            .collect()
    }
}

/// Flags whose value must be JSON; checked here so the error can point at
/// the position (vLLM's parser only says the value "cannot be converted").
const JSON_FLAGS: [&str; 1] = ["--hf-overrides"];

fn check_json_flags(args: &[String]) -> Result<(), String> {
    for (i, a) in args.iter().enumerate() {
        let (name, inline) = a.split_once('=').map_or((a.as_str(), None), |(n, v)| (n, Some(v)));
        if !JSON_FLAGS.contains(&name) {
            continue;
        }
        let Some(value) = inline.or(args.get(i + 1).map(String::as_str)) else {
            return Err(format!("{name} needs a JSON value"));
        };
        if let Err(e) = serde_json::from_str::<serde_json::Value>(value) {
            // serde_json's message already says where ("at line 1 column 9").
            return Err(format!("{name} value is not valid JSON: {e}, in {value}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECIPE: &str = r#"
name = "m3"
model = "amd/MiniMax-M3-MXFP4"
hardware = "mi355x"
[vars]
MAX_MODEL_LEN = "10240"
[env]
VLLM_ROCM_USE_AITER = "1"
[engine]
args = ["--tensor-parallel-size", "${TP}", "--max-model-len", "${MAX_MODEL_LEN}", "--block-size", "128"]
[sweep]
isl_osl = [[1024, 1024], [8192, 1024]]
search_space = [{ tp = 8, conc_range = [1, 32] }, { tp = 4, conc_range = [1, 256] }]
[variants.fp8kv]
args_replace = { "--kv-cache-dtype" = "fp8" }
[variants.topk]
hf_overrides = { index_topk_freq = 4, use_index_cache = true }
sweep = { search_space = [{ tp = 4, conc = [64] }] }
[variants.int4]
env = { VLLM_ROCM_QUICK_REDUCE_QUANTIZATION = "INT4" }
env_unset = ["VLLM_ROCM_USE_AITER"]
"#;

    fn recipe() -> Recipe {
        Recipe::parse(RECIPE, "m3.toml").unwrap()
    }

    #[test]
    fn base_expands_per_tp() {
        let c = recipe().engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].label(), "base tp=8");
        assert_eq!(c[0].args, vec!["--tensor-parallel-size", "8", "--max-model-len", "10240", "--block-size", "128"]);
        assert_eq!(c[0].points.len(), 12); // 2 pairs x conc 1..32
        assert_eq!(c[1].points.len(), 18); // 2 pairs x conc 1..256
        assert!(c[1].points.iter().all(|p| p.tp == Some(4)));
    }

    #[test]
    fn variants_overlay() {
        let r = recipe();
        let fp8 = &r.engine_configs(&["fp8kv".into()], &Sweep::default()).unwrap()[0];
        assert_eq!(fp8.args[fp8.args.len() - 2..], ["--kv-cache-dtype", "fp8"]);
        let topk = r.engine_configs(&["topk".into()], &Sweep::default()).unwrap();
        assert_eq!(topk.len(), 1);
        assert_eq!(topk[0].points.len(), 2);
        let json: serde_json::Value = serde_json::from_str(topk[0].args.last().unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"index_topk_freq": 4, "use_index_cache": true}));
        let int4 = &r.engine_configs(&["int4".into()], &Sweep::default()).unwrap()[0];
        assert!(!int4.env.contains_key("VLLM_ROCM_USE_AITER"));
        assert_eq!(int4.env_unset, vec!["VLLM_ROCM_USE_AITER"]);
        assert_eq!(int4.env["VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"], "INT4");
        let both = r.engine_configs(&["fp8kv".into(), "int4".into()], &Sweep::default()).unwrap();
        assert_eq!(both.len(), 4);
    }

    #[test]
    fn errors() {
        let r = recipe();
        let e = r.engine_configs(&["nope".into()], &Sweep::default()).unwrap_err();
        assert!(e.contains("fp8kv") && e.contains("topk"), "{e}");
        let twice = RECIPE.replace("\"--block-size\", \"128\"]", "\"--hf-overrides\", \"{}\"]\nhf_overrides = { a = 1 }");
        assert!(Recipe::parse(&twice, "x").unwrap_err().to_string().contains("--hf-overrides"));
        let unknown = RECIPE.replace("${MAX_MODEL_LEN}", "${MAXLEN}");
        let e = Recipe::parse(&unknown, "x").unwrap_err().to_string();
        assert!(e.contains("MAXLEN") && e.contains("MAX_MODEL_LEN"), "{e}");
        let bad_json = RECIPE.replace("\"--block-size\", \"128\"]", "\"--hf-overrides\", \"{\\\"a\\\": 1,}\"]");
        let e = Recipe::parse(&bad_json, "x").unwrap_err().to_string();
        assert!(e.contains("not valid JSON") && e.contains("column 9"), "{e}");
        let fixed = RECIPE.replace("\"${TP}\"", "\"8\"");
        assert!(Recipe::parse(&fixed, "x").unwrap_err().to_string().contains("${TP}"));
    }

    #[test]
    fn tp_flag_added_when_no_placeholder() {
        let text = "name = \"x\"\nmodel = \"m\"\n[sweep]\nisl = 1\nosl = 1\nconc = [1]\ntp = [2]";
        let c = Recipe::parse(text, "x").unwrap().engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!(c[0].args, vec!["--tensor-parallel-size", "2"]);
    }
}
