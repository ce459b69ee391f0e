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

/// A P/D recipe (`[roles]`, issue 44): its faults exit 2 with one line
/// naming them, from `recipe check` and from `run` before any engine starts
/// (no Python is asked: these are read from the recipe itself).
#[test]
fn bad_pd_recipes_exit_2_before_any_engine() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(repo().join("recipes/cpu/smollm2-135m-pd.toml")).unwrap();
    let decode_kv = r#"'{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu", "kv_load_failure_policy": "fail"}'"#;
    assert!(good.contains(decode_kv));
    let cases = [
        ("missing", good[..good.find("[roles.decode]").unwrap()].to_string() + &good[good.find("[sweep]").unwrap()..], "[roles] has prefill but no [roles.decode]"),
        ("nokv", good.replace(&format!("\"--kv-transfer-config\", {decode_kv}"), "\"--max-num-seqs\", \"4\""), "[roles.decode] has no --kv-transfer-config"),
        ("block", good.replace(decode_kv, &format!("{decode_kv}, \"--block-size\", \"64\"")), "[roles] prefill has --block-size 128 but decode has 64"),
        ("dtype", good.replace(decode_kv, &format!("{decode_kv}, \"--kv-cache-dtype\", \"fp8\"")), "prefill has KV dtype auto (--dtype float32) but decode has --kv-cache-dtype fp8"),
        ("model", good.replace(decode_kv, &format!("{decode_kv}, \"--model\", \"Qwen/Qwen3-0.6B\"")), "[roles.decode] has --model Qwen/Qwen3-0.6B but the recipe's model is bundled:smollm2-135m-instruct"),
        ("device", good.replace(", \"kv_buffer_device\": \"cpu\", \"kv_load", ", \"kv_load"), "kv_buffer_device unset (vLLM's default \"cuda\")"),
        ("role", good.replace("\"kv_role\": \"kv_both\", \"kv_buffer_device\": \"cpu\", \"kv_load", "\"kv_role\": \"kv_producer\", \"kv_buffer_device\": \"cpu\", \"kv_load"), "the decode side needs \"kv_both\" or \"kv_consumer\""),
    ];
    for (name, body, want) in &cases {
        let f = write_recipe(dir.path(), name, body);
        for cmd in [&["recipe", "check", f.as_str()][..], &["run", f.as_str(), "-o", dir.path().join("runs").to_str().unwrap()][..]] {
            let out = enginebench(cmd);
            let log = text(&out);
            assert_eq!(out.status.code(), Some(2), "{name} {cmd:?}: {log}");
            let line = log.lines().find(|l| l.contains(want)).unwrap_or_else(|| panic!("{name} {cmd:?}: no {want:?} in {log}"));
            assert!(line.starts_with("error: recipe ") && line.contains(&format!("{name}.toml")), "{name}: {line}");
            assert!(!log.contains("Traceback") && !log.contains("checking flags"), "{name}: the recipe's own fault, found before Python: {log}");
        }
    }
    assert!(!dir.path().join("runs").exists(), "no run folder for a refused recipe");
    // What P/D jobs do not run yet is refused by `run`, before any engine.
    let runs = dir.path().join("runs");
    let two_decode = write_recipe(dir.path(), "twodecode", &good.replace("[roles.decode]\n", "[roles.decode]\nlayout = { nodes = 2 }\n"));
    let shipped = repo().join("recipes/cpu/smollm2-135m-pd.toml");
    let refused = [
        (vec!["run", two_decode.as_str()], "[roles.decode] layout nodes = 2: P/D jobs run on one node for now"),
        (vec!["run", shipped.to_str().unwrap(), "--task", "gsm8k"], "the eval does not run through a P/D pair yet"),
    ];
    for (mut cmd, want) in refused {
        cmd.extend(["-o", runs.to_str().unwrap()]);
        let out = enginebench(&cmd);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {}", text(&out));
        assert!(text(&out).contains(want), "{cmd:?}: {}", text(&out));
    }
    assert!(!runs.exists(), "no run folder for a refused job");
}
