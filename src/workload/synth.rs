//! Prompt synthesis for replays: a turn's token-id prompt, built at send
//! time into a reusable buffer (no prompt is kept).
//!
//! - Hash id `h` of namespace `ns` becomes `block_size` token ids drawn
//!   from `allowed` (the vocabulary minus special tokens) by a generator
//!   keyed by (seed, ns, h): equal ids give identical blocks wherever they
//!   occur in the namespace (root and subagents of a trace), different
//!   namespaces (traces) never share. AgentX draws a block as a 64-token
//!   window of a tokenized text corpus keyed by sha256(seed:trace:h)
//!   (notes/agentx.md 5c); we send token ids in-process, so any fixed ids
//!   serve, and random ones keep a block's content unique.
//! - A prompt is its first `min(len(hash_ids), in / block_size)` blocks,
//!   then `in - covered * block_size` tail tokens keyed by (seed, ns,
//!   session, stream, turn): AgentX's partial-tail rule, so the prompt has
//!   exactly `in` tokens and a partial last block is never shared. Where a
//!   hash id names the partial last block (Mooncake's traces,
//!   [`SessionSet::named_partial_block`]), the tail is instead the first
//!   tokens of that id's block: equal ids give equal tails, and a partial
//!   block is a prefix of the full block of the same id (AIPerf's Mooncake
//!   path caches the partial block by its id; vLLM's `timed_trace` keys it
//!   by id and size).
//! - With cache busting, [`MARKER_TOKENS`] ids keyed by (seed, run id,
//!   lane, recycle pass, ns) go before every prompt of a session tree: the
//!   whole tree shares them, a recycled tree gets new ones, and nothing of
//!   an earlier replay is a prefix (AgentX's `first_turn_prefix` marker,
//!   5d). The prompt is then `in + MARKER_TOKENS` tokens long.
//! - Token-id sessions (conversations) are sent as they are.
//!
//! The generator is SplitMix64 (a fixed, documented function: the same ids
//! on every machine), one 64-bit draw per token.

use super::sessions::{Content, SessionSet};

/// Token ids of a cache-bust marker.
pub const MARKER_TOKENS: u32 = 8;

/// Domains of the generator keys.
const BLOCK: u64 = 1;
const TAIL: u64 = 2;
const MARKER: u64 = 3;

/// Builds prompts for one replay.
#[derive(Debug, Clone, Copy)]
pub struct Synth<'a> {
    allowed: &'a [u32],
    seed: u64,
}

impl<'a> Synth<'a> {
    /// Draws from `allowed` (vocabulary minus special tokens), keyed by `seed`.
    ///
    /// Panics if `allowed` is empty.
    pub fn new(allowed: &'a [u32], seed: u64) -> Self {
        assert!(!allowed.is_empty(), "no token ids to draw prompts from");
        Synth { allowed, seed }
    }

    /// The marker key of a session tree.
    pub fn marker_key(&self, run_id: u64, lane: u32, pass: u32, ns_key: u64) -> u64 {
        key(&[MARKER, self.seed, run_id, lane.into(), pass.into(), ns_key])
    }

    /// Writes turn `k` of stream `stream` (index within the session) of
    /// session `session` into `out` (cleared first); `marker`: a marker key
    /// from [`Synth::marker_key`] or none. `scratch` holds the turn's ids.
    pub fn build(
        &self,
        set: &SessionSet,
        session: usize,
        stream: usize,
        k: usize,
        marker: Option<u64>,
        out: &mut Vec<u32>,
        scratch: &mut Vec<u32>,
    ) {
        out.clear();
        if let Some(m) = marker {
            self.draw(m, MARKER_TOKENS as usize, out);
        }
        let st = set.session_streams(session)[stream];
        let turn = set.stream_turns(&st)[k];
        set.turn_ids(&st, k, scratch);
        match set.content {
            Content::Tokens => out.extend_from_slice(scratch),
            Content::Blocks { block_size } => {
                let ns = set.sessions[session].ns_key;
                let covered = covered_blocks(scratch.len() as u32, turn.input, block_size);
                out.reserve(turn.input as usize);
                for &id in &scratch[..covered as usize] {
                    self.draw(key(&[BLOCK, self.seed, ns, id.into()]), block_size as usize, out);
                }
                let tail = turn.input - covered * block_size;
                let tail_key = match scratch.get(covered as usize) {
                    Some(&id) if set.named_partial_block => key(&[BLOCK, self.seed, ns, id.into()]),
                    _ => key(&[TAIL, self.seed, ns, session as u64, stream as u64, k as u64]),
                };
                self.draw(tail_key, tail as usize, out);
            }
        }
    }

    /// Appends `n` ids drawn by the generator keyed `key`.
    fn draw(&self, key: u64, n: usize, out: &mut Vec<u32>) {
        let len = self.allowed.len() as u64;
        let mut state = key;
        out.extend((0..n).map(|_| {
            state = state.wrapping_add(GOLDEN);
            // Multiply-shift maps the high 32 bits onto 0..len.
            self.allowed[(((mix(state) >> 32) * len) >> 32) as usize]
        }));
    }
}

/// Full blocks of a prompt: the hash ids that fit within `input` tokens.
pub fn covered_blocks(ids: u32, input: u32, block_size: u32) -> u32 {
    ids.min(input / block_size)
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 64-bit key of a tuple of parts.
pub fn key(parts: &[u64]) -> u64 {
    parts.iter().fold(0x243F_6A88_85A3_08D3, |h, &p| mix(h.wrapping_add(GOLDEN) ^ p))
}

/// A namespace key of a trace id (FNV-1a): the same trace gets the same
/// blocks wherever it sits in the file.
pub fn name_key(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::sessions::{Arrival, TurnRecord};

    fn set_with(turns: &[(&[u32], u32)], ns: u64, content: Content) -> SessionSet {
        let mut set = SessionSet::new(content, Arrival::Lanes);
        let mut b = set.begin("t", ns);
        for (k, (ids, input)) in turns.iter().enumerate() {
            b.turn(0, TurnRecord { t_s: k as f64, api_s: 0.0, input: *input, max_tokens: 1, ids }).unwrap();
        }
        b.finish();
        set
    }

    #[test]
    fn equal_ids_equal_blocks_and_exact_lengths() {
        let allowed: Vec<u32> = (100..5000).collect();
        let synth = Synth::new(&allowed, 9);
        let bs = Content::Blocks { block_size: 4 };
        // Turn 1 extends turn 0; its `in` leaves a 2-token partial tail.
        let set = set_with(&[(&[0, 1], 8), (&[0, 1, 2, 3], 14)], 5, bs);
        let (mut a, mut b, mut s) = (Vec::new(), Vec::new(), Vec::new());
        synth.build(&set, 0, 0, 0, None, &mut a, &mut s);
        synth.build(&set, 0, 0, 1, None, &mut b, &mut s);
        assert_eq!((a.len(), b.len()), (8, 14));
        assert_eq!(a[..], b[..8], "shared hash ids give the same tokens");
        assert!(b.iter().all(|t| allowed.contains(t)));
        // Another namespace with the same ids shares nothing.
        let other = set_with(&[(&[0, 1], 8)], 6, bs);
        let mut c = Vec::new();
        synth.build(&other, 0, 0, 0, None, &mut c, &mut s);
        assert_ne!(a[..4], c[..4]);
        // A different seed changes the blocks.
        let mut d = Vec::new();
        Synth::new(&allowed, 10).build(&set, 0, 0, 0, None, &mut d, &mut s);
        assert_ne!(a, d);
    }

    #[test]
    fn tails_cover_missing_blocks_and_markers_go_first() {
        let allowed: Vec<u32> = (0..1000).collect();
        let synth = Synth::new(&allowed, 1);
        // 1 hash id for 10 tokens of 4-token blocks: 1 block + 6 tail tokens;
        // turn 1 has the same ids and length, but its own tail.
        let set = set_with(&[(&[7], 10), (&[7], 10)], 5, Content::Blocks { block_size: 4 });
        let (mut a, mut b, mut s) = (Vec::new(), Vec::new(), Vec::new());
        synth.build(&set, 0, 0, 0, None, &mut a, &mut s);
        synth.build(&set, 0, 0, 1, None, &mut b, &mut s);
        assert_eq!(a.len(), 10);
        assert_eq!(a[..4], b[..4]);
        assert_ne!(a[4..], b[4..], "tails are per turn");
        let m1 = synth.marker_key(0, 0, 0, 5);
        let m2 = synth.marker_key(0, 0, 1, 5);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        synth.build(&set, 0, 0, 0, Some(m1), &mut x, &mut s);
        synth.build(&set, 0, 0, 0, Some(m2), &mut y, &mut s);
        let m = MARKER_TOKENS as usize;
        assert_eq!(x.len(), 10 + m);
        assert_eq!(x[m..], a[..]);
        assert_ne!(x[..m], y[..m], "a new recycle pass gets a new marker");
    }

    #[test]
    fn a_named_partial_block_is_shared_by_its_id() {
        let allowed: Vec<u32> = (0..1000).collect();
        let synth = Synth::new(&allowed, 1);
        // 4-token blocks: 1 full block and a 2-token partial block named 8,
        // twice; then 8 as a full block.
        let mut set = set_with(&[(&[7, 8], 6), (&[7, 8], 6), (&[7, 8], 8)], 5, Content::Blocks { block_size: 4 });
        set.named_partial_block = true;
        let (mut a, mut b, mut c, mut s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        synth.build(&set, 0, 0, 0, None, &mut a, &mut s);
        synth.build(&set, 0, 0, 1, None, &mut b, &mut s);
        synth.build(&set, 0, 0, 2, None, &mut c, &mut s);
        assert_eq!((a.len(), c.len()), (6, 8));
        assert_eq!(a, b, "a repeated prompt is the same tokens, its partial block included");
        assert_eq!(a[..], c[..6], "a partial block is the prefix of the full block of its id");
        // Unnamed (AgentX): the tails differ.
        set.named_partial_block = false;
        synth.build(&set, 0, 0, 1, None, &mut b, &mut s);
        assert_ne!(a[4..], b[4..]);
    }

    #[test]
    fn token_sessions_are_sent_as_they_are() {
        let allowed = [1u32];
        let set = set_with(&[(&[5, 6, 7], 3)], 1, Content::Tokens);
        let (mut a, mut s) = (Vec::new(), Vec::new());
        Synth::new(&allowed, 1).build(&set, 0, 0, 0, None, &mut a, &mut s);
        assert_eq!(a, vec![5, 6, 7]);
    }

    #[test]
    fn keys_separate_tuples() {
        assert_ne!(key(&[1, 2]), key(&[2, 1]));
        assert_ne!(key(&[1, 2]), key(&[1, 2, 0]));
        assert_eq!(name_key("abc"), name_key("abc"));
        assert_ne!(name_key("abc"), name_key("abd"));
    }
}
