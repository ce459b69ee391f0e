//! Synthetic agentic traces of a chosen shape, for tests of the trace
//! loader and the lanes replay at AgentX's scale (memory and speed figures
//! without the real dataset) and for bench/promptgen's `agentx` set
//! (test-only in the library, unlike [`super::synth`], which builds the
//! prompts of every replay): [`Shape::agentx`] is the
//! size of AgentX's corpus (393 traces, ~57k top-level and ~42k subagent
//! requests, contexts growing to ~200k tokens; notes/agentx.md 6). The
//! traces follow AgentX's structure: 64-token hash-id blocks numbered per
//! trace, each turn's context = the previous one plus new blocks (the
//! partial last block gets a new id every turn), a compaction now and then
//! (a fresh context), subagents spawned from a root turn with their own
//! context, most joined by the root's next turn, some in the background.
//! All numbers are drawn from a seeded generator; none is real data.

use std::io::Write;

use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::sessions::{Arrival, Content, SessionSet};
use super::trees::{Entry, RecordedSubagent, RecordedTurn, TreeCounts, add_tree};
use super::synth::{key, name_key};

/// The size of a synthetic trace set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub sessions: usize,
    /// Mean top-level requests per session (each session draws 0.3x to 1.7x).
    pub root_turns: usize,
    /// Mean subagents per session and turns per subagent.
    pub subagents: usize,
    pub subagent_turns: usize,
    /// Tokens per hash id.
    pub block_size: u32,
    /// A root context is compacted once it passes a limit drawn in this range, tokens.
    pub compact_at: (u32, u32),
}

impl Shape {
    /// AgentX's corpus size: 393 x 145 = ~57k top-level requests, 393 x 10
    /// x 11 = ~43k subagent requests.
    pub fn agentx() -> Self {
        Shape { sessions: 393, root_turns: 145, subagents: 10, subagent_turns: 11, block_size: 64, compact_at: (150_000, 200_000) }
    }
}

/// One synthetic request.
#[derive(Debug, Clone)]
struct Req {
    t: f64,
    api: f64,
    input: u32,
    out: u32,
    ids: Vec<u32>,
}

/// One synthetic session: root requests, and subagents after root turn `anchor`.
struct Gen {
    id: String,
    root: Vec<Req>,
    subs: Vec<(usize, f64, Vec<Req>)>, // anchor, duration s, requests
}

/// A growing context: full blocks, then a partial block with a fresh id.
struct Context {
    tokens: u32,
    full: Vec<u32>,
}

impl Context {
    fn new(tokens: u32, next_id: &mut u32, bs: u32) -> Self {
        let mut c = Context { tokens: 0, full: Vec::new() };
        c.grow(tokens, next_id, bs);
        c
    }

    fn grow(&mut self, by: u32, next_id: &mut u32, bs: u32) {
        self.tokens += by;
        while (self.full.len() as u32 + 1) * bs <= self.tokens {
            self.full.push(*next_id);
            *next_id += 1;
        }
    }

    /// The request's hash ids (a fresh id for a partial last block).
    fn ids(&self, next_id: &mut u32, bs: u32) -> Vec<u32> {
        let mut ids = self.full.clone();
        if self.tokens % bs != 0 {
            ids.push(*next_id);
            *next_id += 1;
        }
        ids
    }
}

impl Shape {
    fn session(&self, seed: u64, i: usize) -> Gen {
        let mut rng = ChaCha8Rng::seed_from_u64(key(&[21, seed, i as u64]));
        let bs = self.block_size;
        let mut next_id = 0u32;
        let n_root = ((self.root_turns as f64) * rng.random_range(0.3..1.7)).max(1.0) as usize;
        let spawn_p = self.subagents as f64 / n_root as f64;
        let mut ctx = Context::new(rng.random_range(12_000..25_000), &mut next_id, bs);
        // A compaction keeps the system prompt and tools (the first 4,000
        // tokens here), as a coding agent's summary does: AIPerf's chain
        // detection sees the same agent go on (a seam), not a new one.
        let system = ctx.full[..(4_000 / bs as usize).min(ctx.full.len())].to_vec();
        let mut limit = rng.random_range(self.compact_at.0..self.compact_at.1);
        let mut t = 0.0;
        let mut g = Gen { id: format!("synthetic-{i:04}"), root: Vec::new(), subs: Vec::new() };
        for k in 0..n_root {
            if ctx.tokens > limit {
                ctx = Context { tokens: system.len() as u32 * bs, full: system.clone() };
                ctx.grow(rng.random_range(16_000..36_000), &mut next_id, bs);
                limit = rng.random_range(self.compact_at.0..self.compact_at.1);
            }
            let api = rng.random_range(2.0..20.0);
            let ids = ctx.ids(&mut next_id, bs);
            g.root.push(Req { t, api, input: ctx.tokens, out: rng.random_range(50..2000), ids });
            let mut next_t = t + api + rng.random_range(0.5..30.0);
            if k + 1 < n_root && rng.random_bool(spawn_p.min(1.0)) {
                let spawn_at = t + api + rng.random_range(0.5..3.0);
                let (reqs, end) = self.subagent(&mut rng, spawn_at, &mut next_id);
                let start = reqs[0].t;
                g.subs.push((k, end - start, reqs));
                if rng.random_bool(0.8) {
                    next_t = next_t.max(end + rng.random_range(0.2..3.0));
                }
            }
            t = next_t;
            ctx.grow(rng.random_range(100..1500), &mut next_id, bs);
        }
        g
    }

    fn subagent(&self, rng: &mut ChaCha8Rng, mut t: f64, next_id: &mut u32) -> (Vec<Req>, f64) {
        let bs = self.block_size;
        let n = ((self.subagent_turns as f64) * rng.random_range(0.3..1.7)).max(1.0) as usize;
        let mut ctx = Context::new(rng.random_range(8_000..15_000), next_id, bs);
        let mut reqs = Vec::with_capacity(n);
        let mut end = t;
        for _ in 0..n {
            let api = rng.random_range(1.0..10.0);
            reqs.push(Req { t, api, input: ctx.tokens, out: rng.random_range(50..1000), ids: ctx.ids(next_id, bs) });
            end = t + api;
            t = end + rng.random_range(0.2..5.0);
            ctx.grow(rng.random_range(200..2000), next_id, bs);
        }
        (reqs, end)
    }

    /// Builds the set in memory (the same tree assembly the loader uses).
    pub fn build(&self, seed: u64) -> Result<SessionSet> {
        let mut set = SessionSet::new(Content::Blocks { block_size: self.block_size }, Arrival::Lanes);
        for i in 0..self.sessions {
            let g = self.session(seed, i);
            let rec = |r: &Req| RecordedTurn { t_s: r.t, api_s: r.api, input: r.input, out: r.out, ids: r.ids.clone() };
            let mut entries = Vec::new();
            let mut subs = g.subs.iter().peekable();
            for (k, r) in g.root.iter().enumerate() {
                entries.push(Entry::Turn(rec(r)));
                while let Some((_, dur, reqs)) = subs.next_if(|s| s.0 == k) {
                    let turns = reqs.iter().map(rec).collect();
                    entries.push(Entry::Subagent(RecordedSubagent { turns, end_s: reqs[0].t + dur }));
                }
            }
            let mut b = set.begin(g.id.clone(), name_key(&g.id));
            add_tree(&mut b, &entries, true, &mut TreeCounts::default())?;
            b.finish();
        }
        set.finish_loading();
        Ok(set)
    }

    /// Writes the set as an AgentX `traces.jsonl` (one session per line).
    pub fn write_agentx(&self, seed: u64, out: &mut dyn Write) -> Result<()> {
        let req = |r: &Req| {
            serde_json::json!({"t": r.t, "type": "s", "in": r.input, "out": r.out, "hash_ids": r.ids, "api_time": r.api})
        };
        for i in 0..self.sessions {
            let g = self.session(seed, i);
            let mut requests = Vec::new();
            let mut subs = g.subs.iter().peekable();
            for (k, r) in g.root.iter().enumerate() {
                requests.push(req(r));
                while let Some((_, dur, reqs)) = subs.next_if(|s| s.0 == k) {
                    requests.push(serde_json::json!({
                        "t": reqs[0].t, "type": "subagent", "agent_id": format!("subagent_{k:03}"),
                        "duration_ms": dur * 1000.0, "requests": reqs.iter().map(req).collect::<Vec<_>>(),
                    }));
                }
            }
            let line = serde_json::json!({"id": g.id, "block_size": self.block_size, "hash_id_scope": "local", "requests": requests});
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::lanes::LanesReplay;
    use super::super::replay_config::ReplayConfig;
    use super::super::testkit::simulate;
    use super::super::trace::load_agentx;
    use super::super::synth::Synth;
    use std::time::Instant;

    /// Prompt tokens if every prompt were kept, and ids if stored whole.
    fn naive_bytes(set: &SessionSet) -> (u64, u64) {
        let prompts = set.turns.iter().map(|t| u64::from(t.input) * 4).sum();
        let ids = set.turns.iter().map(|t| u64::from(t.ids_len()) * 4).sum();
        (prompts, ids)
    }

    #[test]
    fn memory_is_the_distinct_hash_ids() {
        let shape = Shape { sessions: 12, ..Shape::agentx() };
        let set = shape.build(1).unwrap();
        let (prompts, ids) = naive_bytes(&set);
        let bytes = set.memory_bytes() as u64;
        let id_bytes = set.ids.len() as u64 * 4;
        assert!(id_bytes * 2 > bytes, "ids {id_bytes} of {bytes} bytes");
        assert!(bytes * 10 < ids && ids * 60 < prompts, "set {bytes}, whole ids {ids}, prompts {prompts}");
        // The written file loads back into the same set.
        let mut text = Vec::new();
        Shape { sessions: 3, ..shape }.write_agentx(1, &mut text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traces.jsonl");
        std::fs::write(&path, &text).unwrap();
        let (loaded, summary) = load_agentx(&path, 64, true).unwrap();
        let built = Shape { sessions: 3, ..shape }.build(1).unwrap();
        assert_eq!((loaded.turns.len(), loaded.ids.len()), (built.turns.len(), built.ids.len()));
        let shape_of = |set: &SessionSet| -> Vec<(u32, u32, Option<u32>, Option<u32>)> {
            let st = set.streams.iter();
            st.map(|s| (s.first_turn, s.n_turns, s.spawn.map(|x| x.anchor), s.join.map(|j| j.turn))).collect()
        };
        assert_eq!(shape_of(&loaded), shape_of(&built));
        for (a, b) in loaded.streams.iter().zip(&built.streams) {
            let gap = |s: &crate::workload::sessions::Stream| s.join.map_or(0.0, |j| j.gap_s);
            assert!((gap(a) - gap(b)).abs() < 1e-9, "JSON keeps the times");
        }
        assert!(summary.tree.subagents > 0);
    }

    /// The full AgentX shape: memory of the loaded set and of the replay's
    /// state, and the cost of building prompts.
    /// `cargo test --release --lib full_agentx_shape -- --ignored --nocapture`
    #[test]
    #[ignore = "a report: builds ~100k requests, ~5 s"]
    fn full_agentx_shape_memory_report() {
        let t0 = Instant::now();
        let set = Shape::agentx().build(42).unwrap();
        let built = t0.elapsed().as_secs_f64();
        let (prompts, ids) = naive_bytes(&set);
        let (turns, sub) = set.turn_counts();
        let inputs: Vec<u32> = set.turns.iter().map(|t| t.input).collect();
        let mean_in = inputs.iter().map(|&x| f64::from(x)).sum::<f64>() / inputs.len() as f64;
        let max_in = inputs.iter().max().unwrap();
        println!("sessions {}, requests {turns} ({} top-level, {sub} subagent), mean in {mean_in:.0}, max in {max_in}", set.sessions.len(), turns - sub);
        println!(
            "set: {:.1} MiB ({:.1} MiB ids, {} distinct ids; {:.1} MiB turns); built in {built:.1} s",
            mib(set.memory_bytes() as u64),
            mib(set.ids.len() as u64 * 4),
            set.ids.len(),
            mib((set.turns.len() * std::mem::size_of::<crate::workload::sessions::Turn>()) as u64)
        );
        println!("for comparison: every request's ids stored whole {:.0} MiB, every prompt kept {:.0} MiB", mib(ids), mib(prompts));
        let allowed: Vec<u32> = (0..150_000).collect();
        let synth = Synth::new(&allowed, 1);
        let (mut buf, mut scratch) = (Vec::new(), Vec::new());
        let biggest = set.turns.iter().position(|t| t.input == *max_in).unwrap() as u32;
        let (s, st, k) = locate(&set, biggest);
        let t1 = Instant::now();
        for _ in 0..20 {
            synth.build(&set, s, st, k, Some(7), &mut buf, &mut scratch);
        }
        println!("building the largest prompt ({} tokens): {:.0} us", buf.len(), t1.elapsed().as_secs_f64() / 20.0 * 1e6);
        // Issue 34: the replay's state at GPU concurrencies (lanes), the same
        // measured-request budget each.
        for lanes in [64, 256, 512] {
            let cfg = ReplayConfig {
                lanes,
                seed: 42,
                run_id: 0,
                start_min_ratio: 0.25,
                start_max_ratio: 0.75,
                warmup_requests_per_lane: 10,
                tree_idle_cap_s: Some(300.0),
                system_idle_cap_s: Some(10.0),
                duration_s: None,
                max_requests: Some(5000),
                time_scale: 1.0,
                cache_bust: true,
                ignore_eos: true,
            };
            let mut replay = LanesReplay::new(&set, &allowed, cfg).unwrap();
            let t2 = Instant::now();
            let reqs = simulate(&mut replay, 0.05, &|_| false);
            let secs = t2.elapsed().as_secs_f64();
            let tokens: usize = reqs.iter().map(|r| r.prompt.len()).sum();
            println!(
                "replay at {lanes} lanes: {} requests ({} prompt tokens) in {secs:.2} s of harness time; replay state {:.2} MiB",
                reqs.len(),
                tokens,
                mib(replay.memory_bytes() as u64)
            );
        }
    }

    /// The loader's speed on a written quarter of the corpus.
    /// `cargo test --release --lib agentx_file_load -- --ignored --nocapture`
    #[test]
    #[ignore = "a report: writes and loads a ~150 MB trace file"]
    fn agentx_file_load_report() {
        let shape = Shape { sessions: 98, ..Shape::agentx() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traces.jsonl");
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        shape.write_agentx(42, &mut file).unwrap();
        drop(file);
        let size = std::fs::metadata(&path).unwrap().len();
        let t0 = Instant::now();
        let (set, summary) = load_agentx(&path, 64, true).unwrap();
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "loaded {:.0} MiB ({} sessions, {} requests) in {secs:.2} s ({:.0} MiB/s); set {:.1} MiB",
            mib(size),
            summary.sessions,
            set.turns.len(),
            mib(size) / secs,
            mib(summary.memory_bytes as u64)
        );
    }

    fn mib(b: u64) -> f64 {
        b as f64 / (1 << 20) as f64
    }

    /// (session, stream within it, turn within it) of global turn `g`.
    fn locate(set: &SessionSet, g: u32) -> (usize, usize, usize) {
        for s in 0..set.sessions.len() {
            for (si, st) in set.session_streams(s).iter().enumerate() {
                if (st.first_turn..st.first_turn + st.n_turns).contains(&g) {
                    return (s, si, (g - st.first_turn) as usize);
                }
            }
        }
        unreachable!()
    }
}
