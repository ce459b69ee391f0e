//! lm-eval's answer extraction and exact-match metric, with Python `re`
//! semantics where they differ from Rust's `regex`:
//! `lm_eval/filters/extraction.py` `RegexFilter` (findall, `group_select`,
//! first non-empty group of a tuple, strip, `[invalid]` fallback) and
//! `lm_eval/api/metrics.py` `exact_match_hf_evaluate` (`re.sub` of each of
//! `regexes_to_ignore` on both sides, then lower-case).

use regex::Regex;

/// What a filter returns when nothing matches (lm-eval's `fallback`).
pub const INVALID: &str = "[invalid]";

/// A Python `re` pattern run with Rust's `regex`.
///
/// The syntax the GSM8K tasks use is common to both. One semantic
/// difference is handled: Python's `$` (without MULTILINE) also matches just
/// before a final newline, Rust's only at the very end. A pattern that ends
/// in an unescaped `$` and has no `|` is run as `(?:body)(\n?)\z`, and the
/// extra group is hidden from callers.
#[derive(Debug, Clone)]
pub struct PyRegex {
    re: Regex,
    /// Capture groups of the Python pattern.
    groups: usize,
    /// Whether the last Rust group is the synthetic `(\n?)` of a final `$`.
    dollar: bool,
}

/// One item of Python's `re.findall`: the match (no groups), group 1 (one
/// group), or all groups (several groups; unmatched ones are "").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Str(String),
    Tuple(Vec<String>),
}

fn ends_with_unescaped_dollar(p: &str) -> bool {
    let Some(body) = p.strip_suffix('$') else { return false };
    body.chars().rev().take_while(|&c| c == '\\').count() % 2 == 0
}

impl PyRegex {
    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        let dollar = ends_with_unescaped_dollar(pattern) && !pattern.contains('|');
        let rust = if dollar {
            format!("(?:{})(\\n?)\\z", &pattern[..pattern.len() - 1])
        } else {
            pattern.to_string()
        };
        let re = Regex::new(&rust)?;
        let groups = re.captures_len() - 1 - usize::from(dollar);
        Ok(PyRegex { re, groups, dollar })
    }

    /// `re.findall(pattern, text)`.
    pub fn findall(&self, text: &str) -> Vec<Found> {
        self.re
            .captures_iter(text)
            .map(|c| {
                let group = |i: usize| c.get(i).map_or("", |m| m.as_str()).to_string();
                match self.groups {
                    0 => {
                        let m = c.get(0).unwrap();
                        let end =
                            if self.dollar { m.end() - c.get(1).map_or(0, |g| g.len()) } else { m.end() };
                        Found::Str(text[m.start()..end].to_string())
                    }
                    1 => Found::Str(group(1)),
                    g => Found::Tuple((1..=g).map(group).collect()),
                }
            })
            .collect()
    }

    /// `re.sub(pattern, "", text)`.
    pub fn remove_all(&self, text: &str) -> String {
        if self.dollar {
            let keep = format!("${{{}}}", self.groups + 1);
            self.re.replace_all(text, keep.as_str()).into_owned()
        } else {
            self.re.replace_all(text, "").into_owned()
        }
    }
}

/// Python's `str.strip()` (whitespace as `str.isspace`).
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

/// lm-eval's `regex` filter followed by `take_first`.
#[derive(Debug, Clone)]
pub struct RegexFilter {
    pub name: String,
    pub regex: PyRegex,
    /// Index into the findall list, negative from the end (Python indexing).
    pub group_select: i64,
    pub fallback: String,
}

impl RegexFilter {
    pub fn new(name: &str, pattern: &str, group_select: i64) -> Result<Self, regex::Error> {
        Ok(RegexFilter {
            name: name.to_string(),
            regex: PyRegex::new(pattern)?,
            group_select,
            fallback: INVALID.to_string(),
        })
    }

    /// The extracted answer, or the fallback. (Python raises IndexError for a
    /// `group_select` out of range; here that is the fallback too.)
    pub fn apply(&self, completion: &str) -> String {
        let found = self.regex.findall(completion);
        if found.is_empty() {
            return self.fallback.clone();
        }
        let len = found.len() as i64;
        let idx = if self.group_select < 0 { len + self.group_select } else { self.group_select };
        if !(0..len).contains(&idx) {
            return self.fallback.clone();
        }
        let picked = match &found[idx as usize] {
            Found::Str(s) => s.as_str(),
            Found::Tuple(groups) => match groups.iter().find(|g| !g.is_empty()) {
                Some(g) => g.as_str(),
                None => self.fallback.as_str(),
            },
        };
        py_strip(picked).to_string()
    }
}

/// exact_match's normalisation: `re.sub(r, "", x)` for each of
/// `regexes_to_ignore` in order, then (with `ignore_case`) lower-case.
#[derive(Debug, Clone)]
pub struct Normalizer {
    pub regexes_to_ignore: Vec<PyRegex>,
    pub ignore_case: bool,
}

impl Normalizer {
    pub fn new(regexes_to_ignore: &[String], ignore_case: bool) -> Result<Self, regex::Error> {
        Ok(Normalizer {
            regexes_to_ignore: regexes_to_ignore.iter().map(|p| PyRegex::new(p)).collect::<Result<_, _>>()?,
            ignore_case,
        })
    }

    pub fn normalize(&self, s: &str) -> String {
        let mut out = s.to_string();
        for re in &self.regexes_to_ignore {
            out = re.remove_all(&out);
        }
        if self.ignore_case { out.to_lowercase() } else { out }
    }

    /// exact_match of an extracted prediction against the gold target.
    pub fn exact_match(&self, prediction: &str, gold: &str) -> bool {
        self.normalize(prediction) == self.normalize(gold)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    /// lm-eval gsm8k's strict-match pattern.
    pub const STRICT_PATTERN: &str = r"#### (\-?[0-9\.\,]+)";
    /// lm-eval gsm8k's flexible-extract pattern.
    pub const FLEXIBLE_PATTERN: &str = r"(-?[$0-9.,]{2,})|(-?[0-9]+)";
    /// lm-eval gsm8k's `regexes_to_ignore`, in order.
    pub const GSM8K_IGNORE: [&str; 4] = [",", r"\$", r"(?s).*#### ", r"\.$"];
    
    static STRICT: LazyLock<RegexFilter> =
        LazyLock::new(|| RegexFilter::new("strict-match", STRICT_PATTERN, 0).unwrap());
    static FLEXIBLE: LazyLock<RegexFilter> =
        LazyLock::new(|| RegexFilter::new("flexible-extract", FLEXIBLE_PATTERN, -1).unwrap());
    static GSM8K_NORMALIZER: LazyLock<Normalizer> =
        LazyLock::new(|| Normalizer::new(&GSM8K_IGNORE.map(String::from), true).unwrap());
    
    /// gsm8k strict-match: the first `#### N` (group 1), else `[invalid]`.
    pub fn strict_match(completion: &str) -> String {
        STRICT.apply(completion)
    }
    
    /// gsm8k flexible-extract: the last number-like match (`group_select: -1`);
    /// of its two groups the first non-empty one.
    pub fn flexible_extract(completion: &str) -> String {
        FLEXIBLE.apply(completion)
    }
    
    /// gsm8k's normalisation for exact_match: remove `,`, `$`, everything up to
    /// the last `#### `, a trailing `.`, then lower-case.
    pub fn normalize(s: &str) -> String {
        GSM8K_NORMALIZER.normalize(s)
    }
    
    /// gsm8k exact_match of an extracted prediction against the full gold answer.
    pub fn exact_match(prediction: &str, gold_answer: &str) -> bool {
        GSM8K_NORMALIZER.exact_match(prediction, gold_answer)
    }
    use super::*;

    #[test]
    fn strict_takes_first_hash_answer() {
        assert_eq!(strict_match("so 3+4=7\n#### 7\n#### 9"), "7");
        assert_eq!(strict_match("#### -1,234.50"), "-1,234.50");
        assert_eq!(strict_match("#### 12.\n"), "12.");
        assert_eq!(strict_match("The answer is 7"), INVALID);
        assert_eq!(strict_match("####7"), INVALID);
        assert_eq!(strict_match("#### $5"), INVALID);
        assert_eq!(strict_match(""), INVALID);
    }

    #[test]
    fn flexible_takes_last_number() {
        assert_eq!(flexible_extract("She has 3 apples and 12 pears, so 15."), "15.");
        assert_eq!(flexible_extract("costs $1,200 in total"), "$1,200");
        assert_eq!(flexible_extract("x = -5"), "-5");
        assert_eq!(flexible_extract("a 7"), "7");
        assert_eq!(flexible_extract("2.5 and then -0.75"), "-0.75");
        assert_eq!(flexible_extract("no digits here"), INVALID);
        // "$." style runs of 2+ symbols count as a match, as in Python.
        assert_eq!(flexible_extract("3 then ..."), "...");
        assert_eq!(flexible_extract("It costs $5."), "$5.");
    }

    #[test]
    fn normaliser_on_tricky_answers() {
        let gold = "Janet sells 16 - 3 - 4 = 9 eggs.\n#### 1,018";
        assert_eq!(normalize(gold), "1018");
        assert!(exact_match("1,018", gold));
        assert!(exact_match("$1018.", gold));
        assert!(exact_match("$1,018", gold));
        assert!(!exact_match("1018.5", gold));
        assert!(!exact_match("1018.0", gold));
        assert!(exact_match("-3", "#### -3"));
        assert!(!exact_match("3", "#### -3"));
        assert!(exact_match("2.5", "so\n#### 2.5"));
        assert!(!exact_match(INVALID, gold));
        // Only one trailing period is removed.
        assert_eq!(normalize("5.."), "5.");
        // Everything up to the last "#### " goes.
        assert_eq!(normalize("#### 3\n#### 4"), "4");
        assert_eq!(normalize("ABC"), "abc");
    }

    #[test]
    fn python_dollar_matches_before_final_newline() {
        let re = PyRegex::new(r"\.$").unwrap();
        assert_eq!(re.remove_all("5.\n"), "5\n");
        assert_eq!(re.remove_all("5."), "5");
        assert_eq!(re.remove_all("5.\n\n"), "5.\n\n");
        assert_eq!(re.remove_all("5.x"), "5.x");
        assert_eq!(re.findall("a.\n"), vec![Found::Str(".".into())]);
        // An escaped `$` is a literal.
        let lit = PyRegex::new(r"\$").unwrap();
        assert_eq!(lit.remove_all("$5$"), "5");
    }

    #[test]
    fn findall_shapes_like_python() {
        let none = PyRegex::new(r"\d+").unwrap();
        assert_eq!(none.findall("a1b22"), vec![Found::Str("1".into()), Found::Str("22".into())]);
        let two = PyRegex::new(FLEXIBLE_PATTERN).unwrap();
        assert_eq!(
            two.findall("7 and 12"),
            vec![Found::Tuple(vec!["".into(), "7".into()]), Found::Tuple(vec!["12".into(), "".into()])]
        );
    }

    #[test]
    fn cot_strict_needs_a_char_after_the_number() {
        // gsm8k-cot's strict pattern ends in `.` (any char but newline).
        let f = RegexFilter::new("strict-match", r"The answer is (\-?[0-9\.\,]+).", 0).unwrap();
        assert_eq!(f.apply("So 6. The answer is 6."), "6");
        assert_eq!(f.apply("The answer is 1,234.5 dollars."), "1,234.5");
        assert_eq!(f.apply("The answer is -3.\nThe answer is 4."), "-3");
        assert_eq!(f.apply("The answer is 6"), INVALID);
        assert_eq!(f.apply("The answer is 6\n"), INVALID);
        assert_eq!(f.apply("the answer is 6."), INVALID);
        // group_select out of range falls back.
        let g = RegexFilter::new("x", r"(\d)", 5).unwrap();
        assert_eq!(g.apply("1 2"), INVALID);
        let last = RegexFilter::new("x", r"#### (\-?[0-9\.\,]+)", -1).unwrap();
        assert_eq!(last.apply("#### 1\n#### 2"), "2");
    }
}
