//! lm-eval's GSM8K answer extraction and exact-match metric
//! (lm_eval/tasks/gsm8k/gsm8k.yaml, lm_eval/filters/extraction.py
//! `RegexFilter`, lm_eval/api/metrics.py `exact_match_hf_evaluate`).

use std::sync::LazyLock;

use regex::Regex;

/// What a filter returns when nothing matches (lm-eval's `fallback`).
pub const INVALID: &str = "[invalid]";

static STRICT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"#### (\-?[0-9\.\,]+)").unwrap());
static FLEXIBLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(-?[$0-9.,]{2,})|(-?[0-9]+)").unwrap());
/// `regexes_to_ignore` of the gsm8k task, applied in this order.
static IGNORE: LazyLock<[Regex; 4]> = LazyLock::new(|| {
    [",", r"\$", r"(?s).*#### ", r"\.$"].map(|p| Regex::new(p).unwrap())
});

/// strict-match: the first `#### N` (group 1), else `[invalid]`.
pub fn strict_match(completion: &str) -> String {
    STRICT
        .captures(completion)
        .and_then(|c| c.get(1))
        .map_or_else(|| INVALID.to_string(), |m| m.as_str().trim().to_string())
}

/// flexible-extract: the last number-like match (`group_select: -1`); of its
/// two groups the first non-empty one, as lm-eval's RegexFilter takes it.
pub fn flexible_extract(completion: &str) -> String {
    FLEXIBLE
        .captures_iter(completion)
        .last()
        .and_then(|c| c.iter().skip(1).flatten().find(|m| !m.as_str().is_empty()))
        .map_or_else(|| INVALID.to_string(), |m| m.as_str().trim().to_string())
}

/// lm-eval's normalisation for exact_match: remove `,`, `$`, everything up to
/// `#### `, a trailing `.`, then lower-case.
pub fn normalize(s: &str) -> String {
    let mut out = s.to_string();
    for re in IGNORE.iter() {
        out = re.replace_all(&out, "").into_owned();
    }
    out.to_lowercase()
}

/// exact_match of an extracted prediction against the full gold answer.
pub fn exact_match(prediction: &str, gold_answer: &str) -> bool {
    normalize(prediction) == normalize(gold_answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_takes_first_hash_answer() {
        assert_eq!(strict_match("so 3+4=7\n#### 7\n#### 9"), "7");
        assert_eq!(strict_match("#### -1,234.50"), "-1,234.50");
        assert_eq!(strict_match("The answer is 7"), INVALID);
        assert_eq!(strict_match("####7"), INVALID);
    }

    #[test]
    fn flexible_takes_last_number() {
        assert_eq!(flexible_extract("She has 3 apples and 12 pears, so 15."), "15.");
        assert_eq!(flexible_extract("costs $1,200 in total"), "$1,200");
        assert_eq!(flexible_extract("x = -5"), "-5");
        assert_eq!(flexible_extract("a 7"), "7");
        assert_eq!(flexible_extract("no digits here"), INVALID);
    }

    #[test]
    fn normaliser_on_tricky_answers() {
        let gold = "Janet sells 16 - 3 - 4 = 9 eggs.\n#### 1,018";
        assert_eq!(normalize(gold), "1018");
        assert!(exact_match("1,018", gold));
        assert!(exact_match("$1018.", gold));
        assert!(!exact_match("1018.5", gold));
        assert!(exact_match("-3", "#### -3"));
        assert!(exact_match("2.5", "so\n#### 2.5"));
        assert!(!exact_match(INVALID, gold));
        // Only one trailing period is removed.
        assert_eq!(normalize("5.."), "5.");
    }
}
