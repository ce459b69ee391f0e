//! One verdict per knob of a [`KnobReport`]: did this vLLM build take it?
//!
//! Three answers ([`Effect`]): vLLM reads it (`Read`), it provably does
//! nothing here (`NoOp`), or nothing here can tell (`Unknown`). The rules
//! (docs/knobs.md has them with their sources and limits):
//! - env: a `VLLM_*` name vLLM does not know, or lists as removed, or
//!   registers but no file of the build mentions, is a no-op; a registered
//!   name some file mentions is read. Other names: enginebench's own are
//!   known exactly ([`OUR_VARIABLES`]); a library's ([`LIBRARY_PREFIXES`])
//!   or the user's are unknown, unless vLLM's own source mentions them.
//! - flags: a flag whose removal leaves the config vLLM builds unchanged
//!   is a no-op (it restates what vLLM resolves anyway); one that changes
//!   it is read; a flag that is not part of that config is unknown.
//! - hf-overrides: by the shim's verdict (`nowhere`, `other_models`,
//!   `wrong_level` are no-ops).

use crate::protocol::knobs::{EnvKnob, FlagKnob, KnobReport, OverrideKnob};

/// Whether a knob takes effect in this vLLM build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Provably nothing here reads it or it changes nothing.
    NoOp,
    /// Nothing here can tell.
    Unknown,
    /// vLLM reads it (or it changes the config vLLM builds).
    Read,
}

impl Effect {
    /// A short tag for tables: `no effect`, `unknown`, `read`.
    pub fn tag(self) -> &'static str {
        match self {
            Effect::NoOp => "NO EFFECT",
            Effect::Unknown => "unknown",
            Effect::Read => "read",
        }
    }
}

/// One knob's verdict: what it is (`VLLM_X=1`, `--max-num-seqs 256`,
/// `hf-override use_index_cache`), the effect, and the reason in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub knob: String,
    pub effect: Effect,
    pub why: String,
}

/// The variables enginebench itself reads (src/ and python-shim/; a unit
/// test checks this list against the sources). Any other `ENGINEBENCH_*`
/// name is read by nothing of ours.
pub const OUR_VARIABLES: [&str; 12] = [
    "ENGINEBENCH_CACHE",
    "ENGINEBENCH_CHECK_SWAP",
    "ENGINEBENCH_CONCURRENT",
    "ENGINEBENCH_FAKE_ENGINE",
    "ENGINEBENCH_HOME",
    "ENGINEBENCH_HOST_PYTHON",
    "ENGINEBENCH_LOG",
    "ENGINEBENCH_NATIVE",
    "ENGINEBENCH_PYTHON",
    "ENGINEBENCH_STEP_PATH",
    "ENGINEBENCH_TELEMETRY_SOURCES",
    "ENGINEBENCH_TEST_HANG_AFTER_STEPS",
];

/// Name prefixes of variables that libraries under vLLM read, by their
/// documented prefixes: the library's name is said, never whether it reads
/// a given name (nothing here can tell).
pub const LIBRARY_PREFIXES: [(&str, &str); 36] = [
    ("NCCL_", "NCCL"),
    ("RCCL_", "RCCL"),
    ("HSA_", "the ROCm runtime (HSA)"),
    ("HIP_", "the HIP runtime"),
    ("ROCR_", "the ROCm runtime"),
    ("ROCM_", "ROCm"),
    ("AMD_", "the AMD GPU stack"),
    ("GPU_MAX_HW_QUEUES", "the HIP runtime"),
    ("HIPBLASLT_", "hipBLASLt"),
    ("TENSILE_", "hipBLASLt (Tensile)"),
    ("MIOPEN_", "MIOpen"),
    ("AITER_", "AITER"),
    ("CUDA_", "the CUDA runtime"),
    ("NVIDIA_", "the NVIDIA driver stack"),
    ("NVSHMEM_", "NVSHMEM"),
    ("NVTE_", "Transformer Engine"),
    ("FLASHINFER_", "FlashInfer"),
    ("TRITON_", "Triton"),
    ("TORCHINDUCTOR_", "TorchInductor"),
    ("TORCH_", "PyTorch"),
    ("PYTORCH_", "PyTorch"),
    ("GLOO_", "gloo"),
    ("MASTER_", "torch.distributed"),
    ("OMP_", "OpenMP"),
    ("KMP_", "Intel OpenMP"),
    ("MKL_", "MKL"),
    ("UCX_", "UCX"),
    ("NIXL_", "NIXL"),
    ("MC_", "Mooncake"),
    ("LMCACHE_", "LMCache"),
    ("HF_", "huggingface_hub"),
    ("TRANSFORMERS_", "transformers"),
    ("TOKENIZERS_", "tokenizers"),
    ("PYTHON", "Python"),
    ("LD_", "the dynamic loader"),
    ("MALLOC_", "the C library's allocator"),
];

/// The library whose documented prefix `name` has, if any.
pub fn library_of(name: &str) -> Option<&'static str> {
    LIBRARY_PREFIXES.iter().find(|(p, _)| name.starts_with(p)).map(|(_, lib)| *lib)
}

/// Every knob's verdict, env first, then flags in argv order, then overrides.
pub fn verdicts(report: &KnobReport) -> Vec<Verdict> {
    let version = report.vllm_version.as_deref().unwrap_or("?");
    let mut out: Vec<Verdict> = report.env.iter().map(|e| env_verdict(e, version)).collect();
    out.extend(report.flags.iter().map(|f| flag_verdict(f, report.config_error.as_deref())));
    out.extend(report.hf_overrides.iter().map(|o| override_verdict(o, version)));
    out
}

/// The verdict on one environment variable.
pub fn env_verdict(e: &EnvKnob, version: &str) -> Verdict {
    let knob = format!("{}={}", e.name, e.value);
    let (effect, why) = match e.status.as_str() {
        "registered" if e.readers.is_empty() => {
            (Effect::NoOp, format!("registered by vLLM {version}, but no file of this build reads it"))
        }
        "registered" => (Effect::Read, format!("registered by vLLM {version}; read in {}", files(&e.readers))),
        "removed" => (Effect::NoOp, format!("removed from vLLM {version}: {}", e.hint.as_deref().unwrap_or("no hint"))),
        "unknown" => (
            Effect::NoOp,
            format!(
                "vLLM {version} has no such variable{}",
                if e.close.is_empty() { String::new() } else { format!(" (did you mean {}?)", e.close.join(", ")) }
            ),
        ),
        _ if !e.readers.is_empty() => {
            (Effect::Read, format!("not a registered vLLM variable, but vLLM reads it directly in {}", files(&e.readers)))
        }
        _ if e.name.starts_with("ENGINEBENCH_") => {
            if OUR_VARIABLES.contains(&e.name.as_str()) {
                (Effect::Read, "enginebench's own".to_string())
            } else {
                (Effect::NoOp, "enginebench reads no such variable, and vLLM does not mention it".to_string())
            }
        }
        _ => match library_of(&e.name) {
            Some(lib) => (Effect::Unknown, format!("{lib}'s, not vLLM's: whether {lib} reads this name, nothing here can tell")),
            None => (Effect::Unknown, "not vLLM's and not a known library's: nothing here can tell who reads it".to_string()),
        },
    };
    Verdict { knob, effect, why }
}

/// The verdict on one flag group.
pub fn flag_verdict(f: &FlagKnob, config_error: Option<&str>) -> Verdict {
    let knob = f.tokens.join(" ");
    let (effect, why) = if f.dest.is_none() {
        (Effect::Unknown, "not a flag of this vLLM's serve parser".to_string())
    } else if f.dest.as_deref() == Some("hf_overrides") {
        (Effect::Read, "its keys are judged one by one below".to_string())
    } else if f.restates_default {
        (Effect::NoOp, format!("restates vLLM's default ({})", f.default.as_deref().unwrap_or("?")))
    } else {
        match &f.changes {
            Some(changes) if changes.is_empty() && f.resolved.is_empty() => (
                Effect::Unknown,
                "not part of the config vLLM builds from the arguments (used when the engine starts): nothing here can tell".to_string(),
            ),
            Some(changes) if changes.is_empty() => (
                Effect::NoOp,
                format!("restates what vLLM resolves without it: {}", pairs(f.resolved.iter())),
            ),
            Some(changes) => (Effect::Read, format!("sets {}", change_list(changes))),
            None => (
                Effect::Unknown,
                match (f.without_error.as_deref(), config_error) {
                    (Some(e), _) => format!("vLLM cannot build the config without it here: {e}"),
                    (None, Some(_)) => format!("parsed {}; not judged: vLLM could not build this config here", f.value.as_deref().unwrap_or("?")),
                    (None, None) => "not judged".to_string(),
                },
            ),
        }
    };
    Verdict { knob, effect, why }
}

/// The verdict on one `--hf-overrides` key.
pub fn override_verdict(o: &OverrideKnob, version: &str) -> Verdict {
    let knob = format!("hf-override {}={}", o.key, o.value);
    let module = o.model_module.as_deref().unwrap_or("(unknown)");
    let (effect, why) = match o.verdict.as_str() {
        "nowhere" => (Effect::NoOp, format!("referenced nowhere in vLLM {version}: no effect here")),
        "other_models" => (
            Effect::NoOp,
            format!("read by {}, not by this model's module ({module})", files(&o.other_model_readers)),
        ),
        "wrong_level" => {
            let leaf = o.key.rsplit('.').next().unwrap_or(&o.key);
            (
                Effect::NoOp,
                format!(
                    "set on the top-level config, but this model reads its text config: write {{\"text_config\": {{\"{leaf}\": {}}}}}",
                    json_value(&o.value)
                ),
            )
        }
        "read" => {
            let by = if o.model_readers.is_empty() {
                format!("read by vLLM outside the model ({})", files(&o.generic_readers))
            } else {
                format!("read by this model's module ({})", files(&o.model_readers))
            };
            let had = if o.had_key == Some(true) { "; the config had the key: the override replaces its value" } else { "" };
            (Effect::Read, format!("{by}{had}"))
        }
        _ => (Effect::Unknown, format!("the model's config could not be built here; mentioned in {}", files(&all_readers(o)))),
    };
    Verdict { knob, effect, why }
}

fn all_readers(o: &OverrideKnob) -> Vec<String> {
    o.model_readers.iter().chain(&o.other_model_readers).chain(&o.generic_readers).cloned().collect()
}

/// A JSON literal for a value the shim wrote as Python text (`True` -> `true`).
fn json_value(v: &str) -> String {
    match v {
        "True" => "true".into(),
        "False" => "false".into(),
        "None" => "null".into(),
        _ if v.parse::<f64>().is_ok() => v.into(),
        _ => serde_json::to_string(v).unwrap_or_else(|_| v.into()),
    }
}

/// `a.py, b.py (+3 more)`, or `no file` when empty.
pub fn files(list: &[String]) -> String {
    match list.len() {
        0 => "no file".into(),
        1..=3 => list.join(", "),
        n => format!("{} (+{} more)", list[..3].join(", "), n - 3),
    }
}

fn pairs<'a>(it: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    it.map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")
}

/// `model_config.max_model_len 8192 -> 2048 (+2 more)`.
pub fn change_list(changes: &[crate::protocol::knobs::FieldChange]) -> String {
    let shown: Vec<String> = changes
        .iter()
        .take(3)
        .map(|c| format!("{} {} -> {}", c.field, c.without.as_deref().unwrap_or("(none)"), c.with_.as_deref().unwrap_or("(none)")))
        .collect();
    let more = if changes.len() > 3 { format!(" (+{} more)", changes.len() - 3) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::knobs::FieldChange;

    fn env(name: &str, status: &str, readers: &[&str]) -> EnvKnob {
        EnvKnob { name: name.into(), value: "1".into(), status: status.into(), readers: readers.iter().map(|s| s.to_string()).collect(), ..EnvKnob::default() }
    }

    #[test]
    fn env_rules() {
        let typo = EnvKnob { close: vec!["VLLM_CPU_KVCACHE_SPACE".into()], ..env("VLLM_CPU_KVCACHE_SPCE", "unknown", &[]) };
        let v = env_verdict(&typo, "0.32.0");
        assert_eq!(v.effect, Effect::NoOp);
        assert_eq!(v.why, "vLLM 0.32.0 has no such variable (did you mean VLLM_CPU_KVCACHE_SPACE?)");
        assert_eq!(env_verdict(&env("VLLM_X", "registered", &[]), "0.32.0").effect, Effect::NoOp);
        assert_eq!(env_verdict(&env("VLLM_X", "registered", &["platforms/cpu.py"]), "0.32.0").effect, Effect::Read);
        let nccl = env_verdict(&env("NCCL_DEBUG", "other", &[]), "0.32.0");
        assert_eq!(nccl.effect, Effect::Unknown);
        assert!(nccl.why.starts_with("NCCL's, not vLLM's"), "{}", nccl.why);
        assert_eq!(env_verdict(&env("NCCL_CUMEM_ENABLE", "other", &["env_override.py"]), "0.32.0").effect, Effect::Read);
        assert_eq!(env_verdict(&env("ENGINEBENCH_INERT_KNOB", "other", &[]), "0.32.0").effect, Effect::NoOp);
        assert_eq!(env_verdict(&env("ENGINEBENCH_STEP_PATH", "other", &[]), "0.32.0").effect, Effect::Read);
        let mine = env_verdict(&env("MY_FLAG", "other", &[]), "0.32.0");
        assert_eq!(mine.effect, Effect::Unknown);
        assert!(mine.why.contains("nothing here can tell"));
    }

    #[test]
    fn flag_rules() {
        let base = FlagKnob { tokens: vec!["--max-num-seqs".into(), "128".into()], flag: "--max-num-seqs".into(), dest: Some("max_num_seqs".into()), value: Some("128".into()), default: Some("None".into()), ..FlagKnob::default() };
        let same = FlagKnob { changes: Some(vec![]), resolved: [("scheduler_config.max_num_seqs".to_string(), "128".to_string())].into(), ..base.clone() };
        let v = flag_verdict(&same, None);
        assert_eq!((v.effect, v.why.as_str()), (Effect::NoOp, "restates what vLLM resolves without it: scheduler_config.max_num_seqs = 128"));
        let changed = FlagKnob { changes: Some(vec![FieldChange { field: "scheduler_config.max_num_seqs".into(), without: Some("128".into()), with_: Some("256".into()) }]), ..base.clone() };
        assert_eq!(flag_verdict(&changed, None).why, "sets scheduler_config.max_num_seqs 128 -> 256");
        let outside = FlagKnob { changes: Some(vec![]), ..base.clone() };
        assert_eq!(flag_verdict(&outside, None).effect, Effect::Unknown);
        let restated = FlagKnob { restates_default: true, default: Some("auto".into()), ..base.clone() };
        assert_eq!(flag_verdict(&restated, None).why, "restates vLLM's default (auto)");
        let unbuilt = flag_verdict(&base, Some("ValueError: no GPU"));
        assert_eq!(unbuilt.effect, Effect::Unknown);
        assert_eq!(unbuilt.why, "parsed 128; not judged: vLLM could not build this config here");
    }

    #[test]
    fn override_rules() {
        let o = OverrideKnob { key: "use_index_cache".into(), value: "True".into(), verdict: "wrong_level".into(), model_module: Some("vllm.models.minimax_m3".into()), ..OverrideKnob::default() };
        let v = override_verdict(&o, "0.32.0");
        assert_eq!(v.effect, Effect::NoOp);
        assert!(v.why.ends_with("write {\"text_config\": {\"use_index_cache\": true}}"), "{}", v.why);
        let nowhere = override_verdict(&OverrideKnob { verdict: "nowhere".into(), ..o.clone() }, "0.32.0");
        assert_eq!(nowhere.why, "referenced nowhere in vLLM 0.32.0: no effect here");
        let other = OverrideKnob { verdict: "other_models".into(), other_model_readers: vec!["models/minimax_m3/amd/model.py".into()], model_module: Some("vllm.model_executor.models.llama".into()), ..o.clone() };
        assert_eq!(override_verdict(&other, "0.32.0").why, "read by models/minimax_m3/amd/model.py, not by this model's module (vllm.model_executor.models.llama)");
    }

    /// Every `ENGINEBENCH_*` name the sources read is in [`OUR_VARIABLES`],
    /// and every name there is still read somewhere.
    #[test]
    fn our_variables_match_the_sources() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut found = std::collections::BTreeSet::new();
        let pattern = regex::Regex::new(r#""(ENGINEBENCH_[A-Z0-9_]+)""#).unwrap();
        let mut stack = vec![root.join("src"), root.join("python-shim"), root.join("native/src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = entry.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "rs" || e == "py") && !p.ends_with("knobs/verdict.rs") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    found.extend(pattern.captures_iter(&text).map(|c| c[1].to_string()));
                }
            }
        }
        // Names the shim reads with os.environ.get("...") are quoted too.
        let listed: std::collections::BTreeSet<String> = OUR_VARIABLES.iter().map(|s| s.to_string()).collect();
        let inert: std::collections::BTreeSet<String> = ["ENGINEBENCH_INERT_KNOB".to_string()].into();
        let found: std::collections::BTreeSet<String> = found.difference(&inert).cloned().collect();
        assert_eq!(found, listed);
    }
}
