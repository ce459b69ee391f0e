//! The knob report (docs/knobs.md) through the CLI, made by real vLLM (the
//! CPU build) from its own parser, config classes, model registry and quick
//! all-reduce class, with no engine and no weights: the bundled model's
//! typo, restated default and unread override; where an override lands in a
//! multimodal wrapper's config; and an imported recipe (the fixture
//! launcher's flat top-k override and INT4 quick all-reduce) on a
//! MiniMax-M3-shaped config from a local Hugging Face cache.

use std::path::Path;

use crate::util::{enginebench, enginebench_env, repo, text, write_recipe};

/// A MiniMax-M3-shaped config in vLLM's own classes (`minimax_m3_vl` wrapping
/// `minimax_m3_text`: hidden size 6144 as the real model's), no weights,
/// cached as Hugging Face keeps a hub model: HF_HOME/hub/models--ORG--NAME.
fn cached_hub_model(hf_home: &Path, id: &str) {
    let repo_dir = hf_home.join("hub").join(format!("models--{}", id.replace('/', "--")));
    let snapshot = repo_dir.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), "0123abcd").unwrap();
    let config = serde_json::json!({
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
        "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "minimax_m3_text",
            "hidden_size": 6144,
            "num_hidden_layers": 4,
            "vocab_size": 1024,
            "moe_layer_freq": [0, 1, 1, 1],
            "sparse_attention_config": {"use_sparse_attention": false}
        }
    });
    std::fs::write(snapshot.join("config.json"), config.to_string()).unwrap();
}

/// The lines of `log` that mention `needle`, for messages.
fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(needle)).collect()
}

#[test]
fn the_bundled_models_report_names_a_typo_a_restated_default_and_an_unread_override() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"name = "knobs"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
[env]
VLLM_CPU_KVCACHE_SPACE = "1"
VLLM_CPU_KVCACHE_SPCE = "1"
NCCL_DEBUG = "INFO"
[engine]
args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "128", "--seed", "0"]
hf_overrides = { enginebench_unread_key = 1 }
[sweep]
isl = 32
osl = 8
conc = [1]
"#;
    let f = write_recipe(dir.path(), "knobs", body);
    let out = enginebench(&["recipe", "show", &f]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let has = |line: &str| log.lines().any(|l| l.trim() == line);
    assert!(has("[NO EFFECT] VLLM_CPU_KVCACHE_SPCE=1: vLLM 0.32.0 has no such variable (did you mean VLLM_CPU_KVCACHE_SPACE?)"), "{log}");
    assert!(lines_with(&log, "[read] VLLM_CPU_KVCACHE_SPACE=1: registered by vLLM 0.32.0; read in").len() == 1, "{log}");
    assert!(has("[unknown] NCCL_DEBUG=INFO: NCCL's, not vLLM's: whether NCCL reads this name, nothing here can tell"), "{log}");
    // vLLM resolves max_num_seqs to 128 here without the flag (serve defaults on CPU).
    assert!(has("[NO EFFECT] --max-num-seqs 128: restates what vLLM resolves without it: scheduler_config.max_num_seqs = 128"), "{log}");
    assert!(has("[read] --max-model-len 1024: sets model_config.max_model_len 8192 -> 1024"), "{log}");
    assert!(has("[NO EFFECT] --seed 0: restates vLLM's default (0)"), "{log}");
    assert!(has("[NO EFFECT] hf-override enginebench_unread_key=1: referenced nowhere in vLLM 0.32.0: no effect here"), "{log}");

    // `recipe check` repeats only the doubtful ones (it names the typo itself).
    let out = enginebench(&["recipe", "check", &f]);
    let log = text(&out);
    assert!(out.status.code() == Some(2), "a CPU recipe's unknown variable is an error: {log}");
    assert!(log.contains("knob [NO EFFECT] --max-num-seqs 128") && log.contains("knob [NO EFFECT] hf-override enginebench_unread_key=1"), "{log}");
    assert!(!log.contains("knob [read]") && !log.contains("knob [NO EFFECT] VLLM_CPU_KVCACHE_SPCE"), "{log}");
}

/// A multimodal wrapper transformers knows (Llava: a Llama text config
/// inside), as a local folder holding only config.json: a flat key lands on
/// the wrapper, a nested one in the text config vLLM's model reads.
#[test]
fn an_override_lands_on_the_wrapper_or_in_its_text_config() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("wrapper");
    std::fs::create_dir_all(&model).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "image_token_index": 1000,
        "torch_dtype": "float32",
        "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "image_size": 56, "patch_size": 14, "projection_dim": 32}
    });
    std::fs::write(model.join("config.json"), config.to_string()).unwrap();
    let body = format!(
        r#"name = "wrapper"
model = "{}"
hardware = "cpu"
[engine]
args = ["--skip-tokenizer-init", "--max-model-len", "512"]
[sweep]
isl = 32
osl = 8
conc = [1]
[variants.flat]
hf_overrides = {{ rms_norm_eps = 0.001 }}
[variants.nested]
hf_overrides = {{ text_config = {{ rms_norm_eps = 0.001 }} }}
"#,
        model.display()
    );
    let f = write_recipe(dir.path(), "wrapper", &body);
    let out = enginebench(&["recipe", "show", &f]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let flat = lines_with(&log, "hf-override rms_norm_eps=0.001:");
    assert_eq!(flat.len(), 1, "{log}");
    assert!(flat[0].contains("[NO EFFECT]") && flat[0].ends_with(r#"write {"text_config": {"rms_norm_eps": 0.001}}"#), "{log}");
    let nested = lines_with(&log, "hf-override text_config.rms_norm_eps=0.001:");
    assert_eq!(nested.len(), 1, "{log}");
    assert!(nested[0].contains("[read]") && nested[0].contains("the config had the key"), "{log}");
}

/// The fixture launcher's knobs, imported, on a MiniMax-M3-shaped config in
/// a local Hugging Face cache: the flat top-k override is named as landing
/// outside the text config, and vLLM's quick all-reduce rule (its own table)
/// gives the issue's figures at TP 4, bf16, hidden 6144; the variants the
/// test adds change the range as that table says.
#[test]
fn an_imported_recipes_override_and_quick_reduce_are_judged() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hf");
    cached_hub_model(&hf, "example/Sparse-M3");
    let f = dir.path().join("sparse.toml");
    let ix = repo().join("tests/fixtures/inferencex-checkout");
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", ix.to_str().unwrap(), "--key", "sparse-fp4-mi355x-vllm", "-o", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let mut recipe = std::fs::read_to_string(&f).unwrap();
    recipe.push_str(
        r#"
[variants.nested]
args_replace = { "--hf-overrides" = '{"text_config": {"use_index_cache": true, "index_topk_freq": 4}}' }
[variants.fp16_cast]
env = { VLLM_ROCM_QUICK_REDUCE_CAST_BF16_TO_FP16 = "1" }
[variants.floor_1mb]
env = { VLLM_ROCM_QUICK_REDUCE_MIN_SIZE_BYTES_MB = "1" }
"#,
    );
    std::fs::write(&f, recipe).unwrap();
    let hf_home = hf.to_string_lossy().into_owned();
    let out = enginebench_env(&["recipe", "show", f.to_str().unwrap()], &[("HF_HOME", &hf_home), ("HF_HUB_OFFLINE", "1")]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let blocks: Vec<&str> = log.split("== sparse-fp4-mi355x-vllm / ").skip(1).collect();
    assert_eq!(blocks.len(), 4, "{log}");
    let block = |name: &str| *blocks.iter().find(|b| b.starts_with(name)).unwrap_or_else(|| panic!("no {name}: {log}"));

    let base = block("base");
    for key in ["use_index_cache=True", "index_topk_freq=4"] {
        let line = lines_with(base, &format!("hf-override {key}:"));
        assert_eq!(line.len(), 1, "{base}");
        assert!(line[0].contains("[NO EFFECT] hf-override") && line[0].contains("set on the top-level config, but this model reads its text config: write {\"text_config\""), "{base}");
    }
    let qr = lines_with(base, "quick all-reduce:");
    assert_eq!(qr.len(), 1, "{base}");
    assert!(qr[0].contains("INT4 quick all-reduce fires for 16 MiB-"), "{base}");
    assert!(qr[0].contains("(TP 4, bfloat16, hidden 6144: >= 1,366 tokens)"), "{base}");
    assert!(qr[0].contains("prefill chunks (8,192 tokens, 96 MiB) yes (INT4)"), "{base}");
    assert!(qr[0].contains("decode at conc 1-256 (12 KiB-3 MiB) never"), "{base}");
    assert!(qr[0].contains("the INT4 codec only from 256 KiB up (FP below)"), "{base}");

    let nested = block("nested");
    assert!(lines_with(nested, "hf-override text_config.use_index_cache=True:")[0].contains("[read] hf-override"), "{nested}");
    // fp16 kernels: the table's (fp16, 4) INT4 entry, 2 MiB = 171 rows of 12 KiB.
    let cast = lines_with(block("fp16_cast"), "quick all-reduce:")[0];
    assert!(cast.contains("fires for 2 MiB-") && cast.contains("float16, hidden 6144: >= 171 tokens") && cast.contains("decode at conc 1-256 (12 KiB-3 MiB) at conc 256"), "{cast}");
    // MIN_SIZE_BYTES_MB=1 replaces the table: 1 MiB = 86 rows.
    let floor = lines_with(block("floor_1mb"), "quick all-reduce:")[0];
    assert!(floor.contains("fires for 1 MiB-") && floor.contains(">= 86 tokens") && floor.contains("at conc 256"), "{floor}");
}
