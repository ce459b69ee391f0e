//! Trace files into [`SessionSet`]s, checked before any engine starts.
//!
//! - **AgentX** (InferenceX's agentic traces, notes/agentx.md 5b, 6): a
//!   `.jsonl` file, or a folder holding `traces.jsonl`, one session per
//!   line: `id`, `block_size`, optional `hash_id_scope` ("local" default:
//!   one namespace per trace; "global": one for the file), `requests`. A
//!   request `{"type": "n"|"s", "t", "in", "out", "hash_ids", "api_time",
//!   ..}` is a root turn; `{"type": "subagent", "t"?, "duration_ms"?,
//!   "requests": [..]}` a subagent stream whose requests carry absolute
//!   `t` (a `t` below the entry's own `t` is taken as relative to it, as
//!   AgentX reads older files). A subagent spawns from the last root turn
//!   before it (none: it is left out and counted, as AgentX drops it) and
//!   joins the first later root turn starting at or after its end
//!   (`t + duration_ms/1000`, else its last request's `t + api_time`).
//!   Other fields (`model`, `think_time`, `stop`, `input_types`, ..) are
//!   not needed: delays come from `t` and `api_time`.
//! - **Timed** (vLLM's `timed_trace`, Mooncake): one request per line,
//!   `timestamp`, `input_length`, `output_length`, `hash_ids`; sorted by
//!   timestamp (stable); hash ids share one namespace over the file and
//!   are renumbered in first-seen order (only equality matters); a hash id
//!   after the full blocks names the partial last block, as in Mooncake's
//!   traces. Mooncake's format has no session key: each line is its own
//!   session; lines with a `session_id` or `chat_id` (Alibaba's Bailian
//!   traces) are turns of that conversation in the figures, released as
//!   recorded all the same.
//!
//! Without a format given, the first line's keys say which it is
//! ([`detect_format`]): `requests` makes it AgentX, `timestamp` with
//! `input_length` a timed trace; a format given that the first line
//! contradicts is refused with the one that fits.
//!
//! Bad input is a usage error naming `file:line`, the request and the
//! field: malformed JSON, a missing or mistyped field, a negative time, an
//! `in` of 0, more hash ids than `in` tokens cover (`ceil(in /
//! block_size)`), a duplicate trace id, a `block_size` that disagrees, an
//! empty file. An `out` of 0 is sent as 1 (vLLM needs at least one token)
//! and counted in [`LoadSummary::zero_out`]; a missing `api_time` is 0
//! (counted in [`LoadSummary::missing_api_time`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

use super::files::{for_each_line, parse_json};
use super::sessions::{Arrival, Content, SessionSet, TurnRecord};
use super::trees::{Entry, RecordedSubagent, RecordedTurn, TreeCounts, add_tree};
use super::synth::name_key;
use crate::error::usage;
use crate::protocol::{TraceFormat, TraceSpec};

/// What a load found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadSummary {
    pub sessions: usize,
    /// Top-level requests, subagents, parallel chains ([`TreeCounts`];
    /// timed traces: `root_turns` only, one per line).
    pub tree: TreeCounts,
    /// Requests recorded with `out` 0, sent with `max_tokens` 1.
    pub zero_out: usize,
    /// Requests without an `api_time` (or null): taken as 0 s, as AIPerf's
    /// `_api_time_ms` does, so their end-to-start delay is start-to-start.
    pub missing_api_time: usize,
    /// Largest `in + out` of any request, tokens.
    pub max_context: u64,
    pub block_size: u32,
    /// Bytes the loaded set holds ([`SessionSet::memory_bytes`]).
    pub memory_bytes: usize,
}

/// The `.jsonl` file of a trace path: the path itself, or a folder's
/// `traces.jsonl`.
///
/// Errors (usage): the path does not exist, or the folder has no `traces.jsonl`.
pub fn trace_file(path: &Path) -> Result<PathBuf> {
    if path.is_dir() {
        let file = path.join("traces.jsonl");
        if !file.is_file() {
            return Err(usage(format!(
                "trace folder {} has no traces.jsonl (give the .jsonl file, or the folder of the downloaded dataset)",
                path.display()
            )));
        }
        return Ok(file);
    }
    if !path.is_file() {
        return Err(usage(format!("trace file {} does not exist", path.display())));
    }
    Ok(path.to_path_buf())
}

/// Loads and checks the trace of `spec` (its `block_size` is the default
/// for files that do not carry one).
///
/// Errors (usage): see the module overview.
pub fn load_trace(spec: &TraceSpec) -> Result<(SessionSet, LoadSummary)> {
    let file = trace_file(&spec.path)?;
    if let Some(found) = sniff_format(&file).transpose().map_err(usage)?.filter(|f| *f != spec.format) {
        let name = |f: TraceFormat| match f {
            TraceFormat::Agentx => "agentx",
            TraceFormat::Timed => "timed",
        };
        let shape = if found == TraceFormat::Timed { "`timestamp`, `input_length`: a timed trace" } else { "`requests`: an AgentX trace" };
        return Err(usage(format!(
            "{}: its first line has {shape}, but format {} was asked: give --trace-format {} (recipe: [sweep.trace] format = \"{}\"), or leave the format out to have it read off the file",
            file.display(),
            name(spec.format),
            name(found),
            name(found),
        )));
    }
    match spec.format {
        TraceFormat::Agentx => load_agentx(&file, spec.block_size, spec.split_chains),
        TraceFormat::Timed => load_timed(&file, spec.block_size),
    }
}

/// The two shapes, as an error message names them.
const SHAPES: &str = "an AgentX line is one session, `{\"id\", \"block_size\", \"requests\": [{\"t\", \"in\", \"out\", \"hash_ids\", ..}]}` (InferenceX's agentic traces); a timed line is one request, `{\"timestamp\", \"input_length\", \"output_length\", \"hash_ids\"}` (Mooncake's traces, vLLM's timed_trace)";

/// The format of one trace line, by its keys: `requests` is AgentX's,
/// `timestamp` with `input_length` a timed trace's.
///
/// Errors: not a JSON object, or neither shape (the message shows both).
pub fn detect_format(line: &str) -> std::result::Result<TraceFormat, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e}): {SHAPES}"))?;
    let Some(o) = v.as_object() else { return Err(format!("not a JSON object: {SHAPES}")) };
    if o.contains_key("requests") {
        Ok(TraceFormat::Agentx)
    } else if o.contains_key("timestamp") && o.contains_key("input_length") {
        Ok(TraceFormat::Timed)
    } else {
        let keys: Vec<&str> = o.keys().map(String::as_str).take(8).collect();
        Err(format!("neither trace shape (its keys: {}): {SHAPES}", keys.join(", ")))
    }
}

/// The format of the trace at `path` (a file, or a folder's
/// `traces.jsonl`) from its first non-blank line; `None` when there is no
/// such file here (a dataset address, an empty file).
///
/// Errors: `file:line: ` and [`detect_format`]'s.
pub fn sniff_format(path: &Path) -> Option<std::result::Result<TraceFormat, String>> {
    let (file, n, line) = first_line(path)?;
    Some(detect_format(&line).map_err(|e| format!("{}:{n}: {e}", file.display())))
}

/// The `block_size` an AgentX trace at `path` declares on its first line
/// (the default a recipe without one takes, as AIPerf honours a capture's
/// own block size); `None` when there is no such file or key.
pub fn sniff_block_size(path: &Path) -> Option<u32> {
    let (_, _, line) = first_line(path)?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    v.get("block_size")?.as_u64().and_then(|b| u32::try_from(b).ok())
}

/// The file of a trace path, the 1-based number of its first non-blank
/// line, and the line.
fn first_line(path: &Path) -> Option<(PathBuf, usize, String)> {
    use std::io::BufRead;
    let file = if path.is_dir() { path.join("traces.jsonl") } else { path.to_path_buf() };
    let reader = std::io::BufReader::new(std::fs::File::open(&file).ok()?);
    let (n, line) = reader.lines().map_while(|l| l.ok()).enumerate().find(|(_, l)| !l.trim().is_empty())?;
    Some((file, n + 1, line))
}

#[derive(Deserialize)]
struct RawSession {
    id: Option<serde_json::Value>,
    block_size: Option<u32>,
    hash_id_scope: Option<String>,
    requests: Option<Vec<RawRequest>>,
}

#[derive(Deserialize)]
struct RawRequest {
    #[serde(rename = "type")]
    kind: Option<String>,
    t: Option<f64>,
    #[serde(rename = "in")]
    input: Option<u64>,
    out: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    api_time: Option<f64>,
    duration_ms: Option<f64>,
    requests: Option<Vec<RawRequest>>,
}

/// Namespace of traces with `hash_id_scope: "global"`.
const GLOBAL_SCOPE: &str = "global hash ids";

/// Loads an AgentX trace file (one session per line); `default_block_size`
/// (the recipe's) must match every line's `block_size`, and is used where a
/// line has none.
///
/// Errors (usage): see the module overview.
pub fn load_agentx(path: &Path, default_block_size: u32, split_chains: bool) -> Result<(SessionSet, LoadSummary)> {
    if default_block_size == 0 {
        return Err(usage("block_size must be at least 1"));
    }
    let mut set: Option<SessionSet> = None;
    let mut summary = LoadSummary { block_size: default_block_size, ..LoadSummary::default() };
    let mut ids_seen: HashSet<String> = HashSet::new();
    let file = path.display().to_string();
    for_each_line(path, |line, text| {
        let at = |what: String| usage(format!("{file}:{line}: {what}"));
        let raw: RawSession = parse_json(path, Some(line), text)?;
        let id = match raw.id {
            Some(serde_json::Value::String(s)) => s,
            Some(v @ serde_json::Value::Number(_)) => v.to_string(),
            Some(_) => return Err(at("`id` must be a string".into())),
            None => return Err(at("missing field `id` (the trace's name)".into())),
        };
        if !ids_seen.insert(id.clone()) {
            return Err(at(format!("trace id {id:?} appears twice")));
        }
        let bs = raw.block_size.unwrap_or(default_block_size);
        if bs != default_block_size {
            return Err(at(format!(
                "trace {id}: block_size {bs} differs from the recipe's {default_block_size}; set the trace's block_size to the file's"
            )));
        }
        let set = set.get_or_insert_with(|| SessionSet::new(Content::Blocks { block_size: bs }, Arrival::Lanes));
        let requests = raw.requests.ok_or_else(|| at(format!("trace {id}: missing field `requests`")))?;
        let ns = match raw.hash_id_scope.as_deref() {
            None | Some("local") => name_key(&id),
            Some("global") => name_key(GLOBAL_SCOPE),
            Some(other) => {
                return Err(at(format!("trace {id}: hash_id_scope {other:?}; expected \"local\" or \"global\"")));
            }
        };
        let mut entries = Vec::with_capacity(requests.len());
        for (i, req) in requests.iter().enumerate() {
            let place = format!("trace {id}: requests[{i}]");
            match req.kind.as_deref() {
                Some("n" | "s") => {
                    let turn = request(req, bs, None, &mut summary).map_err(|w| at(format!("{place}: {w}")))?;
                    entries.push(Entry::Turn(turn));
                }
                Some("subagent") => entries.push(Entry::Subagent(
                    subagent(req, bs, &mut summary).map_err(|w| at(format!("{place} (subagent): {w}")))?,
                )),
                Some(other) => return Err(at(format!("{place}: type {other:?}; expected \"n\", \"s\" or \"subagent\""))),
                None => return Err(at(format!("{place}: missing field `type`"))),
            }
        }
        if !entries.iter().any(|e| matches!(e, Entry::Turn(_))) {
            return Err(at(format!("trace {id} has no top-level requests (type \"n\" or \"s\")")));
        }
        let mut b = set.begin(id.clone(), ns);
        add_tree(&mut b, &entries, split_chains, &mut summary.tree)?;
        b.finish();
        summary.sessions += 1;
        Ok(())
    })?;
    let mut set = set.ok_or_else(|| usage(format!("{file}: no traces in the file")))?;
    set.finish_loading();
    summary.memory_bytes = set.memory_bytes();
    Ok((set, summary))
}

/// Checks a subagent entry and its requests.
fn subagent(entry: &RawRequest, bs: u32, summary: &mut LoadSummary) -> std::result::Result<RecordedSubagent, String> {
    let inner = entry.requests.as_deref().ok_or("missing field `requests`")?;
    if inner.is_empty() {
        return Err("`requests` is empty".into());
    }
    let entry_t = entry.t.map(|t| time(t, "t")).transpose()?;
    let mut turns = Vec::with_capacity(inner.len());
    for (k, req) in inner.iter().enumerate() {
        match req.kind.as_deref() {
            Some("n" | "s") => {}
            Some("subagent") => return Err(format!("requests[{k}]: nested subagents are not supported")),
            Some(other) => return Err(format!("requests[{k}]: type {other:?}; expected \"n\" or \"s\"")),
            None => return Err(format!("requests[{k}]: missing field `type`")),
        }
        turns.push(request(req, bs, entry_t, summary).map_err(|w| format!("requests[{k}]: {w}"))?);
    }
    let start = entry_t.unwrap_or(turns[0].t_s);
    let end_s = match entry.duration_ms {
        Some(ms) => start + time(ms, "duration_ms")? / 1000.0,
        None => turns.iter().map(|t| t.t_s + t.api_s).fold(f64::NEG_INFINITY, f64::max),
    };
    Ok(RecordedSubagent { turns, end_s })
}

/// Checks one n/s request. `entry_t`: a subagent's own start (a smaller
/// `t` is relative to it).
fn request(
    req: &RawRequest,
    bs: u32,
    entry_t: Option<f64>,
    summary: &mut LoadSummary,
) -> std::result::Result<RecordedTurn, String> {
    let mut t = time(req.t.ok_or("missing field `t`")?, "t")?;
    if let Some(e) = entry_t.filter(|&e| t < e) {
        t += e;
    }
    let api = match req.api_time {
        Some(a) => time(a, "api_time")?,
        None => {
            summary.missing_api_time += 1;
            0.0
        }
    };
    let input = req.input.ok_or("missing field `in`")?;
    let out = req.out.ok_or("missing field `out`")?;
    let hash_ids = req.hash_ids.as_deref().ok_or("missing field `hash_ids`")?;
    let (input, out) = lengths(input, out, hash_ids.len(), bs, ("in", "out"), summary)?;
    let mut ids = Vec::with_capacity(hash_ids.len());
    to_u32_ids(hash_ids, &mut ids)?;
    Ok(RecordedTurn { t_s: t, api_s: api, input, out, ids })
}

/// A time field: finite and not negative.
fn time(v: f64, field: &str) -> std::result::Result<f64, String> {
    if v.is_finite() && v >= 0.0 { Ok(v) } else { Err(format!("`{field}` is {v}; times must be >= 0")) }
}

/// Checks a request's lengths against its hash ids; returns (input, max_tokens).
fn lengths(
    input: u64,
    out: u64,
    n_ids: usize,
    bs: u32,
    names: (&str, &str),
    summary: &mut LoadSummary,
) -> std::result::Result<(u32, u32), String> {
    let (in_name, out_name) = names;
    if input == 0 || input > u64::from(u32::MAX) {
        return Err(format!("`{in_name}` is {input}; expected 1 to {}", u32::MAX));
    }
    if out > u64::from(u32::MAX) {
        return Err(format!("`{out_name}` is {out}; expected at most {}", u32::MAX));
    }
    let covers = input.div_ceil(u64::from(bs));
    if n_ids as u64 > covers {
        return Err(format!(
            "{n_ids} hash_ids but `{in_name}` = {input} tokens fill at most {covers} blocks of {bs}; the hash ids and the length disagree (wrong block_size?)"
        ));
    }
    if out == 0 {
        summary.zero_out += 1;
    }
    summary.max_context = summary.max_context.max(input + out);
    Ok((input as u32, out.max(1) as u32))
}

fn to_u32_ids(hash_ids: &[u64], ids: &mut Vec<u32>) -> std::result::Result<(), String> {
    ids.clear();
    for &h in hash_ids {
        ids.push(u32::try_from(h).map_err(|_| format!("hash id {h} is beyond {}", u32::MAX))?);
    }
    Ok(())
}

#[derive(Deserialize)]
struct RawTimed {
    timestamp: Option<f64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    /// A conversation key (Alibaba's Bailian traces); Mooncake's have none.
    session_id: Option<serde_json::Value>,
    chat_id: Option<serde_json::Value>,
}

/// Loads a timed trace (one request per line).
///
/// Errors (usage): see the module overview.
pub fn load_timed(path: &Path, block_size: u32) -> Result<(SessionSet, LoadSummary)> {
    if block_size == 0 {
        return Err(usage("block_size must be at least 1"));
    }
    let file = path.display().to_string();
    let mut summary = LoadSummary { block_size, ..LoadSummary::default() };
    let mut lines: Vec<(f64, u32, u32, Vec<u64>, usize, Option<String>)> = Vec::new();
    for_each_line(path, |line, text| {
        let at = |what: String| usage(format!("{file}:{line}: {what}"));
        let raw: RawTimed = parse_json(path, Some(line), text)?;
        let t = raw.timestamp.ok_or_else(|| at("missing field `timestamp`".into()))?;
        let t = time(t, "timestamp").map_err(at)?;
        let input = raw.input_length.ok_or_else(|| at("missing field `input_length`".into()))?;
        let out = raw.output_length.ok_or_else(|| at("missing field `output_length`".into()))?;
        let ids = raw.hash_ids.ok_or_else(|| at("missing field `hash_ids`".into()))?;
        let (input, out) =
            lengths(input, out, ids.len(), block_size, ("input_length", "output_length"), &mut summary).map_err(at)?;
        let key = raw.session_id.or(raw.chat_id).filter(|v| !v.is_null()).map(|v| match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        });
        lines.push((t, input, out, ids, line, key));
        Ok(())
    })?;
    if lines.is_empty() {
        return Err(usage(format!("{file}: no requests in the file")));
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut set = SessionSet::new(Content::Blocks { block_size }, Arrival::Timed);
    set.named_partial_block = true;
    let keyed = lines.iter().any(|l| l.5.is_some());
    let mut conversations: HashMap<String, (u32, u32)> = HashMap::new();
    let mut dense: HashMap<u64, u32> = HashMap::new();
    let mut ids = Vec::new();
    let ns = name_key("timed trace");
    for (t, input, out, raw_ids, line, key) in lines {
        if keyed {
            // A line without the key is a conversation of its own.
            let key = key.unwrap_or_else(|| format!("line {line}"));
            let next = conversations.len() as u32;
            let c = conversations.entry(key).or_insert((next, 0));
            set.timed_sessions.push(*c);
            c.1 += 1;
        }
        ids.clear();
        for h in raw_ids {
            let next = dense.len() as u32;
            ids.push(*dense.entry(h).or_insert(next));
        }
        let mut b = set.begin(format!("line {line}"), ns);
        b.turn(0, TurnRecord { t_s: t, api_s: 0.0, input, max_tokens: out, ids: &ids })?;
        b.finish();
        summary.sessions += 1;
        summary.tree.root_turns += 1;
    }
    set.finish_loading();
    summary.memory_bytes = set.memory_bytes();
    Ok((set, summary))
}

/// A request whose prompt plus output does not fit the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlong {
    pub trace: String,
    pub stream: u32,
    pub turn: u32,
    /// Prompt (with the marker) plus `max_tokens`.
    pub tokens: u64,
}

/// Requests whose `in + extra_prompt_tokens + max_tokens` exceeds
/// `max_model_len` (`extra_prompt_tokens`: the cache-bust marker's
/// `synth::MARKER_TOKENS` when busting, else 0).
pub fn over_context(set: &SessionSet, max_model_len: u64, extra_prompt_tokens: u32) -> Vec<Overlong> {
    let mut out = Vec::new();
    for (s, name) in set.names.iter().enumerate() {
        for (si, stream) in set.session_streams(s).iter().enumerate() {
            for (k, t) in set.stream_turns(stream).iter().enumerate() {
                let tokens = u64::from(t.input) + u64::from(extra_prompt_tokens) + u64::from(t.max_tokens);
                if tokens > max_model_len {
                    out.push(Overlong { trace: name.clone(), stream: si as u32, turn: k as u32, tokens });
                }
            }
        }
    }
    out
}

/// Refuses a set with requests longer than `max_model_len` (see [`over_context`]).
///
/// Errors (usage): how many requests, in how many traces, the first few
/// and the limit.
pub fn check_context(set: &SessionSet, max_model_len: u64, extra_prompt_tokens: u32) -> Result<()> {
    let over = over_context(set, max_model_len, extra_prompt_tokens);
    if over.is_empty() {
        return Ok(());
    }
    let traces: HashSet<&str> = over.iter().map(|o| o.trace.as_str()).collect();
    let first: Vec<String> = over
        .iter()
        .take(3)
        .map(|o| format!("trace {} stream {} turn {}: {} tokens", o.trace, o.stream, o.turn, o.tokens))
        .collect();
    Err(usage(format!(
        "{} request(s) in {} trace(s) need more than the model's max-model-len of {max_model_len} tokens (prompt{} + output), e.g. {}; use a model with a longer context, a larger --max-model-len, or a trace cut to fit (AgentX publishes a _256k variant)",
        over.len(),
        traces.len(),
        if extra_prompt_tokens > 0 { format!(" + {extra_prompt_tokens}-token cache-bust marker") } else { String::new() },
        first.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::UsageError;

    pub(crate) fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces").join(name)
    }

    /// A trace spec asking for AgentX at `path`, with no window, warm-ups,
    /// idle caps or time scaling.
    fn agentx_spec(path: PathBuf, block_size: u32, seed: u64) -> TraceSpec {
        TraceSpec {
            path,
            format: TraceFormat::Agentx,
            block_size,
            seed,
            duration_s: None,
            max_requests: None,
            start_min_ratio: 0.0,
            start_max_ratio: 0.0,
            warmup_requests_per_lane: 0,
            tree_idle_cap_s: None,
            system_idle_cap_s: None,
            time_scale: 1.0,
            cache_bust: true,
            split_chains: true,
        }
    }

    /// The usage error of loading `text` as an AgentX file (block size 16).
    fn agentx_error(text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, text).unwrap();
        let err = load_agentx(&path, 16, true).expect_err("bad input must fail");
        assert!(err.downcast_ref::<UsageError>().is_some(), "not a usage error: {err:#}");
        err.to_string()
    }

    fn timed_error(text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, text).unwrap();
        let err = load_timed(&path, 16).expect_err("bad input must fail");
        assert!(err.downcast_ref::<UsageError>().is_some(), "not a usage error: {err:#}");
        err.to_string()
    }

    fn stream_delays(set: &SessionSet, s: usize, stream: usize) -> Vec<f64> {
        let st = set.session_streams(s)[stream];
        set.stream_turns(&st).iter().map(|t| t.delay_s).collect()
    }

    fn stream_hits(set: &SessionSet, s: usize, stream: usize) -> Vec<u32> {
        let st = set.session_streams(s)[stream];
        set.stream_turns(&st).iter().map(|t| t.hit).collect()
    }

    #[test]
    fn agentx_fixture_loads_with_trees_delays_and_hits() {
        let (set, summary) = load_agentx(&fixture("agentx.jsonl"), 16, true).unwrap();
        assert_eq!(set.names, vec!["alpha", "beta", "gamma", "delta"]);
        assert_eq!(
            (summary.sessions, summary.tree.root_turns, summary.tree.subagents, summary.tree.subagent_turns),
            (4, 12, 3, 5)
        );
        assert_eq!((summary.tree.dropped_subagents, summary.zero_out, summary.max_context), (0, 0, 108));
        assert_eq!(set.content, Content::Blocks { block_size: 16 });
        assert_eq!(set.turn_counts(), (17, 5));
        // alpha: a joined subagent off root turn 1 and a background one.
        let alpha = set.session_streams(0);
        assert_eq!(alpha.len(), 3);
        let (c, bg) = (alpha[1], alpha[2]);
        assert_eq!((c.spawn.unwrap().anchor, c.spawn.unwrap().delay_s), (1, 1.0)); // 6 - 4 - 1
        assert_eq!((c.join.unwrap().turn, c.join.unwrap().gap_s), (3, 1.0)); // ends 6 + 7 = 13, joined at 14
        assert_eq!((bg.spawn.unwrap().anchor, bg.spawn.unwrap().delay_s), (1, 2.0));
        assert_eq!(bg.join, None);
        assert_eq!(stream_delays(&set, 0, 0), vec![0.0, 2.5, 3.0, 5.0]);
        assert_eq!(stream_delays(&set, 0, 1), vec![0.0, 2.0]); // 10 - 6 - 2
        // Recorded order r0 r1 c0 bg r2 c1 r3 over one seen set.
        assert_eq!(stream_hits(&set, 0, 0), vec![0, 2, 5, 5]);
        assert_eq!(stream_hits(&set, 0, 1), vec![0, 2]);
        assert_eq!(stream_hits(&set, 0, 2), vec![0]);
        // gamma's context reset shares nothing with what came before.
        assert_eq!(stream_hits(&set, 2, 0), vec![0, 0, 2]);
        // delta's subagent has times relative to its entry (older files).
        let delta = set.session_streams(3);
        let sub = set.stream_turns(&delta[1]);
        assert_eq!((sub[0].t_s, sub[1].t_s), (105.0, 107.0));
        assert_eq!(delta[1].spawn.unwrap().delay_s, 4.0); // 105 - 100 - 1
        assert_eq!((delta[1].join.unwrap().turn, delta[1].join.unwrap().gap_s), (1, 4.0)); // ends 108
        assert_eq!(set.sessions[3].start_s, 100.0);
        // Ids are stored once per stream prefix: alpha 3+3+0+2 root, 3 child, 1 background.
        let mut ids = Vec::new();
        set.turn_ids(&alpha[0], 3, &mut ids);
        assert_eq!(ids, vec![0, 1, 3, 4, 5, 6, 7]);
        assert!(summary.memory_bytes > 0 && summary.memory_bytes == set.memory_bytes());
    }

    #[test]
    fn parallel_chains_become_streams_by_aiperfs_rule() {
        // fanout: a worker forks the main agent's prefix while root turn 1
        // runs (t 3, 6), the main agent compacts at t 12 (a seam), and a
        // subagent runs two chains (its second request forks the first's).
        let (set, summary) = load_agentx(&fixture("agentx_chains.jsonl"), 16, true).unwrap();
        assert_eq!((summary.tree.top_level_chains, summary.tree.subagent_chains, summary.tree.seams), (1, 1, 1));
        assert_eq!((summary.tree.root_turns, summary.tree.subagents, summary.tree.subagent_turns), (7, 1, 3));
        let st = set.session_streams(0);
        let n: Vec<u32> = st.iter().map(|s| s.n_turns).collect();
        assert_eq!(n, vec![5, 2, 1, 2], "root (with the compaction), the subagent's two chains, the worker");
        let input = |s: usize| set.stream_turns(&st[s]).iter().map(|t| t.input).collect::<Vec<_>>();
        assert_eq!(input(0), vec![48, 64, 80, 48, 64]);
        // The subagent's chains: both from root turn 2 (t 9, ends 10), at
        // their own offsets, both joined by root turn 4 (t 15; ends 14.5).
        for (s, delay) in [(1, 0.5), (2, 1.0)] {
            assert_eq!((st[s].spawn.unwrap().anchor, st[s].spawn.unwrap().delay_s), (2, delay));
            assert_eq!((st[s].join.unwrap().turn, st[s].join.unwrap().gap_s), (4, 0.5));
        }
        // The worker starts 2 s after root turn 0 ends (beside root turn 1),
        // and root turn 2 (t 9) waits for its end (7) plus 2 s.
        let w = st[3];
        assert_eq!((w.spawn.unwrap().anchor, w.spawn.unwrap().delay_s), (0, 2.0));
        assert_eq!((w.join.unwrap().turn, w.join.unwrap().gap_s), (2, 2.0));
        assert_eq!(stream_delays(&set, 0, 3), vec![0.0, 1.0]); // 6 - 3 - 2
        // The theoretical hits do not depend on the split (recorded order).
        let (serial, s2) = load_agentx(&fixture("agentx_chains.jsonl"), 16, false).unwrap();
        assert_eq!((s2.tree.top_level_chains, s2.tree.subagent_chains, s2.tree.seams), (0, 0, 0));
        let n: Vec<u32> = serial.session_streams(0).iter().map(|s| s.n_turns).collect();
        assert_eq!(n, vec![7, 3], "split_chains = false: one stream each");
        let hits = |set: &SessionSet| set.turns.iter().map(|t| t.hit).sum::<u32>();
        assert_eq!(hits(&set), hits(&serial));
    }

    #[test]
    fn folders_and_specs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(fixture("agentx.jsonl"), dir.path().join("traces.jsonl")).unwrap();
        let spec = agentx_spec(dir.path().to_path_buf(), 16, 1);
        assert_eq!(load_trace(&spec).unwrap().1.sessions, 4);
        let empty = tempfile::tempdir().unwrap();
        let err = load_trace(&TraceSpec { path: empty.path().to_path_buf(), ..spec.clone() }).unwrap_err();
        assert!(err.to_string().contains("has no traces.jsonl"), "{err}");
        let err = load_trace(&TraceSpec { path: empty.path().join("nope.jsonl"), ..spec.clone() }).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        // The file's block size must agree with the recipe's.
        let err = load_trace(&TraceSpec { block_size: 64, path: fixture("agentx.jsonl"), ..spec }).unwrap_err();
        assert!(err.to_string().contains("block_size 16 differs from the recipe's 64"), "{err}");
    }

    #[test]
    fn agentx_bad_input_names_file_line_and_field() {
        let ok = r#"{"id":"a","requests":[{"t":0,"type":"n","in":32,"out":2,"hash_ids":[0,1],"api_time":1}]}"#;
        let cases: &[(String, &str)] = &[
            (format!("{ok}\n{{\"id\": \"b\", \"requests\": [\n"), "bad.jsonl:2:"),
            (ok.replace(r#""in":32,"#, ""), "bad.jsonl:1: trace a: requests[0]: missing field `in`"),
            (ok.replace(r#""t":0"#, r#""t":-1.5"#), "requests[0]: `t` is -1.5; times must be >= 0"),
            (ok.replace(r#""api_time":1"#, r#""api_time":-2"#), "`api_time` is -2"),
            (ok.replace("[0,1]", "[0,1,2]"), "3 hash_ids but `in` = 32 tokens fill at most 2 blocks of 16"),
            (ok.replace(r#""in":32"#, r#""in":0"#), "`in` is 0; expected 1 to"),
            (ok.replace(r#""in":32"#, r#""in":"ten""#), "bad.jsonl:1:"),
            (ok.replace(r#""type":"n""#, r#""type":"x""#), r#"requests[0]: type "x"; expected "n", "s" or "subagent""#),
            (ok.replace(r#""id":"a","#, ""), "bad.jsonl:1: missing field `id`"),
            (format!("{ok}\n{ok}"), "bad.jsonl:2: trace id \"a\" appears twice"),
            (ok.replace(r#""requests""#, r#""reqs""#), "trace a: missing field `requests`"),
            (ok.replace(r#""id":"a","#, r#""id":"a","block_size":64,"#), "block_size 64 differs from the recipe's 16"),
            (
                ok.replace(
                    "]}",
                    r#",{"t":3,"type":"subagent","requests":[{"t":3,"type":"n","in":16,"hash_ids":[5],"api_time":1}]}]}"#,
                ),
                "trace a: requests[1] (subagent): requests[0]: missing field `out`",
            ),
            (
                ok.replace("]}", r#",{"t":3,"type":"subagent","requests":[]}]}"#),
                "requests[1] (subagent): `requests` is empty",
            ),
            (r#"{"id":"a","requests":[]}"#.to_string(), "trace a has no top-level requests"),
            ("\n\n".to_string(), "no traces in the file"),
        ];
        for (text, want) in cases {
            let got = agentx_error(text);
            assert!(got.contains(want), "input {text:?}\n  error {got:?}\n  wanted {want:?}");
        }
        // The type error keeps serde's words and the column, and names the field.
        let got = agentx_error(&ok.replace(r#""in":32"#, r#""in":"ten""#));
        assert!(got.contains("field `requests[0].in`: invalid type: string \"ten\""), "{got}");
    }

    #[test]
    fn lenient_fields_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let text = r#"{"id":"a","requests":[{"t":0,"type":"subagent","requests":[{"t":0,"type":"n","in":16,"out":1,"hash_ids":[5],"api_time":1}]},{"t":2,"type":"n","in":32,"out":0,"hash_ids":[0,1],"api_time":1},{"t":5,"type":"n","in":32,"out":3,"hash_ids":[0,1],"api_time":null}]}"#;
        std::fs::write(&path, text).unwrap();
        let (set, summary) = load_agentx(&path, 16, true).unwrap();
        assert_eq!((summary.tree.dropped_subagents, summary.tree.subagents, summary.zero_out), (1, 0, 1));
        assert_eq!(set.turns.len(), 2);
        assert_eq!(set.turns[0].max_tokens, 1, "an out of 0 is sent as 1");
        assert_eq!(summary.missing_api_time, 1);
        assert_eq!(set.turns[1].api_s, 0.0);
    }

    #[test]
    fn timed_trace_sorts_renumbers_and_hits_across_lines() {
        let (set, summary) = load_timed(&fixture("timed.jsonl"), 16).unwrap();
        assert_eq!(set.arrival, Arrival::Timed);
        assert_eq!(summary.sessions, 4);
        assert_eq!(set.names, vec!["line 1", "line 3", "line 2", "line 5"]);
        let times: Vec<f64> = set.turns.iter().map(|t| t.t_s).collect();
        assert_eq!(times, vec![0.0, 20.0, 50.0, 120.0]);
        let mut ids = Vec::new();
        let all: Vec<Vec<u32>> = (0..4)
            .map(|s| {
                set.turn_ids(&set.session_streams(s)[0], 0, &mut ids);
                ids.clone()
            })
            .collect();
        assert_eq!(all, vec![vec![0, 1, 2], vec![3], vec![0, 1, 4], vec![0, 1, 4, 5, 6]]);
        let hits: Vec<u32> = set.turns.iter().map(|t| t.hit).collect();
        assert_eq!(hits, vec![0, 0, 2, 3]);
    }

    #[test]
    fn the_format_is_read_off_the_first_line() {
        assert_eq!(sniff_format(&fixture("agentx.jsonl")).unwrap(), Ok(TraceFormat::Agentx));
        assert_eq!(sniff_format(&fixture("mooncake_shaped.jsonl")).unwrap(), Ok(TraceFormat::Timed));
        assert_eq!(sniff_format(Path::new("hf://datasets/o/n")), None, "not a file here");
        let err = detect_format(r#"{"prompt": "hi", "max_tokens": 3}"#).unwrap_err();
        assert!(err.contains("its keys: max_tokens, prompt") && err.contains("\"requests\"") && err.contains("\"timestamp\""), "{err}");
        // A format given that the file contradicts names the right one.
        let spec = agentx_spec(fixture("mooncake_shaped.jsonl"), 64, 0);
        let err = load_trace(&spec).unwrap_err().to_string();
        assert!(err.contains("a timed trace, but format agentx was asked: give --trace-format timed"), "{err}");
    }

    #[test]
    fn a_session_key_groups_timed_lines_into_conversations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bailian.jsonl");
        let line = |t: u32, key: &str| format!(r#"{{"timestamp": {t}, "input_length": 32, "output_length": 2, "hash_ids": [1, 2]{key}}}"#);
        let text = [line(30, r#", "chat_id": 7"#), line(0, r#", "chat_id": 7"#), line(10, r#", "session_id": "b""#), line(20, "")].join("\n");
        std::fs::write(&path, text).unwrap();
        let (set, _) = load_timed(&path, 16).unwrap();
        // In release order: chat 7 turn 0, b turn 0, the keyless line alone, chat 7 turn 1.
        assert_eq!(set.timed_sessions, vec![(0, 0), (1, 0), (2, 0), (0, 1)]);
        let (mooncake, _) = load_timed(&fixture("mooncake_shaped.jsonl"), 512).unwrap();
        assert!(mooncake.timed_sessions.is_empty(), "no key: each line its own session");
    }

    #[test]
    fn timed_bad_input() {
        let ok = r#"{"timestamp": 5, "input_length": 32, "output_length": 2, "hash_ids": [1, 2]}"#;
        let cases: &[(String, &str)] = &[
            (ok.replace(r#""timestamp": 5, "#, ""), "bad.jsonl:1: missing field `timestamp`"),
            (format!("{ok}\n{}", ok.replace("5,", "-5,")), "bad.jsonl:2: `timestamp` is -5"),
            (ok.replace("[1, 2]", "[1, 2, 3]"), "3 hash_ids but `input_length` = 32 tokens fill at most 2 blocks"),
            (ok.replace(r#", "hash_ids": [1, 2]"#, ""), "missing field `hash_ids`"),
            (ok.replace("}", ""), "bad.jsonl:1:"),
            (String::new(), "no requests in the file"),
            // A wrong type names the field (docs/workloads.md).
            (format!("{ok}\n{}", ok.replace("[1, 2]", r#""1002""#)), "bad.jsonl:2:75: field `hash_ids`: invalid type: string \"1002\", expected a sequence"),
        ];
        for (text, want) in cases {
            let got = timed_error(text);
            assert!(got.contains(want), "input {text:?}\n  error {got:?}\n  wanted {want:?}");
        }
    }

    #[test]
    fn context_check_lists_what_does_not_fit() {
        let (set, _) = load_agentx(&fixture("agentx.jsonl"), 16, true).unwrap();
        assert!(check_context(&set, 108, 0).is_ok());
        let over = over_context(&set, 100, 8);
        // alpha r2 (80+8+5) fits; r3 (100+8+8) does not; nothing else comes close.
        assert_eq!(over, vec![Overlong { trace: "alpha".into(), stream: 0, turn: 3, tokens: 116 }]);
        let err = check_context(&set, 60, 8).unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some());
        let msg = err.to_string();
        assert!(msg.contains("request(s) in 3 trace(s) need more than the model's max-model-len of 60 tokens"), "{msg}");
        assert!(msg.contains("8-token cache-bust marker") && msg.contains("trace alpha stream 0 turn 1: 83 tokens"), "{msg}");
    }
}
