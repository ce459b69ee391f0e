//! Speculative decoding on the real engine: `ab` of the recipe's base against
//! an ngram (prompt lookup) variant on the bundled model. One run gives the
//! acceptance figures of the ngram job (per point and per step), the token
//! accounting that ties them to the output, the lossless check on the perf
//! requests, and the acceptance deltas and eval token agreement of the
//! comparison (two engine starts in all).

use serde_json::Value;

use crate::util::{engine_lock, enginebench, f, read_json, text};

/// Draft tokens per step of the ngram variant below.
const K: u64 = 3;

const RECIPE: &str = r#"name = "spec-e2e"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
[env]
VLLM_CPU_KVCACHE_SPACE = "1"
[engine]
args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
[sweep]
isl = 32
osl = 32
conc = [2]
num_prompts = 4
warmups = 2
[eval]
task = "gsm8k"
limit = 3
concurrency = 3
[variants.ngram]
args_add = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}']
"#;

#[test]
fn ngram_acceptance_figures_lossless_check_and_ab_deltas() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("spec.toml");
    std::fs::write(&recipe, RECIPE).unwrap();
    let out = dir.path().join("ab");
    let o = enginebench(&[
        "ab", recipe.to_str().unwrap(), "--baseline", "base", "--candidate", "ngram", "--repeats", "1",
        "--step-trace", "--max-regression", "10", "--max-accuracy-drop", "1", "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");

    let r = read_json(&out.join("result.json"));
    let jobs = r["jobs"].as_array().unwrap();
    let job = |label: &str| jobs.iter().find(|j| j["label"] == label).unwrap_or_else(|| panic!("no {label} job: {r}"));
    let (base, ngram) = (job("base"), job("ngram"));

    // The base engine does not speculate: no speculative field at all.
    assert!(base["engine"]["num_speculative_tokens"].is_null(), "{}", base["engine"]);
    assert!(base["points"][0].get("spec_decode").is_none(), "absent, not zeros: {}", base["points"][0]);

    let p = &ngram["points"][0];
    assert_eq!(ngram["engine"]["num_speculative_tokens"], K);
    let s = &p["spec_decode"];
    let drafts = s["drafts"].as_u64().unwrap();
    let draft_tokens = s["draft_tokens"].as_u64().unwrap();
    let accepted = s["accepted_tokens"].as_u64().unwrap();
    assert!(drafts > 0, "ngram drafted nothing: {s}");
    assert!(draft_tokens >= drafts && draft_tokens <= K * drafts, "{s}");
    let rate = f(&s["acceptance_rate"]);
    assert!((0.0..=1.0).contains(&rate), "{s}");
    assert!((rate - accepted as f64 / draft_tokens as f64).abs() < 1e-12);
    let length = f(&s["acceptance_length"]);
    assert!((1.0..=1.0 + K as f64).contains(&length), "{s}");
    assert!((length - (1.0 + accepted as f64 / drafts as f64)).abs() < 1e-12);
    let per_pos: Vec<f64> = s["per_position_acceptance_rates"].as_array().unwrap().iter().map(f).collect();
    assert_eq!(per_pos.len() as u64, K, "{s}");
    for w in per_pos.windows(2) {
        // A token at position i+1 is only accepted after the one at i.
        assert!(w[1] <= w[0] + 1e-9, "per-position rates must not increase: {per_pos:?}");
    }
    assert!((per_pos.iter().sum::<f64>() - (length - 1.0)).abs() < 1e-9, "{per_pos:?} vs length {length}");
    // vLLM's own running totals over the point say the same (on the
    // engine-core path vLLM's stat loggers get each step's stats from the shim).
    assert_eq!(ngram["engine"]["step_path"], "core", "{}", ngram["engine"]);
    assert_eq!(s["vllm_counters_agree"], true, "{s}");
    assert_eq!(s["vllm_counters"]["drafts"], drafts);

    // steps.jsonl: the per-step counters of the ngram job's point sum to the point's.
    let steps: Vec<Value> = std::fs::read_to_string(out.join("steps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ngram_index = jobs.iter().position(|j| j["label"] == "ngram").unwrap();
    let mine: Vec<&Value> = steps.iter().filter(|st| st["job"] == ngram_index && st["point"] == 0).collect();
    assert!(!mine.is_empty());
    assert!(mine.iter().all(|st| st.get("spec").is_some()), "every step of a speculating engine has counters");
    let sum = |k: &str| mine.iter().map(|st| st["spec"][k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("drafts"), sum("accepted_tokens")), (drafts, accepted));
    assert!(steps.iter().filter(|st| st["label"] == "base").all(|st| st.get("spec").is_none()));

    // Token accounting: each decoding request gets 1 + its accepted tokens per
    // step, and each completed request one first token; only accepted tokens
    // past a request's max_tokens are cut off (at most k per request).
    let completed = p["completed"].as_u64().unwrap();
    let output = p["total_output_tokens"].as_u64().unwrap();
    let decode_reqs: u64 = mine.iter().map(|st| st["decode_reqs"].as_u64().unwrap()).sum();
    let produced = completed + decode_reqs + accepted;
    assert!(produced >= output && produced - output <= K * completed, "{produced} vs {output} output tokens");
    // Multi-token steps: one ITL gap per chunk, per-token ITL beside it.
    assert!(p.get("mean_itl_per_token_ms").is_some(), "{p}");
    if accepted > 0 {
        assert!(f(&p["mean_itl_per_token_ms"]) < f(&p["mean_itl_ms"]), "chunks of several tokens split the gap");
        assert!(std::fs::read_to_string(out.join("requests.jsonl")).unwrap().contains("itl_chunk_tokens"));
    }

    // The comparison: acceptance deltas and the lossless check.
    let c = read_json(&out.join("ab.json"));
    let spec = &c["spec"];
    let row = &spec["rows"][0];
    assert!(row["baseline"]["rate"].is_null() && f(&row["candidate"]["rate"]) == rate, "{spec}");
    let outputs = &spec["outputs"][0];
    assert_eq!(outputs["compared"], 4, "every perf request compared: {spec}");
    assert!(outputs["changed"].as_u64().unwrap() <= 4);
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("### Speculative decoding") && md.contains("the candidate changed"), "{md}");
    assert!(log.contains("acceptance rate"), "{log}");
    // Greedy-token agreement on the eval prompts is there too.
    assert_eq!(c["accuracy"]["agreement"]["compared"], 3, "{}", c["accuracy"]);

    // Exports carry bench serve's keys for the speculating job only.
    let e = enginebench(&["export", "--format", "vllm-bench", out.join("result.json").to_str().unwrap()]);
    assert_eq!(e.status.code(), Some(0), "{}", text(&e));
    let docs: Value = serde_json::from_slice(&e.stdout).unwrap();
    let with: Vec<&Value> = docs.as_array().unwrap().iter().filter(|d| d.get("spec_decode_acceptance_rate").is_some()).collect();
    assert_eq!(with.len(), 1, "{docs}");
    assert!((f(&with[0]["spec_decode_acceptance_rate"]) - 100.0 * rate).abs() < 1e-9);
    assert_eq!(with[0]["spec_decode_per_position_acceptance_rates"].as_array().unwrap().len() as u64, K);
    eprintln!(
        "ngram on the bundled model: {drafts} drafts, {draft_tokens} draft tokens, {accepted} accepted, rate {rate:.3}, length {length:.3}, per position {per_pos:?}; changed {} of {}",
        outputs["changed"], outputs["compared"]
    );
}

/// `recipe check` validates `--speculative-config` with vLLM's own parser
/// (JSON) and SpeculativeConfig's field names and method values, loading no
/// weights.
#[test]
fn recipe_check_validates_the_speculative_config() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("bad.toml");
    std::fs::write(
        &recipe,
        r#"name = "bad-spec"
model = "bundled:smollm2-135m-instruct"
[engine]
args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "512"]
[sweep]
isl = 32
osl = 8
conc = [1]
[variants.ngram]
args_add = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}']
[variants.bad_method]
args_add = ["--speculative-config", '{"method": "ngramm", "num_speculative_tokens": 3}']
[variants.bad_json]
args_add = ["--speculative-config", '{"method": "ngram", num_speculative_tokens: 3}']
[variants.bad_key]
args_add = ["--speculative-config", '{"method": "ngram", "num_speculative_token": 3}']
"#,
    )
    .unwrap();
    let o = enginebench(&["recipe", "check", recipe.to_str().unwrap()]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("ngram [ok]"), "{log}");
    assert!(log.contains("method 'ngramm' is not one of vLLM's speculative methods"), "{log}");
    assert!(log.contains("bad_json [ERROR]") && log.contains("--speculative-config"), "{log}");
    assert!(log.contains("unknown key 'num_speculative_token' (did you mean num_speculative_tokens"), "{log}");
    assert!(log.contains("3 problem(s)"), "{log}");
}
