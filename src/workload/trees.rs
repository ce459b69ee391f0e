//! A recorded agent session into the streams of a session tree: the one
//! place AgentX traces (`super::trace`) and the synthetic AgentX shape
//! become [`super::sessions`]' trees, with or without parallel chains.
//!
//! With `split_chains` (the default, as InferenceX's AIPerf replay does),
//! [`super::chains::detect`] runs on the top-level requests and on each
//! subagent's: the main top-level chain is the root stream; every other
//! top-level chain becomes a stream spawned from the last root turn that
//! had ended when the chain's first request started (so it starts at its
//! recorded offset, beside the root turn then in flight), ending at its
//! last request's end (joined, as a subagent is, by the first later root
//! turn that starts at or after that end);
//! a subagent's main chain is its stream, and each of its other chains a
//! sibling stream with the same anchor and recorded end (a join waits for
//! all of them). Without it, the top-level requests are one stream in file
//! order and each subagent one stream, as AgentX's older replay ran them.
//!
//! A subagent spawns from the last root-stream turn listed before it; with
//! no top-level request before it at all it is left out (AgentX drops it).
//! The tree has one level: a subagent listed after a worker chain's turns
//! still spawns from a root-stream turn, so its recorded offset, not that
//! worker's progress, places it.

use anyhow::Result;

use super::chains::{ChainRequest, detect};
use super::sessions::{SessionBuilder, TurnRecord};

/// One recorded request.
#[derive(Debug, Clone)]
pub struct RecordedTurn {
    /// Start, s on the trace's timeline; server time, s.
    pub t_s: f64,
    pub api_s: f64,
    /// Prompt tokens; output tokens recorded (the turn asks for at least 1).
    pub input: u32,
    pub out: u32,
    /// Hash ids of the prompt's blocks.
    pub ids: Vec<u32>,
}

/// A subagent entry: its requests and its recorded end, s.
#[derive(Debug, Clone)]
pub struct RecordedSubagent {
    pub turns: Vec<RecordedTurn>,
    pub end_s: f64,
}

/// One entry of a session, in the trace's order.
#[derive(Debug, Clone)]
pub enum Entry {
    Turn(RecordedTurn),
    Subagent(RecordedSubagent),
}

/// What [`add_tree`] made of the sessions it was given (it adds to them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeCounts {
    pub root_turns: usize,
    pub subagents: usize,
    pub subagent_turns: usize,
    /// Subagents with no top-level request before them: left out.
    pub dropped_subagents: usize,
    /// Top-level chains beside the main one, and subagents' chains beside
    /// their main one: streams of their own.
    pub top_level_chains: usize,
    pub subagent_chains: usize,
    /// Context edits spliced back as the same agent.
    pub seams: usize,
}

/// Adds one recorded session's streams to `b` (module overview) and its
/// figures to `counts`. The session needs a top-level request (loaders check it first).
///
/// Errors: the set's id store would pass 2^32 entries.
pub fn add_tree(b: &mut SessionBuilder<'_>, entries: &[Entry], split_chains: bool, counts: &mut TreeCounts) -> Result<()> {
    let roots: Vec<(usize, &RecordedTurn)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Entry::Turn(t) => Some((i, t)),
            Entry::Subagent(_) => None,
        })
        .collect();
    let top = chains(roots.iter().map(|(_, t)| *t), split_chains);
    counts.seams += top.seams;
    // Root-stream turns in their order, by entry position.
    let main_entries: Vec<usize> = top.main.iter().map(|&k| roots[k].0).collect();
    for &k in &top.main {
        b.turn(0, record(roots[k].1))?;
    }
    counts.root_turns += roots.len();
    // The last root-stream turn listed before entry `i`.
    let anchor_before = |i: usize| main_entries.iter().rposition(|&e| e < i).map(|k| k as u32);
    for (i, e) in entries.iter().enumerate() {
        let Entry::Subagent(sub) = e else { continue };
        // `roots` is in entry order: its first is the earliest top-level request.
        if roots.first().is_none_or(|&(r, _)| r > i) {
            counts.dropped_subagents += 1;
            continue;
        }
        // A worker turn precedes it but no root-stream turn: the first.
        let anchor = anchor_before(i).unwrap_or(0);
        let inner = chains(sub.turns.iter(), split_chains);
        counts.seams += inner.seams;
        counts.subagent_chains += inner.workers.len();
        for chain in std::iter::once(&inner.main).chain(&inner.workers) {
            let s = b.child(anchor, sub.end_s);
            for &k in chain {
                b.turn(s, record(&sub.turns[k]))?;
            }
        }
        counts.subagents += 1;
        counts.subagent_turns += sub.turns.len();
    }
    for chain in &top.workers {
        let first = roots[chain[0]].1;
        // The last root-stream turn that had ended when the chain began,
        // so the chain starts its recorded offset after it (the first one
        // when none had: at once after it).
        let anchor = top
            .main
            .iter()
            .rposition(|&k| roots[k].1.t_s + roots[k].1.api_s <= first.t_s + 1e-6)
            .unwrap_or(0) as u32;
        let end = chain.iter().map(|&k| roots[k].1.t_s + roots[k].1.api_s).fold(f64::NEG_INFINITY, f64::max);
        let s = b.child(anchor, end);
        for &k in chain {
            b.turn(s, record(roots[k].1))?;
        }
        counts.top_level_chains += 1;
    }
    Ok(())
}

/// The chains of `turns`: detected, or all of them in order as one.
fn chains<'a>(turns: impl Iterator<Item = &'a RecordedTurn>, split: bool) -> super::chains::Chains {
    let turns: Vec<&RecordedTurn> = turns.collect();
    if !split {
        return super::chains::Chains { main: (0..turns.len()).collect(), workers: Vec::new(), seams: 0 };
    }
    let reqs: Vec<ChainRequest<'_>> = turns
        .iter()
        .map(|t| ChainRequest { t_s: t.t_s, end_s: t.t_s + t.api_s, out: t.out, ids: &t.ids })
        .collect();
    detect(&reqs)
}

fn record(t: &RecordedTurn) -> TurnRecord<'_> {
    TurnRecord { t_s: t.t_s, api_s: t.api_s, input: t.input, max_tokens: t.out, ids: &t.ids }
}
