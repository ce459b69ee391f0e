//! Eval task definitions, as data: `evals/*.toml` (built into the binary) or
//! any TOML file with the same keys. Unknown keys are errors.
//!
//! The keys mirror lm-eval's task YAML (`doc_to_text`, `doc_to_target`,
//! `target_delimiter`, `fewshot_delimiter`, `num_fewshot`, `until`,
//! `filter_list`, `metric_list`), restricted to what the GSM8K tasks use.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::data::Doc;
use super::filters::{Normalizer, RegexFilter, py_strip};
use crate::error::usage;
pub use crate::protocol::MaxTokensPolicy;

/// The built-in tasks: name and TOML text.
pub const BUILTIN_TASKS: [(&str, &str); 3] = [
    ("gsm8k", include_str!("../../evals/gsm8k.toml")),
    ("gsm8k_cot", include_str!("../../evals/gsm8k_cot.toml")),
    ("gsm8k_inferencex", include_str!("../../evals/gsm8k_inferencex.toml")),
];

/// The placeholder `doc_to_text` may hold.
const QUESTION: &str = "{{question}}";

/// What a document's target (few-shot answer and gold) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// The full answer (`{{answer}}`).
    Answer,
    /// The text after the last `####`, stripped (`answer.split('####')[-1].strip()`).
    AnswerNumber,
}

/// Where the few-shot examples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FewshotSource {
    /// A random draw from the train split: lm-eval's default sampler, one
    /// `random.Random(seed)` shared across the test documents in order,
    /// `sample(train, k)` per document.
    Train,
    /// The task's own `[[fewshot.samples]]`, the first k in order (lm-eval's
    /// `first_n` sampler).
    Samples,
}

/// What to do with `source = "train"` when the data has no train split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WithoutTrain {
    /// The first k test questions are the shots (in order) and are not scored.
    FirstKTest,
    /// The task's `[[fewshot.samples]]`, first k in order.
    Samples,
    /// Refuse.
    Error,
}

/// A fixed few-shot exemplar (`[[fewshot.samples]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shot {
    pub question: String,
    pub target: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    name: String,
    #[serde(default)]
    description: String,
    lm_eval_task: Option<String>,
    doc_to_text: String,
    doc_to_target: TargetKind,
    #[serde(default = "default_target_delimiter")]
    target_delimiter: String,
    #[serde(default = "default_fewshot_delimiter")]
    fewshot_delimiter: String,
    num_fewshot: usize,
    #[serde(default)]
    chat: bool,
    #[serde(default = "yes")]
    fewshot_as_multiturn: bool,
    system_prompt: Option<String>,
    limit: Option<usize>,
    fewshot: FewshotFile,
    generation: GenerationFile,
    filter: Vec<FilterFile>,
    metric: MetricFile,
}

fn default_target_delimiter() -> String {
    " ".into()
}
fn default_fewshot_delimiter() -> String {
    "\n\n".into()
}
fn yes() -> bool {
    true
}
fn default_seed() -> i64 {
    1234
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FewshotFile {
    source: FewshotSource,
    #[serde(default = "default_seed")]
    seed: i64,
    #[serde(default = "default_without_train")]
    without_train: WithoutTrain,
    #[serde(default)]
    samples: Vec<Shot>,
}

fn default_without_train() -> WithoutTrain {
    WithoutTrain::FirstKTest
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerationFile {
    until: Vec<String>,
    max_tokens: u32,
    #[serde(default)]
    max_tokens_policy: MaxTokensPolicy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterFile {
    name: String,
    regex: String,
    #[serde(default)]
    group_select: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricFile {
    name: String,
    ignore_case: bool,
    regexes_to_ignore: Vec<String>,
}

/// Command-line / recipe overrides of a task's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskOverrides {
    pub num_fewshot: Option<usize>,
    /// Questions to score (None: the task's, default all).
    pub limit: Option<usize>,
    /// Fixed max new tokens (also turns a context-derived policy off).
    pub max_tokens: Option<u32>,
    /// Stop sequences replacing the task's `until`.
    pub stop: Option<Vec<String>>,
    /// Chat template on/off.
    pub chat: Option<bool>,
    pub fewshot_as_multiturn: Option<bool>,
    pub system_prompt: Option<String>,
    pub fewshot_seed: Option<i64>,
}

/// A loaded, validated task.
#[derive(Debug, Clone)]
pub struct TaskDef {
    pub name: String,
    /// `builtin:<name>` or the file path it was read from.
    pub origin: String,
    pub description: String,
    /// The lm-eval task this one reproduces (InferenceX's thresholds and
    /// results name it so: `gsm8k` for `gsm8k_inferencex`).
    pub lm_eval_task: Option<String>,
    /// Prompt of one question; `{{question}}` is replaced.
    pub doc_to_text: String,
    pub doc_to_target: TargetKind,
    pub target_delimiter: String,
    pub fewshot_delimiter: String,
    pub num_fewshot: usize,
    /// Apply the model's chat template (lm-eval `--apply_chat_template`).
    pub chat: bool,
    /// With chat: shots as user/assistant turns (lm-eval `--fewshot_as_multiturn`);
    /// else one user message holding the text prompt.
    pub fewshot_as_multiturn: bool,
    /// lm-eval `--system_instruction`.
    pub system_prompt: Option<String>,
    pub limit: Option<usize>,
    pub fewshot_source: FewshotSource,
    pub fewshot_seed: i64,
    pub without_train: WithoutTrain,
    pub samples: Vec<Shot>,
    pub until: Vec<String>,
    pub max_tokens: u32,
    pub max_tokens_policy: MaxTokensPolicy,
    /// The `strict-match` filter.
    pub strict: RegexFilter,
    /// The `flexible-extract` filter.
    pub flexible: RegexFilter,
    pub normalizer: Normalizer,
}

impl TaskDef {
    /// The names thresholds may know it by: its own, then the lm-eval task it reproduces.
    pub fn names(&self) -> Vec<&str> {
        std::iter::once(self.name.as_str()).chain(self.lm_eval_task.as_deref()).collect()
    }

    /// lm-eval's `doc_to_text`.
    pub fn doc_to_text(&self, question: &str) -> String {
        self.doc_to_text.replace(QUESTION, question)
    }

    /// lm-eval's `doc_to_target` of a data document.
    pub fn target(&self, doc: &Doc) -> String {
        match self.doc_to_target {
            TargetKind::Answer => doc.answer.clone(),
            TargetKind::AnswerNumber => {
                py_strip(doc.answer.rsplit("####").next().unwrap_or_default()).to_string()
            }
        }
    }

    /// Max new tokens for an engine whose context is `max_model_len` (if known).
    pub fn max_tokens_for(&self, max_model_len: Option<u32>) -> u32 {
        self.max_tokens_policy.resolve(self.max_tokens, max_model_len)
    }
}

/// Loads a task by built-in name (`gsm8k`, `gsm8k_cot`, `gsm8k_inferencex`)
/// or from a TOML file path, then applies the overrides.
pub fn load_task(name_or_path: &str, overrides: &TaskOverrides) -> Result<TaskDef> {
    let (text, origin) = if let Some((name, text)) = BUILTIN_TASKS.iter().find(|(n, _)| *n == name_or_path) {
        (text.to_string(), format!("builtin:{name}"))
    } else {
        let path = Path::new(name_or_path);
        if path.is_file() {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read task file {}: {e}", path.display())))?;
            (text, path.display().to_string())
        } else if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            return Err(usage(format!("task file {name_or_path}: no such file")));
        } else {
            return Err(usage(format!(
                "unknown eval task '{name_or_path}': built-in tasks are {}, or give the path of a task TOML file",
                BUILTIN_TASKS.map(|(n, _)| n).join(", ")
            )));
        }
    };
    parse_task(&text, &origin, overrides)
}

/// Parses and validates a task TOML; `origin` names it in errors.
pub fn parse_task(text: &str, origin: &str, ov: &TaskOverrides) -> Result<TaskDef> {
    let bad = |what: String| usage(format!("task {origin}: {what}"));
    let f: TaskFile = toml::from_str(text).map_err(|e| bad(format!("{e}")))?;

    let rest = f.doc_to_text.replace(QUESTION, "");
    if rest.contains("{{") || rest.contains("}}") {
        return Err(bad(format!(
            "doc_to_text: only the placeholder {QUESTION} is supported: {:?}",
            f.doc_to_text
        )));
    }
    if f.metric.name != "exact_match" {
        return Err(bad(format!("metric.name: only \"exact_match\" is supported, not {:?}", f.metric.name)));
    }
    let mut names: Vec<&str> = f.filter.iter().map(|x| x.name.as_str()).collect();
    names.sort();
    if names != ["flexible-extract", "strict-match"] {
        return Err(bad(format!(
            "[[filter]]: expected exactly two filters named \"strict-match\" and \"flexible-extract\", found {names:?}"
        )));
    }
    let compile = |name: &str| -> Result<RegexFilter> {
        let x = f.filter.iter().find(|x| x.name == name).unwrap();
        RegexFilter::new(&x.name, &x.regex, x.group_select)
            .map_err(|e| bad(format!("filter {name}: bad regex {:?}: {e}", x.regex)))
    };
    let strict = compile("strict-match")?;
    let flexible = compile("flexible-extract")?;
    let normalizer = Normalizer::new(&f.metric.regexes_to_ignore, f.metric.ignore_case)
        .map_err(|e| bad(format!("metric.regexes_to_ignore: {e}")))?;

    let mut t = TaskDef {
        name: f.name,
        origin: origin.to_string(),
        description: f.description,
        lm_eval_task: f.lm_eval_task,
        doc_to_text: f.doc_to_text,
        doc_to_target: f.doc_to_target,
        target_delimiter: f.target_delimiter,
        fewshot_delimiter: f.fewshot_delimiter,
        num_fewshot: f.num_fewshot,
        chat: f.chat,
        fewshot_as_multiturn: f.fewshot_as_multiturn,
        system_prompt: f.system_prompt,
        limit: f.limit,
        fewshot_source: f.fewshot.source,
        fewshot_seed: f.fewshot.seed,
        without_train: f.fewshot.without_train,
        samples: f.fewshot.samples,
        until: f.generation.until,
        max_tokens: f.generation.max_tokens,
        max_tokens_policy: f.generation.max_tokens_policy,
        strict,
        flexible,
        normalizer,
    };

    if let Some(k) = ov.num_fewshot {
        t.num_fewshot = k;
    }
    if let Some(l) = ov.limit {
        t.limit = Some(l);
    }
    if let Some(m) = ov.max_tokens {
        t.max_tokens = m;
        t.max_tokens_policy = MaxTokensPolicy::Fixed;
    }
    if let Some(s) = &ov.stop {
        t.until = s.clone();
    }
    if let Some(c) = ov.chat {
        t.chat = c;
    }
    if let Some(m) = ov.fewshot_as_multiturn {
        t.fewshot_as_multiturn = m;
    }
    if let Some(s) = &ov.system_prompt {
        t.system_prompt = Some(s.clone());
    }
    if let Some(s) = ov.fewshot_seed {
        t.fewshot_seed = s;
    }

    if t.max_tokens == 0 {
        return Err(bad("max_tokens must be at least 1".into()));
    }
    if t.limit == Some(0) {
        return Err(bad("limit must be at least 1".into()));
    }
    let needs_samples =
        t.fewshot_source == FewshotSource::Samples || t.without_train == WithoutTrain::Samples;
    if needs_samples && t.num_fewshot > t.samples.len() {
        return Err(bad(format!(
            "{} shots asked but the task has {} [[fewshot.samples]]",
            t.num_fewshot,
            t.samples.len()
        )));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load_with_lm_eval_settings() {
        let g = load_task("gsm8k", &TaskOverrides::default()).unwrap();
        assert_eq!(g.origin, "builtin:gsm8k");
        assert_eq!(g.lm_eval_task.as_deref(), Some("gsm8k"));
        assert_eq!(g.doc_to_text("Q?"), "Question: Q?\nAnswer:");
        assert_eq!((g.target_delimiter.as_str(), g.fewshot_delimiter.as_str()), (" ", "\n\n"));
        assert_eq!(g.num_fewshot, 5);
        assert_eq!(g.until, ["Question:", "</s>", "<|im_end|>"]);
        assert_eq!(g.max_tokens_for(Some(2048)), 256);
        assert_eq!(
            (g.fewshot_source, g.fewshot_seed, g.without_train),
            (FewshotSource::Train, 1234, WithoutTrain::FirstKTest)
        );
        assert!(!g.chat);
        assert_eq!(g.strict.apply("x #### -1,234.5 #### 9"), "-1,234.5");
        assert_eq!(g.strict.group_select, 0);
        assert_eq!(g.flexible.apply("3 then $12, and 7"), "7");
        assert_eq!(g.flexible.group_select, -1);
        let doc = Doc { question: "q".into(), answer: "a\n#### 1,234".into() };
        assert_eq!(g.target(&doc), "a\n#### 1,234");

        let c = load_task("gsm8k_cot", &TaskOverrides::default()).unwrap();
        assert_eq!(c.doc_to_text("Q?"), "Q: Q?\nA:");
        assert_eq!(c.num_fewshot, 8);
        assert_eq!(c.samples.len(), 8);
        assert_eq!(c.fewshot_source, FewshotSource::Samples);
        assert_eq!(c.until, ["Q:", "</s>", "<|im_end|>"]);
        // The final "." of "The answer is (...)." is a regex dot: it needs one more character.
        assert_eq!(c.strict.apply("The answer is 6."), "6");
        assert_eq!(c.strict.apply("The answer is 6"), "[invalid]");
        assert_eq!(c.target(&doc), "1,234");
        assert_eq!(c.target(&Doc { question: "q".into(), answer: "x ####  7 \n".into() }), "7");
        assert_eq!(
            c.samples[7].target,
            "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 dollars left. 23 - 15 is 8. The answer is 8."
        );

        let x = load_task("gsm8k_inferencex", &TaskOverrides::default()).unwrap();
        assert!(x.chat && x.fewshot_as_multiturn);
        assert_eq!(x.lm_eval_task.as_deref(), Some("gsm8k"), "InferenceX's task is named gsm8k");
        assert_eq!(
            x.doc_to_text("Q?"),
            "Question: Q?\nEnd your response with the answer on the last line, formatted as: #### [number]\nAnswer:"
        );
        assert_eq!(x.until, ["</s>", "<|im_end|>"]);
        assert_eq!(x.strict.group_select, -1);
        assert_eq!(x.max_tokens_for(None), 12288);
        assert_eq!(x.max_tokens_for(Some(2048)), 1024);
        assert_eq!(x.max_tokens_for(Some(10240)), 6144);
        assert_eq!(x.max_tokens_for(Some(131072)), 16384);
    }

    #[test]
    fn overrides_apply() {
        let ov = TaskOverrides {
            num_fewshot: Some(3),
            limit: Some(10),
            max_tokens: Some(64),
            stop: Some(vec!["\n\n".into()]),
            chat: Some(true),
            fewshot_as_multiturn: Some(false),
            system_prompt: Some("Be brief.".into()),
            fewshot_seed: Some(7),
        };
        let t = load_task("gsm8k_inferencex", &ov).unwrap();
        assert_eq!((t.num_fewshot, t.limit, t.max_tokens_for(Some(65536))), (3, Some(10), 64));
        assert_eq!(t.until, ["\n\n"]);
        assert!(t.chat && !t.fewshot_as_multiturn);
        assert_eq!(t.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(t.fewshot_seed, 7);
        let t = load_task("gsm8k_cot", &TaskOverrides { num_fewshot: Some(9), ..Default::default() });
        assert!(t.unwrap_err().to_string().contains("9 shots asked but the task has 8"));
    }

    #[test]
    fn task_from_file_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.toml");
        std::fs::write(&path, BUILTIN_TASKS[0].1.replace("name = \"gsm8k\"", "name = \"mine\"")).unwrap();
        let t = load_task(path.to_str().unwrap(), &TaskOverrides::default()).unwrap();
        assert_eq!(t.name, "mine");
        assert_eq!(t.origin, path.display().to_string());

        let err = load_task("gsm9k", &TaskOverrides::default()).unwrap_err();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(err.to_string().contains("gsm8k, gsm8k_cot, gsm8k_inferencex"), "{err}");
        let err = load_task("/nonexistent/task.toml", &TaskOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/task.toml"), "{err}");

        // Unknown keys are refused, with the line.
        std::fs::write(&path, format!("{}\nbogus = 1\n", BUILTIN_TASKS[0].1)).unwrap();
        let msg = load_task(path.to_str().unwrap(), &TaskOverrides::default()).unwrap_err().to_string();
        assert!(msg.contains("bogus") && msg.contains("line"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");

        let bad_tpl = BUILTIN_TASKS[0].1.replace("{{question}}", "{{q}}");
        assert!(
            parse_task(&bad_tpl, "t", &TaskOverrides::default())
                .unwrap_err()
                .to_string()
                .contains("placeholder")
        );
        let one_filter = BUILTIN_TASKS[0].1.replace("flexible-extract", "other");
        assert!(
            parse_task(&one_filter, "t", &TaskOverrides::default())
                .unwrap_err()
                .to_string()
                .contains("strict-match")
        );
        let bad_re = BUILTIN_TASKS[0].1.replace(r"#### (\-?[0-9\.\,]+)", "(unclosed");
        assert!(
            parse_task(&bad_re, "t", &TaskOverrides::default())
                .unwrap_err()
                .to_string()
                .contains("bad regex")
        );
    }
}
