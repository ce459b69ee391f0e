//! Agent chains: which requests of one recorded stream are one agent's
//! serial turns, and which are other agents running beside it.
//!
//! A coding agent's capture flattens parallel work into one list: workers
//! fanned out from the main agent, a subagent's own helpers. Their requests
//! interleave in time, and replaying them as one serial stream runs less in
//! parallel than was recorded. The evidence is in the hash ids: an agent's
//! next request resends its context, so its ids start with all of the
//! previous request's. This is AIPerf's rule (`weka_agent_chains.py`
//! `detect_agent_chains`, with the seam guard and the preamble rule of
//! `weka_trace.py`, read 2026-12-03; [Workloads](../../docs/workloads.md)),
//! which InferenceX's agentic replay runs:
//!
//! 1. **Preamble.** The earliest request, when its ids share no prefix with
//!    any other request and it is either small (at most 64 output tokens: a
//!    title-generation call) or shares no block at all with the others,
//!    does not found the main chain; it rides on it.
//! 2. **Forward pass**, in (start, position) order. A request without ids
//!    joins the first chain. Otherwise it *extends* the chain whose last ids
//!    are a full prefix of its own and whose last request has ended by its
//!    start (the deepest such tail; ties: the earlier chain); failing that it
//!    *forks* a new chain, remembering the chain with the longest common
//!    prefix (ties: the longer tail, then the earlier chain) and that
//!    prefix's length (the depth; 0: nothing shared).
//! 3. **Seams.** A fork whose source request stayed the last of its chain
//!    is the same agent after a context edit (a compaction), not a new
//!    one: for each source request in position order, among its forks with
//!    a depth above 0 that start after it ended, the deepest (ties: the
//!    earliest, then the first made) is spliced onto the source's chain;
//!    the others stay agents. The guard: a fork starting more than
//!    [`SEAM_MAX_GAP_S`] after the source ended that keeps less than
//!    [`SEAM_MIN_OVERLAP`] of the source's ids is a new session, not a seam.
//! 4. The chain holding the earliest request is the main one; the others
//!    are workers, ordered by their first request.
//!
//! Requests are seconds on one timeline; positions are indices into the
//! caller's slice.

use std::collections::BTreeMap;

use super::sessions::common_prefix;

/// Two times this close are equal (AIPerf's `_EPSILON_SECONDS`).
const EPS_S: f64 = 1e-6;
/// A continuation this long after its source ended, s ...
pub const SEAM_MAX_GAP_S: f64 = 3600.0;
/// ... that keeps less than this share of the source's ids is not a seam
/// (AIPerf's `WEKA_SEAM_MAX_GAP_SECONDS` / `WEKA_SEAM_MIN_OVERLAP_RATIO` defaults).
pub const SEAM_MIN_OVERLAP: f64 = 0.5;
/// A preamble's largest output, tokens (AIPerf's `_TITLE_GEN_MAX_OUTPUT_TOKENS`).
pub const PREAMBLE_MAX_OUT: u32 = 64;

/// One request as the detection sees it.
#[derive(Debug, Clone, Copy)]
pub struct ChainRequest<'a> {
    /// Recorded start, s.
    pub t_s: f64,
    /// Recorded end (start + server time), s.
    pub end_s: f64,
    /// Output tokens recorded.
    pub out: u32,
    /// Hash ids of the prompt's blocks.
    pub ids: &'a [u32],
}

/// The chains of a stream: positions into the detection's input, each
/// chain in (start, position) order.
#[derive(Debug, Clone, PartialEq)]
pub struct Chains {
    pub main: Vec<usize>,
    /// Chains beside the main one, by their first request.
    pub workers: Vec<Vec<usize>>,
    /// Forks spliced back as the same agent (compactions).
    pub seams: usize,
}

#[derive(Debug, Default)]
struct Chain {
    requests: Vec<usize>,
    /// Ids shared with the tail it forked from (0: none, or not a fork).
    depth: usize,
    spliced: bool,
    /// The last request with ids: position, and its end.
    tail: Option<(usize, f64)>,
}

/// Splits `reqs` into agent chains (module overview). An empty input gives
/// an empty main chain.
pub fn detect(reqs: &[ChainRequest<'_>]) -> Chains {
    if reqs.is_empty() {
        return Chains { main: Vec::new(), workers: Vec::new(), seams: 0 };
    }
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by(|&a, &b| reqs[a].t_s.total_cmp(&reqs[b].t_s).then(a.cmp(&b)));
    let preamble = preamble(reqs, &order);
    let mut chains: Vec<Chain> = Vec::new();
    let mut chain_of = vec![usize::MAX; reqs.len()];
    // Fork source position -> the chains forked from it (depth > 0 only).
    let mut forks_of: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &i in order.iter().filter(|&&i| Some(i) != preamble) {
        let r = &reqs[i];
        let c = if r.ids.is_empty() {
            if chains.is_empty() {
                chains.push(Chain::default());
            }
            chains[0].requests.push(i);
            chain_of[i] = 0;
            continue;
        } else if let Some(c) = extension(&chains, reqs, r) {
            c
        } else {
            let (parent, depth) = longest_prefix(&chains, reqs, r.ids);
            chains.push(Chain { depth, ..Chain::default() });
            let c = chains.len() - 1;
            if let Some(p) = parent {
                let (source, _) = chains[p].tail.expect("a parent has a tail");
                forks_of.entry(source).or_default().push(c);
            }
            c
        };
        chains[c].requests.push(i);
        chains[c].tail = Some((i, r.end_s));
        chain_of[i] = c;
    }
    let seams = splice_seams(&mut chains, &mut chain_of, &forks_of, reqs);
    // A preamble needs a second request, so there is a first one here.
    let first = order.iter().copied().find(|&i| Some(i) != preamble).expect("a request besides the preamble");
    let main_c = chain_of[first];
    let mut main = chains[main_c].requests.clone();
    if let Some(p) = preamble {
        main.insert(0, p);
    }
    let mut workers: Vec<Vec<usize>> = chains
        .iter()
        .enumerate()
        .filter(|(c, ch)| *c != main_c && !ch.spliced && !ch.requests.is_empty())
        .map(|(_, ch)| ch.requests.clone())
        .collect();
    workers.sort_by(|a, b| reqs[a[0]].t_s.total_cmp(&reqs[b[0]].t_s).then(a[0].cmp(&b[0])));
    Chains { main, workers, seams }
}

/// The earliest request when it is a preamble (step 1); needs two requests.
fn preamble(reqs: &[ChainRequest<'_>], order: &[usize]) -> Option<usize> {
    let &lead = order.first()?;
    let r = &reqs[lead];
    if reqs.len() < 2 || r.ids.is_empty() {
        return None;
    }
    let others = || order[1..].iter().map(|&i| reqs[i].ids).filter(|ids| !ids.is_empty());
    if others().any(|ids| common_prefix(r.ids, ids) > 0) {
        return None;
    }
    if r.out > PREAMBLE_MAX_OUT {
        let mine: std::collections::HashSet<u32> = r.ids.iter().copied().collect();
        if others().flatten().any(|id| mine.contains(id)) {
            return None;
        }
    }
    Some(lead)
}

/// The chain `r` extends: its tail is a full prefix of `r`'s ids and ended
/// by `r`'s start; the deepest wins, then the earliest chain.
fn extension(chains: &[Chain], reqs: &[ChainRequest<'_>], r: &ChainRequest<'_>) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (c, ch) in chains.iter().enumerate() {
        let Some((tail, end)) = ch.tail else { continue };
        let tail_ids = reqs[tail].ids;
        let deeper = best.is_none_or(|(_, len)| tail_ids.len() > len);
        if deeper && end <= r.t_s + EPS_S && r.ids.starts_with(tail_ids) {
            best = Some((c, tail_ids.len()));
        }
    }
    best.map(|(c, _)| c)
}

/// The chain whose tail shares the longest prefix with `ids` (ties: the
/// longer tail, then the earlier chain) and that prefix's length; (None, 0)
/// when no tail shares any.
fn longest_prefix(chains: &[Chain], reqs: &[ChainRequest<'_>], ids: &[u32]) -> (Option<usize>, usize) {
    let mut best: (Option<usize>, (usize, usize)) = (None, (0, 0));
    for (c, ch) in chains.iter().enumerate() {
        let Some((tail, _)) = ch.tail else { continue };
        let d = common_prefix(reqs[tail].ids, ids);
        let key = (d, reqs[tail].ids.len());
        if d > 0 && key > best.1 {
            best = (Some(c), key);
        }
    }
    (best.0, best.1.0)
}

/// Step 3; returns the seams spliced.
fn splice_seams(
    chains: &mut [Chain],
    chain_of: &mut [usize],
    forks_of: &BTreeMap<usize, Vec<usize>>,
    reqs: &[ChainRequest<'_>],
) -> usize {
    let mut seams = 0;
    for (&source, forks) in forks_of {
        let owner = chain_of[source];
        if chains[owner].requests.last() != Some(&source) {
            continue; // the longer context went on: every fork is an agent
        }
        let end = reqs[source].end_s;
        let source_len = reqs[source].ids.len();
        let elected = forks
            .iter()
            .copied()
            .filter(|&c| {
                let depth = chains[c].depth;
                let start = reqs[chains[c].requests[0]].t_s;
                let far = start - end > SEAM_MAX_GAP_S;
                let low = (depth as f64) < SEAM_MIN_OVERLAP * source_len as f64;
                end <= start + EPS_S && !(far && low)
            })
            .max_by(|&a, &b| {
                let key = |c: usize| (chains[c].depth, reqs[chains[c].requests[0]].t_s);
                let ((da, ta), (db, tb)) = (key(a), key(b));
                da.cmp(&db).then(tb.total_cmp(&ta)).then(b.cmp(&a))
            });
        let Some(c) = elected else { continue };
        let moved = std::mem::take(&mut chains[c].requests);
        for &i in &moved {
            chain_of[i] = owner;
        }
        chains[owner].requests.extend(moved);
        chains[c].spliced = true;
        seams += 1;
    }
    seams
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (t, api, ids) -> chains as positions.
    fn chains(reqs: &[(f64, f64, &[u32])]) -> Chains {
        let rs: Vec<ChainRequest<'_>> =
            reqs.iter().map(|&(t, api, ids)| ChainRequest { t_s: t, end_s: t + api, out: 100, ids }).collect();
        detect(&rs)
    }

    #[test]
    fn a_growing_context_is_one_chain() {
        let c = chains(&[(0.0, 1.0, &[1, 2]), (2.0, 1.0, &[1, 2, 3]), (4.0, 1.0, &[1, 2, 3, 4])]);
        assert_eq!((c.main, c.workers.len(), c.seams), (vec![0, 1, 2], 0, 0));
    }

    #[test]
    fn overlapping_forks_are_workers_in_order_of_their_first_request() {
        // Main [1,2,3] grows at t=9; two workers fork its prefix [1,2] while
        // it lives, the later-listed one starting first.
        let c = chains(&[
            (0.0, 0.5, &[1, 2, 3]),
            (5.0, 10.0, &[1, 2, 50, 51]),
            (2.0, 10.0, &[1, 2, 60, 61]),
            (9.0, 0.5, &[1, 2, 3, 4]),
            (16.0, 0.5, &[1, 2, 50, 51, 52]),
        ]);
        assert_eq!(c.main, vec![0, 3]);
        assert_eq!(c.workers, vec![vec![2], vec![1, 4]]);
        assert_eq!(c.seams, 0);
    }

    #[test]
    fn a_compaction_is_a_seam_unless_the_old_context_goes_on() {
        // [1..6] shrinks to [1,2,90,91]: the old tail never continues.
        let c = chains(&[(0.0, 0.5, &[1, 2, 3, 4, 5, 6]), (2.0, 0.5, &[1, 2, 90, 91]), (3.0, 0.5, &[1, 2, 90, 91, 92])]);
        assert_eq!((c.main, c.workers.len(), c.seams), (vec![0, 1, 2], 0, 1));
        // The same fork while the old context goes on later: a worker.
        let c = chains(&[(0.0, 0.5, &[1, 2, 3, 4, 5, 6]), (2.0, 0.5, &[1, 2, 90, 91]), (3.0, 0.5, &[1, 2, 3, 4, 5, 6, 7])]);
        assert_eq!((c.main, c.workers, c.seams), (vec![0, 2], vec![vec![1]], 0));
        // A fork that starts before its source ended cannot continue it.
        let c = chains(&[(0.0, 5.0, &[1, 2, 3, 4]), (2.0, 0.5, &[1, 2, 9])]);
        assert_eq!((c.main, c.workers, c.seams), (vec![0], vec![vec![1]], 0));
    }

    #[test]
    fn the_seam_guard_splits_a_far_low_overlap_continuation_only() {
        // Keeps 1 of 4 ids 10,000 s later: a new session.
        let c = chains(&[(0.0, 0.5, &[1, 2, 3, 4]), (10_000.0, 0.5, &[1, 9])]);
        assert_eq!((c.main, c.workers, c.seams), (vec![0], vec![vec![1]], 0));
        // Near: a compaction.
        assert_eq!(chains(&[(0.0, 0.5, &[1, 2, 3, 4]), (2.0, 0.5, &[1, 9])]).seams, 1);
        // Far, keeping 3 of 4: a resume.
        assert_eq!(chains(&[(0.0, 0.5, &[1, 2, 3, 4]), (10_000.0, 0.5, &[1, 2, 3, 9])]).seams, 1);
    }

    #[test]
    fn the_deepest_fork_is_the_seam_and_disjoint_contexts_are_agents() {
        // Two forks of a dead tail: the deeper one continues it.
        let c = chains(&[(0.0, 0.5, &[1, 2, 3, 4, 5]), (2.0, 0.5, &[1, 7]), (2.5, 0.5, &[1, 2, 3, 8])]);
        assert_eq!((c.main, c.workers, c.seams), (vec![0, 2], vec![vec![1]], 1));
        // A disjoint context with its own seam: one worker of two requests.
        let c = chains(&[
            (0.0, 0.5, &[1, 2, 3, 4, 5, 6]),
            (2.0, 0.5, &[1, 2, 90, 91]),
            (1.0, 0.5, &[100, 101, 102, 103]),
            (3.0, 0.5, &[100, 101, 80, 81]),
        ]);
        assert_eq!((c.main, c.workers, c.seams), (vec![0, 1], vec![vec![2, 3]], 2));
    }

    #[test]
    fn a_preamble_rides_on_the_main_chain_and_empty_ids_join_the_first() {
        // A small disjoint first call does not found the main chain.
        let rs = [
            ChainRequest { t_s: 0.0, end_s: 0.5, out: 10, ids: &[70, 71] },
            ChainRequest { t_s: 1.0, end_s: 2.0, out: 500, ids: &[1, 2] },
            ChainRequest { t_s: 3.0, end_s: 4.0, out: 500, ids: &[1, 2, 3] },
        ];
        assert_eq!(detect(&rs).main, vec![0, 1, 2]);
        // A large one that shares a block later is no preamble: it is main.
        let rs = [ChainRequest { out: 500, ids: &[70, 1], ..rs[0] }, rs[1], rs[2]];
        let c = detect(&rs);
        assert_eq!((c.main, c.workers), (vec![0], vec![vec![1, 2]]));
        let c = chains(&[(0.0, 0.5, &[1]), (1.0, 0.5, &[]), (2.0, 0.5, &[1, 2])]);
        assert_eq!((c.main, c.workers.len()), (vec![0, 1, 2], 0));
        assert_eq!(chains(&[]).main, Vec::<usize>::new());
    }
}
