//! A stand-in engine with no model and no Python imports, for testing the
//! runner's paths (resume, Ctrl-C, exit codes, the gate, executors) in plain
//! `cargo test`. It steps like bench's null engine (`pyloop.null_engine`,
//! `EB_NULL_ENGINE=1`: every step gives each running request one token and
//! finishes it at its max_tokens), but where that one still builds vLLM and
//! patches its step, this one replaces the whole engine, so a worker runs in
//! any CPython 3.10+ without vLLM.
//!
//! Selected by the worker's environment: `ENGINEBENCH_FAKE_ENGINE=1`, or a
//! comma list of settings:
//! `step_ms=N` (sleep per step, default 2), `start_ms=N` (engine start,
//! default 50), `reject_flag=--X` (engine args holding --X are rejected as
//! vLLM's parser rejects unknown flags: bad input), `fail_at_request=N`
//! (adding the N-th perf request, from 0, raises: with 4 requests a point,
//! 4 fails the second point), `answer=TEXT` (every eval completion),
//! `no_lockstep=1` (a DP rank decides alone when to stop stepping: the
//! out-of-step loop a DP group must not run, to show it hangs).
//!
//! With vLLM's DP variables in its environment (a MoE job's ranks), the
//! fake engine joins a fake DP group ([`super::fake_dp`]) and behaves as a
//! vLLM DP rank: the group's all-reduce decides whether to step, an idle
//! rank runs a dummy step, and every step syncs the group.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, bail};

use super::{ChatMessage, Completion, Delta, EngineInfo, Prompt, SpecCounts, StepEngine, StepOutput, StepStats, WorkerEngine};
use crate::error::usage;

/// The variable that selects the fake engine.
pub const FAKE_VAR: &str = "ENGINEBENCH_FAKE_ENGINE";

/// The fake engine's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeConfig {
    pub step: Duration,
    pub start: Duration,
    pub reject_flag: Option<String>,
    pub fail_at_request: Option<usize>,
    pub answer: String,
    pub no_lockstep: bool,
}

impl FakeConfig {
    /// The settings from `$ENGINEBENCH_FAKE_ENGINE`, `None` when unset or `0`.
    ///
    /// Errors (usage): an unknown setting or a bad number.
    pub fn from_env() -> Result<Option<FakeConfig>> {
        match std::env::var(FAKE_VAR) {
            Ok(v) if !v.is_empty() && v != "0" => Self::parse(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// Parses `1` or `key=value,...`.
    pub fn parse(text: &str) -> Result<FakeConfig> {
        let mut c = FakeConfig { step: Duration::from_millis(2), start: Duration::from_millis(50), reject_flag: None, fail_at_request: None, answer: "#### 0".into(), no_lockstep: false };
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty() && *i != "1") {
            let (k, v) = item.split_once('=').ok_or_else(|| usage(format!("{FAKE_VAR}: {item:?} is not key=value")))?;
            let num = |v: &str| v.parse::<u64>().map_err(|_| usage(format!("{FAKE_VAR}: {k}={v} is not a number")));
            match k {
                "step_ms" => c.step = Duration::from_millis(num(v)?),
                "start_ms" => c.start = Duration::from_millis(num(v)?),
                "reject_flag" => c.reject_flag = Some(v.to_string()),
                "fail_at_request" => c.fail_at_request = Some(num(v)? as usize),
                "answer" => c.answer = v.to_string(),
                "no_lockstep" => c.no_lockstep = num(v)? != 0,
                _ => return Err(usage(format!("{FAKE_VAR}: unknown setting {k:?} (step_ms, start_ms, reject_flag, fail_at_request, answer, no_lockstep)"))),
            }
        }
        Ok(c)
    }
}

/// The stand-in engine.
pub struct FakeEngine {
    cfg: FakeConfig,
    info: EngineInfo,
    allowed: Vec<u32>,
    /// rid -> (max tokens, generated, text request)
    running: BTreeMap<u64, (u32, u32, bool)>,
    /// Perf requests added so far (`fail_at_request`).
    added: usize,
    /// A rank of a fake DP group (a MoE job's rank), and whether its next
    /// step is a dummy one.
    group: Option<super::fake_dp::FakeDpGroup>,
    dummy_next: bool,
    /// P/D stand-in ([`super::KvTransfer`]): prompt lengths of prefill
    /// requests (their finish hands back transfer parameters) and of decode
    /// requests (their first output counts the prompt as transferred).
    prefills: BTreeMap<u64, usize>,
    decodes: BTreeMap<u64, usize>,
    transfers: crate::protocol::pd::KvTransferStats,
}

impl FakeEngine {
    /// "Builds" the engine from `vllm serve` arguments (model first).
    ///
    /// Errors (usage): the arguments hold `reject_flag`.
    pub fn build(argv: &[String], cfg: FakeConfig) -> Result<FakeEngine> {
        if let Some(f) = cfg.reject_flag.as_ref().filter(|f| argv.iter().any(|a| a == *f || a.starts_with(&format!("{f}=")))) {
            return Err(usage(format!("vllm serve: error: unrecognized arguments: {f} (fake engine)")));
        }
        std::thread::sleep(cfg.start);
        let info = EngineInfo {
            vllm: Some("0.0.0+fake".into()),
            model: argv.first().cloned(),
            tensor_parallel_size: Some(1),
            pipeline_parallel_size: Some(1),
            max_model_len: Some(4096),
            vocab_size: Some(1000),
            special_token_ids: vec![0],
            fake_engine: true,
            ..EngineInfo::default()
        };
        let group = super::fake_dp::FakeDpGroup::from_env(Duration::from_secs(60))?;
        Ok(FakeEngine { cfg, info, allowed: (1..1000).collect(), running: BTreeMap::new(), added: 0, group, dummy_next: false, prefills: BTreeMap::new(), decodes: BTreeMap::new(), transfers: Default::default() })
    }
}

impl StepEngine for FakeEngine {
    fn add_tokens(&mut self, rid: u64, _prompt: &[u32], max_tokens: u32, _ignore_eos: bool) -> Result<()> {
        if self.cfg.fail_at_request == Some(self.added) {
            bail!("fake engine: failing at request {} as {FAKE_VAR} asks", self.added);
        }
        self.added += 1;
        self.running.insert(rid, (max_tokens.max(1), 0, false));
        Ok(())
    }

    fn add_text(&mut self, rid: u64, _prompt: &Prompt, max_tokens: u32, _stop: &[String]) -> Result<()> {
        self.running.insert(rid, (max_tokens.clamp(1, 4), 0, true));
        Ok(())
    }

    fn keep_stepping(&mut self, in_flight: usize, pending: bool) -> Result<bool> {
        let lockstep = !self.cfg.no_lockstep;
        match self.group.as_mut().filter(|_| lockstep) {
            None => Ok(in_flight > 0),
            Some(g) => {
                let any = g.all_reduce_max(u8::from(in_flight > 0 || pending))? > 0;
                self.dummy_next = any && in_flight == 0;
                Ok(any)
            }
        }
    }

    fn sync_ranks(&mut self) -> Result<()> {
        if let Some(g) = self.group.as_mut().filter(|_| !self.cfg.no_lockstep) {
            g.all_reduce_max(0)?;
        }
        Ok(())
    }

    fn step(&mut self, out: &mut StepOutput) -> Result<()> {
        out.clear();
        std::thread::sleep(self.cfg.step);
        if let Some(g) = self.group.as_mut() {
            // A MoE forward's DP sync: every rank, every step.
            g.all_reduce_max(1)?;
        }
        if std::mem::take(&mut self.dummy_next) {
            return Ok(());
        }
        let mut done = Vec::new();
        for (&rid, st) in self.running.iter_mut() {
            st.1 += 1;
            let finished = st.1 >= st.0;
            out.deltas.push(Delta { rid, new_tokens: 1, finished });
            if let Some(n) = self.decodes.remove(&rid) {
                out.external_cached.push((rid, n as u32));
                self.transfers.transfers += 1;
                self.transfers.bytes += n as u64;
            }
            if let Some(n) = self.prefills.remove(&rid).filter(|_| finished) {
                out.kv_params.push((rid, serde_json::json!({"remote_engine_id": "fake", "remote_num_tokens": n}).to_string()));
            }
            if finished {
                done.push(rid);
                if st.2 {
                    out.completions.push(Completion { rid, text: self.cfg.answer.clone(), token_ids: vec![1; st.1 as usize] });
                }
            }
        }
        for rid in done {
            self.running.remove(&rid);
        }
        out.stats = StepStats { running: self.running.len() as u32, ..StepStats::default() };
        Ok(())
    }

    fn abort(&mut self, rids: &[u64]) -> Result<()> {
        for r in rids {
            self.running.remove(r);
        }
        Ok(())
    }
}

impl super::KvTransfer for FakeEngine {
    fn add_prefill(&mut self, rid: u64, prompt: &[u32]) -> Result<()> {
        self.add_tokens(rid, prompt, 1, true)?;
        self.prefills.insert(rid, prompt.len());
        Ok(())
    }

    fn add_decode(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool, _params: &serde_json::Value) -> Result<()> {
        self.add_tokens(rid, prompt, max_tokens, ignore_eos)?;
        self.decodes.insert(rid, prompt.len());
        Ok(())
    }

    fn take_kv_transfer_stats(&mut self) -> Result<Option<crate::protocol::pd::KvTransferStats>> {
        let t = std::mem::take(&mut self.transfers);
        Ok((t.transfers > 0).then_some(t))
    }
}

impl WorkerEngine for FakeEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }
    fn allowed_token_ids(&self) -> &[u32] {
        &self.allowed
    }
    fn record_token_ids(&mut self, _on: bool) -> Result<()> {
        Ok(())
    }
    fn spec_counters(&self) -> Option<SpecCounts> {
        None
    }
    fn shutdown(&mut self) -> Result<()> {
        Ok(())
    }
    fn reset_prefix_cache(&mut self) -> Result<Option<bool>> {
        Ok(Some(self.running.is_empty()))
    }
    /// Three ids before the content, two after: a stand-in chat template.
    fn chat_frame(&mut self) -> Result<(Vec<u32>, Vec<u32>)> {
        Ok((vec![1, 2, 3], vec![4, 5]))
    }
    /// One id per byte of each message's content, framed like `chat_frame`.
    fn tokenize_chat(&mut self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let mut ids = vec![1, 2, 3];
        for m in messages {
            ids.extend(m.content.bytes().map(|b| u32::from(b).max(1)));
        }
        ids.extend([4, 5]);
        Ok(ids)
    }
    fn count_tokens(&mut self, text: &str) -> Result<u32> {
        Ok(text.len() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_bad_ones_are_named() {
        let c = FakeConfig::parse("step_ms=0,reject_flag=--bogus,fail_at_request=4,answer=#### 42").unwrap();
        assert_eq!((c.step, c.reject_flag.as_deref(), c.fail_at_request, c.answer.as_str()), (Duration::ZERO, Some("--bogus"), Some(4), "#### 42"));
        assert_eq!(FakeConfig::parse("1").unwrap().step, Duration::from_millis(2));
        let e = FakeConfig::parse("speed=3").unwrap_err().to_string();
        assert!(e.contains("unknown setting \"speed\""), "{e}");
    }

    #[test]
    fn one_token_per_step_until_max_tokens_and_rejected_flag() {
        let cfg = FakeConfig::parse("step_ms=0,start_ms=0,reject_flag=--bogus").unwrap();
        assert!(FakeEngine::build(&["m".into(), "--bogus".into()], cfg.clone()).is_err());
        let mut e = FakeEngine::build(&["m".into()], cfg).unwrap();
        e.add_tokens(1, &[1, 2], 3, true).unwrap();
        let mut out = StepOutput::default();
        for _ in 0..2 {
            out.clear();
            e.step(&mut out).unwrap();
            assert_eq!(out.deltas, vec![Delta { rid: 1, new_tokens: 1, finished: false }]);
        }
        out.clear();
        e.step(&mut out).unwrap();
        assert!(out.deltas[0].finished);
    }
}

/// The stand-in runs no torch: `--profile` on it is an error, not an empty table.
impl super::Profiler for FakeEngine {
    fn profile_start(&mut self) -> Result<Vec<String>> {
        bail!("the fake engine (${FAKE_VAR}) has no profiler: --profile needs vLLM")
    }
    fn profile_stop(&mut self, _trace: &std::path::Path) -> Result<super::ProfileStop> {
        bail!("the fake engine has no profiler")
    }
}
