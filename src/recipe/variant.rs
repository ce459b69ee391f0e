//! `[variants.NAME]`: overlays on the base recipe, for before/after runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::sweep::Sweep;

/// What a variant changes. Everything is relative to the base recipe.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The variant is meant to change nothing (a deliberate null A/B, like
    /// the bundled recipe's `knob`): `ab` runs it although the knob report
    /// finds every difference a no-op (crate::knobs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expect_noop: bool,
    /// The Python interpreter this variant's engine runs in (another vLLM
    /// build: a venv, a source checkout's environment); default: the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<std::path::PathBuf>,
    /// Variables to set (or change).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables to remove from the engine's environment.
    #[serde(default)]
    pub env_unset: Vec<String>,
    /// Flags to remove (with their values), e.g. `["--kv-cache-dtype"]`.
    #[serde(default)]
    pub args_remove: Vec<String>,
    /// Flags to set: `{ "--kv-cache-dtype" = "fp8", "--enforce-eager" = "" }`
    /// (an empty value sets a switch).
    #[serde(default)]
    pub args_replace: BTreeMap<String, String>,
    /// Tokens appended to the flag list as written.
    #[serde(default)]
    pub args_add: Vec<String>,
    /// Merged into the base `hf_overrides` (tables merge key by key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_overrides: Option<toml::Table>,
    /// Placeholder values to set or change.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Sweep keys to override (e.g. a narrower `conc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Sweep>,
    /// The variant's `[layout]` (replaces the recipe's whole: the same
    /// engine on 2 nodes is `layout = { nodes = 2 }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<super::layout::NodeLayout>,
}

/// Deep merge of TOML tables: tables merge key by key, anything else is replaced.
pub fn merge_tables(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_merge() {
        let mut base: toml::Table = toml::from_str("a = 1\n[t]\nx = 1\ny = 2").unwrap();
        let over: toml::Table = toml::from_str("b = 2\n[t]\ny = 3").unwrap();
        merge_tables(&mut base, &over);
        assert_eq!(base.to_string(), toml::from_str::<toml::Table>("a = 1\nb = 2\n[t]\nx = 1\ny = 3").unwrap().to_string());
    }
}
