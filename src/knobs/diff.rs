//! What differs between two arms' engines, and whether any of it takes
//! effect: `ab` asks before it runs anything, `compare` after.
//!
//! Compared, for two [`KnobReport`]s of the same vLLM build: the config vLLM
//! builds from each arm's arguments (flattened, volatile fields removed), the
//! HF config after overrides, every registered vLLM variable's value as vLLM
//! reads it, the other variables by name, and flags that are not part of the
//! built config. Each difference gets an [`Effect`]:
//! - a config field that differs: read (vLLM built something else);
//! - an HF config key that differs: by the override's verdict (a key
//!   referenced nowhere, or set where the model does not read it, is a no-op);
//! - a vLLM variable: by the value vLLM reads (`1` and `true` read the same),
//!   then by whether any file of the build reads it; `VLLM_ROCM_QUICK_REDUCE_*`
//!   by vLLM's quick all-reduce rule at this job's sizes (the same answer for
//!   every all-reduce of the sweep is a no-op);
//! - any other variable: by [`super::verdict::env_verdict`];
//! - a flag outside the built config: unknown.

use std::collections::{BTreeMap, BTreeSet};

use super::verdict::{Effect, env_verdict};
use crate::protocol::knobs::{EnvKnob, KnobReport, QuickReduce};

/// One difference between the arms.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Difference {
    /// `model_config.max_model_len 2048 -> 4096`, `VLLM_X unset -> 1`, ...
    pub what: String,
    pub effect: Effect,
    pub why: String,
}

/// The differences between baseline `a` and candidate `b`, most effective first.
pub fn differences(a: &KnobReport, b: &KnobReport) -> Vec<Difference> {
    let mut out = Vec::new();
    let version = b.vllm_version.as_deref().unwrap_or("?");
    if let Some(e) = a.config_error.as_ref().or(b.config_error.as_ref()) {
        out.push(Difference {
            what: "the engine config".into(),
            effect: Effect::Unknown,
            why: format!("vLLM could not build an arm's config here, so its effect cannot be compared: {e}"),
        });
    }
    if let (Some(ca), Some(cb)) = (&a.config, &b.config) {
        for (field, va, vb) in changed(ca, cb) {
            out.push(Difference {
                what: format!("{field} {} -> {}", va.unwrap_or("(none)"), vb.unwrap_or("(none)")),
                effect: Effect::Read,
                why: "the config vLLM builds differs".into(),
            });
        }
    }
    if let (Some(ha), Some(hb)) = (&a.hf_config, &b.hf_config) {
        for (key, va, vb) in changed(ha, hb) {
            let leaf = key.rsplit('.').next().unwrap_or(key);
            let verdict = [b, a]
                .iter()
                .flat_map(|r| &r.hf_overrides)
                .find(|o| o.key == key || o.key.rsplit('.').next() == Some(leaf))
                .map(|o| super::verdict::override_verdict(o, version));
            let (effect, why) = match verdict {
                Some(v) => (v.effect, v.why),
                None => (Effect::Read, "the HF config differs".into()),
            };
            out.push(Difference { what: format!("hf config {key} {} -> {}", va.unwrap_or("(none)"), vb.unwrap_or("(none)")), effect, why });
        }
    }
    out.extend(env_differences(a, b, version));
    out.extend(flags_outside_config(a, b));
    out.sort_by(|x, y| y.effect.cmp(&x.effect));
    out
}

/// The arms' verdict: `Read` when anything takes effect, `Unknown` when
/// something cannot be told, `NoOp` when every difference is a no-op or
/// there is none.
pub fn overall(diffs: &[Difference]) -> Effect {
    diffs.iter().map(|d| d.effect).max().unwrap_or(Effect::NoOp)
}

fn changed<'a>(a: &'a BTreeMap<String, String>, b: &'a BTreeMap<String, String>) -> Vec<(&'a str, Option<&'a str>, Option<&'a str>)> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (va, vb) = (a.get(k).map(String::as_str), b.get(k).map(String::as_str));
            (va != vb).then_some((k.as_str(), va, vb))
        })
        .collect()
}

fn env_differences(a: &KnobReport, b: &KnobReport, version: &str) -> Vec<Difference> {
    let (ea, eb) = (by_name(&a.env), by_name(&b.env));
    let names: BTreeSet<&str> = ea.keys().chain(eb.keys()).copied().collect();
    let mut out = Vec::new();
    for name in names {
        let (ka, kb) = (ea.get(name), eb.get(name));
        let (va, vb) = (ka.map(|k| k.value.as_str()), kb.map(|k| k.value.as_str()));
        if va == vb {
            continue;
        }
        let what = format!("{name} {} -> {}", va.unwrap_or("unset"), vb.unwrap_or("unset"));
        let knob = kb.or(ka).expect("named by one arm");
        let (effect, why) = if name.starts_with("VLLM_ROCM_QUICK_REDUCE_") {
            quick_reduce_effect(a.quick_reduce.as_ref(), b.quick_reduce.as_ref())
        } else if knob.status == "registered" {
            match (a.vllm_env.get(name), b.vllm_env.get(name)) {
                (Some(x), Some(y)) if x == y => (Effect::NoOp, format!("vLLM reads the same value in both arms ({x})")),
                _ => {
                    let v = env_verdict(knob, version);
                    (v.effect, v.why)
                }
            }
        } else {
            let v = env_verdict(knob, version);
            (v.effect, v.why)
        };
        out.push(Difference { what, effect, why });
    }
    out
}

fn by_name(env: &[EnvKnob]) -> BTreeMap<&str, &EnvKnob> {
    env.iter().map(|e| (e.name.as_str(), e)).collect()
}

/// The quick all-reduce answer for every all-reduce size of the job, per arm:
/// equal answers make the variables' difference a no-op at this sweep.
fn quick_reduce_effect(a: Option<&QuickReduce>, b: Option<&QuickReduce>) -> (Effect, String) {
    let (Some(a), Some(b)) = (a, b) else {
        return (Effect::Unknown, "vLLM's quick all-reduce rule was not evaluated for both arms".into());
    };
    if a.error.is_some() || b.error.is_some() || a.fires.is_none() || b.fires.is_none() {
        let why = a.error.clone().or(b.error.clone()).or(a.why.clone()).or(b.why.clone()).unwrap_or_default();
        return (Effect::Unknown, format!("vLLM's quick all-reduce rule cannot be decided here: {why}"));
    }
    let answers = |q: &QuickReduce| -> Vec<(u64, bool, Option<String>)> {
        q.decode.iter().chain(q.prefill.iter()).map(|s| (s.bytes, s.fires, s.codec.clone())).collect()
    };
    let (xa, xb) = (answers(a), answers(b));
    if xa == xb && !xa.is_empty() || (a.fires.as_deref() == Some("never") && b.fires.as_deref() == Some("never")) {
        (Effect::NoOp, format!("vLLM's quick all-reduce rule gives the same answer for every all-reduce of this sweep in both arms ({})", super::quick_reduce::quick_reduce_line(b)))
    } else {
        (Effect::Read, format!("vLLM's quick all-reduce rule differs: {}", super::quick_reduce::quick_reduce_line(b)))
    }
}

/// Flags one arm has and the other lacks that are not part of the built
/// config (`resolved` empty): the config diff cannot see them.
fn flags_outside_config(a: &KnobReport, b: &KnobReport) -> Vec<Difference> {
    let mut out = Vec::new();
    for (this, other, verb) in [(b, a, "add"), (a, b, "remove")] {
        for f in &this.flags {
            let outside = f.resolved.is_empty() && f.dest.as_deref() != Some("hf_overrides") && !f.restates_default;
            if outside && !other.flags.iter().any(|g| g.tokens == f.tokens) {
                out.push(Difference {
                    what: format!("{verb} {}", f.tokens.join(" ")),
                    effect: Effect::Unknown,
                    why: "not part of the config vLLM builds from the arguments: nothing here can tell".into(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::knobs::{OverrideKnob, QuickReduceSize};

    fn report(config: &[(&str, &str)], env: &[(&str, &str, &str)]) -> KnobReport {
        KnobReport {
            vllm_version: Some("0.32.0".into()),
            config: Some(config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            hf_config: Some(BTreeMap::new()),
            env: env.iter().map(|(n, v, s)| EnvKnob { name: n.to_string(), value: v.to_string(), status: s.to_string(), ..EnvKnob::default() }).collect(),
            ..KnobReport::default()
        }
    }

    #[test]
    fn a_changed_config_field_takes_effect() {
        let a = report(&[("model_config.max_model_len", "2048")], &[]);
        let b = report(&[("model_config.max_model_len", "4096")], &[]);
        let d = differences(&a, &b);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].what, "model_config.max_model_len 2048 -> 4096");
        assert_eq!(overall(&d), Effect::Read);
    }

    #[test]
    fn unknown_and_inert_variables_are_no_ops_and_libraries_are_unknown() {
        let a = report(&[], &[]);
        let b = report(&[], &[("VLLM_TYPO_X", "1", "unknown"), ("ENGINEBENCH_INERT_KNOB", "1", "other")]);
        let d = differences(&a, &b);
        assert_eq!(d.len(), 2);
        assert_eq!(overall(&d), Effect::NoOp, "{d:?}");
        let c = report(&[], &[("NCCL_DEBUG", "INFO", "other")]);
        assert_eq!(overall(&differences(&a, &c)), Effect::Unknown);
    }

    #[test]
    fn a_registered_variable_read_the_same_is_a_no_op() {
        let mut a = report(&[], &[("VLLM_X", "1", "registered")]);
        let mut b = report(&[], &[("VLLM_X", "true", "registered")]);
        a.vllm_env.insert("VLLM_X".into(), "True".into());
        b.vllm_env.insert("VLLM_X".into(), "True".into());
        assert_eq!(overall(&differences(&a, &b)), Effect::NoOp);
        b.vllm_env.insert("VLLM_X".into(), "False".into());
        b.env[0].readers = vec!["platforms/cpu.py".into()];
        assert_eq!(overall(&differences(&a, &b)), Effect::Read);
    }

    #[test]
    fn an_override_nothing_reads_is_a_no_op() {
        let a = report(&[], &[]);
        let mut b = report(&[], &[]);
        b.hf_config = Some([("foo_knob".to_string(), "1".to_string())].into());
        b.hf_overrides = vec![OverrideKnob { key: "foo_knob".into(), value: "1".into(), verdict: "nowhere".into(), ..OverrideKnob::default() }];
        let d = differences(&a, &b);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].effect, Effect::NoOp);
        assert!(d[0].why.contains("referenced nowhere"));
    }

    #[test]
    fn quick_reduce_variables_are_judged_by_the_rule_at_the_sweeps_sizes() {
        let q = |codec: Option<&str>, fires: bool| QuickReduce {
            fires: Some("range".into()),
            decode: vec![QuickReduceSize { conc: Some(64), bytes: 786432, fires: false, ..QuickReduceSize::default() }],
            prefill: Some(QuickReduceSize { tokens: Some(8192), bytes: 100663296, fires, codec: codec.map(String::from), ..QuickReduceSize::default() }),
            ..QuickReduce::default()
        };
        let env = [("VLLM_ROCM_QUICK_REDUCE_QUANTIZATION", "INT4", "registered")];
        let mut a = report(&[], &env);
        let mut b = report(&[], &[env[0], ("VLLM_ROCM_QUICK_REDUCE_QUANTIZATION_MIN_SIZE_KB", "256", "registered")]);
        a.quick_reduce = Some(q(Some("INT4"), true));
        b.quick_reduce = Some(q(Some("INT4"), true));
        let d = differences(&a, &b);
        assert_eq!(overall(&d), Effect::NoOp, "{d:?}");
        b.quick_reduce = Some(q(Some("FP"), true));
        assert_eq!(overall(&differences(&a, &b)), Effect::Read);
    }

    #[test]
    fn an_unbuildable_config_cannot_be_called_a_no_op() {
        let a = report(&[], &[]);
        let b = KnobReport { config_error: Some("ValueError: no GPU".into()), config: None, ..report(&[], &[("VLLM_TYPO_X", "1", "unknown")]) };
        assert_eq!(overall(&differences(&a, &b)), Effect::Unknown);
    }
}
