//! Scoring completions: both filters, exact_match, lm-eval's standard error.

use serde::{Deserialize, Serialize};

use super::tasks::TaskDef;
use crate::metrics::stats;

/// One scored question (a line of `gsm8k_samples.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub doc_id: usize,
    /// SHA-256 of the prompt (its text, or its chat messages as JSON), hex.
    pub prompt_sha256: String,
    pub completion: String,
    /// Tokens generated for `completion`.
    pub output_tokens: u32,
    /// What the strict-match filter extracted (`[invalid]` when nothing).
    pub strict: String,
    /// What the flexible-extract filter extracted.
    pub flexible: String,
    /// The target compared with (full answer for gsm8k, the number for gsm8k_cot).
    pub gold: String,
    pub strict_correct: bool,
    pub flexible_correct: bool,
    /// The generated token ids (filled in by the runner; greedy-token
    /// agreement between two runs compares them).
    #[serde(default)]
    pub token_ids: Vec<u32>,
}

/// Scores one completion with the task's filters and exact_match.
/// `prompt_hash_input` is [`crate::protocol::Prompt::hash_input`].
pub fn score_sample(
    task: &TaskDef,
    doc_id: usize,
    prompt_hash_input: &str,
    completion: &str,
    output_tokens: u32,
    gold: &str,
) -> Sample {
    use sha2::{Digest, Sha256};
    let strict = task.strict.apply(completion);
    let flexible = task.flexible.apply(completion);
    Sample {
        doc_id,
        prompt_sha256: format!("{:x}", Sha256::digest(prompt_hash_input.as_bytes())),
        completion: completion.to_string(),
        output_tokens,
        strict_correct: task.normalizer.exact_match(&strict, gold),
        flexible_correct: task.normalizer.exact_match(&flexible, gold),
        strict,
        flexible,
        gold: gold.to_string(),
        token_ids: Vec::new(),
    }
}

/// exact_match means and standard errors over scored samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Aggregate {
    pub n: usize,
    pub exact_match_strict: f64,
    pub exact_match_strict_stderr: f64,
    pub exact_match_flexible: f64,
    pub exact_match_flexible_stderr: f64,
}

pub fn aggregate(samples: &[Sample]) -> Aggregate {
    let (s, s_se) = mean_and_stderr(samples.iter().map(|s| s.strict_correct));
    let (f, f_se) = mean_and_stderr(samples.iter().map(|s| s.flexible_correct));
    Aggregate {
        n: samples.len(),
        exact_match_strict: s,
        exact_match_strict_stderr: s_se,
        exact_match_flexible: f,
        exact_match_flexible_stderr: f_se,
    }
}

/// Mean of 0/1 outcomes and its standard error, sample std (ddof 1) / sqrt(n),
/// as lm-eval's `mean_stderr`. (0, 0) for n = 0; stderr 0 for n = 1 (lm-eval
/// reports N/A there).
pub fn mean_and_stderr(outcomes: impl Iterator<Item = bool>) -> (f64, f64) {
    let v: Vec<f64> = outcomes.map(|b| if b { 1.0 } else { 0.0 }).collect();
    (stats::mean(&v), stats::standard_error(&v))
}

#[cfg(test)]
mod tests {
    /// Scores one completion with lm-eval gsm8k's filters (the built-in `gsm8k` task).
    pub fn score(doc_id: usize, prompt: &str, completion: &str, output_tokens: u32, gold: &str) -> Sample {
        use std::sync::LazyLock;
        static GSM8K: LazyLock<TaskDef> =
            LazyLock::new(|| crate::eval::tasks::load_task("gsm8k", &Default::default()).expect("built-in gsm8k task"));
        score_sample(&GSM8K, doc_id, prompt, completion, output_tokens, gold)
    }
    use super::*;
    use crate::eval::tasks::{TaskOverrides, load_task};

    #[test]
    fn scores_both_filters() {
        let s = score(3, "p", "She pays 5 + 7 = 12.\n#### 12\n\nQ", 9, "5+7=12\n#### 12");
        assert!(s.strict_correct && s.flexible_correct);
        let s = score(3, "p", "The answer is 12.", 4, "#### 12");
        assert!(!s.strict_correct && s.flexible_correct);
        assert_eq!(s.strict, "[invalid]");
        assert_eq!(s.prompt_sha256.len(), 64);
        assert_eq!(s.prompt_sha256, "148de9c5a7a44d19e56cd9ae1a554bf67847afb0c58f6e12fa29ac7ddfca9940");
    }

    #[test]
    fn cot_scores_against_the_number() {
        let t = load_task("gsm8k_cot", &TaskOverrides::default()).unwrap();
        let s = score_sample(&t, 0, "p", "18 - 3 = 15. The answer is 1,5.\n", 10, "15");
        assert_eq!((s.strict.as_str(), s.flexible.as_str()), ("1,5", "1,5."));
        assert!(s.strict_correct && s.flexible_correct);
        let s = score_sample(&t, 0, "p", "The answer is $15", 10, "15");
        assert_eq!(s.strict, "[invalid]");
        assert!(!s.strict_correct && s.flexible_correct);
        let s = score_sample(&t, 0, "p", "no idea", 2, "15");
        assert!(!s.strict_correct && !s.flexible_correct);
    }

    #[test]
    fn inferencex_strict_takes_the_last_hash_answer() {
        let t = load_task("gsm8k_inferencex", &TaskOverrides::default()).unwrap();
        let s = score_sample(&t, 0, "p", "#### 3 is wrong\n#### 4", 5, "x\n#### 4");
        assert_eq!(s.strict, "4");
        assert!(s.strict_correct);
        let g = load_task("gsm8k", &TaskOverrides::default()).unwrap();
        assert_eq!(score_sample(&g, 0, "p", "#### 3 is wrong\n#### 4", 5, "x\n#### 4").strict, "3");
    }

    #[test]
    fn stderr_like_lm_eval() {
        // [1,0,1,1]: mean .75, sample var .25, stderr sqrt(.25/4) = .25
        let (m, se) = mean_and_stderr([true, false, true, true].into_iter());
        assert_eq!(m, 0.75);
        assert!((se - 0.25).abs() < 1e-12);
        assert_eq!(mean_and_stderr(std::iter::empty()), (0.0, 0.0));
        let a = aggregate(&[score(0, "p", "#### 1", 1, "#### 1"), score(1, "p", "1", 1, "#### 1")]);
        assert_eq!((a.n, a.exact_match_strict, a.exact_match_flexible), (2, 0.5, 1.0));
        assert!((a.exact_match_strict_stderr - 0.5).abs() < 1e-12);
        assert_eq!(a.exact_match_flexible_stderr, 0.0);
    }

    #[test]
    fn equals_lm_eval_filters_and_metric() {
        // evals/fixtures/lm_eval_scores.json: lm-eval's own filter ensembles and
        // process_results on tricky completions, per task.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/evals/fixtures/lm_eval_scores.json");
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut n = 0;
        for t in fixture["tasks"].as_array().unwrap() {
            let task = load_task(t["task"].as_str().unwrap(), &TaskOverrides::default()).unwrap();
            for row in t["rows"].as_array().unwrap() {
                let (c, gold) = (row["completion"].as_str().unwrap(), row["gold"].as_str().unwrap());
                let s = score_sample(&task, 0, "p", c, 1, gold);
                let ctx = format!("{} {c:?} vs {gold:?}", task.name);
                assert_eq!(s.strict, row["strict-match"].as_str().unwrap(), "{ctx}");
                assert_eq!(s.flexible, row["flexible-extract"].as_str().unwrap(), "{ctx}");
                assert_eq!(s.strict_correct, row["strict-match:exact_match"].as_f64() == Some(1.0), "{ctx}");
                assert_eq!(
                    s.flexible_correct,
                    row["flexible-extract:exact_match"].as_f64() == Some(1.0),
                    "{ctx}"
                );
                n += 1;
            }
        }
        assert_eq!(n, 480);
    }
}
