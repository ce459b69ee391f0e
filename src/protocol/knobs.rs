//! The knob report as the shim sends it (python-shim/enginebench_shim/knobs.py
//! `report`): per environment variable, `vllm serve` flag and `--hf-overrides`
//! key of one engine configuration, what this vLLM build does with it; the
//! ROCm quick all-reduce rule where the recipe sets it; and the resolved
//! configuration, flattened, for `ab`'s comparison of two arms.
//!
//! These are vLLM's facts, not verdicts: the verdicts in words, the rules
//! and their sources are in `crate::knobs` (docs/knobs.md). Every field is
//! optional on reading: an older shim or result file may lack any of them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the shim needs besides the flags to make a knob report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KnobRequest {
    /// The variables the engine process gets (recipe, variant, enginebench's
    /// defaults), and those removed from it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub env_unset: Vec<String>,
    /// The sweep's concurrencies: the decode batch sizes of the quick
    /// all-reduce rule.
    #[serde(default)]
    pub concs: Vec<u32>,
    /// Evaluate the quick all-reduce rule even where `env` sets no
    /// `VLLM_ROCM_QUICK_REDUCE_*` (the other arm of an `ab` does).
    #[serde(default)]
    pub quick_reduce: bool,
}

/// One engine configuration's knob report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KnobReport {
    /// `vllm.__version__` of the interpreter that made the report.
    #[serde(default)]
    pub vllm_version: Option<String>,
    /// Why vLLM could not build the engine configuration here (a GPU recipe
    /// on a CPU host, a hub model that is not cached): then flags are
    /// judged from the parse alone and overrides by name only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    /// Every variable of the configuration's environment, by name.
    #[serde(default)]
    pub env: Vec<EnvKnob>,
    /// Every `vllm serve` flag group (a flag and its values), in argv order.
    #[serde(default)]
    pub flags: Vec<FlagKnob>,
    /// Every leaf key of `--hf-overrides` (`a.b` for nested keys).
    #[serde(default)]
    pub hf_overrides: Vec<OverrideKnob>,
    /// vLLM's quick all-reduce rule, where the recipe sets `VLLM_ROCM_QUICK_REDUCE_*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_reduce: Option<QuickReduce>,
    /// The config vLLM built, flattened (`model_config.max_model_len` ->
    /// `2048`), without fields that differ between two builds of the same
    /// arguments; `None` when it could not be built. What `ab` and `compare`
    /// diff between two arms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<BTreeMap<String, String>>,
    /// The HF config after overrides (`config.to_dict()`), flattened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_config: Option<BTreeMap<String, String>>,
    /// Every registered vLLM variable's value as vLLM reads it (`vllm.envs.NAME`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vllm_env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What vLLM knows of one environment variable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvKnob {
    pub name: String,
    #[serde(default)]
    pub value: String,
    /// `registered` (in `vllm.envs.environment_variables`), `removed`
    /// (vLLM's own removed list), `unknown` (a `VLLM_*` name vLLM does not
    /// know) or `other` (not vLLM's).
    #[serde(default)]
    pub status: String,
    /// Files of the vllm package (relative paths) that mention the name,
    /// envs.py excluded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<String>,
    /// Registered names close to an unknown one (a typo's likely intent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub close: Vec<String>,
    /// vLLM's hint for a removed name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// What one flag group does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlagKnob {
    /// The tokens as the recipe wrote them (`["--max-num-seqs", "256"]`).
    #[serde(default)]
    pub tokens: Vec<String>,
    #[serde(default)]
    pub flag: String,
    /// The parser's destination (`max_num_seqs`); `None` for a token the
    /// parser does not know.
    #[serde(default)]
    pub dest: Option<String>,
    /// The parsed value and the parser's default, as text.
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub default: Option<String>,
    /// The parsed value equals the parser's default.
    #[serde(default)]
    pub restates_default: bool,
    /// What the flag changes in the config vLLM builds (with it vs without
    /// it); `None` when either config could not be built.
    #[serde(default)]
    pub changes: Option<Vec<FieldChange>>,
    /// Config fields named as the flag's destination, with their resolved values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolved: BTreeMap<String, String>,
    /// Why the config without this flag could not be built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_error: Option<String>,
}

/// One config field that differs between two builds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    /// The value without the knob / with it; `None` where the field is absent.
    #[serde(default)]
    pub without: Option<String>,
    #[serde(default, rename = "with")]
    pub with_: Option<String>,
}

/// Where one `--hf-overrides` key landed and who reads its name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverrideKnob {
    /// `use_index_cache`, or `text_config.use_index_cache` when nested.
    pub key: String,
    #[serde(default)]
    pub value: String,
    /// The model's module in vLLM's ModelRegistry (`vllm.models.minimax_m3`).
    #[serde(default)]
    pub model_module: Option<String>,
    /// Files of the model's module, of other models, and of the rest of the
    /// vllm package that mention the key's last name.
    #[serde(default)]
    pub model_readers: Vec<String>,
    #[serde(default)]
    pub other_model_readers: Vec<String>,
    #[serde(default)]
    pub generic_readers: Vec<String>,
    /// `text` (the config the model reads, `hf_text_config`), `top` (the
    /// top-level config, when that is not the text config) or the nested
    /// config's name; `None` when the config could not be built.
    #[serde(default)]
    pub landed: Option<String>,
    #[serde(default)]
    pub text_config_is_top: Option<bool>,
    /// The config had the key before the override.
    #[serde(default)]
    pub had_key: Option<bool>,
    /// `nowhere`, `wrong_level`, `other_models`, `read` or `unknown` (crate::knobs).
    #[serde(default)]
    pub verdict: String,
}

/// vLLM's quick all-reduce rule for one job (vllm/distributed/
/// device_communicators/quick_all_reduce.py, evaluated with its own class).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickReduce {
    /// The codec (`VLLM_ROCM_QUICK_REDUCE_QUANTIZATION`: FP, INT8, INT6, INT4, INT3, NONE).
    #[serde(default)]
    pub level: Option<String>,
    #[serde(default)]
    pub cast_bf16_to_fp16: Option<bool>,
    #[serde(default)]
    pub tp: Option<u32>,
    /// The all-reduce's dtype (the model's) and the kernels' (fp16 when cast).
    #[serde(default)]
    pub dtype: Option<String>,
    #[serde(default)]
    pub kernel_dtype: Option<String>,
    #[serde(default)]
    pub hidden_size: Option<u64>,
    #[serde(default)]
    pub max_num_batched_tokens: Option<u64>,
    /// `range` (fires between min and max), `never`, or `None` (undecided here).
    #[serde(default)]
    pub fires: Option<String>,
    /// Why it never fires or cannot be decided.
    #[serde(default)]
    pub why: Option<String>,
    /// The smallest all-reduce that fires, bytes and tokens (rows of hidden x dtype).
    #[serde(default)]
    pub min_bytes: Option<u64>,
    #[serde(default)]
    pub min_tokens: Option<u64>,
    /// The largest, bytes; `None`: the ROCm library's limit, not known here.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Bytes below which a firing all-reduce uses the FP codec
    /// (`VLLM_ROCM_QUICK_REDUCE_QUANTIZATION_MIN_SIZE_KB`).
    #[serde(default)]
    pub quantization_min_bytes: Option<u64>,
    /// Decode all-reduces at the sweep's concurrencies.
    #[serde(default)]
    pub decode: Vec<QuickReduceSize>,
    /// The prefill chunk's all-reduce (`--max-num-batched-tokens` rows).
    #[serde(default)]
    pub prefill: Option<QuickReduceSize>,
    /// The module could not be loaded, or vLLM refuses the values.
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One all-reduce size and the rule's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickReduceSize {
    /// The concurrency (decode) or `None`.
    #[serde(default)]
    pub conc: Option<u32>,
    /// Tokens (prefill) or `None`.
    #[serde(default)]
    pub tokens: Option<u64>,
    pub bytes: u64,
    pub fires: bool,
    /// The codec it would use (FP below the quantization minimum).
    #[serde(default)]
    pub codec: Option<String>,
}
