//! `[roles]`: a disaggregated prefill/decode (P/D) recipe (issue 44;
//! docs/pd.md). Each role is its own engine configuration: the recipe's
//! `[engine]` flags and `[env]` shared by both, then the role's own.
//!
//! ```toml
//! [engine]                       # both roles
//! args = ["--dtype", "float32", "--block-size", "128"]
//! [roles.prefill]
//! args = ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}']
//! env = { OMP_NUM_THREADS = "1" }
//! layout = { workers = 2 }       # two prefill engines (issue 43's [layout] keys)
//! [roles.decode]
//! args = ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}']
//! ```
//!
//! A role's flags come after the shared ones (vLLM's parser keeps the last
//! value of a flag given twice). Checked here, when the recipe is read and
//! so before any engine starts ([`check_pair`]): both roles present, each
//! with a `--kv-transfer-config` whose `kv_role` fits it, and the two alike
//! in what the decode engine reads of the prefill engine's KV blocks as they
//! are (the model, its quantization and overrides, the KV block size and
//! the KV dtype). The engine id of each worker's connector and its NIXL
//! side-channel port are the harness's to give (distinct per worker); a
//! recipe's own `engine_id` is not used.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parallel::flag_value;

/// vLLM's flag for the KV connector's configuration (a JSON object,
/// `KVTransferConfig`), with the spelling its parser also takes.
pub const KV_TRANSFER_FLAGS: [&str; 2] = ["--kv-transfer-config", "--kv_transfer_config"];

/// One side of a P/D pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PdRole {
    /// Computes the prompt's KV (a request of `max_tokens` 1) and keeps it
    /// for the decode side to read.
    Prefill,
    /// Reads the prompt's KV from a prefill worker and generates.
    Decode,
}

impl PdRole {
    pub const BOTH: [PdRole; 2] = [PdRole::Prefill, PdRole::Decode];

    /// "prefill" / "decode", as in the recipe.
    pub fn name(self) -> &'static str {
        match self {
            PdRole::Prefill => "prefill",
            PdRole::Decode => "decode",
        }
    }

    /// The `kv_role` values of vLLM's `KVTransferConfig` this side may have.
    fn kv_roles(self) -> [&'static str; 2] {
        match self {
            PdRole::Prefill => ["kv_both", "kv_producer"],
            PdRole::Decode => ["kv_both", "kv_consumer"],
        }
    }
}

impl std::fmt::Display for PdRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[roles]`: the two sides of a P/D recipe. Both must be given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<Role>,
}

/// `[roles.prefill]` / `[roles.decode]`: what one side adds to the shared
/// recipe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    /// `vllm serve` flags after the shared `[engine] args`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for this side's engines (over the recipe's `[env]`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables removed from this side's engines' environment.
    #[serde(default)]
    pub env_unset: Vec<String>,
    /// Where this side's engines run and how many there are
    /// ([`super::layout::NodeLayout`]: `workers` engines of this side, each
    /// its own copy of `nodes` / `gpus_per_node` / `dp_ranks_per_node`);
    /// absent: one engine on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<super::layout::NodeLayout>,
}

impl Roles {
    /// Both sides, in the order prefill, decode.
    ///
    /// Errors: a side missing, named with what to add.
    pub fn pair(&self) -> Result<[(PdRole, &Role); 2], String> {
        match (&self.prefill, &self.decode) {
            (Some(p), Some(d)) => Ok([(PdRole::Prefill, p), (PdRole::Decode, d)]),
            (p, _) => {
                let (has, lacks) = if p.is_some() { ("prefill", "decode") } else { ("decode", "prefill") };
                Err(format!(
                    "[roles] has {has} but no [roles.{lacks}]: a prefill/decode recipe needs both sides (an aggregated recipe has no [roles])"
                ))
            }
        }
    }
}

/// The parts of a side's `KVTransferConfig` the harness reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvTransfer {
    /// `kv_connector`, e.g. "NixlConnector", "MultiConnector".
    pub connector: String,
    /// `kv_role`: "kv_both", "kv_producer" or "kv_consumer".
    pub role: String,
    /// `kv_buffer_device` (vLLM's default "cuda").
    pub buffer_device: Option<String>,
    /// `kv_load_failure_policy` (vLLM 0.32's default "fail": a request
    /// whose KV cannot be read ends with finish reason `error`; "recompute":
    /// the decode engine computes the prompt itself).
    pub load_failure_policy: Option<String>,
}

/// The `--kv-transfer-config` of one side's final flags.
///
/// Errors: no such flag, a value that is not a JSON object, no
/// `kv_connector`, or a `kv_role` that does not fit `side`.
pub fn kv_transfer(side: PdRole, args: &[String]) -> Result<KvTransfer, String> {
    let example = r#"'{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'"#;
    let text = flag_value(args, &KV_TRANSFER_FLAGS).ok_or_else(|| {
        format!("[roles.{side}] has no --kv-transfer-config: each side names its KV connector, e.g. --kv-transfer-config {example}")
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("[roles.{side}] --kv-transfer-config is not valid JSON: {e}, in {text}"))?;
    let Value::Object(map) = value else {
        return Err(format!("[roles.{side}] --kv-transfer-config {text}: give a JSON object, e.g. {example}"));
    };
    let get = |k: &str| map.get(k).and_then(Value::as_str).map(String::from);
    let connector = get("kv_connector").filter(|c| !c.is_empty()).ok_or_else(|| {
        format!("[roles.{side}] --kv-transfer-config names no kv_connector: give one, e.g. \"kv_connector\": \"NixlConnector\"")
    })?;
    let role = get("kv_role").unwrap_or_default();
    if !side.kv_roles().contains(&role.as_str()) {
        let [a, b] = side.kv_roles();
        let shown = if role.is_empty() { "none".to_string() } else { format!("{role:?}") };
        return Err(format!("[roles.{side}] --kv-transfer-config has kv_role {shown}: the {side} side needs \"{a}\" or \"{b}\""));
    }
    Ok(KvTransfer { connector, role, buffer_device: get("kv_buffer_device"), load_failure_policy: get("kv_load_failure_policy") })
}

/// Flags that name the model the weights come from: both sides must
/// compute the same KV for the same tokens.
const MODEL_FLAGS: [(&str, &[&str]); 5] = [
    ("--model", &["--model"]),
    ("--tokenizer", &["--tokenizer"]),
    ("--revision", &["--revision"]),
    ("--quantization", &["--quantization", "-q"]),
    ("--hf-overrides", &["--hf-overrides"]),
];

/// Flags that shape the KV blocks the decode side reads as they are.
const BLOCK_FLAGS: [&str; 1] = ["--block-size"];
const KV_DTYPE_FLAGS: [&str; 1] = ["--kv-cache-dtype"];
const DTYPE_FLAGS: [&str; 1] = ["--dtype"];

/// The checks of a P/D pair that need both sides' final flags (after the
/// shared ones, the variant and the sweep's TP), before any engine starts.
/// `model` is the recipe's; `cpu`: the recipe's hardware is the CPU.
///
/// Errors (one line, naming the flag and both values): either side's
/// [`kv_transfer`] error; a role's `--model` that is not the recipe's;
/// model flags, `--block-size` or the KV dtype (`--kv-cache-dtype`, or
/// `--dtype` where that is "auto") that differ between the sides; on the
/// CPU a `kv_buffer_device` other than "cpu" (vLLM's default is "cuda").
pub fn check_pair(prefill: &[String], decode: &[String], model: &str, cpu: bool) -> Result<(), String> {
    for (side, args) in [(PdRole::Prefill, prefill), (PdRole::Decode, decode)] {
        let kv = kv_transfer(side, args)?;
        if cpu && kv.buffer_device.as_deref() != Some("cpu") {
            return Err(format!(
                "[roles.{side}] --kv-transfer-config has kv_buffer_device {}: on the CPU the KV cache itself is the transfer buffer, give \"kv_buffer_device\": \"cpu\"",
                kv.buffer_device.map_or("unset (vLLM's default \"cuda\")".into(), |d| format!("{d:?}"))
            ));
        }
        if let Some(m) = flag_value(args, &["--model"]).filter(|m| m != model) {
            return Err(format!("[roles.{side}] has --model {m} but the recipe's model is {model}: both sides serve the recipe's model; remove --model"));
        }
    }
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unset".into());
    let differ = |what: &str, p: Option<String>, d: Option<String>, why: &str| {
        Err(format!("[roles] prefill has {what} {} but decode has {}: {why}", shown(&p), shown(&d)))
    };
    for (name, spellings) in MODEL_FLAGS {
        let (p, d) = (flag_value(prefill, spellings), flag_value(decode, spellings));
        if !same_value(&p, &d) {
            return differ(name, p, d, "the decode engine reads the prefill engine's KV as it is, so both sides need the same model; give the flag the same value on both");
        }
    }
    let (p, d) = (flag_value(prefill, &BLOCK_FLAGS), flag_value(decode, &BLOCK_FLAGS));
    if p != d {
        return differ("--block-size", p, d, "the KV moves in whole blocks, read as they are; give both sides the same --block-size");
    }
    let (p, d) = (kv_dtype(prefill), kv_dtype(decode));
    if p != d {
        return differ("KV dtype", Some(p), Some(d), "the decode engine reads the prefill engine's KV bytes as they are; give both sides the same --kv-cache-dtype (and --dtype where it is auto)");
    }
    Ok(())
}

/// The KV cache's dtype as the flags fix it: `--kv-cache-dtype` unless
/// absent or "auto" (vLLM's default), then the model's (`--dtype`, itself
/// "auto" when absent).
fn kv_dtype(args: &[String]) -> String {
    match flag_value(args, &KV_DTYPE_FLAGS).filter(|v| v != "auto") {
        Some(v) => format!("--kv-cache-dtype {v}"),
        None => format!("auto (--dtype {})", flag_value(args, &DTYPE_FLAGS).unwrap_or_else(|| "auto".into())),
    }
}

/// Equal values, JSON ones compared as JSON (key order and spacing apart).
fn same_value(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b || matches!((serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)), (Ok(x), Ok(y)) if x == y),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NIXL: &str = r#"{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}"#;

    fn args(extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = ["--dtype", "float32", "--block-size", "128", "--kv-transfer-config", NIXL].iter().map(|s| s.to_string()).collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    #[test]
    fn a_matching_pair_passes() {
        assert_eq!(check_pair(&args(&[]), &args(&["-tp", "2"]), "m", true), Ok(()));
        let kv = kv_transfer(PdRole::Decode, &args(&[])).unwrap();
        assert_eq!((kv.connector.as_str(), kv.role.as_str(), kv.buffer_device.as_deref()), ("NixlConnector", "kv_both", Some("cpu")));
        // JSON values compare as JSON.
        let p = args(&["--hf-overrides", r#"{"a": 1, "b": 2}"#]);
        let d = args(&["--hf-overrides", r#"{"b":2,"a":1}"#]);
        assert_eq!(check_pair(&p, &d, "m", true), Ok(()));
    }

    #[test]
    fn mismatches_name_the_flag_and_both_values() {
        let e = check_pair(&args(&[]), &args(&["--block-size", "64"]), "m", true).unwrap_err();
        assert!(e.contains("--block-size 128 but decode has 64"), "{e}");
        let e = check_pair(&args(&["--kv-cache-dtype", "fp8"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("KV dtype --kv-cache-dtype fp8 but decode has auto (--dtype float32)"), "{e}");
        let e = check_pair(&args(&["--dtype", "bfloat16"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("KV dtype"), "{e}");
        // kv-cache-dtype fp8 on both: the model dtypes may differ.
        assert_eq!(check_pair(&args(&["--kv-cache-dtype", "fp8", "--dtype", "bfloat16"]), &args(&["--kv-cache-dtype", "fp8"]), "m", true), Ok(()));
        let e = check_pair(&args(&["--quantization", "fp8"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("--quantization fp8 but decode has unset"), "{e}");
        let e = check_pair(&args(&["--model", "other"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("[roles.prefill] has --model other but the recipe's model is m"), "{e}");
    }

    #[test]
    fn the_connector_config_is_checked_per_side() {
        let bare: Vec<String> = vec!["--dtype".into(), "float32".into()];
        let e = check_pair(&args(&[]), &bare, "m", true).unwrap_err();
        assert!(e.starts_with("[roles.decode] has no --kv-transfer-config"), "{e}");
        let producer = args(&["--kv-transfer-config", r#"{"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"}"#]);
        let e = check_pair(&args(&[]), &producer, "m", true).unwrap_err();
        assert!(e.contains("kv_role \"kv_producer\": the decode side needs \"kv_both\" or \"kv_consumer\""), "{e}");
        assert_eq!(check_pair(&producer, &args(&[]), "m", true), Ok(()));
        let e = check_pair(&args(&["--kv-transfer-config", "{\"kv_role\": \"kv_both\"}"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("names no kv_connector"), "{e}");
        let e = check_pair(&args(&["--kv-transfer-config=[1]"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("give a JSON object"), "{e}");
        let e = check_pair(&args(&["--kv-transfer-config", "{"]), &args(&[]), "m", true).unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        // The buffer device: "cpu" on the CPU, anything on GPUs.
        let gpu = args(&["--kv-transfer-config", r#"{"kv_connector": "NixlConnector", "kv_role": "kv_both"}"#]);
        let e = check_pair(&gpu, &gpu, "m", true).unwrap_err();
        assert!(e.contains("kv_buffer_device unset (vLLM's default \"cuda\")"), "{e}");
        assert_eq!(check_pair(&gpu, &gpu, "m", false), Ok(()));
    }

    #[test]
    fn both_sides_are_needed() {
        let one = Roles { prefill: Some(Role::default()), decode: None };
        assert!(one.pair().unwrap_err().starts_with("[roles] has prefill but no [roles.decode]"));
        let other = Roles { prefill: None, decode: Some(Role::default()) };
        assert!(other.pair().unwrap_err().contains("no [roles.prefill]"));
    }
}
