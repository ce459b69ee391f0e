//! ShareGPT-shaped conversation files into [`SessionSet`]s: real text, one
//! or many turns per conversation, replayed by `super::lanes::LanesReplay` as
//! one-stream sessions with no think time.
//!
//! The file is a JSON list, or JSON lines, of `{"id": .., "conversations":
//! [{"from": .., "value": ..}, ..]}`; `from` is `human` or `user`, `gpt`
//! or `assistant`, or `system`. Each user message directly followed by an
//! assistant reply is a turn: its prompt is every message before the reply
//! (earlier replies as assistant messages), put through the model's chat
//! template by the caller's tokenizer, and its `max_tokens` is the reply's
//! length in tokens (at most `max_output_tokens`, at least 1). A user
//! message without a reply is context for later turns only; a conversation
//! without any turn is skipped (counted). Turns share the prefix of the
//! previous turn's tokens: that shared prefix is the theoretical hit.

use std::path::Path;

use anyhow::Result;
use serde::Deserialize;

use super::files::{for_each_line, parse_json};
use super::sessions::{Arrival, Content, SessionSet, TurnRecord};
use super::synth::name_key;
use crate::error::usage;
use crate::protocol::{ChatMessage, ConversationSpec};

/// What a check or load found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversationSummary {
    /// Conversations with at least one turn.
    pub conversations: usize,
    pub turns: usize,
    /// Conversations without a user message followed by a reply.
    pub skipped: usize,
}

#[derive(Deserialize)]
struct RawConversation {
    id: Option<serde_json::Value>,
    conversations: Option<Vec<RawMessage>>,
}

#[derive(Deserialize)]
struct RawMessage {
    from: Option<String>,
    value: Option<String>,
}

/// A checked conversation: its name and messages with chat roles.
struct Parsed {
    name: String,
    messages: Vec<ChatMessage>,
}

/// Parses and checks `path` without a tokenizer (the orchestrator's check
/// before any engine starts).
///
/// Errors (usage): see [`load_conversations`].
pub fn check_conversations(path: &Path, max_turns: Option<u32>) -> Result<ConversationSummary> {
    let mut summary = ConversationSummary::default();
    for c in parse(path)? {
        let n = turn_ends(&c.messages, max_turns).len();
        if n == 0 {
            summary.skipped += 1;
        } else {
            summary.conversations += 1;
            summary.turns += n;
        }
    }
    if summary.turns == 0 {
        return Err(no_turns(path));
    }
    Ok(summary)
}

/// Loads the conversations of `spec`: `tokenize` turns messages into the
/// prompt's token ids (the engine's chat template, with the generation
/// prompt), `count_tokens` gives a reply's length in tokens.
///
/// Errors (usage): the file is missing or not JSON (file:line:column), an
/// entry without `conversations`, a message without `from` or `value` or
/// with an unknown `from` (naming the entry and the message), no turn in
/// the whole file; and whatever the callbacks return.
pub fn load_conversations(
    spec: &ConversationSpec,
    tokenize: &mut dyn FnMut(&[ChatMessage]) -> Result<Vec<u32>>,
    count_tokens: &mut dyn FnMut(&str) -> Result<u32>,
) -> Result<(SessionSet, ConversationSummary)> {
    let mut set = SessionSet::new(Content::Tokens, Arrival::Lanes);
    let mut summary = ConversationSummary::default();
    for c in parse(&spec.path)? {
        let ends = turn_ends(&c.messages, spec.max_turns);
        if ends.is_empty() {
            summary.skipped += 1;
            continue;
        }
        let mut b = set.begin(c.name.clone(), name_key(&c.name));
        for &reply in &ends {
            let prompt = tokenize(&c.messages[..reply])?;
            if prompt.is_empty() {
                return Err(usage(format!("conversation {}: the tokenizer made an empty prompt", c.name)));
            }
            let mut max_tokens = count_tokens(&c.messages[reply].content)?.max(1);
            if let Some(cap) = spec.max_output_tokens {
                max_tokens = max_tokens.min(cap.max(1));
            }
            let input = u32::try_from(prompt.len()).map_err(|_| usage("a conversation prompt beyond 2^32 tokens"))?;
            b.turn(0, TurnRecord { t_s: 0.0, api_s: 0.0, input, max_tokens, ids: &prompt })?;
        }
        b.finish();
        summary.conversations += 1;
        summary.turns += ends.len();
    }
    if summary.turns == 0 {
        return Err(no_turns(&spec.path));
    }
    set.finish_loading();
    Ok((set, summary))
}

fn no_turns(path: &Path) -> anyhow::Error {
    usage(format!(
        "{}: no conversation has a user message followed by a reply (`from`: \"human\" then \"gpt\")",
        path.display()
    ))
}

/// Index of each turn's reply message (the prompt is everything before it).
fn turn_ends(messages: &[ChatMessage], max_turns: Option<u32>) -> Vec<usize> {
    let ends = (1..messages.len()).filter(|&i| messages[i].role == "assistant" && messages[i - 1].role == "user");
    ends.take(max_turns.map_or(usize::MAX, |m| m as usize)).collect()
}

/// Reads a JSON list or JSON lines file of conversations.
fn parse(path: &Path) -> Result<Vec<Parsed>> {
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    if text.trim_start().starts_with('[') {
        let raw: Vec<RawConversation> = parse_json(path, None, &text)?;
        for (i, c) in raw.into_iter().enumerate() {
            out.push(check(c, &format!("{}: entry {i}", path.display()))?);
        }
    } else {
        drop(text);
        for_each_line(path, |line, text| {
            let raw: RawConversation = parse_json(path, Some(line), text)?;
            out.push(check(raw, &format!("{}:{line}", path.display()))?);
            Ok(())
        })?;
    }
    if out.is_empty() {
        return Err(usage(format!("{}: no conversations in the file", path.display())));
    }
    Ok(out)
}

/// Checks one entry; `place` names it in errors.
fn check(raw: RawConversation, place: &str) -> Result<Parsed> {
    let id = match raw.id {
        Some(serde_json::Value::String(s)) => Some(s),
        Some(v) => Some(v.to_string()),
        None => None,
    };
    // Errors name the place once, and the entry's id when it has one.
    let at_entry = match &id {
        Some(id) => format!("{place} (id {id})"),
        None => place.to_string(),
    };
    let name = id.unwrap_or_else(|| place.rsplit(": ").next().unwrap_or(place).to_string());
    let msgs = raw.conversations.ok_or_else(|| usage(format!("{at_entry}: missing field `conversations`")))?;
    let mut messages = Vec::with_capacity(msgs.len());
    for (j, m) in msgs.into_iter().enumerate() {
        let at = |what: &str| usage(format!("{at_entry}: conversations[{j}]: {what}"));
        let from = m.from.ok_or_else(|| at("missing field `from`"))?;
        let role = match from.as_str() {
            "human" | "user" => "user",
            "gpt" | "assistant" => "assistant",
            "system" => "system",
            other => {
                return Err(at(&format!("`from` is {other:?}; expected \"human\", \"gpt\" or \"system\"")));
            }
        };
        let value = m.value.ok_or_else(|| at("missing field `value`"))?;
        messages.push(ChatMessage::new(role, value));
    }
    Ok(Parsed { name, messages })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::UsageError;

    /// A stand-in chat template: BOS, then per message a role id, the
    /// content's bytes and an end id, then a generation-prompt id.
    pub(crate) fn fake_tokenize(messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let mut out = vec![1];
        for m in messages {
            out.push(match m.role.as_str() {
                "system" => 2,
                "user" => 3,
                _ => 4,
            });
            out.extend(m.content.bytes().map(u32::from));
            out.push(5);
        }
        out.push(6);
        Ok(out)
    }

    pub(crate) fn count_words(text: &str) -> Result<u32> {
        Ok(text.split_whitespace().count() as u32)
    }

    fn fixture() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces/sharegpt.json")
    }

    fn spec(path: &Path) -> ConversationSpec {
        ConversationSpec { path: path.to_path_buf(), max_turns: None, max_output_tokens: None }
    }

    #[test]
    fn sharegpt_turns_prompts_and_lengths() {
        let (set, summary) = load_conversations(&spec(&fixture()), &mut fake_tokenize, &mut count_words).unwrap();
        assert_eq!(summary, ConversationSummary { conversations: 2, turns: 5, skipped: 1 });
        assert_eq!(check_conversations(&fixture(), None).unwrap(), summary);
        assert_eq!(set.names, vec!["conv-weather", "conv-recipe"]);
        let weather = set.session_streams(0)[0];
        let turns = set.stream_turns(&weather);
        // Reply lengths in words: 9, 11, 7.
        assert_eq!(turns.iter().map(|t| t.max_tokens).collect::<Vec<_>>(), vec![9, 11, 7]);
        // Turn 2's prompt = turn 1's (less the generation prompt) + reply + question.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        set.turn_ids(&weather, 0, &mut a);
        set.turn_ids(&weather, 1, &mut b);
        let system_user = fake_tokenize(&[
            ChatMessage::new("system", "You are a terse assistant."),
            ChatMessage::new("user", "Will it rain in the valley tomorrow?"),
        ])
        .unwrap();
        assert_eq!(a, system_user);
        assert_eq!(turns[0].input as usize, a.len());
        assert_eq!(turns[1].hit as usize, a.len() - 1);
        assert_eq!(common_prefix_len(&a, &b), a.len() - 1);
        // The recipe's caps.
        let capped = ConversationSpec { max_turns: Some(1), max_output_tokens: Some(4), ..spec(&fixture()) };
        let (set, summary) = load_conversations(&capped, &mut fake_tokenize, &mut count_words).unwrap();
        assert_eq!(summary.turns, 2);
        assert!(set.turns.iter().all(|t| t.max_tokens == 4));
    }

    fn common_prefix_len(a: &[u32], b: &[u32]) -> usize {
        crate::workload::sessions::common_prefix(a, b)
    }

    fn error_of(text: &str, name: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let err = check_conversations(&path, None).expect_err("bad input");
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err:#}");
        let loaded = load_conversations(&spec(&path), &mut fake_tokenize, &mut count_words).expect_err("bad input");
        assert_eq!(loaded.to_string(), err.to_string(), "check and load agree");
        err.to_string()
    }

    #[test]
    fn jsonl_and_bad_input() {
        let good = r#"{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"}]}"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(&path, format!("{good}\n\n{}\n", good.replace("\"a\"", "\"b\""))).unwrap();
        assert_eq!(check_conversations(&path, None).unwrap().turns, 2);
        let cases: &[(String, &str, &str)] = &[
            (good.replace("human", "bot"), "c.jsonl", r#"c.jsonl:1 (id a): conversations[0]: `from` is "bot"; expected "human", "gpt" or "system""#),
            (good.replace(r#", "value": "hi""#, ""), "c.jsonl", "c.jsonl:1 (id a): conversations[0]: missing field `value`"),
            (good.replace("conversations", "turns"), "c.jsonl", "c.jsonl:1 (id a): missing field `conversations`"),
            (format!("{good}\n{{\"id\": "), "c.jsonl", "c.jsonl:2:"),
            ("[{\"id\": \"x\", \"conversations\": [{\"from\": \"human\", \"value\": 3}]}]".into(), "c.json", "c.json:1:"),
            (format!("[{}]", good.replace("gpt", "human")), "c.json", "no conversation has a user message followed by a reply"),
            ("[]".into(), "c.json", "no conversations in the file"),
        ];
        for (text, name, want) in cases {
            let got = error_of(text, name);
            assert!(got.contains(want), "input {text:?}\n  error {got:?}\n  wanted {want:?}");
        }
        // Without an id the place is named once, not twice.
        let anonymous = good.replace(r#""id": "a", "#, "").replace("human", "bot");
        for (text, name, want) in [(anonymous.clone(), "c.jsonl", "c.jsonl:1: conversations[0]"), (format!("[{anonymous}]"), "c.json", "c.json: entry 0: conversations[0]")] {
            let got = error_of(&text, name);
            assert!(got.contains(want) && got.matches(name).count() == 1, "{got}");
        }
        let err = check_conversations(&dir.path().join("missing.json"), None).unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }
}
