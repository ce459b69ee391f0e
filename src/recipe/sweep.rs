//! `[sweep]`: the workload matrix of a recipe and its expansion into points.

use serde::{Deserialize, Serialize};

use super::workload::{ConversationSettings, TraceSettings, WorkloadName};
use crate::protocol::{LengthConvention, Point, Workload};

/// What `[sweep]` may hold. Every key is optional except the lengths and
/// concurrencies; see [`Sweep::resolve`] for the defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// One ISL/OSL pair, tokens ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub osl: Option<u32>,
    /// ... or several: `isl_osl = [[1024, 1024], [8192, 1024]]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl_osl: Option<Vec<[u32; 2]>>,
    /// Concurrencies (requests kept in flight) as a list ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conc: Option<Vec<u32>>,
    /// ... or a doubling range `[start, end]`: start, 2 start, ... up to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conc_range: Option<[u32; 2]>,
    /// Tensor-parallel sizes: one engine configuration each; `${TP}` in the
    /// engine args takes the value (else `--tensor-parallel-size` is added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<Vec<u32>>,
    /// InferenceX-style search space instead of `tp`/`conc`/`conc_range`:
    /// `search_space = [{ tp = 8, conc_range = [1, 32] }, { tp = 4, conc_range = [1, 256] }]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_space: Option<Vec<SearchSpace>>,
    /// Run as InferenceX's client does: 10 x conc prompts, 2 x conc warm-ups,
    /// ignore_eos, percentiles 90/99/99.9, InferenceX length convention. Wins
    /// over the individual keys.
    #[serde(default)]
    pub inferencex: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_convention: Option<LengthConvention>,
    /// Length spread; see [`LengthConvention`]. Default: fixed lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_ratio: Option<f64>,
    /// Tokens of random prefix shared by all prompts of a point.
    #[serde(default)]
    pub prefix_len: u32,
    /// Measured requests per point as a multiple of conc (default 10) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_per_conc: Option<u32>,
    /// ... or a fixed count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_prompts: Option<u32>,
    /// Warm-up requests per point as a multiple of conc (default 2) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmups_per_conc: Option<u32>,
    /// ... or a fixed count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmups: Option<u32>,
    /// Request-rate mode: requests/s with gamma-distributed gaps, as
    /// `vllm bench serve --request-rate`. Absent: all at once (closed loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    /// Gamma shape of the gaps (1 = Poisson), as `--burstiness`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// Generate exactly the output length (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Latency percentiles to report (default 90, 99, 99.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentiles: Option<Vec<f64>>,
    /// Service-level objectives for goodput, ms: `{ ttft_ms = 500, tpot_ms = 50 }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    #[serde(default)]
    pub seed: u64,
    /// What the requests are (default random); see [`super::workload`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadName>,
    /// `[sweep.trace]`: the trace replay's file and rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSettings>,
    /// `[sweep.conversation]`: the conversations file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationSettings>,
    /// Empty the engine's prefix cache before each point (default true), so
    /// no point is helped by what an earlier one cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_prefix_cache: Option<bool>,
}

/// One entry of a search space: a TP size with its concurrencies, optionally
/// only for some ISL/OSL pairs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conc: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conc_range: Option<[u32; 2]>,
    /// Restrict this entry to these pairs (default: all of the sweep's pairs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl_osl: Option<Vec<[u32; 2]>>,
}

/// A resolved search-space entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpaceEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    pub pairs: Vec<(u32, u32)>,
    pub concs: Vec<u32>,
}

/// SLOs of `vllm bench serve --goodput`: a request is good when it meets all given ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goodput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2el_ms: Option<f64>,
}

impl Goodput {
    /// Both sets of SLOs; `later`'s win where both set one.
    pub fn and(self, later: Goodput) -> Goodput {
        Goodput {
            ttft_ms: later.ttft_ms.or(self.ttft_ms),
            tpot_ms: later.tpot_ms.or(self.tpot_ms),
            e2el_ms: later.e2el_ms.or(self.e2el_ms),
        }
    }
}

/// A sweep with every default filled in and every value checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedSweep {
    /// (TP, ISL/OSL pairs, concurrencies) entries, in order.
    pub space: Vec<SpaceEntry>,
    pub inferencex: bool,
    pub length_convention: LengthConvention,
    pub range_ratio: f64,
    pub prefix_len: u32,
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    pub ignore_eos: bool,
    pub percentiles: Vec<f64>,
    pub goodput: Option<Goodput>,
    pub seed: u64,
    /// What every point sends (the measured-request budget of session
    /// workloads is each point's `num_prompts`).
    #[serde(default)]
    pub workload: Workload,
    #[serde(default = "yes")]
    pub reset_prefix_cache: bool,
    /// Trace replays: the measured-request budget ends a point (else only
    /// the duration does; `[sweep.trace] request_budget`).
    #[serde(default = "yes")]
    pub request_budget: bool,
    count: Count,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Count {
    prompts_per_conc: Option<u32>,
    num_prompts: Option<u32>,
    warmups_per_conc: Option<u32>,
    warmups: Option<u32>,
}

/// InferenceX's client settings (benchmark_serving.py as their launchers call it).
pub const INFERENCEX_PROMPTS_PER_CONC: u32 = 10;
pub const INFERENCEX_WARMUPS_PER_CONC: u32 = 2;
pub const INFERENCEX_PERCENTILES: [f64; 3] = [90.0, 99.0, 99.9];

impl Sweep {
    /// `over` laid on top of `self`: every key `over` sets wins. Keys that
    /// exclude each other travel together (setting `conc` drops the base's
    /// `conc_range` and `search_space`, `isl_osl` drops `isl`/`osl`, and so on);
    /// setting only one of `isl`/`osl` keeps the other from the base (its first
    /// pair when the base has several).
    pub fn overlay(&self, over: &Sweep) -> Sweep {
        let mut s = self.clone();
        if over.conc.is_some() || over.conc_range.is_some() {
            (s.conc, s.conc_range, s.search_space) = (over.conc.clone(), over.conc_range, None);
        }
        if over.tp.is_some() {
            (s.tp, s.search_space) = (over.tp.clone(), None);
        }
        if over.search_space.is_some() {
            (s.search_space, s.conc, s.conc_range, s.tp) = (over.search_space.clone(), None, None, None);
        }
        if over.isl_osl.is_some() {
            (s.isl_osl, s.isl, s.osl) = (over.isl_osl.clone(), None, None);
        } else if over.isl.is_some() || over.osl.is_some() {
            let first = s.isl_osl.as_ref().and_then(|p| p.first().copied());
            let isl = over.isl.or(s.isl).or(first.map(|p| p[0]));
            let osl = over.osl.or(s.osl).or(first.map(|p| p[1]));
            (s.isl, s.osl, s.isl_osl) = (isl, osl, None);
        }
        let count_on_top = over.prompts_per_conc.is_some() || over.num_prompts.is_some();
        if count_on_top {
            (s.prompts_per_conc, s.num_prompts) = (over.prompts_per_conc, over.num_prompts);
        }
        if over.warmups_per_conc.is_some() || over.warmups.is_some() {
            (s.warmups_per_conc, s.warmups) = (over.warmups_per_conc, over.warmups);
        }
        s.inferencex |= over.inferencex;
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { s.$f = over.$f.clone(); } )* };
        }
        take!(length_convention, range_ratio, request_rate, burstiness, ignore_eos, percentiles, goodput, workload, reset_prefix_cache);
        if let Some(t) = &over.trace {
            s.trace = Some(s.trace.unwrap_or_default().overlay(t));
        }
        if let Some(c) = &over.conversation {
            s.conversation = Some(s.conversation.unwrap_or_default().overlay(c));
        }
        // A request count given on top (a variant's, --num-prompts) makes the
        // replay's budget end its points, unless the overlay itself says otherwise.
        if count_on_top {
            if let Some(t) = s.trace.as_mut() {
                t.request_budget = over.trace.as_ref().and_then(|o| o.request_budget).or(Some(true));
            }
        }
        if over.prefix_len != 0 {
            s.prefix_len = over.prefix_len;
        }
        if over.seed != 0 {
            s.seed = over.seed;
        }
        s
    }

    /// Makes the workload files relative paths relative to `dir` (a
    /// dataset address, `hf://datasets/...`, stays as it is).
    pub fn anchor_files(&mut self, dir: &std::path::Path) {
        let files = [self.trace.as_mut().and_then(|t| t.file.as_mut()), self.conversation.as_mut().and_then(|c| c.file.as_mut())];
        for f in files.into_iter().flatten() {
            if f.is_relative() && !crate::workload::hub::is_dataset(f) {
                *f = dir.join(&*f);
            }
        }
    }

    /// Fills defaults and checks values. Errors name the key and the valid range.
    pub fn resolve(&self) -> Result<ResolvedSweep, String> {
        let workload = super::workload::resolve(
            self.workload.unwrap_or_default(),
            self.trace.as_ref(),
            self.conversation.as_ref(),
            self.seed,
        )?;
        // Session workloads take their lengths from the file: no ISL/OSL.
        let sessions = workload.is_sessions();
        let timed = matches!(&workload, Workload::Trace(t) if t.format == crate::protocol::TraceFormat::Timed);
        let pairs = match (&self.isl_osl, self.isl, self.osl) {
            _ if sessions => vec![(0, 0)],
            (Some(p), None, None) => p.iter().map(|[i, o]| (*i, *o)).collect(),
            (None, Some(i), Some(o)) => vec![(i, o)],
            (Some(_), _, _) => return Err("give either isl/osl or isl_osl, not both".into()),
            (None, _, _) => return Err("give isl and osl (tokens), or isl_osl = [[isl, osl], ...]".into()),
        };
        let pairs: Vec<(u32, u32)> = pairs;
        if !sessions && (pairs.is_empty() || pairs.iter().any(|&(i, o)| i == 0 || o == 0)) {
            return Err(format!("isl/osl must be at least 1 token, got {pairs:?}"));
        }
        let space = match &self.search_space {
            Some(entries) => {
                if self.conc.is_some() || self.conc_range.is_some() || self.tp.is_some() {
                    return Err("give either search_space or tp/conc/conc_range, not both".into());
                }
                if entries.is_empty() {
                    return Err("search_space is empty".into());
                }
                entries
                    .iter()
                    .map(|e| {
                        let pairs = match &e.isl_osl {
                            Some(p) => p.iter().map(|[i, o]| (*i, *o)).collect(),
                            None => pairs.clone(),
                        };
                        Ok(SpaceEntry { tp: check_tp(e.tp)?, pairs, concs: concs_of(&e.conc, e.conc_range)? })
                    })
                    .collect::<Result<Vec<_>, String>>()?
            }
            None => {
                let concs = concs_of(&self.conc, self.conc_range)?;
                match &self.tp {
                    None => vec![SpaceEntry { tp: None, pairs: pairs.clone(), concs }],
                    Some(tps) if tps.is_empty() => return Err("tp = []: give TP sizes >= 1 or omit tp".into()),
                    Some(tps) => tps
                        .iter()
                        .map(|&tp| Ok(SpaceEntry { tp: check_tp(Some(tp))?, pairs: pairs.clone(), concs: concs.clone() }))
                        .collect::<Result<Vec<_>, String>>()?,
                }
            }
        };
        let ix = self.inferencex;
        let length_convention = if ix {
            LengthConvention::Inferencex
        } else {
            self.length_convention.unwrap_or_default()
        };
        let range_ratio = self.range_ratio.unwrap_or(length_convention.fixed_ratio());
        length_convention.check_ratio(range_ratio)?;
        let count = if ix {
            Count {
                prompts_per_conc: Some(INFERENCEX_PROMPTS_PER_CONC),
                num_prompts: None,
                warmups_per_conc: Some(INFERENCEX_WARMUPS_PER_CONC),
                warmups: None,
            }
        } else {
            Count {
                prompts_per_conc: self.prompts_per_conc,
                num_prompts: self.num_prompts,
                warmups_per_conc: self.warmups_per_conc,
                warmups: self.warmups,
            }
        };
        if count.prompts_per_conc.is_some() && count.num_prompts.is_some() {
            return Err("give either prompts_per_conc or num_prompts, not both".into());
        }
        if count.warmups_per_conc.is_some() && count.warmups.is_some() {
            return Err("give either warmups_per_conc or warmups, not both".into());
        }
        if count.prompts_per_conc == Some(0) || count.num_prompts == Some(0) {
            return Err("num_prompts / prompts_per_conc must be at least 1".into());
        }
        if let Some(r) = self.request_rate {
            check_request_rate(r).map_err(|why| format!("request_rate = {r}: {why}"))?;
        }
        let burstiness = self.burstiness.unwrap_or(1.0);
        check_burstiness(burstiness).map_err(|why| format!("burstiness = {burstiness}: {why}"))?;
        let percentiles =
            if ix { INFERENCEX_PERCENTILES.to_vec() } else { self.percentiles.clone().unwrap_or(INFERENCEX_PERCENTILES.to_vec()) };
        for &p in &percentiles {
            check_percentile(p).map_err(|why| format!("percentiles = {percentiles:?}: {why}"))?;
        }
        if let Some(g) = self.goodput {
            for (k, v) in [("ttft_ms", g.ttft_ms), ("tpot_ms", g.tpot_ms), ("e2el_ms", g.e2el_ms)] {
                if v.is_some_and(|v| !(v > 0.0)) {
                    return Err(format!("goodput.{k} must be > 0 ms"));
                }
            }
        }
        Ok(ResolvedSweep {
            space,
            inferencex: ix,
            length_convention,
            range_ratio,
            prefix_len: self.prefix_len,
            request_rate: self.request_rate,
            burstiness,
            ignore_eos: ix || self.ignore_eos.unwrap_or(true),
            percentiles,
            goodput: self.goodput,
            seed: self.seed,
            workload,
            reset_prefix_cache: self.reset_prefix_cache.unwrap_or(true),
            // A timed trace replays whole unless asked (as vLLM's timed replay
            // and AIPerf's fixed schedule); an AgentX replay has a budget.
            request_budget: self.trace.as_ref().and_then(|t| t.request_budget).unwrap_or(!timed),
            count,
        })
    }
}

impl ResolvedSweep {
    /// The points: entry by entry, ISL/OSL pair by pair, concurrencies in the given order.
    pub fn points(&self) -> Vec<Point> {
        let c = &self.count;
        let mut out = Vec::new();
        for entry in &self.space {
            for &(isl, osl) in &entry.pairs {
                for &conc in &entry.concs {
                    out.push(Point {
                        tp: entry.tp,
                        isl,
                        osl,
                        conc,
                        num_prompts: c.num_prompts.unwrap_or(c.prompts_per_conc.unwrap_or(10) * conc),
                        warmups: c.warmups.unwrap_or(c.warmups_per_conc.unwrap_or(2) * conc),
                    });
                }
            }
        }
        out
    }

    /// The TP sizes in order of first appearance (`[None]` without TP).
    pub fn tps(&self) -> Vec<Option<u32>> {
        let mut tps = Vec::new();
        for e in &self.space {
            if !tps.contains(&e.tp) {
                tps.push(e.tp);
            }
        }
        tps
    }

    /// Seed of a point's prompts: differs per point, fixed by the sweep seed.
    pub fn point_seed(&self, p: &Point) -> u64 {
        self.seed ^ (u64::from(p.conc) << 40) ^ (u64::from(p.isl) << 20) ^ u64::from(p.osl)
    }
}

/// The rules of the sweep's values that need no other key, shared by the
/// recipe's keys and the command line's flags. Each returns the value, or
/// what a right one is; the caller names the key (`request_rate = -1: ...`)
/// or clap names the flag (`invalid value '-1' for '--request-rate'`), so
/// that an error blames where the value came from.
///
/// A request rate, requests/s: > 0.
pub fn check_request_rate(r: f64) -> Result<f64, String> {
    if r > 0.0 && r.is_finite() { Ok(r) } else { Err("give requests/s > 0 (omit it for all at once)".into()) }
}

/// The gamma shape of request gaps: > 0 (1 = Poisson).
pub fn check_burstiness(b: f64) -> Result<f64, String> {
    if b > 0.0 && b.is_finite() { Ok(b) } else { Err("must be > 0 (1 = Poisson)".into()) }
}

/// A latency percentile: in [0, 100].
pub fn check_percentile(p: f64) -> Result<f64, String> {
    if (0.0..=100.0).contains(&p) { Ok(p) } else { Err("each percentile must be in [0, 100], e.g. 50,90,99".into()) }
}

/// A length spread under either convention: in [0, 1] (whether 1 itself
/// is allowed depends on the convention, [`LengthConvention::check_ratio`]).
pub fn check_range_ratio(r: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&r) { Ok(r) } else { Err("give a fraction in [0, 1) (vllm convention) or [0, 1] (inferencex convention)".into()) }
}

fn check_tp(tp: Option<u32>) -> Result<Option<u32>, String> {
    match tp {
        Some(0) => Err("tp = 0: TP sizes must be >= 1".into()),
        t => Ok(t),
    }
}

fn concs_of(conc: &Option<Vec<u32>>, range: Option<[u32; 2]>) -> Result<Vec<u32>, String> {
    let concs = match (conc, range) {
        (Some(c), None) => c.clone(),
        (None, Some([start, end])) => doubling(start, end)?,
        (Some(_), Some(_)) => return Err("give either conc or conc_range, not both".into()),
        (None, None) => return Err("give conc = [1, 4, ...] or conc_range = [start, end]".into()),
    };
    if concs.is_empty() || concs.contains(&0) {
        return Err(format!("conc = {concs:?}: give concurrencies >= 1"));
    }
    Ok(concs)
}

/// start, 2 start, 4 start, ... <= end.
fn doubling(start: u32, end: u32) -> Result<Vec<u32>, String> {
    if start == 0 || end < start {
        return Err(format!("conc_range = [{start}, {end}]: need 1 <= start <= end"));
    }
    let mut v = Vec::new();
    let mut c = start;
    while c <= end {
        v.push(c);
        c = match c.checked_mul(2) {
            Some(n) => n,
            None => break,
        };
    }
    Ok(v)
}

/// Parses a CLI concurrency list: `1,4,16` or a doubling range `1..256`.
pub fn parse_conc(s: &str) -> Result<Vec<u32>, String> {
    let bad = || format!("--conc {s:?}: give a list like 1,4,16 or a doubling range like 1..256");
    if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        return doubling(a, b);
    }
    let v: Vec<u32> = s.split(',').map(|x| x.trim().parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if v.is_empty() || v.contains(&0) {
        return Err(bad());
    }
    Ok(v)
}

/// Parses a CLI ISL/OSL list: `256/128,1024/128`.
pub fn parse_isl_osl(s: &str) -> Result<Vec<[u32; 2]>, String> {
    let bad = || format!("--isl-osl {s:?}: give pairs like 1024/1024,8192/1024 (tokens)");
    s.split(',')
        .map(|pair| {
            let (i, o) = pair.split_once('/').ok_or_else(bad)?;
            let (i, o): (u32, u32) = (i.trim().parse().map_err(|_| bad())?, o.trim().parse().map_err(|_| bad())?);
            if i == 0 || o == 0 { Err(bad()) } else { Ok([i, o]) }
        })
        .collect()
}

/// Parses one `--goodput` item in `vllm bench serve`'s KEY:VALUE form (ms),
/// e.g. `ttft:500`: a [`Goodput`] with that one SLO (see [`Goodput::and`]).
pub fn parse_slo(item: &str) -> Result<Goodput, String> {
    let bad = || format!("--goodput {item:?}: give KEY:MS with KEY one of ttft, tpot, e2el, e.g. ttft:500");
    let (k, v) = item.split_once(':').ok_or_else(bad)?;
    let v: f64 = v.trim().parse().map_err(|_| bad())?;
    if !(v > 0.0) {
        return Err(bad());
    }
    let mut g = Goodput::default();
    match k.trim() {
        "ttft" => g.ttft_ms = Some(v),
        "tpot" => g.tpot_ms = Some(v),
        "e2el" => g.e2el_ms = Some(v),
        _ => return Err(bad()),
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(toml_text: &str) -> Sweep {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn pairs_by_concurrencies_with_defaults() {
        let s = sweep("isl_osl = [[1024, 1024], [8192, 1024]]\nconc_range = [1, 8]").resolve().unwrap();
        let pts = s.points();
        assert_eq!(pts.len(), 8);
        assert_eq!(pts[0], Point { tp: None, isl: 1024, osl: 1024, conc: 1, num_prompts: 10, warmups: 2 });
        assert_eq!(pts[7], Point { tp: None, isl: 8192, osl: 1024, conc: 8, num_prompts: 80, warmups: 16 });
        assert_eq!(s.length_convention, LengthConvention::Vllm);
        assert_eq!(s.range_ratio, 0.0);
        assert!(s.ignore_eos);
        assert_eq!(s.percentiles, vec![90.0, 99.0, 99.9]);
        assert_ne!(s.point_seed(&pts[0]), s.point_seed(&pts[1]));
    }

    #[test]
    fn search_space_per_tp() {
        let s = sweep(
            "isl_osl = [[1024, 1024], [8192, 1024]]\nsearch_space = [{ tp = 8, conc_range = [1, 4] }, { tp = 4, conc = [64], isl_osl = [[8192, 1024]] }]",
        )
        .resolve()
        .unwrap();
        let pts = s.points();
        let tps: Vec<_> = pts.iter().map(|p| (p.tp, p.isl, p.conc)).collect();
        assert_eq!(
            tps,
            vec![
                (Some(8), 1024, 1), (Some(8), 1024, 2), (Some(8), 1024, 4),
                (Some(8), 8192, 1), (Some(8), 8192, 2), (Some(8), 8192, 4),
                (Some(4), 8192, 64),
            ]
        );
        assert_eq!(s.tps(), vec![Some(8), Some(4)]);
        let t = sweep("isl = 1\nosl = 1\nconc = [1, 2]\ntp = [2, 4]").resolve().unwrap();
        assert_eq!(t.points().len(), 4);
        assert_eq!(t.tps(), vec![Some(2), Some(4)]);
        assert!(sweep("isl = 1\nosl = 1\nconc = [1]\nsearch_space = [{ tp = 8, conc = [1] }]").resolve().is_err());
    }

    #[test]
    fn inferencex_switch_wins() {
        let s = sweep("isl = 1024\nosl = 1024\nconc = [4]\nnum_prompts = 3\npercentiles = [50]\nrange_ratio = 0.8\ninferencex = true")
            .resolve();
        // num_prompts conflicts with nothing under the switch: the switch's count wins.
        let s = s.unwrap();
        assert_eq!(s.points()[0].num_prompts, 40);
        assert_eq!(s.points()[0].warmups, 8);
        assert_eq!(s.length_convention, LengthConvention::Inferencex);
        assert_eq!(s.range_ratio, 0.8);
        assert_eq!(s.percentiles, INFERENCEX_PERCENTILES.to_vec());
    }

    #[test]
    fn errors_name_the_key() {
        let e = |t: &str| sweep(t).resolve().unwrap_err();
        assert!(e("isl = 1\nosl = 1\nconc = [1]\nconc_range = [1, 4]").contains("conc_range"));
        assert!(e("isl = 1\nconc = [1]").contains("isl and osl"));
        assert!(e("isl = 1\nosl = 1\nconc = [0]").contains("conc"));
        assert!(e("isl = 1\nosl = 1\nconc = [1]\nrange_ratio = 1.0").contains("[0, 1)"));
        assert!(e("isl = 1\nosl = 1\nconc = [1]\nrequest_rate = 0").contains("request_rate"));
        assert!(e("isl = 1\nosl = 1\nconc_range = [8, 2]").contains("start <= end"));
        assert!(e("isl = 1\nosl = 1\nconc = [1]\nnum_prompts = 2\nprompts_per_conc = 3").contains("num_prompts"));
    }

    #[test]
    fn overlay_keeps_groups_consistent() {
        let base = sweep("isl_osl = [[1024, 1024], [8192, 1024]]\nsearch_space = [{ tp = 8, conc = [1] }]\nnum_prompts = 5");
        let over = sweep("conc = [2, 4]\nosl = 64\nprompts_per_conc = 3\nrange_ratio = 0.5");
        let s = base.overlay(&over);
        assert_eq!((s.isl, s.osl, s.isl_osl.clone()), (Some(1024), Some(64), None));
        assert_eq!((s.conc.clone(), s.search_space.clone()), (Some(vec![2, 4]), None));
        assert_eq!((s.prompts_per_conc, s.num_prompts), (Some(3), None));
        assert_eq!(s.range_ratio, Some(0.5));
        let r = s.resolve().unwrap();
        assert_eq!(r.points().len(), 2);
        // An empty overlay changes nothing.
        assert_eq!(base.overlay(&Sweep::default()).resolve(), base.resolve());
    }

    #[test]
    fn cli_parsers() {
        assert_eq!(parse_conc("1,4,16").unwrap(), vec![1, 4, 16]);
        assert_eq!(parse_conc("1..64").unwrap(), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(parse_conc("3..10").unwrap(), vec![3, 6]);
        assert!(parse_conc("0,1").is_err());
        assert!(parse_conc("a").unwrap_err().contains("--conc"));
        assert_eq!(parse_isl_osl("256/128, 1024/64").unwrap(), vec![[256, 128], [1024, 64]]);
        assert!(parse_isl_osl("256x128").is_err());
        let g = parse_slo("ttft:500").unwrap().and(parse_slo("tpot:50").unwrap());
        assert_eq!((g.ttft_ms, g.tpot_ms, g.e2el_ms), (Some(500.0), Some(50.0), None));
        assert!(parse_slo("itl:5").is_err());
    }
}
