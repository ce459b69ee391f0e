//! Scoring completions: both lm-eval filters, exact_match, standard errors.

use serde::{Deserialize, Serialize};

use super::filters::{exact_match, flexible_extract, strict_match};

/// One scored question (a line of `gsm8k_samples.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub doc_id: usize,
    /// SHA-256 of the prompt text, hex.
    pub prompt_sha256: String,
    pub completion: String,
    /// Tokens generated for `completion`.
    pub output_tokens: u32,
    pub strict: String,
    pub flexible: String,
    pub gold: String,
    pub strict_correct: bool,
    pub flexible_correct: bool,
}

/// Scores one completion against the gold answer.
pub fn score(doc_id: usize, prompt: &str, completion: &str, output_tokens: u32, gold: &str) -> Sample {
    use sha2::{Digest, Sha256};
    let strict = strict_match(completion);
    let flexible = flexible_extract(completion);
    Sample {
        doc_id,
        prompt_sha256: format!("{:x}", Sha256::digest(prompt.as_bytes())),
        completion: completion.to_string(),
        output_tokens,
        strict_correct: exact_match(&strict, gold),
        flexible_correct: exact_match(&flexible, gold),
        strict,
        flexible,
        gold: gold.to_string(),
    }
}

/// Mean of 0/1 outcomes and its standard error, sample std (ddof 1) / sqrt(n),
/// as lm-eval's `mean_stderr`. (0, 0) for n = 0; stderr 0 for n = 1.
pub fn mean_and_stderr(outcomes: impl Iterator<Item = bool>) -> (f64, f64) {
    let v: Vec<f64> = outcomes.map(|b| if b { 1.0 } else { 0.0 }).collect();
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_both_filters() {
        let s = score(3, "p", "She pays 5 + 7 = 12.\n#### 12\n\nQ", 9, "5+7=12\n#### 12");
        assert!(s.strict_correct && s.flexible_correct);
        let s = score(3, "p", "The answer is 12.", 4, "#### 12");
        assert!(!s.strict_correct && s.flexible_correct);
        assert_eq!(s.strict, "[invalid]");
        assert_eq!(s.prompt_sha256.len(), 64);
    }

    #[test]
    fn stderr_like_lm_eval() {
        // [1,0,1,1]: mean .75, sample var .25, stderr sqrt(.25/4) = .25
        let (m, se) = mean_and_stderr([true, false, true, true].into_iter());
        assert_eq!(m, 0.75);
        assert!((se - 0.25).abs() < 1e-12);
        assert_eq!(mean_and_stderr(std::iter::empty()), (0.0, 0.0));
    }
}
