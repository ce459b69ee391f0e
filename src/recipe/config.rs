//! From a recipe (plus variant and command-line overlays) to the engine
//! configurations to run: one per variant and TP size, each with its final
//! flag list, environment and points.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::args::{has_flag, remove_flag, set_flag, substitute};
use super::roles::{PdRole, check_pair};
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
    /// The side of a prefill/decode pair this engine is (`[roles]`), or
    /// `None` for an aggregated recipe's engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<PdRole>,
    /// Where its processes run (`[layout]`), checked against its parallel
    /// shape ([`super::layout::Placement`]).
    #[serde(default)]
    pub layout: super::layout::NodeLayout,
}

impl EngineConfig {
    /// "base", "aiter", "aiter tp=8", "base prefill", ... for messages and tables.
    pub fn label(&self) -> String {
        let v = self.variant.as_deref().unwrap_or("base");
        let label = match self.tp {
            Some(tp) => format!("{v} tp={tp}"),
            None => v.to_string(),
        };
        match self.role {
            Some(r) => format!("{label} {r}"),
            None => label,
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

        // The engines to build per TP size: the recipe's one, or a P/D
        // recipe's two sides (the shared flags, then the side's own).
        let shared_layout = v.layout.clone().or_else(|| self.layout.clone());
        let sides = match &self.roles {
            None => vec![(None, args, env, env_unset, shared_layout.unwrap_or_default())],
            Some(_) if shared_layout.is_some() => {
                return Err("[layout] in a prefill/decode recipe: each side has its own, give it as [roles.prefill.layout] / [roles.decode.layout]".into());
            }
            Some(roles) => roles
                .pair()?
                .into_iter()
                .map(|(side, role)| {
                    let mut args = args.clone();
                    args.extend(role.args.iter().cloned());
                    check_json_flags(&args).map_err(|e| format!("[roles.{side}] {e}"))?;
                    let mut env = env.clone();
                    env.extend(role.env.clone());
                    let mut unset = env_unset.clone();
                    for k in &role.env_unset {
                        if role.env.contains_key(k) {
                            return Err(format!("[roles.{side}] env variable {k} is both set and unset"));
                        }
                        env.remove(k);
                        unset.push(k.clone());
                    }
                    unset.sort();
                    unset.dedup();
                    Ok((Some(side), args, env, unset, role.layout.clone().unwrap_or_default()))
                })
                .collect::<Result<_, String>>()?,
        };
        if let [(_, _, _, _, p), (_, _, _, _, d)] = &sides[..] {
            if let (Some(gp), Some(gd)) = (p.gpus_per_node, d.gpus_per_node) {
                if gp != gd {
                    return Err(format!("[roles] prefill layout gpus_per_node = {gp} but decode's = {gd}: it is the allocation's GPUs per node, the same for both sides"));
                }
            }
        }

        let mut sweep = self.sweep.clone();
        if let Some(s) = &v.sweep {
            sweep = sweep.overlay(s);
        }
        let sweep = sweep.overlay(cli).resolve().map_err(|e| format!("[sweep]: {e}"))?;

        let mut vars = self.vars.clone();
        vars.extend(v.vars.clone());
        let points = sweep.points();
        let mut out = Vec::new();
        for tp in sweep.tps() {
            let first = out.len();
            for (role, args, env, env_unset, layout) in &sides {
                let mut vars = vars.clone();
                let uses_tp = args.iter().any(|a| a.contains("${TP}"));
                let fixed_tp = has_flag(args, &TP_FLAGS);
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
                super::layout::Placement::of(&layout.of_one_engine(role.is_some()), &args, tp, env.get(super::parallel::DP_SIZE_VAR).map(String::as_str))
                    .map_err(|e| match role {
                        Some(r) => format!("[roles.{r}] {e}").replace("[layout]", "layout"),
                        None => e,
                    })?;
                let layout = layout.clone();
                out.push(EngineConfig {
                    variant: name.cloned(),
                    tp,
                    args,
                    env,
                    env_unset: env_unset.clone(),
                    sweep: sweep.clone(),
                    points: points.iter().filter(|p| p.tp == tp).copied().collect(),
                    python: v.python.clone(),
                    role: *role,
                    layout,
                });
            }
            if let [p, d] = &out[first..] {
                if p.role.is_some() {
                    check_pair(&p.args, &d.args, &self.model, self.is_cpu())?;
                }
            }
        }
        Ok(out)
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

    const PD: &str = r#"
name = "pd"
model = "m"
hardware = "cpu"
[env]
A = "1"
[engine]
args = ["--dtype", "float32", "--block-size", "128"]
[roles.prefill]
args = ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"}', "--max-num-seqs", "4"]
env = { B = "p" }
env_unset = ["A"]
[roles.decode]
args = ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cpu"}']
[sweep]
isl = 64
osl = 16
conc = [1, 2]
[variants.small]
args_replace = { "--block-size" = "64" }
"#;

    #[test]
    fn a_pd_recipe_is_two_engine_configurations() {
        let r = Recipe::parse(PD, "pd.toml").unwrap();
        assert!(r.is_pd());
        let c = r.engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!(c.iter().map(EngineConfig::label).collect::<Vec<_>>(), ["base prefill", "base decode"]);
        assert_eq!(c[0].args[4..6], ["--kv-transfer-config".to_string(), r#"{"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"}"#.to_string()]);
        assert_eq!(c[0].args.last().unwrap(), "4");
        assert_eq!((c[0].env.get("A"), c[0].env.get("B").map(String::as_str), c[0].env_unset.clone()), (None, Some("p"), vec!["A".to_string()]));
        assert_eq!((c[1].env["A"].as_str(), c[1].env.get("B"), c[1].env_unset.len()), ("1", None, 0));
        assert_eq!((c[0].points.len(), c[1].points.len()), (2, 2));
        // A variant's edit of the shared flags reaches both sides alike.
        let small = r.engine_configs(&["small".into()], &Sweep::default()).unwrap();
        assert!(small.iter().all(|c| c.args[2..4] == ["--block-size".to_string(), "64".to_string()]));
        // A TP sweep sets both sides' TP.
        let tp = PD.replace("conc = [1, 2]", "conc = [1]\ntp = [1, 2]");
        let c = Recipe::parse(&tp, "x").unwrap().engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!(c.iter().map(EngineConfig::label).collect::<Vec<_>>(), ["base tp=1 prefill", "base tp=1 decode", "base tp=2 prefill", "base tp=2 decode"]);
    }

    #[test]
    fn each_side_has_its_own_layout() {
        let two = PD.replace("env = { B = \"p\" }", "env = { B = \"p\" }\nlayout = { workers = 2 }");
        let c = Recipe::parse(&two, "x").unwrap().engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!((c[0].layout.workers, c[1].layout.workers), (2, 1));
        let e = Recipe::parse(&format!("{two}\n[layout]\nnodes = 1\n"), "x").unwrap_err().to_string();
        assert!(e.contains("[layout] in a prefill/decode recipe: each side has its own"), "{e}");
        let bad = PD.replace("env = { B = \"p\" }", "env = { B = \"p\" }\nlayout = { nodes = 2, gpus_per_node = 4 }").replace("\"--max-num-seqs\", \"4\"]", "\"--max-num-seqs\", \"4\", \"-dp\", \"3\"]");
        let e = Recipe::parse(&bad, "x").unwrap_err().to_string();
        assert!(e.contains("[roles.prefill] layout nodes = 2 with DP size 3"), "{e}");
        let gpus = PD.replace("env = { B = \"p\" }", "env = { B = \"p\" }\nlayout = { gpus_per_node = 4 }").replace("\n[sweep]", "\nlayout = { gpus_per_node = 8 }\n[sweep]");
        let e = Recipe::parse(&gpus, "x").unwrap_err().to_string();
        assert!(e.contains("prefill layout gpus_per_node = 4 but decode's = 8"), "{e}");
    }

    #[test]
    fn bad_pd_recipes_are_usage_errors_that_name_the_fault() {
        let err = |text: &str| {
            let e = Recipe::parse(text, "pd.toml").unwrap_err();
            assert!(e.downcast_ref::<crate::error::UsageError>().is_some(), "{e}");
            e.to_string()
        };
        let no_decode = &PD[..PD.find("[roles.decode]").unwrap()];
        let e = err(&format!("{no_decode}[sweep]\nisl = 64\nosl = 16\nconc = [1]\n"));
        assert!(e.starts_with("recipe pd.toml: [roles] has prefill but no [roles.decode]"), "{e}");
        let e = err(&PD.replace("[roles.decode]\nargs = [", "[roles.decode]\nargs = [\"--max-num-seqs\", \"2\"]\nx = ["));
        assert!(e.contains("unknown field `x`") && e.contains("roles.decode"), "{e}");
        let e = err(&PD.replace(r#""--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cpu"}'"#, "\"--enforce-eager\""));
        assert!(e.contains("[roles.decode] has no --kv-transfer-config"), "{e}");
        // Only the variant's blocks differ between the sides: named with the variant.
        let e = err(&PD.replace("[variants.small]\nargs_replace = { \"--block-size\" = \"64\" }", "[variants.small]\nargs_add = [\"--kv-cache-dtype\", \"fp8\"]").replace("\"--max-num-seqs\", \"4\"]", "\"--max-num-seqs\", \"4\", \"--kv-cache-dtype\", \"auto\"]"));
        assert!(e.contains("variant small: [roles] prefill has KV dtype auto (--dtype float32) but decode has --kv-cache-dtype fp8"), "{e}");
        let e = err(&PD.replace("\"--max-num-seqs\", \"4\"]", "\"--max-num-seqs\", \"4\", \"--model\", \"other\"]"));
        assert!(e.contains("[roles.prefill] has --model other but the recipe's model is m"), "{e}");
        let e = err(&PD.replace("env_unset = [\"A\"]", "env_unset = [\"B\"]"));
        assert!(e.contains("[roles.prefill] env variable B is both set and unset"), "{e}");
    }

    #[test]
    fn tp_flag_added_when_no_placeholder() {
        let text = "name = \"x\"\nmodel = \"m\"\n[sweep]\nisl = 1\nosl = 1\nconc = [1]\ntp = [2]";
        let c = Recipe::parse(text, "x").unwrap().engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!(c[0].args, vec!["--tensor-parallel-size", "2"]);
    }
}
