//! The data model every session workload shares: a [`SessionSet`] of
//! session trees, built once from a file and read by the replay schedules.
//!
//! A session is a tree of streams: stream 0 is the root (the main agent's
//! turns, or a conversation); every other stream is a subagent, spawned a
//! recorded delay after a root turn (its anchor) completes, and optionally
//! joined by a later root turn that waits for it (no join: a background
//! subagent; the tree still lasts until it ends). A turn is one request:
//! its recorded start time and server time, its prompt (a list of ids: hash
//! ids of `block_size`-token blocks for traces, token ids for
//! conversations), its prompt length `input`, and `max_tokens`. The delay
//! before turn k of a stream is end-to-start, measured from the moment
//! turn k-1 completes: `max(0, t_k - t_{k-1} - api_time_{k-1})` (AgentX's
//! `_end_to_start_delay_ms`, notes/agentx.md 5f).
//!
//! Memory: prompts are never stored, only ids, and those delta-encoded:
//! turn k keeps the ids it shares as a prefix with turn k-1 of its stream
//! (`keep`) and stores only the ones after it. An agent's context grows by
//! appending, so a trace costs about its distinct blocks, not the sum of
//! its requests' contexts ([`SessionSet::memory_bytes`]). A turn's full id
//! list is rebuilt by walking back its stream ([`SessionSet::turn_ids`]).

use std::collections::HashSet;

use anyhow::{Result, bail};

/// What a turn's ids stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// Hash ids of `block_size`-token blocks (equal ids = identical blocks
    /// within a namespace); the prompt is synthesized (`super::synth`).
    Blocks { block_size: u32 },
    /// The prompt's token ids themselves (already through the chat template).
    Tokens,
}

/// How sessions start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Lanes of session trees: a lane holds one tree until it ends, then
    /// takes the next (`super::lanes::LanesReplay`).
    Lanes,
    /// Each session (one turn) is released at its recorded time
    /// (`super::timed::TimedReplay`).
    Timed,
}

/// One recorded request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Turn {
    /// Recorded start, s from the trace's origin (before the replay's time scale).
    pub t_s: f64,
    /// Recorded server time (AgentX `api_time`), s.
    pub api_s: f64,
    /// End-to-start delay after the previous turn of the stream completes,
    /// s: `max(0, t_k - t_{k-1} - api_{k-1})`; 0 for a stream's first turn.
    pub delay_s: f64,
    /// Prompt tokens (without the replay's cache-bust marker).
    pub input: u32,
    /// Output tokens asked for (the recorded `out`; at least 1).
    pub max_tokens: u32,
    /// Leading ids shared with the previous turn of the stream.
    pub keep: u32,
    /// The ids after those, `SessionSet::ids[new_start..new_start + new_len]`.
    pub new_start: u32,
    pub new_len: u32,
    /// Theoretical prefix-cache hit, in ids (see `TurnInfo::hit_blocks`).
    pub hit: u32,
}

impl Turn {
    /// Length of the turn's full id list.
    pub fn ids_len(&self) -> u32 {
        self.keep + self.new_len
    }
}

/// A subagent's spawn: `delay_s` after root turn `anchor` completes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spawn {
    pub anchor: u32,
    /// `max(0, t_first - t_anchor - api_anchor)`, s.
    pub delay_s: f64,
}

/// A subagent's join: root turn `turn` is not sent before the subagent
/// ended plus `gap_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Join {
    pub turn: u32,
    /// `max(0, t_join - recorded end of the subagent)`, s.
    pub gap_s: f64,
}

/// One stream of turns (root or subagent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stream {
    /// `SessionSet::turns[first_turn..first_turn + n_turns]`.
    pub first_turn: u32,
    pub n_turns: u32,
    /// `None` for the root.
    pub spawn: Option<Spawn>,
    /// `None`: the root, or a background subagent.
    pub join: Option<Join>,
}

/// One session tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Session {
    /// Keys the prompt content: sessions with equal keys share blocks of
    /// equal ids (one per AgentX trace; one for a whole timed trace).
    pub ns_key: u64,
    /// `SessionSet::streams[first_stream..first_stream + n_streams]`; root first.
    pub first_stream: u32,
    pub n_streams: u32,
    /// Earliest and latest recorded turn start, s.
    pub start_s: f64,
    pub end_s: f64,
}

/// Sessions loaded from a file: the replay's read-only input.
#[derive(Debug, Clone)]
pub struct SessionSet {
    pub content: Content,
    pub arrival: Arrival,
    /// One name per session (the trace id, `line N`, or the conversation id).
    pub names: Vec<String>,
    pub sessions: Vec<Session>,
    pub streams: Vec<Stream>,
    pub turns: Vec<Turn>,
    /// Every turn's new ids, back to back.
    pub ids: Vec<u32>,
    /// A hash id after a prompt's full blocks names its partial last block
    /// (Mooncake's traces: equal ids, equal tokens, as far as the shorter
    /// goes); `false`: the tail is the turn's own (AgentX).
    pub named_partial_block: bool,
    /// Timed traces with a session key: per line (session of the set, in
    /// release order), its conversation and its turn within it, both
    /// 0-based in first-seen order; empty without a key (each line is its
    /// own session).
    pub timed_sessions: Vec<(u32, u32)>,
    /// Theoretical hits: ids seen so far in the current namespace.
    seen: Seen,
    seen_ns: Option<u64>,
}

impl SessionSet {
    pub fn new(content: Content, arrival: Arrival) -> Self {
        SessionSet {
            content,
            arrival,
            names: Vec::new(),
            sessions: Vec::new(),
            streams: Vec::new(),
            turns: Vec::new(),
            ids: Vec::new(),
            named_partial_block: false,
            timed_sessions: Vec::new(),
            seen: Seen::default(),
            seen_ns: None,
        }
    }

    /// Starts a session named `name` in namespace `ns_key`; sessions of one
    /// namespace must be added one after the other (theoretical hits run
    /// over a namespace in that order).
    pub fn begin(&mut self, name: impl Into<String>, ns_key: u64) -> SessionBuilder<'_> {
        self.names.push(name.into());
        SessionBuilder { set: self, ns_key, streams: vec![StreamDraft::default()] }
    }

    /// The streams of session `s`.
    pub fn session_streams(&self, s: usize) -> &[Stream] {
        let ses = &self.sessions[s];
        &self.streams[ses.first_stream as usize..(ses.first_stream + ses.n_streams) as usize]
    }

    /// The turns of a stream.
    pub fn stream_turns(&self, stream: &Stream) -> &[Turn] {
        &self.turns[stream.first_turn as usize..(stream.first_turn + stream.n_turns) as usize]
    }

    /// Writes turn `k` of `stream`'s full id list into `out` (cleared
    /// first), walking back over the turns it shares a prefix with.
    pub fn turn_ids(&self, stream: &Stream, k: usize, out: &mut Vec<u32>) {
        let turns = self.stream_turns(stream);
        let total = turns[k].ids_len() as usize;
        out.clear();
        out.resize(total, 0);
        // Positions [0, limit) are still to fill; turn j holds its own
        // positions [keep_j, ids_len_j) and `limit <= ids_len_j` always
        // holds, since keep_{j+1} <= ids_len_j.
        let mut limit = total;
        let mut j = k;
        loop {
            let t = &turns[j];
            let keep = t.keep as usize;
            if limit > keep {
                let start = t.new_start as usize;
                out[keep..limit].copy_from_slice(&self.ids[start..start + (limit - keep)]);
                limit = keep;
            }
            if limit == 0 {
                break;
            }
            j -= 1;
        }
    }

    /// Bytes held by the set (vector capacities and names).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.ids.capacity() * size_of::<u32>()
            + self.turns.capacity() * size_of::<Turn>()
            + self.streams.capacity() * size_of::<Stream>()
            + self.sessions.capacity() * size_of::<Session>()
            + self.names.capacity() * size_of::<String>()
            + self.names.iter().map(|n| n.capacity()).sum::<usize>()
            + self.seen.bytes()
    }

    /// Drops load-time scratch and spare capacity (call once loading is done).
    pub fn finish_loading(&mut self) {
        self.seen = Seen::default();
        self.seen_ns = None;
        self.ids.shrink_to_fit();
        self.turns.shrink_to_fit();
        self.streams.shrink_to_fit();
        self.sessions.shrink_to_fit();
        self.names.shrink_to_fit();
    }

    /// Total turns over all sessions, and those of subagent streams.
    pub fn turn_counts(&self) -> (usize, usize) {
        let sub: usize = (0..self.sessions.len())
            .flat_map(|s| self.session_streams(s)[1..].iter())
            .map(|st| st.n_turns as usize)
            .sum();
        (self.turns.len(), sub)
    }
}

/// A recorded request as a loader hands it to [`SessionBuilder::turn`].
#[derive(Debug, Clone, Copy)]
pub struct TurnRecord<'a> {
    pub t_s: f64,
    pub api_s: f64,
    pub input: u32,
    pub max_tokens: u32,
    pub ids: &'a [u32],
}

#[derive(Debug, Default)]
struct StreamDraft {
    turns: Vec<Turn>,
    prev_ids: Vec<u32>,
    /// Subagents: the anchor root turn and the recorded end, s.
    anchor: Option<u32>,
    end_s: f64,
}

/// Adds one session's streams and turns; [`SessionBuilder::finish`] derives
/// the spawn/join links and theoretical hits and appends it to the set.
pub struct SessionBuilder<'s> {
    set: &'s mut SessionSet,
    ns_key: u64,
    streams: Vec<StreamDraft>,
}

/// Joins match a subagent's recorded end this loosely (AgentX's 1e-6).
const JOIN_SLACK_S: f64 = 1e-6;

impl SessionBuilder<'_> {
    /// Adds a subagent stream spawned after root turn `anchor` whose
    /// recorded end is `end_s`; returns its stream index.
    pub fn child(&mut self, anchor: u32, end_s: f64) -> u32 {
        self.streams.push(StreamDraft { anchor: Some(anchor), end_s, ..StreamDraft::default() });
        (self.streams.len() - 1) as u32
    }

    /// Root turns added so far.
    pub fn root_turns(&self) -> u32 {
        self.streams[0].turns.len() as u32
    }

    /// Appends a turn to `stream` (0 = root).
    ///
    /// Errors: the set's id store would pass 2^32 entries.
    pub fn turn(&mut self, stream: u32, rec: TurnRecord<'_>) -> Result<()> {
        let draft = &mut self.streams[stream as usize];
        let keep = if draft.turns.is_empty() { 0 } else { common_prefix(&draft.prev_ids, rec.ids) };
        let delay_s = match draft.turns.last() {
            Some(p) => (rec.t_s - p.t_s - p.api_s).max(0.0),
            None => 0.0,
        };
        let fresh = &rec.ids[keep..];
        let new_start = self.set.ids.len();
        if new_start + fresh.len() > u32::MAX as usize {
            bail!("more than 2^32 distinct hash ids in one replay");
        }
        self.set.ids.extend_from_slice(fresh);
        draft.turns.push(Turn {
            t_s: rec.t_s,
            api_s: rec.api_s,
            delay_s,
            input: rec.input,
            max_tokens: rec.max_tokens.max(1),
            keep: keep as u32,
            new_start: new_start as u32,
            new_len: fresh.len() as u32,
            hit: 0,
        });
        draft.prev_ids.clear();
        draft.prev_ids.extend_from_slice(rec.ids);
        Ok(())
    }

    /// Links the subagents (join = the first root turn after the anchor
    /// that starts at or after the subagent's recorded end; none: a
    /// background subagent), computes the theoretical hits and appends the
    /// session. Subagents without turns are left out.
    ///
    /// Panics if the root has no turns (loaders check it first).
    pub fn finish(self) {
        let SessionBuilder { set, ns_key, mut streams } = self;
        assert!(!streams[0].turns.is_empty(), "a session needs a root turn");
        streams.retain(|s| !s.turns.is_empty());
        let root = &streams[0].turns;
        let links: Vec<(Option<Spawn>, Option<Join>)> = streams
            .iter()
            .map(|s| {
                let Some(anchor) = s.anchor else { return (None, None) };
                let a = &root[anchor as usize];
                let spawn = Spawn { anchor, delay_s: (s.turns[0].t_s - a.t_s - a.api_s).max(0.0) };
                let join = root
                    .iter()
                    .enumerate()
                    .skip(anchor as usize + 1)
                    .find(|(_, r)| r.t_s + JOIN_SLACK_S >= s.end_s)
                    .map(|(j, r)| Join { turn: j as u32, gap_s: (r.t_s - s.end_s).max(0.0) });
                (Some(spawn), join)
            })
            .collect();
        let first_stream = set.streams.len() as u32;
        let (mut start_s, mut end_s) = (f64::INFINITY, f64::NEG_INFINITY);
        for (s, (spawn, join)) in streams.iter().zip(links) {
            for t in &s.turns {
                start_s = start_s.min(t.t_s);
                end_s = end_s.max(t.t_s);
            }
            set.streams.push(Stream {
                first_turn: set.turns.len() as u32,
                n_turns: s.turns.len() as u32,
                spawn,
                join,
            });
            set.turns.extend_from_slice(&s.turns);
        }
        let n_streams = streams.len() as u32;
        set.sessions.push(Session { ns_key, first_stream, n_streams, start_s, end_s });
        set.compute_hits(set.sessions.len() - 1);
    }
}

impl SessionSet {
    /// Theoretical hits of session `s`'s turns. Blocks: its requests in
    /// recorded order (start time, then stream, then turn), one `seen` set
    /// per namespace; a turn's hit is the leading run of its ids already
    /// seen (AIPerf's rule, notes/agentx.md 4e). Tokens: the prefix shared
    /// with the previous turn of the stream.
    fn compute_hits(&mut self, s: usize) {
        let ses = self.sessions[s];
        let streams: Vec<Stream> = self.session_streams(s).to_vec();
        if self.content == Content::Tokens {
            for st in &streams {
                for t in &mut self.turns[st.first_turn as usize..(st.first_turn + st.n_turns) as usize] {
                    t.hit = t.keep;
                }
            }
            return;
        }
        if self.seen_ns != Some(ses.ns_key) {
            self.seen = Seen::default();
            self.seen_ns = Some(ses.ns_key);
        }
        let mut order: Vec<(f64, u32, u32)> = Vec::new();
        for (si, st) in streams.iter().enumerate() {
            for k in 0..st.n_turns {
                order.push((self.turns[(st.first_turn + k) as usize].t_s, si as u32, k));
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut ids = Vec::new();
        let mut seen = std::mem::take(&mut self.seen);
        for (_, si, k) in order {
            let st = streams[si as usize];
            self.turn_ids(&st, k as usize, &mut ids);
            let hit = ids.iter().take_while(|&&id| seen.contains(id)).count();
            for &id in &ids[hit..] {
                seen.insert(id);
            }
            self.turns[(st.first_turn + k) as usize].hit = hit as u32;
        }
        self.seen = seen;
    }
}

/// Length of the common prefix of two id lists.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A set of ids: a bitmap while ids are small (AgentX's per-trace ids run
/// 0, 1, 2, ...), a hash set beyond.
#[derive(Debug, Clone, Default)]
struct Seen {
    bits: Vec<u64>,
    sparse: HashSet<u32>,
}

/// Ids below this go to the bitmap (at most 8 MiB).
const DENSE_IDS: u32 = 1 << 26;

impl Seen {
    fn contains(&self, id: u32) -> bool {
        if id < DENSE_IDS {
            self.bits.get((id / 64) as usize).is_some_and(|w| w >> (id % 64) & 1 == 1)
        } else {
            self.sparse.contains(&id)
        }
    }

    fn insert(&mut self, id: u32) {
        if id < DENSE_IDS {
            let w = (id / 64) as usize;
            if w >= self.bits.len() {
                self.bits.resize(w + 1, 0);
            }
            self.bits[w] |= 1 << (id % 64);
        } else {
            self.sparse.insert(id);
        }
    }

    fn bytes(&self) -> usize {
        self.bits.capacity() * 8 + self.sparse.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t_s: f64, api_s: f64, ids: &[u32]) -> TurnRecord<'_> {
        TurnRecord { t_s, api_s, input: ids.len() as u32 * 4, max_tokens: 3, ids }
    }

    #[test]
    fn delta_encoding_round_trips_and_stores_only_new_ids() {
        let mut set = SessionSet::new(Content::Blocks { block_size: 4 }, Arrival::Lanes);
        let turns: [&[u32]; 5] = [&[0, 1, 2], &[0, 1, 2, 3, 4], &[0, 1, 5], &[0, 1, 5, 6, 7, 8], &[9]];
        let mut b = set.begin("a", 1);
        for (k, ids) in turns.iter().enumerate() {
            b.turn(0, rec(k as f64, 0.5, ids)).unwrap();
        }
        b.finish();
        let stream = set.streams[0];
        let mut out = Vec::new();
        for (k, ids) in turns.iter().enumerate() {
            set.turn_ids(&stream, k, &mut out);
            assert_eq!(&out, ids, "turn {k}");
        }
        // 3 + 2 + 1 + 3 + 1 new ids.
        assert_eq!(set.ids.len(), 10);
        let t = set.stream_turns(&stream);
        assert_eq!(t.iter().map(|t| t.keep).collect::<Vec<_>>(), vec![0, 3, 2, 3, 0]);
        // End-to-start: 1 - 0 - 0.5.
        assert_eq!(t[1].delay_s, 0.5);
        assert_eq!(t[0].delay_s, 0.0);
        // Hits: leading run already seen in the trace.
        assert_eq!(t.iter().map(|t| t.hit).collect::<Vec<_>>(), vec![0, 3, 2, 3, 0]);
    }

    #[test]
    fn spawn_join_background_and_hits_across_streams() {
        let mut set = SessionSet::new(Content::Blocks { block_size: 4 }, Arrival::Lanes);
        let mut b = set.begin("tree", 7);
        b.turn(0, rec(0.0, 1.0, &[0, 1])).unwrap(); // root 0
        b.turn(0, rec(2.0, 1.0, &[0, 1, 2])).unwrap(); // root 1: anchor
        let joined = b.child(1, 10.0);
        b.turn(joined, rec(4.0, 2.0, &[0, 1, 7])).unwrap();
        b.turn(joined, rec(8.0, 2.0, &[0, 1, 7, 8])).unwrap();
        let background = b.child(1, 100.0);
        b.turn(background, rec(5.0, 1.0, &[20])).unwrap();
        let empty = b.child(0, 0.0);
        let _ = empty;
        b.turn(0, rec(6.0, 1.0, &[0, 1, 2, 3])).unwrap(); // root 2: starts before the child ends
        b.turn(0, rec(12.0, 1.0, &[0, 1, 2, 3, 9])).unwrap(); // root 3: the join
        b.finish();
        let streams = set.session_streams(0).to_vec();
        assert_eq!(streams.len(), 3, "the empty subagent is left out");
        let sp = streams[1].spawn.unwrap();
        assert_eq!((sp.anchor, sp.delay_s), (1, 1.0)); // 4 - 2 - 1
        let j = streams[1].join.unwrap();
        assert_eq!((j.turn, j.gap_s), (3, 2.0)); // 12 - 10
        assert_eq!(streams[2].join, None, "nothing starts after t=100: background");
        let ses = set.sessions[0];
        assert_eq!((ses.start_s, ses.end_s), (0.0, 12.0));
        // Recorded order: r0(0) r1(2) c0(4) bg(5) r2(6) c1(8) r3(12).
        let hits = |s: &Stream| set.stream_turns(s).iter().map(|t| t.hit).collect::<Vec<_>>();
        assert_eq!(hits(&streams[0]), vec![0, 2, 3, 4]);
        assert_eq!(hits(&streams[1]), vec![2, 3]);
        assert_eq!(hits(&streams[2]), vec![0]);
        assert_eq!(set.turn_counts(), (7, 3));
    }

    #[test]
    fn tokens_hit_is_the_prefix_shared_with_the_previous_turn() {
        let mut set = SessionSet::new(Content::Tokens, Arrival::Lanes);
        let mut b = set.begin("c", 1);
        b.turn(0, rec(0.0, 0.0, &[5, 6, 7])).unwrap();
        b.turn(0, rec(0.0, 0.0, &[5, 6, 7, 8, 5, 6])).unwrap();
        b.turn(0, rec(0.0, 0.0, &[5, 6, 9])).unwrap();
        b.finish();
        let hits: Vec<u32> = set.turns.iter().map(|t| t.hit).collect();
        assert_eq!(hits, vec![0, 3, 2]);
    }

    #[test]
    fn namespaces_keep_hits_apart_unless_shared() {
        let mut set = SessionSet::new(Content::Blocks { block_size: 2 }, Arrival::Timed);
        for (name, ns) in [("a", 1), ("b", 1), ("c", 2)] {
            let mut b = set.begin(name, ns);
            b.turn(0, rec(0.0, 0.0, &[3, 4])).unwrap();
            b.finish();
        }
        let hits: Vec<u32> = set.turns.iter().map(|t| t.hit).collect();
        assert_eq!(hits, vec![0, 2, 0]);
        let mut seen = Seen::default();
        seen.insert(DENSE_IDS + 5);
        seen.insert(3);
        assert!(seen.contains(DENSE_IDS + 5) && seen.contains(3) && !seen.contains(4));
    }
}
