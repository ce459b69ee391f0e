//! What a launcher tells InferenceX's clients, read from the recorded calls
//! and turned into the recipe's sweep settings:
//!
//! * fixed-seq-len points: the options of `run_benchmark_serving`
//!   (InferenceX benchmarks/benchmark_lib.sh), which runs
//!   `utils/bench_serving/benchmark_serving.py --dataset-name random
//!   --request-rate inf --ignore-eos --num-warmups 2*max_concurrency` with
//!   percentiles 90/99/99.9 and the launcher's lengths, range ratio, number
//!   of prompts and chat-template choice ([`Client`]);
//! * agentic points: `resolve_trace_source` (the trace corpus) and the
//!   environment at `build_replay_cmd` (duration, warm-ups per lane, the
//!   per-tree idle cap; InferenceX's fixed start ratio 0.25-0.75, seed 42,
//!   10 s system idle cap, cache-bust marker) ([`Replay`]).
//!
//! Options the recipe cannot express are named, never dropped silently.

use std::collections::BTreeMap;

use super::sandbox::Call;
use super::workflow::MatrixPoint;

/// `run_benchmark_serving` options that take a value, and switches.
const VALUE_OPTIONS: [&str; 15] = [
    "--model", "--port", "--backend", "--endpoint", "--input-len", "--output-len", "--random-range-ratio",
    "--num-prompts", "--max-concurrency", "--result-filename", "--result-dir", "--bench-serving-dir",
    "--server-pid", "--tokenizer", "--tokenizer-mode",
];
const SWITCHES: [&str; 3] = ["--use-chat-template", "--dsv4", "--trust-remote-code"];
/// What InferenceX's helper requires (it returns 1 without them).
const REQUIRED: [&str; 10] = [
    "--model", "--port", "--backend", "--input-len", "--output-len", "--random-range-ratio", "--num-prompts",
    "--max-concurrency", "--result-filename", "--result-dir",
];

/// How many measured prompts a point sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompts {
    /// A multiple of the concurrency (`--num-prompts $((CONC * 10))`).
    PerConc(u32),
    Fixed(u32),
}

impl Prompts {
    /// The measured prompts at concurrency `conc`.
    pub fn count(self, conc: u32) -> u32 {
        match self {
            Prompts::PerConc(k) => k * conc,
            Prompts::Fixed(n) => n,
        }
    }

    /// The one rule that gives every `(concurrency, prompts)` pair: a
    /// multiple of the concurrency where one fits all, else one count;
    /// `None` when neither does.
    pub fn covering(counts: &[(u32, u32)]) -> Option<Prompts> {
        let (c0, n0) = *counts.first()?;
        if c0 > 0 && n0 % c0 == 0 && counts.iter().all(|&(c, n)| n == n0 / c0 * c) {
            return Some(Prompts::PerConc(n0 / c0));
        }
        counts.iter().all(|&(_, n)| n == n0).then_some(Prompts::Fixed(n0))
    }
}

/// The client settings of a fixed-seq-len point. Equal settings let points
/// share a job; everything here becomes a `[sweep]` key.
#[derive(Debug, Clone, PartialEq)]
pub struct Client {
    /// `--use-chat-template` (also implied by `--dsv4`): workload `chat_random`.
    pub chat: bool,
    /// `--dsv4`: InferenceX's DeepSeek-V4 encoder renders the prompt.
    pub dsv4: bool,
    /// `--random-range-ratio` (InferenceX convention: lengths in [r L, L]).
    pub range_ratio: f64,
    pub prompts: Prompts,
    /// Options the recipe cannot express, each with why.
    pub unsupported: Vec<String>,
}

/// The replay settings of an agentic point.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// AIPerf's public-dataset loader and the Hugging Face dataset it reads.
    pub loader: String,
    pub dataset: String,
    /// `--benchmark-duration`, s.
    pub duration_s: u32,
    pub warmup_requests_per_lane: u32,
    /// `--trace-idle-gap-cap-seconds`, s.
    pub tree_idle_cap_s: u32,
    /// AIPerf's chain detection (`AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS`,
    /// default true): `[sweep.trace] split_chains`.
    pub split_chains: bool,
    /// Settings of the replay the recipe cannot express, each with why.
    pub unsupported: Vec<String>,
}

/// InferenceX's fixed replay rules (build_replay_cmd, the AIPerf scenario).
pub const REPLAY_SEED: u64 = 42;
pub const REPLAY_START_RATIO: [f64; 2] = [0.25, 0.75];
pub const REPLAY_SYSTEM_IDLE_CAP_S: u32 = 10;

/// The options of one `run_benchmark_serving` call for point `p`.
///
/// Errors (the point is not imported): an option InferenceX's helper
/// rejects, a required one missing, a value that is not a number, or
/// lengths/concurrency other than the matrix point's.
pub fn client(call: &Call, p: &MatrixPoint) -> Result<Client, String> {
    let mut opts: BTreeMap<&str, String> = BTreeMap::new();
    let mut switches: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < call.args.len() {
        let a = call.args[i].as_str();
        if let Some(name) = VALUE_OPTIONS.iter().find(|n| **n == a) {
            let v = call.args.get(i + 1).ok_or_else(|| format!("run_benchmark_serving {a} has no value"))?;
            opts.insert(name, v.clone());
            i += 2;
        } else if let Some(name) = SWITCHES.iter().find(|n| **n == a) {
            switches.push(name);
            i += 1;
        } else {
            return Err(format!("run_benchmark_serving: unknown option {a:?} (InferenceX's helper rejects it and returns 1)"));
        }
    }
    if let Some(missing) = REQUIRED.iter().find(|r| !opts.contains_key(**r)) {
        return Err(format!("run_benchmark_serving without {missing} (InferenceX's helper requires it and returns 1)"));
    }
    let num = |k: &str| opts[k].parse::<u32>().map_err(|_| format!("run_benchmark_serving {k} {:?} is not a whole number", opts[k]));
    let (isl, osl, n, conc) = (num("--input-len")?, num("--output-len")?, num("--num-prompts")?, num("--max-concurrency")?);
    if (isl, osl, conc) != (p.isl, p.osl, p.conc) {
        return Err(format!(
            "the client runs ISL {isl}, OSL {osl}, concurrency {conc} where the matrix point is {} {} {}: the recipe's points are the matrix's",
            p.isl, p.osl, p.conc
        ));
    }
    let range_ratio: f64 = opts["--random-range-ratio"]
        .parse()
        .ok()
        .filter(|r: &f64| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("run_benchmark_serving --random-range-ratio {:?} is not a ratio in [0, 1]", opts["--random-range-ratio"]))?;
    if conc == 0 || n == 0 {
        return Err("run_benchmark_serving with --num-prompts or --max-concurrency 0".into());
    }
    let prompts = Prompts::covering(&[(conc, n)]).expect("one point has a rule");
    let dsv4 = switches.contains(&"--dsv4");
    let mut unsupported = Vec::new();
    let model = call.env.get("MODEL").cloned().unwrap_or_default();
    if let Some(t) = opts.get("--tokenizer").filter(|t| **t != model && Some(*t) != call.env.get("MODEL_PATH")) {
        unsupported.push(format!("client --tokenizer {t}: in-process prompts use the engine's tokenizer"));
    }
    if let Some(m) = opts.get("--tokenizer-mode") {
        unsupported.push(format!("client --tokenizer-mode {m}: in-process prompts use the engine's tokenizer (its mode is the engine's --tokenizer-mode)"));
    }
    if let Some(e) = opts.get("--endpoint") {
        unsupported.push(format!("client --endpoint {e}: there is no HTTP server in-process; requests go to the engine directly"));
    }
    if let Some(b) = opts.get("--backend").filter(|b| !["vllm", "openai"].contains(&b.as_str())) {
        unsupported.push(format!("client --backend {b}: the in-process driver is vLLM's engine itself"));
    }
    Ok(Client { chat: dsv4 || switches.contains(&"--use-chat-template"), dsv4, range_ratio, prompts, unsupported })
}

/// Loaders InferenceX's `resolve_trace_source` accepts, without their
/// `semianalysis_cc_traces_weka_` prefix, with the Hugging Face dataset
/// each reads (`semianalysisai/cc-traces-weka-<suffix>`).
const LOADERS: [(&str, &str); 14] = [
    ("with_subagents", "061526"),
    ("with_subagents_256k", "061526-256k"),
    ("with_subagents_060226", "with-subagents-060226"),
    ("with_subagents_060226_256k", "with-subagents-060226-256k"),
    ("with_subagents_060526", "with-subagents-060526"),
    ("with_subagents_060526_256k", "with-subagents-060526-256k"),
    ("with_subagents_060826", "with-subagents-060826"),
    ("with_subagents_060826_256k", "with-subagents-060826-256k"),
    ("061326", "061326"),
    ("061326_256k", "061326-256k"),
    ("061526", "061526"),
    ("061526_256k", "061526-256k"),
    ("062126", "062126"),
    ("062126_256k", "062126-256k"),
];

/// The Hugging Face dataset of an AIPerf public-dataset loader, `None` for
/// one InferenceX does not allow.
pub fn dataset_of(loader: &str) -> Option<String> {
    let suffix = loader.strip_prefix("semianalysis_cc_traces_weka_")?;
    LOADERS.iter().find(|(l, _)| *l == suffix).map(|(_, d)| format!("semianalysisai/cc-traces-weka-{d}"))
}

/// The replay of an agentic point from its `build_replay_cmd` call and the
/// `resolve_trace_source` before it.
///
/// Errors (the point is not imported): no trace chosen before the replay,
/// a loader InferenceX does not allow, or a setting that is not a number.
pub fn replay(call: &Call, trace: Option<&Call>) -> Result<Replay, String> {
    let trace = trace.filter(|t| t.line > 0 || !t.args.is_empty()).ok_or(
        "build_replay_cmd runs without resolve_trace_source before it: the replay has no trace (AIPerf gets no --public-dataset)",
    )?;
    let loader = trace.args.first().cloned().unwrap_or_default();
    let dataset = dataset_of(&loader).ok_or_else(|| format!("trace loader {loader:?} is not one InferenceX's resolve_trace_source allows"))?;
    let env = |k: &str| call.env.get(k).filter(|v| !v.is_empty()).cloned();
    let num = |k: &str, default: u32| -> Result<u32, String> {
        env(k).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{k}={v:?} is not a whole number of {}", if k == "DURATION" { "seconds" } else { "requests or seconds" })))
    };
    let fast = env("AIPERF_EXPERIMENTAL_FAST").as_deref() == Some("1");
    let duration_s = if fast { 1200 } else { num("DURATION", 0)? };
    if duration_s == 0 {
        return Err("build_replay_cmd without DURATION: the replay has no length".into());
    }
    let warmup_requests_per_lane = if fast { 1 } else { num("AIPERF_WARMUP_REQUESTS_PER_LANE", 10)? };
    let tree_idle_cap_s = num("AIPERF_TRACE_IDLE_GAP_CAP_SECONDS", 300)?;
    // As pydantic reads a bool from the environment (AIPerf's Environment settings).
    let split_chains = match env("AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS").map(|v| v.to_ascii_lowercase()) {
        None => true,
        Some(v) if ["1", "true", "yes", "on", "y", "t"].contains(&v.as_str()) => true,
        Some(v) if ["0", "false", "no", "off", "n", "f"].contains(&v.as_str()) => false,
        Some(v) => return Err(format!("AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS={v:?} is not a boolean (true/false, 1/0)")),
    };
    let mut unsupported = Vec::new();
    if let Some(n) = env("MAX_MODEL_LEN").filter(|n| n != "0") {
        unsupported.push(format!(
            "AIPerf drops traces longer than --max-context-length {n} (MAX_MODEL_LEN); here a request longer than the engine's context stops the run before it starts"
        ));
    }
    if let Some(x) = env("AIPERF_EXTRA_INPUTS") {
        unsupported.push(format!("AIPerf --extra-inputs {x}: extra request fields are not sent in-process"));
    }
    if env("AIPERF_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES").as_deref() == Some("1") {
        unsupported.push("live assistant responses (AIPERF_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES=1): the replay sends the recorded assistant turns".into());
    }
    Ok(Replay { loader, dataset, duration_s, warmup_requests_per_lane, tree_idle_cap_s, split_chains, unsupported })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::workflow::Kind;

    fn call(args: &[&str], env: &[(&str, &str)]) -> Call {
        Call {
            line: 7,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn point() -> MatrixPoint {
        MatrixPoint {
            kind: Kind::FixedSeqLen,
            isl: 8192,
            osl: 1024,
            conc: 4,
            tp: 8,
            ep: 1,
            dp_attn: false,
            pp: 1,
            dcp: 1,
            pcp: 1,
            spec: "mtp".into(),
            offload: None,
            env: BTreeMap::new(),
        }
    }

    const FULL: [&str; 21] = [
        "--model", "m", "--port", "8888", "--backend", "vllm", "--input-len", "8192", "--output-len", "1024",
        "--random-range-ratio", "0.8", "--num-prompts", "40", "--max-concurrency", "4", "--result-filename", "r",
        "--result-dir", "/w", "--dsv4",
    ];

    #[test]
    fn client_options_become_settings() {
        let c = client(&call(&FULL, &[("MODEL", "m")]), &point()).unwrap();
        assert_eq!(c, Client { chat: true, dsv4: true, range_ratio: 0.8, prompts: Prompts::PerConc(10), unsupported: vec![] });
        let mut args = FULL.to_vec();
        args[13] = "50";
        args[20] = "--use-chat-template";
        args.extend(["--tokenizer-mode", "deepseek_v4"]);
        let c = client(&call(&args, &[]), &point()).unwrap();
        assert_eq!((c.chat, c.dsv4, c.prompts), (true, false, Prompts::Fixed(50)));
        assert!(c.unsupported[0].contains("--tokenizer-mode deepseek_v4"), "{:?}", c.unsupported);
        let err = client(&call(&["--model", "m", "--frobnicate"], &[]), &point()).unwrap_err();
        assert!(err.contains("unknown option \"--frobnicate\""), "{err}");
        let err = client(&call(&FULL[..12], &[]), &point()).unwrap_err();
        assert!(err.contains("without --num-prompts"), "{err}");
        let mut other = point();
        other.conc = 8;
        assert!(client(&call(&FULL, &[]), &other).unwrap_err().contains("concurrency 4"));
    }

    #[test]
    fn one_prompt_rule_for_a_job() {
        assert_eq!(Prompts::covering(&[(4, 40), (8, 80)]), Some(Prompts::PerConc(10)));
        assert_eq!(Prompts::covering(&[(4, 64), (8, 64)]), Some(Prompts::Fixed(64)));
        assert_eq!(Prompts::covering(&[(3, 64)]), Some(Prompts::Fixed(64)));
        assert_eq!(Prompts::covering(&[(4, 40), (8, 64)]), None);
    }

    #[test]
    fn replay_settings_from_the_environment() {
        let trace = call(&["semianalysis_cc_traces_weka_062126"], &[]);
        let r = replay(&call(&["/workspace/results"], &[("DURATION", "3600")]), Some(&trace)).unwrap();
        assert_eq!(r.dataset, "semianalysisai/cc-traces-weka-062126");
        assert_eq!((r.duration_s, r.warmup_requests_per_lane, r.tree_idle_cap_s), (3600, 10, 300));
        let fast = replay(&call(&[], &[("DURATION", "3600"), ("AIPERF_EXPERIMENTAL_FAST", "1"), ("MAX_MODEL_LEN", "262144")]), Some(&trace)).unwrap();
        assert_eq!((fast.duration_s, fast.warmup_requests_per_lane), (1200, 1));
        assert!(fast.unsupported[0].contains("--max-context-length 262144"), "{:?}", fast.unsupported);
        assert!(replay(&call(&[], &[("DURATION", "3600")]), None).unwrap_err().contains("resolve_trace_source"));
        let bad = call(&["semianalysis_other"], &[]);
        assert!(replay(&call(&[], &[("DURATION", "3600")]), Some(&bad)).unwrap_err().contains("semianalysis_other"));
        assert_eq!(dataset_of("semianalysis_cc_traces_weka_with_subagents").as_deref(), Some("semianalysisai/cc-traces-weka-061526"));
        // AIPerf's chain detection, on unless the launcher turns it off.
        assert!(r.split_chains);
        let off = |v: &str| replay(&call(&[], &[("DURATION", "60"), ("AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS", v)]), Some(&trace));
        assert!(!off("false").unwrap().split_chains && !off("0").unwrap().split_chains && off("True").unwrap().split_chains);
        assert!(off("maybe").unwrap_err().contains("AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS=\"maybe\" is not a boolean"));
    }
}
