//! Whether a model is a mixture of experts, read from its `config.json`
//! before any engine starts: a data-parallel job of a MoE model runs as one
//! DP group in lockstep, a dense one as independent engines (see the parent
//! module).
//!
//! vLLM's rule (0.32 config/model.py `is_moe` = `get_num_experts() > 0`;
//! transformers_utils/model_arch_config_convertor.py `get_num_experts`):
//! the first of `num_experts`, `moe_num_experts`, `n_routed_experts`,
//! `num_local_experts` on the text config (a list counts by its first
//! item), else the largest `n_routed_experts` of `block_configs` entries
//! whose `block_type` is `moe`.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The expert-count keys vLLM reads, in its order.
const EXPERT_KEYS: [&str; 4] = ["num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts"];

/// Whether `model` (a folder, or a hub id found in the Hugging Face cache)
/// is MoE.
///
/// Errors: no readable `config.json`, named with where it was looked for.
pub fn is_moe(model: &str) -> Result<bool, String> {
    let path = config_path(model).ok_or_else(|| {
        format!(
            "cannot tell whether {model} is a mixture-of-experts model (dense DP runs one engine per rank, MoE DP one group): no config.json in {model} or in the Hugging Face cache; download the model first or give its folder"
        )
    })?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let config: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    Ok(num_experts(&config) > 0)
}

/// vLLM's `get_num_experts` over a config (its `text_config` when present).
pub fn num_experts(config: &Value) -> u64 {
    let text = config.get("text_config").filter(|t| t.is_object()).unwrap_or(config);
    let count = |v: &Value| match v {
        Value::Array(items) => items.first().and_then(Value::as_u64).unwrap_or(0),
        v => v.as_u64().unwrap_or(0),
    };
    if let Some(n) = EXPERT_KEYS.iter().find_map(|k| text.get(*k).filter(|v| !v.is_null())).map(count).filter(|&n| n > 0) {
        return n;
    }
    text.get("block_configs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("block_type").and_then(Value::as_str) == Some("moe"))
        .filter_map(|b| b.get("n_routed_experts").and_then(Value::as_u64))
        .max()
        .unwrap_or(0)
}

/// `model/config.json`, else the newest snapshot's in the Hugging Face hub
/// cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`).
fn config_path(model: &str) -> Option<PathBuf> {
    let local = Path::new(model).join("config.json");
    if local.is_file() {
        return Some(local);
    }
    let hub = std::env::var_os("HF_HUB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub")))?;
    let snapshots = hub.join(format!("models--{}", model.replace('/', "--"))).join("snapshots");
    std::fs::read_dir(snapshots)
        .ok()?
        .flatten()
        .map(|e| e.path().join("config.json"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experts_are_counted_as_vllm_counts_them() {
        let n = |s: &str| num_experts(&serde_json::from_str(s).unwrap());
        assert_eq!(n(r#"{"num_local_experts": 8}"#), 8, "Mixtral");
        assert_eq!(n(r#"{"n_routed_experts": 256}"#), 256, "DeepSeek");
        assert_eq!(n(r#"{"text_config": {"num_experts": 64}}"#), 64);
        assert_eq!(n(r#"{"moe_num_experts": [16, 16]}"#), 16);
        assert_eq!(n(r#"{"num_experts": null, "block_configs": [{"block_type": "moe", "n_routed_experts": 4}]}"#), 4);
        assert_eq!(n(r#"{"hidden_size": 576}"#), 0, "dense");
    }
}
