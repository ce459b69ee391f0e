//! `enginebench ab` on the real engine: an inert runtime knob keeps greedy
//! tokens identical, with the A/A noise floor and --until-ci, and its
//! 4-question accuracy gate stays INCONCLUSIVE saying what would decide it;
//! a numerics change (float32 vs bfloat16) moves greedy tokens. Plots come
//! out as valid PNG and SVG. The engine runs are few and shared by the
//! checks (this module was the suite's longest).

use std::path::Path;

use crate::util::{bundled_recipe_head, engine_lock, enginebench, read_json, text, write_recipe};

/// One point plus 4 GSM8K questions (greedy-token and accuracy checks); the
/// questions' prompts need the longer, 1024-token context.
fn ab_recipe(dir: &Path) -> String {
    let rest = r#"[sweep]
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
    write_recipe(dir, "ab", &(bundled_recipe_head("ab-e2e", 1024, "") + rest))
}

/// One `ab` run checks the A/A, the noise floor, --until-ci and the gate
/// together (each engine start is a job of this machine's longest test
/// module): an inert runtime knob against the base, --calibrate (the A/A of
/// the base first, into aa/, whose floor the A/B uses) and --until-ci with a
/// target no run reaches (a third ABBA pair, then which row stayed open).
/// Then a numerics change (float32 vs bfloat16) is run alone and compared,
/// with `compare`, against the base jobs of that run.
#[test]
fn knob_ab_with_calibration_and_until_ci_then_dtype_change_diverges() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let recipe = ab_recipe(dir.path());

    // This machine is noisy, so the perf gate is given room; the numerics
    // must be exactly the same. Four questions cannot show that accuracy
    // held within 1 point (their paired CI is about ±33 points), so the
    // accuracy gate is INCONCLUSIVE and says how many questions would decide it.
    // The knob is a no-op by the knob report: --allow-noop runs it anyway.
    let out = dir.path().join("knob");
    let o = enginebench(&[
        "ab", &recipe, "--baseline", "base", "--candidate", "knob", "--repeats", "2", "--calibrate",
        "--until-ci", "0.0001", "--max-repeats", "3", "--max-regression", "0.5", "--allow-noop", "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);

    // The A/A: base against its copy, two ABBA pairs, in aa/.
    let aa = out.join("aa");
    let labels_of = |r: &serde_json::Value| -> Vec<String> {
        r["jobs"].as_array().unwrap().iter().map(|j| j["label"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(labels_of(&read_json(&aa.join("result.json"))), ["base", "base-aa", "base-aa", "base"], "A/A on the ABBA schedule");
    let c = read_json(&aa.join("ab.json"));
    assert_eq!(c["aa"], true);
    assert!(c["changes"].as_array().unwrap().is_empty(), "an A/A changes nothing: {}", c["changes"]);
    // At 2 repeats (t = 12.7) a ±50% limit may or may not be resolved; a
    // same-variant A/A never fails.
    check_gate_rule(&c, 0.5);
    assert_ne!(c["gate"]["outcome"], "fail", "{log}");
    for f in c["rows"][0]["figures"].as_array().unwrap() {
        assert_eq!(f["method"], "paired-t", "{f}");
        assert!(f["mde"].as_f64().unwrap() > 0.0, "{f}");
        assert_eq!(f["repeat_deltas"].as_array().unwrap().len(), 2, "{f}");
        assert!(f["bootstrap_ci"].is_array(), "the old method's interval is kept beside: {f}");
    }
    let md = std::fs::read_to_string(aa.join("ab.md")).unwrap();
    assert!(md.contains("### Noise floor (A/A)") && md.contains("MDE (80% power)"), "{md}");
    assert!(md.contains("paired t on the repeats' log ratios"), "{md}");

    // The A/B: interleaved per repeat, ABBA, and a third pair added by --until-ci.
    assert!(log.contains("after 2 repeats: ISL/OSL 32/16 TP 1 conc 4: tok/s/gpu"), "progress per row: {log}");
    assert_eq!(labels_of(&read_json(&out.join("result.json"))), ["base", "knob", "knob", "base", "base", "knob"]);
    let c = read_json(&out.join("ab.json"));
    assert_eq!(c["rows"].as_array().unwrap().len(), 1);
    assert!(c["rows"][0]["verdict"].is_string());
    assert_eq!(c["rows"][0]["repeats"], serde_json::json!([3, 3]));
    let floor = aa.join("ab.json");
    assert_eq!(c["noise"]["file"], floor.to_str().unwrap());
    assert_eq!(c["noise"]["repeats"], 2);
    assert!(c["rows"][0]["figures"].as_array().unwrap().iter().all(|f| f["noise_floor"].as_f64().is_some()));
    check_verdict_rule(&c);
    check_gate_rule(&c, 0.5);
    assert_eq!(o.status.code(), Some(exit_of(&c)), "{log}");
    let notes = c["notes"].to_string();
    assert!(notes.contains("still wider than") && notes.contains("conc 4"), "{notes}");
    let agreement = &c["accuracy"]["agreement"];
    assert_eq!(agreement["compared"], 4, "{c}");
    assert_eq!(agreement["fraction"], 1.0, "an inert knob changes no greedy token: {agreement}");
    assert_eq!(c["accuracy"]["outcome"], "inconclusive");
    assert_eq!(c["accuracy"]["strict"]["gate"]["questions_needed"], serde_json::json!({"about": 194}));
    assert_ne!(c["gate"]["outcome"], "pass", "accuracy undecided: {}", c["gate"]);
    assert!(log.contains("about 194 paired eval questions (`--eval-limit 194`)"), "{log}");
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("| conc | before | after | delta |"), "{md}");
    assert!(md.contains("## What took effect") && md.contains("every difference is a no-op in this vLLM build"), "{md}");
    assert!(md.contains("| `ENGINEBENCH_UNUSED_KNOB unset -> 1` | NO EFFECT | enginebench reads no such variable"), "{md}");
    assert!(notes.contains("this comparison measures noise"), "{notes}");
    let job = &read_json(&out.join("result.json"))["jobs"][0];
    assert!(job["knobs"]["env"].as_array().unwrap().iter().any(|e| e["name"] == "VLLM_CPU_KVCACHE_SPACE" && e["status"] == "registered"), "{}", job["knobs"]);
    assert!(job["knobs"]["config"]["model_config.max_model_len"] == "1024", "{}", job["knobs"]["config"]);
    assert!(md.contains(&format!("noise floor, from the A/A `{}`", floor.display())), "{md}");
    assert!(md.contains("### Gate per figure") && md.contains("| gsm8k | exact_match strict-match |"), "{md}");
    let changelog = std::fs::read_to_string(out.join("changelog.yaml")).unwrap();
    assert!(changelog.starts_with("# enginebench: no perf-changelog entry") && !changelog.contains("config-keys"), "{changelog}");
    let png = std::fs::read(out.join("ab_tput_vs_intvty_isl32_osl16.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 10_000, "a drawn chart, not an empty image");
    let svg = std::fs::read_to_string(out.join("ab_tput_vs_intvty_isl32_osl16.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("tok/s/user"), "{}", &svg[..200.min(svg.len())]);

    // float32 vs bfloat16: greedy tokens diverge on some questions. The
    // bfloat16 variant runs alone; its baseline is the A/B's base jobs.
    let bf16 = dir.path().join("bf16");
    let o = enginebench(&["run", &recipe, "--variant", "bf16", "-o", bf16.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cmp = dir.path().join("cmp");
    let o = enginebench(&[
        "compare", out.join("result.json").to_str().unwrap(), bf16.join("result.json").to_str().unwrap(),
        "--baseline-label", "base", "--candidate-label", "bf16", "--max-regression", "10", "--max-accuracy-drop", "1",
        "-o", cmp.to_str().unwrap(),
    ]);
    let log = text(&o);
    let c = read_json(&cmp.join("ab.json"));
    // One run a side: performance is not gated; a 100-point drop limit passes any accuracy.
    assert_eq!(c["gate"]["outcome"], "pass", "{}", c["gate"]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(c["rows"][0]["figures"].as_array().unwrap().iter().all(|f| f["gate"].is_null()));
    assert!(std::fs::read_to_string(cmp.join("changelog.yaml")).unwrap().contains("config-keys"));
    let agreement = &c["accuracy"]["agreement"];
    assert!(agreement["fraction"].as_f64().unwrap() < 1.0, "bf16 must move some greedy tokens: {agreement}");
    let took = c["took_effect"].as_array().unwrap();
    assert!(took.iter().any(|d| d["what"] == "model_config.dtype torch.float32 -> torch.bfloat16" && d["effect"] == "read"), "{took:?}");
    assert!(agreement["mean_first_divergence"].as_f64().is_some(), "{agreement}");
}

/// The tiniest A/A-worthy recipe: one point (ISL/OSL 32/8, conc 2, 4 prompts).
fn tiny_recipe(dir: &Path) -> String {
    let rest = r#"[sweep]
isl = 32
osl = 8
conc = [2]
num_prompts = 4
warmups = 2
[variants.knob]
env = { ENGINEBENCH_UNUSED_KNOB = "1" }
[variants.unread]
hf_overrides = { enginebench_unread_key = 1 }
"#;
    write_recipe(dir, "tiny", &(bundled_recipe_head("ab-noise-e2e", 512, "") + rest))
}

/// Every figure follows the verdict rule: faster/slower only when the CI
/// excludes 0 and |delta| is above the noise floor the figure carries.
fn check_verdict_rule(c: &serde_json::Value) {
    for row in c["rows"].as_array().unwrap() {
        for f in row["figures"].as_array().unwrap() {
            let v = f["verdict"].as_str().unwrap();
            let (lo, hi) = (f["ci"][0].as_f64().unwrap(), f["ci"][1].as_f64().unwrap());
            let delta = f["delta"].as_f64().unwrap();
            if v == "faster" || v == "slower" {
                assert!(lo > 0.0 || hi < 0.0, "{f}");
                if let Some(floor) = f["noise_floor"].as_f64() {
                    assert!(delta.abs() > floor, "{f}");
                }
            }
            if v == "within-noise" {
                assert!(lo > 0.0 || hi < 0.0, "{f}");
                assert!(delta.abs() <= f["noise_floor"].as_f64().unwrap(), "{f}");
            }
        }
    }
}

/// Every gated figure follows the gate's rule: its margin is
/// max(`max_regression`, its noise floor); PASS when the CI excludes a
/// regression beyond it, FAIL when the whole CI lies beyond it, else
/// INCONCLUSIVE with the repeats that would decide it. The overall outcome
/// is the worst of the figures' (and accuracy's), and the exit code is its.
fn check_gate_rule(c: &serde_json::Value, max_regression: f64) {
    let mut outcomes = Vec::new();
    for row in c["rows"].as_array().unwrap() {
        for f in row["figures"].as_array().unwrap() {
            let g = &f["gate"];
            let margin = max_regression.max(f["noise_floor"].as_f64().unwrap_or(0.0));
            assert!((g["margin"].as_f64().unwrap() - margin).abs() < 1e-12, "{f}");
            let (lo, hi) = (f["ci"][0].as_f64().unwrap(), f["ci"][1].as_f64().unwrap());
            // As a regression: throughput drops, latency rises.
            let (wlo, whi) = if f["metric"].as_str().unwrap().contains("tput") { (-hi, -lo) } else { (lo, hi) };
            let want = if whi <= margin { "pass" } else if wlo > margin { "fail" } else { "inconclusive" };
            assert_eq!(g["outcome"], want, "{f}");
            assert_eq!(g["repeats_needed"].is_object(), want == "inconclusive", "{f}");
            outcomes.push(want);
        }
    }
    if let Some(a) = c["accuracy"].as_object() {
        outcomes.push(a["outcome"].as_str().unwrap());
    }
    let worst = ["fail", "inconclusive", "pass"].into_iter().find(|o| outcomes.contains(o)).unwrap_or("inconclusive");
    assert_eq!(c["gate"]["outcome"], worst, "{}", c["gate"]);
}

/// The exit code of a gate outcome: pass 0, fail 1, inconclusive 3.
fn exit_of(c: &serde_json::Value) -> i32 {
    match c["gate"]["outcome"].as_str().unwrap() {
        "pass" => 0,
        "fail" => 1,
        _ => 3,
    }
}

#[test]
fn bad_noise_and_until_ci_options_are_usage_errors_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = &tiny_recipe(dir.path());
    let out = dir.path().join("never");
    let o_arg = out.to_str().unwrap();
    let missing = dir.path().join("missing.json");
    for (args, says) in [
        (vec!["--candidate", "knob", "--noise", missing.to_str().unwrap()], "--noise"),
        (vec!["--candidate", "knob", "--until-ci", "0.02"], "--max-repeats"),
        (vec!["--candidate", "knob", "--until-ci", "2", "--max-repeats", "5"], "fraction"),
        (vec!["--candidate", "knob", "--until-ci", "gates", "--max-repeats", "5"], "nor `gate`"),
        (vec!["--candidate", "knob", "--until-ci", "0.02", "--max-repeats", "2", "--repeats", "3"], "below --repeats"),
        (vec!["--aa", "--calibrate"], "noise floor"),
        (vec!["--aa", "--repeats", "1"], "2 or more"),
        // A candidate whose only change is an override nothing in vLLM reads.
        (vec!["--candidate", "unread"], "hf config enginebench_unread_key (none) -> 1: referenced nowhere in vLLM"),
    ] {
        let mut all = vec!["ab", recipe, "--baseline", "base", "--no-eval", "-o", o_arg];
        all.extend(args.iter().copied());
        let o = enginebench(&all);
        let log = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {log}");
        assert!(log.contains(says), "{args:?} should say {says:?}: {log}");
        assert!(!out.exists(), "{args:?}: nothing may run or be written");
    }
}
