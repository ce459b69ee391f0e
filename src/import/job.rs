//! The jobs of an import: what evaluating a launcher at its points
//! produced ([`super::inferencex`]) and what the recipe is rendered from
//! ([`super::render`]): one engine configuration ([`Engine`]), what its
//! points send ([`Bench`]), helper servers the launcher starts beside it
//! ([`Service`]), the two sides of a prefill/decode job (`roles`), and the
//! points themselves.

use std::collections::BTreeMap;

use super::client::{Client, Prompts, Replay};
use super::workflow::MatrixPoint;

/// One engine configuration the launcher produced.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Engine {
    /// The `vllm serve` model argument.
    pub model: String,
    /// The flags after the model (server-only flags removed).
    pub args: Vec<String>,
    /// Variables the launcher exported that InferenceX's workflow does not set.
    pub env: BTreeMap<String, String>,
}

impl Engine {
    /// Whether this engine asks for data parallelism, by flag or by the
    /// launcher's `VLLM_DP_SIZE` ([`crate::recipe::parallel::data_parallel`]).
    pub fn data_parallel(&self) -> Option<crate::recipe::parallel::DataParallel> {
        crate::recipe::parallel::data_parallel(&self.args, self.env.get(crate::recipe::parallel::DP_SIZE_VAR).map(String::as_str))
    }
}

/// What the points of a job send: the fixed-length client's settings or
/// the agentic replay's.
#[derive(Debug, Clone, PartialEq)]
pub enum Bench {
    Fixed(Client),
    Agentic(Replay),
}

/// A helper server a launcher starts beside the engine at some points.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    /// `mooncake_master`, `vllm-router`, `lmcache server`.
    pub name: String,
    pub line: u32,
    /// The concurrencies of the job's points that start it.
    pub concs: Vec<u32>,
}

impl Service {
    /// Why enginebench does not reproduce it.
    pub fn reason(&self) -> &'static str {
        match self.name.as_str() {
            "mooncake_master" => {
                "Mooncake's store master: a separate server the engine's MooncakeStoreConnector registers with; enginebench starts only the engine, so the connector finds no master"
            }
            "vllm-router" => {
                "vLLM's router: an HTTP front that pins each session to one data-parallel rank; in-process there is no HTTP server (requests go to the engine directly) and no data parallelism"
            }
            "lmcache server" => {
                "LMCache's multi-process cache server: the engine's LMCacheMPConnector connects to it; enginebench starts only the engine"
            }
            _ => "a separate server process; enginebench starts only the engine",
        }
    }
}

/// A job: one engine configuration, one workload setting, and the points.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub engine: Engine,
    pub bench: Bench,
    /// The launcher (relative to the checkout or its folder).
    pub launcher: std::path::PathBuf,
    /// The launcher's line of `vllm serve`.
    pub line: u32,
    /// The line of the client call or of `build_replay_cmd`.
    pub bench_line: u32,
    pub points: Vec<MatrixPoint>,
    /// Helper servers the launcher starts, not reproducible in-process.
    pub services: Vec<Service>,
    /// InferenceX's eval settings the launcher exported (`EVAL_*`, e.g.
    /// `EVAL_CONCURRENT_REQUESTS`), at its first point: they go to `[eval]`,
    /// not to the engine's environment.
    pub eval_env: BTreeMap<String, String>,
    /// `(line, command line)` of machine facts its points read.
    pub facts_used: Vec<(u32, String)>,
    /// `(line, download command)` of stubbed downloads whose checkpoint was
    /// counted as present.
    pub checkpoints: Vec<(u32, String)>,
    /// A prefill/decode job's two sides (`[roles.prefill]` / `[roles.decode]`:
    /// each side's flags, environment and layout over [`Job::engine`], which
    /// then holds what both share); `None` for one engine configuration.
    pub roles: Option<crate::recipe::roles::Roles>,
}

impl Job {
    /// The workload settings of this job with a point at concurrency `conc`
    /// whose client settings are `bench` added, or `None` when they cannot
    /// share one setting. Clients that differ only in the number of prompts
    /// share a job when one rule covers every point: a multiple of the
    /// concurrency (`CONC * 10`) or one count (`64`).
    pub(super) fn joined(&self, bench: &Bench, conc: u32) -> Option<Bench> {
        let (Bench::Fixed(mine), Bench::Fixed(theirs)) = (&self.bench, bench) else {
            return (self.bench == *bench).then(|| bench.clone());
        };
        if (Client { prompts: theirs.prompts, ..mine.clone() }) != *theirs {
            return None;
        }
        let mut counts: Vec<(u32, u32)> = self.points.iter().map(|p| (p.conc, mine.prompts.count(p.conc))).collect();
        counts.push((conc, theirs.prompts.count(conc)));
        let prompts = Prompts::covering(&counts)?;
        Some(Bench::Fixed(Client { prompts, ..mine.clone() }))
    }

    /// The TP all points share (InferenceX's matrix TP), if one.
    pub fn tp(&self) -> Option<u32> {
        let tp = self.points.first()?.tp;
        self.points.iter().all(|p| p.tp == tp).then_some(tp)
    }

    /// For a person: how this job's run differs from InferenceX's, beyond
    /// what the recipe holds (one line each).
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.services {
            let concs: Vec<String> = s.concs.iter().map(u32::to_string).collect();
            out.push(format!(
                "job {}: conc {}: the launcher starts {} (line {}): not reproducible in-process: {}",
                self.name,
                concs.join(","),
                s.name,
                s.line,
                s.reason()
            ));
        }
        if let Some(dp) = self.engine.data_parallel() {
            out.push(format!(
                "job {}: vLLM runs with {}: enginebench runs {} DP ranks, one worker process each (a MoE model's ranks as one vLLM DP group in lockstep, a dense model's as independent engines; see docs/data-parallel.md)",
                self.name,
                dp.spelled(),
                dp.size
            ));
        }
        match &self.bench {
            Bench::Fixed(c) => {
                if c.dsv4 {
                    out.push(format!(
                        "job {}: client --dsv4: InferenceX renders each prompt with its DeepSeek-V4 encoder (encoding_dsv4, thinking mode); not reproduced: workload chat_random uses the tokenizer's chat template, so the framing tokens around the random ids differ",
                        self.name
                    ));
                } else if c.chat {
                    out.push(format!("job {}: client --use-chat-template: workload chat_random (the tokenizer's chat template)", self.name));
                }
                out.extend(c.unsupported.iter().map(|u| format!("job {}: not reproduced: {u}", self.name)));
            }
            Bench::Agentic(r) => out.extend(r.unsupported.iter().map(|u| format!("job {}: not reproduced: {u}", self.name))),
        }
        out
    }
}
