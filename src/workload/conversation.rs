//! ShareGPT-shaped conversation files into [`SessionSet`]s: real text, one
//! or many turns per conversation, replayed by `super::replay::Replay` as
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

use super::files::{for_each_line, json_error};
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
        let raw: Vec<RawConversation> = serde_json::from_str(&text).map_err(|e| json_error(path, None, &e))?;
        for (i, c) in raw.into_iter().enumerate() {
            out.push(check(c, &format!("{}: entry {i}", path.display()))?);
        }
    } else {
        drop(text);
        for_each_line(path, |line, text| {
            let raw: RawConversation = serde_json::from_str(text).map_err(|e| json_error(path, Some(line), &e))?;
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
    let name = match raw.id {
        Some(serde_json::Value::String(s)) => s,
        Some(v) => v.to_string(),
        None => place.rsplit(": ").next().unwrap_or(place).to_string(),
    };
    let msgs = raw.conversations.ok_or_else(|| usage(format!("{place} ({name}): missing field `conversations`")))?;
    let mut messages = Vec::with_capacity(msgs.len());
    for (j, m) in msgs.into_iter().enumerate() {
        let at = |what: &str| usage(format!("{place} ({name}): conversations[{j}]: {what}"));
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
