//! Recipes: every shipped recipe passes `recipe check` (vLLM's own serve
//! parser, no weights needed), bad recipes get one-screen errors and exit 2,
//! `recipe show` lists the matrix (imports: tests/inferencex_import.rs).

use crate::util::{enginebench, repo, text, write_recipe};

fn shipped() -> Vec<String> {
    let mut files = Vec::new();
    for dir in ["recipes/cpu", "recipes/amd", "recipes/nvidia"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                files.push(p.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_shipped_recipe_passes_check() {
    let files = shipped();
    assert!(files.len() >= 4, "{files:?}");
    let mut args = vec!["recipe", "check"];
    args.extend(files.iter().map(String::as_str));
    let out = enginebench(&args);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(!log.contains("[ERROR]"), "{log}");
    // The MI355X recipe: base + 4 variants, each at TP8 and TP4.
    assert!(log.contains("minimax-m3-mxfp4-mi355x") && log.contains("topk_share tp=4 [ok]"), "{log}");
    assert!(log.contains("aiter tp=8 [ok]") && log.contains("before tp=8 [ok]"), "{log}");
}

const GOOD: &str = "name = \"t\"\nmodel = \"bundled:smollm2-135m-instruct\"\nhardware = \"cpu\"\n[engine]\nargs = [\"--dtype\", \"float32\", \"--max-model-len\", \"512\"]\n[sweep]\nisl = 64\nosl = 16\nconc = [1]\n";

#[test]
fn bad_recipes_are_named_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    // Unknown flag: vLLM's parser names it, with the nearest valid flags.
    let f = write_recipe(dir.path(), "flag", &GOOD.replace("\"--dtype\"", "\"--enforce-eagr\", \"--dtype\""));
    let out = enginebench(&["recipe", "check", &f]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("--enforce-eagr") && log.contains("did you mean --enforce-eager"), "{log}");

    // Invalid --hf-overrides JSON: the JSON error position, before Python starts.
    let f = write_recipe(dir.path(), "json", &GOOD.replace("\"--dtype\"", "\"--hf-overrides\", \"{\\\"a\\\": 1,}\", \"--dtype\""));
    let out = enginebench(&["recipe", "check", &f]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("not valid JSON") && log.contains("column"), "{log}");

    // Unknown key: file, line and column.
    let f = write_recipe(dir.path(), "key", &GOOD.replace("osl = 16", "osl = 16\nconcurency = [2]"));
    let out = enginebench(&["recipe", "check", &f]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("key.toml:9:1") && log.contains("concurency"), "{log}");

    // ISL + OSL longer than --max-model-len.
    let f = write_recipe(dir.path(), "long", &GOOD.replace("isl = 64", "isl = 500"));
    let out = enginebench(&["recipe", "check", &f]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("ISL 500 + OSL 16") && log.contains("--max-model-len 512"), "{log}");

    // Unknown variant.
    let out = enginebench(&["recipe", "show", &write_recipe(dir.path(), "v", GOOD), "--variant", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("unknown variant \"nope\""), "{}", text(&out));
}

#[test]
fn show_lists_one_line_per_point() {
    let f = repo().join("recipes/amd/minimax-m3-mxfp4-mi355x.toml");
    let out = enginebench(&["recipe", "show", f.to_str().unwrap(), "--variant", "all", "--no-knobs"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("VLLM_ROCM_QUICK_REDUCE_QUANTIZATION=INT4"), "{log}");
    assert!(log.contains("--kv-cache-dtype fp8"), "{log}");
    assert!(log.contains(r#"--hf-overrides '{"text_config":{"index_topk_freq":4,"use_index_cache":true}}'"#), "{log}");
    assert!(!log.contains("knobs:"), "--no-knobs: {log}");
    // TP8: 2 pairs x 6 concurrencies; TP4: 2 pairs x 9.
    assert_eq!(log.lines().filter(|l| l.trim_start().starts_with("all ")).count(), 12 + 18, "{log}");
}
