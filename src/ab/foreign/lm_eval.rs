//! lm-eval's results file (and its samples) as a side of a comparison.
//!
//! `lm_eval ... --output_path DIR --log_samples` writes
//! `DIR/<model>/results_<date>.json` (or `<stem>_<date>.json` when the path
//! ends in `.json`) and one `samples_<task>_<date>.jsonl` per task beside it
//! (lm-eval 0.4.10 `loggers/evaluation_tracker.py`: `save_results_aggregated`,
//! `save_results_samples`). The results hold `results` (per task
//! `<metric>,<filter>` scores and `<metric>_stderr,<filter>`), `versions`,
//! `n-shot`, `n-samples`, `configs` (per task, with `generation_kwargs`),
//! `config` (`model`: the backend lm-eval drove, `limit`),
//! `chat_template` (null without `--apply_chat_template`) and
//! `lm_eval_version`. A samples line holds `doc_id`, `filter`, `metrics`
//! and each metric's value for one document, and `prompt_hash` (SHA-256 of
//! the prompt as sent).
//!
//! The samples are read when they are beside the results with the same
//! date: then accuracy is paired by question (`doc_id`; how many prompts
//! were byte-identical is reported); otherwise the comparison takes an
//! unpaired interval from the two scores and n.

use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::{EvalRecord, Format, Read, Source, number, text};
use crate::ab::input::{Arm, TaskSample};
use crate::eval::score::Sample;
use crate::report::result::{Evals, Gsm8kResult, LmEvalResult};

/// Keys every lm-eval results file has.
pub const REQUIRED: &[&str] = &["results", "versions", "n-shot"];

/// The built-in tasks and the lm-eval task each reproduces (the
/// `lm_eval_task` of `evals/*.toml`): their scores compare with that task's.
pub const SAME_TASK: &[(&str, &str)] = &[("gsm8k", "gsm8k"), ("gsm8k_inferencex", "gsm8k"), ("gsm8k_cot", "gsm8k_cot")];

/// The lm-eval model backend, named as the engine where it is one.
fn engine_of(backend: &str) -> Option<&'static str> {
    match backend {
        "vllm" | "vllm-vlm" => Some("vLLM (lm-eval's in-process backend)"),
        "sglang" => Some("SGLang (lm-eval's in-process backend)"),
        "hf" | "hf-auto" | "huggingface" => Some("transformers"),
        _ => None,
    }
}

/// Reads a results file and the samples beside it.
///
/// Errors (usage): lm-eval's results without a `results` mapping, or a
/// samples line that is not JSON.
pub fn read(path: &Path, doc: &Value) -> Result<Read> {
    let json = serde_json::to_string(doc)?;
    let tasks = crate::eval::lmeval::parse_results(&json, &[]).map_err(|e| crate::error::usage(format!("{}: {e}", path.display())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let date = stem.rsplit_once('_').map(|(_, d)| d).unwrap_or_default();
    let mut files: Vec<String> = Vec::new();
    if !date.is_empty() {
        for t in &tasks {
            let name = format!("samples_{}_{date}.jsonl", t.task);
            if dir.join(&name).is_file() {
                files.push(name);
            }
        }
    }
    let task_samples = crate::ab::input::read_sample_files(dir, &files)?;
    let version = text(doc, &["lm_eval_version"]);
    let backend = text(&doc["config"], &["model"]);
    let chat = match doc.get("chat_template") {
        Some(Value::Null) => Some(false),
        Some(_) => Some(true),
        None => None,
    };
    let per_task = |f: &dyn Fn(&str) -> Option<u64>| -> Vec<(String, u64)> {
        tasks.iter().filter_map(|t| f(&t.task).map(|v| (t.task.clone(), v))).collect()
    };
    let eval = EvalRecord {
        chat_template: chat,
        num_fewshot: per_task(&|t| doc["n-shot"][t].as_u64()),
        max_tokens: per_task(&|t| doc["configs"][t]["generation_kwargs"]["max_gen_toks"].as_u64()),
        limit: number(&doc["config"]["limit"]),
        model_backend: backend.clone(),
    };
    let mut definitions = vec![
        "exact_match per task and filter as lm-eval scores it (the built-in gsm8k tasks apply the same filters and normalisation)".to_string(),
    ];
    definitions.push(if files.is_empty() {
        "no samples_<task>_<date>.jsonl beside the results: accuracy compared unpaired (two scores and n)".into()
    } else {
        format!("samples read: {} (paired by question, doc_id)", files.join(", "))
    });
    let mut read_files = vec![path.display().to_string()];
    read_files.extend(files.iter().map(|f| dir.join(f).display().to_string()));
    let source = Source {
        format: Format::LmEval,
        files: read_files,
        tool: format!("lm-eval {}", version.as_deref().unwrap_or("(version not recorded)")),
        engine: backend.as_deref().and_then(engine_of).map(str::to_string),
        version: backend.as_deref().filter(|b| b.starts_with("hf")).and_then(|_| text(doc, &["transformers_version"])),
        model: text(doc, &["model_name"]).or_else(|| text(&doc["config"], &["model_args"])),
        hardware: None,
        precision: None,
        points: Vec::new(),
        eval: Some(eval),
        definitions,
        skipped: Vec::new(),
    };
    let lm_eval = LmEvalResult {
        lm_eval_version: version,
        files,
        chat: chat == Some(true),
        max_tokens: None,
        duration_s: 0.0,
        wall_s: 0.0,
        requests: 0,
        output_tokens: 0,
        tasks,
    };
    Ok(Read { source, points: Vec::new(), evals: Some(Evals { gsm8k: None, lm_eval: Some(lm_eval), gate: None }), task_samples })
}

/// Makes the foreign lm-eval arm's task that the built-in task `builtin`
/// reproduces ([`SAME_TASK`]; a task file's own name otherwise) its
/// built-in eval: a [`Gsm8kResult`] with the task's exact_match scores and
/// per-question [`Sample`]s from its samples, so the accuracy block compares
/// it with ours; the task leaves the arm's lm-eval tasks. Returns the
/// lm-eval task taken, `None` when the file has none matching (or it lacks
/// the strict-match and flexible-extract scores).
pub fn as_builtin(arm: &mut Arm, builtin: &str) -> Option<String> {
    let want = SAME_TASK.iter().find(|(b, _)| *b == builtin).map_or(builtin, |(_, l)| *l);
    let repeat = arm.repeats.first_mut()?;
    let lm = repeat.job.eval.as_mut()?.lm_eval.as_mut()?;
    let idx = lm.tasks.iter().position(|t| t.task == want)?;
    let t = &lm.tasks[idx];
    let score = |name: &str| t.metrics.iter().find(|m| m.name == name);
    let (strict, flexible) = (score("exact_match,strict-match")?, score("exact_match,flexible-extract")?);
    let record = arm.source.as_ref().and_then(|s| s.eval.as_ref());
    let of = |list: Option<&Vec<(String, u64)>>| list.and_then(|l| l.iter().find(|(k, _)| k == want)).map(|(_, v)| *v);
    let samples = samples_of(&repeat.task_samples, want);
    let result = Gsm8kResult {
        n: t.n.map_or(samples.len(), |n| n as usize),
        exact_match_strict: strict.value,
        exact_match_strict_stderr: strict.stderr.unwrap_or(f64::NAN),
        exact_match_flexible: flexible.value,
        exact_match_flexible_stderr: flexible.stderr.unwrap_or(f64::NAN),
        task: want.to_string(),
        task_origin: "lm-eval results file".into(),
        chat: record.and_then(|r| r.chat_template).unwrap_or(false),
        num_fewshot: t.num_fewshot.or(of(record.map(|r| &r.num_fewshot))).unwrap_or(0) as usize,
        fewshot_mode: "lm-eval's".into(),
        data_kind: "lm-eval".into(),
        data_source: "lm-eval".into(),
        train_size: None,
        test_size: 0,
        max_tokens: of(record.map(|r| &r.max_tokens)).unwrap_or(0) as u32,
        duration_s: 0.0,
        output_tokens: 0,
    };
    lm.tasks.remove(idx);
    repeat.task_samples.retain(|s| s.task != want);
    repeat.samples = samples;
    repeat.job.eval.as_mut()?.gsm8k = Some(result);
    Some(want.to_string())
}

/// One [`Sample`] per document of `task` that has both its strict-match and
/// flexible-extract exact_match, in doc_id order.
fn samples_of(samples: &[TaskSample], task: &str) -> Vec<Sample> {
    let mut by_doc: std::collections::BTreeMap<u64, (String, Option<bool>, Option<bool>)> = Default::default();
    for s in samples.iter().filter(|s| s.task == task) {
        let e = by_doc.entry(s.doc_id).or_insert_with(|| (s.prompt_hash.clone(), None, None));
        match s.metric.as_str() {
            "exact_match,strict-match" => e.1 = Some(s.value == 1.0),
            "exact_match,flexible-extract" => e.2 = Some(s.value == 1.0),
            _ => {}
        }
    }
    by_doc
        .into_iter()
        .filter_map(|(doc_id, (hash, strict, flexible))| {
            Some(Sample {
                doc_id: doc_id as usize,
                prompt_sha256: hash,
                completion: String::new(),
                output_tokens: 0,
                strict: String::new(),
                flexible: String::new(),
                gold: String::new(),
                strict_correct: strict?,
                flexible_correct: flexible?,
                token_ids: Vec::new(),
            })
        })
        .collect()
}
