//! Accuracy thresholds per task, as InferenceX sets them
//! (`utils/evals/thresholds.yaml`, read by `utils/evals/validate_scores.py`):
//!
//! ```yaml
//! default:            # per task
//!   gsm8k: 0.90
//!   gpqa_diamond_cot_n_shot: 0.30
//! models:             # per model prefix (a master-config entry's `model-prefix`), per task
//!   dsv4:
//!     gsm8k: 0.91
//! ```
//!
//! A task's threshold is found most-specific-first, as `resolve_threshold` of
//! validate_scores.py does: `models.<prefix>.<task>`, then `default.<task>`;
//! enginebench then falls back to the recipe's `[eval.thresholds]` and to
//! `--min-accuracy` / `[eval] min_accuracy` ([`GateRules::threshold`]). A
//! flat mapping (`{gsm8k: 0.85}`, validate_scores.py's legacy form) is the
//! default with no per-model entries. JSON is YAML, so `thresholds.json`
//! reads too.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use yaml_rust2::{Yaml, YamlLoader};

use crate::error::usage;

/// A thresholds file: per-task minimums, and per model prefix.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Task -> minimum score (0..1).
    pub default: BTreeMap<String, f64>,
    /// Model prefix -> task -> minimum score.
    pub models: BTreeMap<String, BTreeMap<String, f64>>,
    /// The file it was read from.
    pub origin: String,
}

impl Thresholds {
    /// Reads a thresholds file (YAML or JSON).
    ///
    /// Errors (usage): unreadable file, bad YAML, a score that is not a
    /// number in [0, 1], a section that is not a mapping.
    pub fn load(path: &Path) -> Result<Thresholds> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("cannot read thresholds file {}: {e}", path.display())))?;
        Thresholds::parse(&text, &path.display().to_string())
    }

    /// Parses thresholds text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Thresholds> {
        let bad = |what: String| usage(format!("thresholds {origin}: {what}"));
        let docs = YamlLoader::load_from_str(text).map_err(|e| bad(format!("not YAML: {e}")))?;
        let Some(Yaml::Hash(top)) = docs.into_iter().next() else {
            return Err(bad("expected a mapping with `default:` (task: score) and `models:` (prefix: {task: score})".into()));
        };
        let key = |k: &str| Yaml::String(k.into());
        let mut out = Thresholds { origin: origin.to_string(), ..Thresholds::default() };
        if !top.contains_key(&key("default")) && !top.contains_key(&key("models")) {
            // validate_scores.py's legacy flat form: the whole mapping is the default.
            out.default = scores(&Yaml::Hash(top), "", &bad)?;
            return Ok(out);
        }
        for (k, v) in &top {
            match k.as_str() {
                Some("default") => out.default = scores(v, "default", &bad)?,
                Some("models") => {
                    let Yaml::Hash(models) = v else { return Err(bad("`models` must map model prefixes to {task: score}".into())) };
                    for (prefix, tasks) in models {
                        let prefix = name(prefix).ok_or_else(|| bad(format!("models: {prefix:?} is not a model prefix")))?;
                        let place = format!("models.{prefix}");
                        out.models.insert(prefix, scores(tasks, &place, &bad)?);
                    }
                }
                _ => return Err(bad(format!("unknown key {k:?}: use `default` and `models`"))),
            }
        }
        Ok(out)
    }

    /// The threshold of `task` for `prefix`, most-specific-first, and where
    /// it came from (`models.<prefix>` or `default`).
    pub fn resolve(&self, prefix: Option<&str>, task: &str) -> Option<(f64, String)> {
        if let Some(p) = prefix {
            if let Some(v) = self.models.get(p).and_then(|m| m.get(task)) {
                return Some((*v, format!("models.{p}")));
            }
        }
        self.default.get(task).map(|v| (*v, "default".to_string()))
    }
}

/// A YAML key as a name (strings, and numbers such as a `glm5.1` read as text).
fn name(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

/// `{task: score}` with every score a number in [0, 1].
fn scores(y: &Yaml, place: &str, bad: &dyn Fn(String) -> anyhow::Error) -> Result<BTreeMap<String, f64>> {
    let at = if place.is_empty() { String::new() } else { format!("{place}: ") };
    let Yaml::Hash(h) = y else { return Err(bad(format!("{at}expected a mapping of task: score"))) };
    let mut out = BTreeMap::new();
    for (k, v) in h {
        let task = name(k).ok_or_else(|| bad(format!("{at}{k:?} is not a task name")))?;
        let score = match v {
            Yaml::Real(s) => s.parse::<f64>().ok(),
            Yaml::Integer(i) => Some(*i as f64),
            _ => None,
        };
        match score {
            Some(s) if (0.0..=1.0).contains(&s) => {
                out.insert(task, s);
            }
            _ => return Err(bad(format!("{at}{task}: {v:?} is not a score in [0, 1] (e.g. 0.90)"))),
        }
    }
    Ok(out)
}

/// Where a run's accuracy thresholds come from, in the order they apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateRules {
    /// `--thresholds FILE` / `[eval] thresholds_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<Thresholds>,
    /// The model prefix the file's `models:` section is keyed by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_prefix: Option<String>,
    /// `[eval.thresholds]`: task -> minimum.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recipe: BTreeMap<String, f64>,
    /// `--min-accuracy` / `[eval] min_accuracy`: every task without another threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_accuracy: Option<f64>,
}

impl GateRules {
    /// No threshold anywhere: no gate.
    pub fn is_empty(&self) -> bool {
        self.file.is_none() && self.recipe.is_empty() && self.min_accuracy.is_none()
    }

    /// The threshold of a task known by any of `names` (its own name first,
    /// then e.g. the lm-eval task a built-in task reproduces), and its source:
    /// the file's `models.<prefix>` / `default`, then `recipe`, then
    /// `min-accuracy`. `None`: the task is not gated.
    pub fn threshold(&self, names: &[&str]) -> Option<(f64, String)> {
        let file = self.file.as_ref();
        let from_file = names.iter().find_map(|n| file.and_then(|f| f.resolve(self.model_prefix.as_deref(), n)));
        from_file
            .or_else(|| names.iter().find_map(|n| self.recipe.get(*n).map(|v| (*v, "recipe".to_string()))))
            .or_else(|| self.min_accuracy.map(|v| (v, "min-accuracy".to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// InferenceX's shape (written here in our words, numbers as in its file).
    const FILE: &str = "# per task, per model prefix\ndefault:\n  gsm8k: 0.90\n  gpqa_diamond_cot_n_shot: 0.30\nmodels:\n  dsv4:\n    gsm8k: 0.91\n  glm5.1:\n    gsm8k: 0.93\n";

    #[test]
    fn resolves_most_specific_first() {
        let t = Thresholds::parse(FILE, "t.yaml").unwrap();
        assert_eq!(t.resolve(Some("dsv4"), "gsm8k"), Some((0.91, "models.dsv4".into())));
        assert_eq!(t.resolve(Some("glm5.1"), "gsm8k"), Some((0.93, "models.glm5.1".into())));
        assert_eq!(t.resolve(Some("dsv4"), "gpqa_diamond_cot_n_shot"), Some((0.30, "default".into())));
        assert_eq!(t.resolve(Some("other"), "gsm8k"), Some((0.90, "default".into())));
        assert_eq!(t.resolve(None, "gsm8k"), Some((0.90, "default".into())));
        assert_eq!(t.resolve(None, "mmlu"), None);
        // JSON reads as YAML; the flat legacy form is the default.
        let j = Thresholds::parse(r#"{"gsm8k": 0.85, "gpqa_diamond_cot_n_shot": 1}"#, "t.json").unwrap();
        assert_eq!(j.resolve(Some("dsv4"), "gsm8k"), Some((0.85, "default".into())));
        assert_eq!(j.default["gpqa_diamond_cot_n_shot"], 1.0);
    }

    #[test]
    fn bad_files_name_the_problem() {
        for (text, needle) in [
            ("default:\n  gsm8k: high\n", "gsm8k"),
            ("default:\n  gsm8k: 1.5\n", "[0, 1]"),
            ("models:\n  dsv4: 0.9\n", "models.dsv4"),
            ("default: {gsm8k: 0.9}\nextra: 1\n", "unknown key"),
            ("- 0.9\n", "mapping"),
            ("default: [\n", "not YAML"),
        ] {
            let e = Thresholds::parse(text, "bad.yaml").unwrap_err();
            assert!(e.downcast_ref::<crate::error::UsageError>().is_some());
            let msg = e.to_string();
            assert!(msg.contains("bad.yaml") && msg.contains(needle), "{text:?}: {msg}");
        }
    }

    #[test]
    fn gate_rules_apply_in_order() {
        let mut rules = GateRules { min_accuracy: Some(0.5), ..GateRules::default() };
        assert_eq!(rules.threshold(&["anything"]), Some((0.5, "min-accuracy".into())));
        rules.recipe.insert("gpqa_diamond_cot_n_shot".into(), 0.25);
        assert_eq!(rules.threshold(&["gpqa_diamond_cot_n_shot"]), Some((0.25, "recipe".into())));
        rules.file = Some(Thresholds::parse(FILE, "t.yaml").unwrap());
        rules.model_prefix = Some("dsv4".into());
        assert_eq!(rules.threshold(&["gpqa_diamond_cot_n_shot"]), Some((0.30, "default".into())));
        // A built-in task found by the lm-eval name it reproduces.
        assert_eq!(rules.threshold(&["gsm8k_inferencex", "gsm8k"]), Some((0.91, "models.dsv4".into())));
        assert!(GateRules::default().is_empty() && GateRules::default().threshold(&["gsm8k"]).is_none());
    }
}
