//! `enginebench ab` on the real engine: an inert runtime knob keeps greedy
//! tokens identical and accuracy held; a numerics change (float32 vs
//! bfloat16) moves them. Plots come out as valid PNG and SVG.

mod common;

use common::{engine_lock, enginebench, read_json, text};

const RECIPE: &str = r#"name = "ab-e2e"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
[env]
VLLM_CPU_KVCACHE_SPACE = "1"
[engine]
args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
[sweep]
isl = 32
osl = 16
conc = [4]
num_prompts = 8
warmups = 4
[eval]
task = "gsm8k"
limit = 4
concurrency = 4
[variants.knob]
description = "an environment variable nothing reads"
env = { ENGINEBENCH_UNUSED_KNOB = "1" }
[variants.bf16]
args_replace = { "--dtype" = "bfloat16" }
"#;

#[test]
fn inert_knob_agrees_and_dtype_change_diverges() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("ab.toml");
    std::fs::write(&recipe, RECIPE).unwrap();

    // Inert knob, two interleaved repeats. This machine is noisy, so the perf
    // gate is given room; the numerics must be exactly the same.
    let out = dir.path().join("knob");
    let o = enginebench(&[
        "ab", recipe.to_str().unwrap(), "--baseline", "base", "--candidate", "knob", "--repeats", "2",
        "--max-regression", "0.5", "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("| conc |") || log.contains("verdict"), "{log}");
    let r = read_json(&out.join("result.json"));
    let labels: Vec<&str> = r["jobs"].as_array().unwrap().iter().map(|j| j["label"].as_str().unwrap()).collect();
    assert_eq!(labels, vec!["base", "knob", "knob", "base"], "interleaved per repeat, ABBA");
    let c = read_json(&out.join("ab.json"));
    let agreement = &c["accuracy"]["agreement"];
    assert_eq!(agreement["compared"], 4, "{c}");
    assert_eq!(agreement["fraction"], 1.0, "an inert knob changes no greedy token: {agreement}");
    assert_eq!(c["accuracy"]["held"], true);
    assert_eq!(c["rows"].as_array().unwrap().len(), 1);
    assert!(c["rows"][0]["verdict"].is_string());
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("| conc | before | after | delta |"), "{md}");
    assert!(std::fs::read_to_string(out.join("changelog.yaml")).unwrap().contains("config-keys"));
    let png = std::fs::read(out.join("ab_tput_vs_intvty_isl32_osl16.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 10_000, "a drawn chart, not an empty image");
    let svg = std::fs::read_to_string(out.join("ab_tput_vs_intvty_isl32_osl16.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("tok/s/user"), "{}", &svg[..200.min(svg.len())]);

    // float32 vs bfloat16: greedy tokens diverge on some questions.
    let out = dir.path().join("bf16");
    let o = enginebench(&[
        "ab", recipe.to_str().unwrap(), "--baseline", "base", "--candidate", "bf16", "--repeats", "1",
        "--max-regression", "10", "--max-accuracy-drop", "1", "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let c = read_json(&out.join("ab.json"));
    let agreement = &c["accuracy"]["agreement"];
    assert!(agreement["fraction"].as_f64().unwrap() < 1.0, "bf16 must move some greedy tokens: {agreement}");
    assert!(agreement["mean_first_divergence"].as_f64().is_some(), "{agreement}");
}
