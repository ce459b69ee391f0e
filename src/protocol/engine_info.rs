//! Facts about a built engine, as the worker reports them once (the shim's
//! `Engine.info()`, python-shim/enginebench_shim/engine.py) and as
//! `result.json` keeps them under each job's `engine`.
//!
//! Every field is optional: an older vLLM, the fake engine or an older
//! result file may lack any of them. Every key the shim sends has its typed
//! field here (a new key in `info()` gets one); keys this build does not
//! know are ignored on reading.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the engine is and how it is laid out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// `vllm.__version__`, `torch.__version__`, the interpreter's version.
    #[serde(default)]
    pub vllm: Option<String>,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
    /// The model as vLLM resolved it (path or hub id).
    #[serde(default)]
    pub model: Option<String>,
    /// Model dtype, e.g. `float32`, `bfloat16`.
    #[serde(default)]
    pub dtype: Option<String>,
    /// Longest prompt + output one request may have, tokens.
    #[serde(default)]
    pub max_model_len: Option<u64>,
    /// vLLM's parallel layout (`ParallelConfig`).
    #[serde(default)]
    pub tensor_parallel_size: Option<u32>,
    #[serde(default)]
    pub pipeline_parallel_size: Option<u32>,
    #[serde(default)]
    pub data_parallel_size: Option<u32>,
    /// Context parallel sizes (`ParallelConfig.prefill_context_parallel_size`,
    /// `.decode_context_parallel_size`; vllm/config/parallel.py:143, 385).
    /// Decode context parallelism reuses the TP ranks; prefill's adds processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_context_parallel_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_context_parallel_size: Option<u32>,
    /// Worker processes (GPUs) of the engine: vLLM's `ParallelConfig.world_size`
    /// = PP x TP x PCP (vllm/config/parallel.py:944-949).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The visible device ordinals the workers use, rank order (vLLM's
    /// `current_platform.logical_device_id_to_visible_device_id(rank)`,
    /// vllm/platforms/interface.py:317-340; `--device-ids` changes them):
    /// positions in the engine's `CUDA_VISIBLE_DEVICES` / `HIP_VISIBLE_DEVICES`
    /// list, or device indices when none is set. Empty on CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_ids: Option<Vec<u32>>,
    /// Whether the engine core schedules asynchronously (vLLM's
    /// `SchedulerConfig.async_scheduling` after the platform's say: on by
    /// default on GPU, forced off on CPU, vllm/platforms/cpu.py:329-331).
    /// Then a step returns the outputs of the batch scheduled one step earlier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
    /// How `--profile` profiles this engine: `vllm` (vLLM's worker profiler,
    /// every rank: `--profiler-config` + `start_profile`/`stop_profile`) or
    /// `torch` (a torch profiler in the engine's own process, for a vLLM
    /// without the worker profiler and one worker); absent without `--profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler: Option<String>,
    /// Tokenizer vocabulary size and its special token ids: random prompts
    /// draw from the ids in `0..vocab_size` that are not special.
    #[serde(default)]
    pub vocab_size: Option<u32>,
    #[serde(default)]
    pub special_token_ids: Vec<u32>,
    /// vLLM's device type (`cpu`, `cuda`, `rocm`, ...).
    #[serde(default)]
    pub device: Option<String>,
    /// The in-process scheduler is reachable (per-step prefill/decode counts).
    #[serde(default)]
    pub scheduler_details: Option<bool>,
    /// The interpreter and the folder vLLM was imported from.
    #[serde(default)]
    pub python_executable: Option<String>,
    #[serde(default)]
    pub vllm_path: Option<String>,
    /// The shim's compatibility report (`compat.report()`): per vLLM internal,
    /// where it was found or what is off without it.
    #[serde(default)]
    pub compat: Option<CompatReport>,
    /// Features off on this vLLM, each with the reason.
    #[serde(default)]
    pub degraded: Vec<String>,
    /// Speculative decoding: tokens proposed per step and the method; `None`
    /// when the engine does not speculate.
    #[serde(default)]
    pub num_speculative_tokens: Option<u32>,
    #[serde(default)]
    pub speculative_method: Option<String>,
    /// vLLM's prefix caching is on (`CacheConfig.enable_prefix_caching`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_prefix_caching: Option<bool>,
    /// Tokens per KV-cache block (`CacheConfig.block_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// The KV pool's size, tokens: what vLLM logs at start as "GPU KV cache
    /// size: N tokens" (`CacheConfig.kv_cache_size_tokens`, else its formula,
    /// max concurrency at `max_model_len` x `max_model_len`; the shim's
    /// `compat.kv_cache_tokens`). One engine's as the shim reports it; the
    /// job's, summed over its DP ranks, in `result.json` (as InferenceX's
    /// agentic aggregation sums the DP engines' log lines). `None` from a
    /// vLLM that keeps neither, the fake engine and older result files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<u64>,
    /// The KV connector (`KVTransferConfig.kv_connector`, e.g.
    /// `OffloadingConnector`); `None` without KV transfer or offload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_connector: Option<String>,
    /// The CPUs vLLM's KV transfer worker had pinned the engine's thread to
    /// while the engine was built, which the shim then undid (vLLM 0.32's
    /// NIXL worker on the CPU platform: the last core of each NUMA node,
    /// docs/pd.md); `None` when building the engine left the thread's CPUs
    /// as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_affinity: Option<Vec<u32>>,
    /// The engine is enginebench's fake one (tests), not vLLM.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fake_engine: bool,
    /// How the shim steps the engine: `core` (vLLM's engine core driven
    /// directly, no output processor between steps for token requests) or
    /// `engine` (`LLMEngine.step()`); python-shim/enginebench_shim/steppath.py.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_path: Option<String>,
    /// Why the engine path was used (a vLLM internal missing,
    /// `ENGINEBENCH_STEP_PATH=engine`); `None` on the core path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_path_reason: Option<String>,
    /// A rank of a MoE data-parallel group on vLLM's CPU platform: the
    /// collectives vLLM's CPU communicator lacks and the shim supplied
    /// (`all_gatherv`, `reduce_scatterv`: vLLM issue #57837; PR #47778 adds
    /// shared-memory versions), python-shim/enginebench_shim/cpu_collectives.py.
    /// `None` where nothing was supplied (GPU, one engine, a vLLM that has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_collectives: Option<Vec<String>>,
    /// The same rank's CPU MoE experts were given expert-parallel ids by the
    /// shim (vLLM 0.32's `CPUUnquantizedExperts.apply` ignores `expert_map`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_expert_map: Option<bool>,
    /// A job over several nodes (`[layout] nodes`, docs/multi-node.md):
    /// the node count; `None` on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
}

/// The shim's compatibility report, `compat.report()`: each vLLM internal
/// it uses (by the shim's name for it, e.g. `make_arg_parser`) and how it
/// was resolved on this vLLM.
pub type CompatReport = BTreeMap<String, CompatItem>;

/// One vLLM internal of the [`CompatReport`]
/// (python-shim/enginebench_shim/compat.py, `report()`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompatItem {
    /// Where it was found (`module.attribute`); `None` when missing.
    #[serde(default)]
    pub found: Option<String>,
    /// Why it is missing (every place that was tried).
    #[serde(default)]
    pub missing: Option<String>,
    /// What is off without it (`None` when found).
    #[serde(default)]
    pub loses: Option<String>,
    /// The engine cannot start without it.
    #[serde(default)]
    pub required: bool,
}

impl CompatItem {
    /// A required internal this vLLM lacks: the engine cannot start.
    pub fn blocks_start(&self) -> bool {
        self.required && self.found.is_none()
    }
}

impl EngineInfo {
    /// GPUs one engine spans, the per-GPU divisor: vLLM's world size (PP x
    /// TP x PCP) when reported, else TP x PP x PCP (1 for a missing size).
    pub fn gpus(&self) -> u32 {
        let size = |s: Option<u32>| s.unwrap_or(1).max(1);
        self.world_size.filter(|&w| w > 0).unwrap_or_else(|| {
            size(self.tensor_parallel_size) * size(self.pipeline_parallel_size) * size(self.prefill_context_parallel_size)
        })
    }

    /// The visible device ordinals the engine's workers use: `device_ids`
    /// when reported, else `0..gpus()`; empty for a CPU engine.
    pub fn device_ordinals(&self) -> Vec<u32> {
        if self.device.as_deref() == Some("cpu") {
            return Vec::new();
        }
        self.device_ids.clone().unwrap_or_else(|| (0..self.gpus()).collect())
    }

    /// GPUs as InferenceX counts them for its per-GPU figures: TP x PP x PCP
    /// (utils/process_result.py and the agentic aggregation's `_gpu_shape`;
    /// DCP and EP add none), with TP the recipe's (`recipe_tp`: the matrix
    /// TP, 8 for a DP-attention job that runs vLLM with `-tp 1 -dp 8`), else
    /// the engine's TP x DP (the GPUs such a layout occupies).
    pub fn inferencex_gpus(&self, recipe_tp: Option<u32>) -> u32 {
        let size = |v: Option<u32>| v.unwrap_or(1).max(1);
        let tp = recipe_tp.filter(|&t| t > 0).unwrap_or_else(|| size(self.tensor_parallel_size) * size(self.data_parallel_size));
        tp * size(self.pipeline_parallel_size) * size(self.prefill_context_parallel_size)
    }

    /// The token ids a random prompt may use (vocabulary minus special
    /// tokens, as the shim computes them); `None` without a vocabulary size.
    pub fn allowed_token_ids(&self) -> Option<Vec<u32>> {
        let vocab = self.vocab_size?;
        Some((0..vocab).filter(|t| !self.special_token_ids.contains(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shim_report() {
        let text = r#"{"vllm": "0.32.0", "torch": null, "max_model_len": 2048,
            "tensor_parallel_size": 2, "pipeline_parallel_size": 2, "vocab_size": 5,
            "special_token_ids": [0, 4], "degraded": [], "fake_engine": true,
            "enable_prefix_caching": true, "block_size": 16, "kv_cache_tokens": 23296, "kv_connector": null, "kv_transfer_affinity": [1], "a_key_of_a_newer_shim": [1],
            "compat": {"make_arg_parser": {"found": "vllm.entrypoints.openai.cli_args.make_arg_parser", "missing": null, "loses": null, "required": true},
                       "stat_logger_base": {"found": null, "missing": "not in vllm.v1.metrics.loggers", "loses": "step_stats", "required": false}}}"#;
        let info: EngineInfo = serde_json::from_str(text).unwrap();
        assert_eq!(info.vllm.as_deref(), Some("0.32.0"));
        assert_eq!(info.max_model_len, Some(2048));
        assert_eq!(info.gpus(), 4);
        assert_eq!(info.allowed_token_ids(), Some(vec![1, 2, 3]));
        assert_eq!((info.enable_prefix_caching, info.block_size, info.kv_connector.as_deref()), (Some(true), Some(16), None));
        assert_eq!(info.kv_cache_tokens, Some(23296));
        assert_eq!(info.kv_transfer_affinity, Some(vec![1]), "the CPUs NIXL had pinned the engine to");
        let older: EngineInfo = serde_json::from_str(r#"{"vllm": "0.32.0", "block_size": 16}"#).unwrap();
        assert_eq!(older.kv_cache_tokens, None, "a result file from before the field reads");
        let compat = info.compat.as_ref().unwrap();
        assert!(!compat["make_arg_parser"].blocks_start() && compat["stat_logger_base"].loses.as_deref() == Some("step_stats"));
        assert!(CompatItem { required: true, ..CompatItem::default() }.blocks_start());
        let back = serde_json::to_value(&info).unwrap();
        assert_eq!(back["fake_engine"], true);
        assert_eq!(back["compat"]["stat_logger_base"]["missing"], "not in vllm.v1.metrics.loggers");
        assert!(back.get("a_key_of_a_newer_shim").is_none() && back.get("kv_connector").is_none());
        assert_eq!(EngineInfo::default().gpus(), 1);
        assert_eq!(info.inferencex_gpus(None), 4);
        // DP attention: vLLM runs -tp 1 -dp 8 with PCP 2; InferenceX counts its TP 8 x PCP 2.
        let dpa = EngineInfo {
            tensor_parallel_size: Some(1),
            data_parallel_size: Some(8),
            prefill_context_parallel_size: Some(2),
            decode_context_parallel_size: Some(8),
            ..EngineInfo::default()
        };
        assert_eq!((dpa.inferencex_gpus(Some(8)), dpa.inferencex_gpus(None)), (16, 16));
    }

    #[test]
    fn world_size_counts_prefill_context_parallel_ranks() {
        // vLLM: world_size = PP x TP x PCP; DCP reuses the TP ranks.
        let info: EngineInfo = serde_json::from_str(
            r#"{"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "prefill_context_parallel_size": 2,
                "decode_context_parallel_size": 4, "world_size": 8, "device": "cuda", "device_ids": [0,1,2,3,4,5,6,7],
                "async_scheduling": true}"#,
        )
        .unwrap();
        assert_eq!(info.gpus(), 8);
        assert_eq!(info.async_scheduling, Some(true));
        let no_world: EngineInfo = serde_json::from_str(r#"{"tensor_parallel_size": 4, "prefill_context_parallel_size": 2}"#).unwrap();
        assert_eq!(no_world.gpus(), 8, "TP x PP only said 4");
        assert_eq!(no_world.device_ordinals(), (0..8).collect::<Vec<u32>>());
        let cpu: EngineInfo = serde_json::from_str(r#"{"device": "cpu", "world_size": 1}"#).unwrap();
        assert!(cpu.device_ordinals().is_empty());
    }
}
