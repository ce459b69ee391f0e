//! [`StepEngine`] over vLLM through the Python shim (`python-shim/enginebench_shim/engine.py`).
//!
//! On the shim's core step path (`steppath.py`) a step hands back vLLM's
//! `EngineCoreOutput` objects as they are, and this module reads the few
//! fields the figures need straight from them (request id, number of new
//! tokens, finish reason; events and prefill stats only where present), so
//! no Python object is made per request per step. The per-request state
//! vLLM's own timings need (its request id, arrival time, first-token and
//! event timestamps) is kept here, touched only on a request's first
//! output, its events and its finish.

use std::collections::HashMap;
use std::sync::Arc;
use std::ffi::CString;
use std::time::Instant;

use anyhow::{Context, Result};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use pyo3::{intern, Py, PyAny};

use super::pyerror::PyResultExt;
use super::token_lists::{token_list, Stager, TokenTable};
use super::PromptStager;
use crate::protocol::knobs::{KnobReport, KnobRequest};
use super::{ChatMessage, Completion, Delta, EngineInfo, EngineTiming, Prompt, SpecCounts, StepEngine, StepOutput, StepStats};

/// The shim's source, compiled into the worker module so it can never go missing.
const SHIM_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/engine.py");
/// The shim's compatibility layer (every vLLM internal it touches), loaded first.
const COMPAT_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/compat.py");
/// The shim's two step paths (engine core directly, or LLMEngine.step()).
const KNOBS_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/knobs.py");
const STEPPATH_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/steppath.py");
/// What a MoE DP group lacks on vLLM's CPU platform (collectives, expert
/// map), supplied by the shim and installed as a vLLM plugin for workers.
const CPU_COLLECTIVES_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/cpu_collectives.py");

/// An in-process vLLM engine.
pub struct VllmEngine {
    engine: Py<PyAny>,
    /// Facts about the built engine (versions, model, dtype, parallel sizes), JSON.
    pub info: EngineInfo,
    /// Token ids a random prompt may use (vocabulary minus special tokens).
    pub allowed_token_ids: Vec<u32>,
    /// Token requests in flight on the core path, by enginebench id.
    core: HashMap<u64, CoreRequest>,
    /// Python ints 0..vocabulary, shared by every prompt list: a list of n
    /// token ids is then n pointer stores, not n new ints.
    token_objects: Arc<TokenTable>,
    /// Replay prompts' lists made on the prefetch thread ([`StepEngine::prompt_stager`]).
    stager: Arc<Stager>,
    /// Requests prepared before a loop ([`StepEngine::prepare_tokens`]), by
    /// (prompt address, length, max_tokens, ignore_eos): the shim's handles.
    prepared: HashMap<(usize, usize, u32, bool), Vec<Py<PyAny>>>,
    /// Per-step reads of `EngineCoreOutput`s: interned attribute names.
    names: OutputNames,
    record_ids: bool,
    /// A rank of a vLLM DP group (MoE data parallel): every loop iteration
    /// asks the group whether to step ([`StepEngine::keep_stepping`]).
    lockstep: bool,
    /// The engine has a KV connector (P/D): finished outputs' transfer
    /// parameters and first outputs' arrived-by-transfer counts are read.
    kv_connector: bool,
}

/// What a core-path request needs for vLLM's own timings and for an abort.
#[derive(Debug)]
struct CoreRequest {
    /// vLLM's request id (ours, maybe with a random suffix).
    vllm_id: String,
    /// `EngineCoreRequest.arrival_time`, time.time() s.
    arrival_s: f64,
    /// TTFT as vLLM computes it; the engine core's timestamp of the first output.
    ttft_s: f64,
    first_ts: Option<f64>,
    /// QUEUED / first SCHEDULED event timestamps (engine core clock), 0 until seen.
    queued_ts: f64,
    scheduled_ts: f64,
}

/// Interned names of the `EngineCoreOutput` fields read each step.
struct OutputNames {
    request_id: Py<PyString>,
    new_token_ids: Py<PyString>,
    finish_reason: Py<PyString>,
    events: Py<PyString>,
    prefill_stats: Py<PyString>,
    num_cached_tokens: Py<PyString>,
    kind: Py<PyString>,
    timestamp: Py<PyString>,
    kv_transfer_params: Py<PyString>,
    num_external_cached_tokens: Py<PyString>,
}

impl OutputNames {
    fn new(py: Python<'_>) -> OutputNames {
        let n = |s: &str| PyString::intern(py, s).unbind();
        OutputNames {
            request_id: n("request_id"),
            new_token_ids: n("new_token_ids"),
            finish_reason: n("finish_reason"),
            events: n("events"),
            prefill_stats: n("prefill_stats"),
            num_cached_tokens: n("num_cached_tokens"),
            kind: n("type"),
            timestamp: n("timestamp"),
            kv_transfer_params: n("kv_transfer_params"),
            num_external_cached_tokens: n("num_external_cached_tokens"),
        }
    }
}

/// vLLM's `EngineCoreEventType` values (vllm/v1/engine/__init__.py, 0.23-0.34).
const EVENT_QUEUED: i64 = 1;
const EVENT_SCHEDULED: i64 = 2;
const EVENT_PREEMPTED: i64 = 3;

impl VllmEngine {
    /// Builds the engine from a `vllm serve` argument list (model first), parsed
    /// by vLLM's own serve parser, in the worker's own interpreter (whose
    /// `sys.executable` is what multiprocessing's children run).
    /// `profile_dir`: `--profile` windows will be taken, and vLLM's worker
    /// profiler writes its per-rank traces there (the shim's `Engine`).
    ///
    /// Errors: a [`super::pyerror::PythonError`] for rejected flags or a failed
    /// engine start, with vLLM's message.
    pub fn build(argv: &[String], profile_dir: Option<&std::path::Path>) -> Result<VllmEngine> {
        Python::attach(|py| {
            let module = load_shim(py)?;
            let dir = profile_dir.map(|d| d.to_string_lossy().into_owned());
            let engine = module.call_method1("Engine", (argv.to_vec(), dir)).py_context(py)?;
            let info: String = module
                .getattr("json")
                .and_then(|json| json.call_method1("dumps", (engine.call_method0("info")?,)))
                .and_then(|s| s.extract())
                .py_context(py)?;
            let allowed_token_ids: Vec<u32> =
                engine.getattr("allowed_token_ids").and_then(|v| v.extract()).py_context(py)?;
            let info: EngineInfo = serde_json::from_str(&info)?;
            let kv_connector = info.kv_connector.is_some();
            let lockstep: bool = engine.getattr("dp_lockstep").and_then(|v| v.extract()).py_context(py)?;
            let vocab = info.vocab_size.unwrap_or(0).max(allowed_token_ids.iter().max().map_or(0, |m| m + 1));
            let token_objects = Arc::new(TokenTable::new(py, vocab).py_context(py)?);
            let stager = Arc::new(Stager::new(Arc::clone(&token_objects)));
            Ok(VllmEngine {
                engine: engine.unbind(),
                info,
                allowed_token_ids,
                core: HashMap::new(),
                token_objects,
                stager,
                prepared: HashMap::new(),
                names: OutputNames::new(py),
                record_ids: false,
                lockstep,
                kv_connector,
            })
        })
    }

    /// Shuts the engine core down; errors are returned, not raised.
    pub fn shutdown(&mut self) -> Result<()> {
        Python::attach(|py| self.engine.call_method0(py, "shutdown").map(drop).py_context(py))
    }
}

/// Loads the shim module (its compatibility layer and step paths first).
fn load_shim<'py>(py: Python<'py>) -> Result<Bound<'py, PyModule>> {
    // Registered in sys.modules as `enginebench_compat` / `enginebench_steppath`
    // / `enginebench_cpu_collectives`, where the shim imports them.
    let compat = CString::new(COMPAT_SOURCE)?;
    PyModule::from_code(py, &compat, c"enginebench_shim/compat.py", c"enginebench_compat")
        .py_context(py)
        .context("loading the enginebench Python shim's compatibility layer")?;
    let knobs = CString::new(KNOBS_SOURCE)?;
    PyModule::from_code(py, &knobs, c"enginebench_shim/knobs.py", c"enginebench_knobs")
        .py_context(py)
        .context("loading the enginebench Python shim's knob report")?;
    let steppath = CString::new(STEPPATH_SOURCE)?;
    PyModule::from_code(py, &steppath, c"enginebench_shim/steppath.py", c"enginebench_steppath")
        .py_context(py)
        .context("loading the enginebench Python shim's step paths")?;
    let collectives = CString::new(CPU_COLLECTIVES_SOURCE)?;
    let module = PyModule::from_code(py, &collectives, c"enginebench_shim/cpu_collectives.py", c"enginebench_cpu_collectives")
        .py_context(py)
        .context("loading the enginebench Python shim's CPU collectives")?;
    // Its own text, which it writes out as a vLLM plugin for worker processes.
    module.setattr("SOURCE", CPU_COLLECTIVES_SOURCE).py_context(py)?;
    let code = CString::new(SHIM_SOURCE)?;
    let module =
        PyModule::from_code(py, &code, c"enginebench_shim/engine.py", c"enginebench_shim_engine")
            .py_context(py)
            .context("loading the enginebench Python shim")?;
    Ok(module)
}

/// What the interpreter's vLLM is (versions, platform, devices, compatibility
/// items), without building an engine: the shim's report.
///
/// Errors: the shim failed, or its report does not have the shape of
/// [`crate::protocol::DoctorReport`] (the shim and this build disagree).
pub fn doctor() -> Result<crate::protocol::DoctorReport> {
    let text = Python::attach(|py| {
        let module = load_shim(py)?;
        module.call_method0("doctor").and_then(|r| r.extract::<String>()).py_context(py)
    })?;
    serde_json::from_str(&text).context("reading the shim's doctor report")
}

/// Checks `vllm serve` arguments with vLLM's own parser, without building an
/// engine; returns the shim's JSON report (see `check_args` in the shim).
pub fn check_args(argv: &[String], env_names: &[String]) -> Result<String> {
    Python::attach(|py| {
        let module = load_shim(py)?;
        module
            .call_method1("check_args", (argv.to_vec(), env_names.to_vec()))
            .and_then(|r| r.extract::<String>())
            .py_context(py)
    })
}

/// The knob report of one engine configuration (`argv`: model, then
/// flags), made by the shim with vLLM's own parser, config classes, model
/// registry and modules (python-shim/enginebench_shim/knobs.py). Builds
/// configs, never an engine; reads no weights.
///
/// Errors: the shim failed, or its report does not have the shape of
/// [`KnobReport`].
pub fn knob_report(argv: &[String], request: &KnobRequest) -> Result<KnobReport> {
    let text: String = Python::attach(|py| {
        let module = load_shim(py)?;
        let unset = request.env_unset.clone();
        module
            .call_method1("knob_report", (argv.to_vec(), request.env.clone(), unset, request.concs.clone(), request.quick_reduce))
            .and_then(|r| r.extract::<String>())
            .py_context(py)
    })?;
    serde_json::from_str(&text).context("reading the shim's knob report")
}

impl StepEngine for VllmEngine {
    fn add_tokens(
        &mut self,
        rid: u64,
        prompt: &[u32],
        max_tokens: u32,
        ignore_eos: bool,
    ) -> Result<()> {
        let key = (prompt.as_ptr() as usize, prompt.len(), max_tokens, ignore_eos);
        let prepared = self.prepared.get_mut(&key).and_then(Vec::pop);
        let staged = if prepared.is_none() { self.stager.take(prompt) } else { None };
        let asked = Instant::now();
        Python::attach(|py| {
            let gil_wait = asked.elapsed();
            let mut made = None;
            let fixed = prepared.is_some();
            let added = match prepared {
                Some(handle) => self.engine.call_method1(py, intern!(py, "add_prepared"), (rid, handle)),
                None => {
                    let ids = match staged {
                        Some(staged) => staged.into_list(py).py_context(py)?,
                        None => {
                            let started = Instant::now();
                            let list = self.prompt_list(py, prompt).py_context(py)?;
                            made = Some(started.elapsed());
                            list
                        }
                    };
                    self.engine.call_method1(py, intern!(py, "add_tokens"), (rid, ids, max_tokens, ignore_eos))
                }
            }
            .py_context(py)?;
            if !fixed {
                self.stager.record_send(gil_wait, prompt.len(), made);
            }
            self.track(py, rid, added)
        })
    }

    fn add_text(&mut self, rid: u64, prompt: &Prompt, max_tokens: u32, stop: &[String]) -> Result<()> {
        Python::attach(|py| {
            let result = match prompt {
                Prompt::Text(text) => self.engine.call_method1(
                    py,
                    intern!(py, "add_text"),
                    (rid, text.as_str(), max_tokens, stop.to_vec()),
                ),
                Prompt::Chat(messages) => {
                    let pairs: Vec<(&str, &str)> =
                        messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
                    self.engine.call_method1(py, intern!(py, "add_chat"), (rid, pairs, max_tokens, stop.to_vec()))
                }
            };
            result.map(drop).py_context(py)
        })
    }

    fn prepare_tokens(&mut self, requests: &[(&[u32], u32, bool)]) -> Result<()> {
        self.prepared.clear();
        Python::attach(|py| {
            for &(prompt, max_tokens, ignore_eos) in requests {
                let ids = self.prompt_list(py, prompt).py_context(py)?;
                let handle = self
                    .engine
                    .call_method1(py, intern!(py, "prepare_tokens"), (ids, max_tokens, ignore_eos))
                    .py_context(py)?;
                let key = (prompt.as_ptr() as usize, prompt.len(), max_tokens, ignore_eos);
                self.prepared.entry(key).or_default().push(handle);
            }
            Ok(())
        })
    }

    fn prompt_stager(&self) -> Option<Arc<dyn PromptStager>> {
        Some(Arc::clone(&self.stager) as Arc<dyn PromptStager>)
    }

    fn abort(&mut self, rids: &[u64]) -> Result<()> {
        // Core-path requests by vLLM's id, the rest by ours.
        let mut ours = Vec::new();
        let mut vllm_ids = Vec::new();
        for rid in rids {
            match self.core.remove(rid) {
                Some(req) => vllm_ids.push(req.vllm_id),
                None => ours.push(*rid),
            }
        }
        Python::attach(|py| {
            self.engine.call_method1(py, intern!(py, "abort"), (ours, vllm_ids)).map(drop).py_context(py)
        })
    }

    fn keep_stepping(&mut self, in_flight: usize, pending: bool) -> Result<bool> {
        if !self.lockstep {
            return Ok(in_flight > 0);
        }
        Python::attach(|py| {
            self.engine
                .call_method1(py, intern!(py, "has_unfinished"), (in_flight, pending))
                .and_then(|v| v.extract::<bool>(py))
                .py_context(py)
        })
    }

    fn sync_ranks(&mut self) -> Result<()> {
        // The shim freezes the heap made so far (its `loop_starts`), then
        // waits for the DP group's ranks.
        Python::attach(|py| self.engine.call_method0(py, intern!(py, "loop_starts")).map(drop).py_context(py))
    }

    fn step(&mut self, out: &mut StepOutput) -> Result<()> {
        out.clear();
        Python::attach(|py| {
            let result = self.engine.call_method0(py, intern!(py, "step")).py_context(py)?;
            let result = result.bind(py).cast::<PyTuple>().map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut core_preempted = 0u32;
            let raw = result.get_borrowed_item(0).py_context(py)?;
            if !raw.is_none() {
                let raw = raw.cast::<PyList>().map_err(|e| anyhow::anyhow!("{e}"))?;
                let wall_s: f64 = result.get_borrowed_item(7).and_then(|v| v.extract()).py_context(py)?;
                let core_ts: f64 = result.get_borrowed_item(8).and_then(|v| v.extract()).py_context(py)?;
                core_preempted = self.core_outputs(py, &raw, wall_s, core_ts, out).py_context(py)?;
            }
            let deltas = result.get_borrowed_item(1).py_context(py)?;
            if !deltas.is_none() {
                let deltas = deltas.cast::<PyList>().map_err(|e| anyhow::anyhow!("{e}"))?;
                out.deltas.reserve(deltas.len());
                for item in deltas.iter() {
                    out.deltas.push(delta(&item).py_context(py)?);
                    // A 4th item (the new token ids) only when record_token_ids is on.
                    let t = item.cast::<PyTuple>().map_err(|e| anyhow::anyhow!("{e}"))?;
                    if t.len() > 3 {
                        out.token_ids.push(t.get_borrowed_item(3).and_then(|v| v.extract()).py_context(py)?);
                    }
                }
            }
            let texts = result.get_item(2).py_context(py)?;
            if !texts.is_none() {
                let texts: Vec<(u64, String, Vec<u32>)> = texts.extract().py_context(py)?;
                out.completions.extend(
                    texts.into_iter().map(|(rid, text, token_ids)| Completion { rid, text, token_ids }),
                );
            }
            let (p_r, p_t, d_r, d_t, running, waiting, kv, queries, hits, preempted, spec): StatsTuple =
                result.get_item(3).and_then(|s| s.extract()).py_context(py)?;
            out.spec = spec.map(|(drafts, draft_tokens, accepted_tokens, accepted_per_pos)| SpecCounts {
                drafts,
                draft_tokens,
                accepted_tokens,
                accepted_per_pos,
            });
            let known = |r: i64, t: i64| (r >= 0 && t >= 0).then_some((r as u32, t as u32));
            out.stats = StepStats {
                prefill: known(p_r, p_t),
                decode: known(d_r, d_t),
                running,
                waiting,
                kv_cache_usage: kv,
                prefix_queries: queries,
                prefix_hits: hits,
                preempted: preempted + core_preempted,
                connector: result.get_item(6).and_then(|c| c.extract()).py_context(py)?,
            };
            let timings = result.get_item(4).py_context(py)?;
            if !timings.is_none() {
                let flat: Vec<f64> = timings.extract().py_context(py)?;
                out.timings.extend(flat.chunks_exact(5).map(|c| EngineTiming {
                    rid: c[0] as u64,
                    ttft_s: c[1],
                    decode_s: c[2],
                    queued_s: c[3],
                    generation_tokens: Some(c[4] as u32),
                }));
            }
            let cached = result.get_item(5).py_context(py)?;
            if !cached.is_none() {
                let flat: Vec<u64> = cached.extract().py_context(py)?;
                out.cached.extend(flat.chunks_exact(2).map(|c| (c[0], c[1] as u32)));
            }
            Ok(())
        })
    }
}

impl super::KvTransfer for VllmEngine {
    fn add_prefill(&mut self, rid: u64, prompt: &[u32]) -> Result<()> {
        Python::attach(|py| {
            let ids = self.prompt_list(py, prompt).py_context(py)?;
            let added = self.engine.call_method1(py, intern!(py, "add_prefill"), (rid, ids)).py_context(py)?;
            self.track(py, rid, added)
        })
    }

    fn add_decode(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool, params: &serde_json::Value) -> Result<()> {
        Python::attach(|py| {
            let ids = self.prompt_list(py, prompt).py_context(py)?;
            let added = self
                .engine
                .call_method1(py, intern!(py, "add_decode"), (rid, ids, max_tokens, ignore_eos, params.to_string()))
                .py_context(py)?;
            self.track(py, rid, added)
        })
    }

    fn take_kv_transfer_stats(&mut self) -> Result<Option<crate::protocol::pd::KvTransferStats>> {
        Python::attach(|py| {
            let stats = self.engine.call_method0(py, intern!(py, "take_kv_transfer_stats")).py_context(py)?;
            if stats.is_none(py) {
                return Ok(None);
            }
            let text: String = py
                .import("json")
                .and_then(|json| json.call_method1("dumps", (stats,)))
                .and_then(|s| s.extract())
                .py_context(py)?;
            Ok(Some(serde_json::from_str(&text).context("reading the KV connector's transfer stats")?))
        })
    }
}

impl VllmEngine {
    /// Keeps what vLLM's timings of a just-added request need: `added` is
    /// the shim's answer, (vLLM's request id, arrival time) on the core
    /// path, None on the engine path.
    fn track(&mut self, py: Python<'_>, rid: u64, added: Py<PyAny>) -> Result<()> {
        let core: Option<(String, f64)> = added.extract(py).py_context(py)?;
        if let Some((vllm_id, arrival_s)) = core {
            let req = CoreRequest { vllm_id, arrival_s, ttft_s: 0.0, first_ts: None, queued_ts: 0.0, scheduled_ts: 0.0 };
            self.core.insert(rid, req);
        }
        Ok(())
    }

    /// A Python list of `prompt`'s ids, made of the table's shared ints
    /// (crate::engine::token_lists).
    fn prompt_list<'py>(&self, py: Python<'py>, prompt: &[u32]) -> PyResult<Bound<'py, PyList>> {
        token_list(py, &self.token_objects, prompt)
    }

    /// Reads the core path's `EngineCoreOutput`s of one step into `out`
    /// (deltas, token ids when recorded, cached tokens at a request's first
    /// output, vLLM's timings at its finish); returns the PREEMPTED events
    /// seen. `wall_s`: time.time() when the outputs came back; `core_ts`:
    /// their engine-core timestamp.
    fn core_outputs(
        &mut self,
        py: Python<'_>,
        raw: &Bound<'_, PyList>,
        wall_s: f64,
        core_ts: f64,
        out: &mut StepOutput,
    ) -> PyResult<u32> {
        let names = &self.names;
        let (a_rid, a_new, a_fin) = (names.request_id.bind(py), names.new_token_ids.bind(py), names.finish_reason.bind(py));
        let (a_events, a_prefill) = (names.events.bind(py), names.prefill_stats.bind(py));
        let mut preempted = 0u32;
        out.deltas.reserve(raw.len());
        for o in raw.iter() {
            let id = o.getattr(a_rid)?;
            let rid = parse_rid(id.cast::<PyString>()?.to_str()?)?;
            let new = o.getattr(a_new)?;
            let new = new.cast::<PyList>()?;
            let finished = !o.getattr(a_fin)?.is_none();
            out.deltas.push(Delta { rid, new_tokens: new.len() as u32, finished });
            if self.record_ids {
                out.token_ids.push(new.extract()?);
            }
            if finished && self.kv_connector {
                let params = o.getattr(names.kv_transfer_params.bind(py))?;
                if !params.is_none() {
                    let text = self.engine.bind(py).call_method1(intern!(py, "kv_params_json"), (params,))?;
                    out.kv_params.push((rid, text.extract()?));
                }
            }
            // A request's first output carries its QUEUED/SCHEDULED events
            // and prefill stats (both recorded only with vLLM's log_stats), a
            // later one events only at a preemption: a plain decode output
            // has none, and nothing more is read of it.
            let events = o.getattr(a_events)?;
            if events.is_none() && !finished {
                continue;
            }
            let Some(req) = self.core.get_mut(&rid) else { continue };
            let prefill = if events.is_none() { None } else { Some(o.getattr(a_prefill)?) };
            let prefill = prefill.filter(|p| !p.is_none());
            if !events.is_none() {
                for ev in events.try_iter()? {
                    let ev = ev?;
                    let kind: i64 = ev.getattr(names.kind.bind(py))?.extract()?;
                    let at: f64 = ev.getattr(names.timestamp.bind(py))?.extract()?;
                    match kind {
                        EVENT_QUEUED => req.queued_ts = at,
                        EVENT_SCHEDULED if req.scheduled_ts == 0.0 => req.scheduled_ts = at,
                        EVENT_PREEMPTED => preempted += 1,
                        _ => {}
                    }
                }
            }
            if let Some(prefill) = prefill.filter(|_| req.first_ts.is_none()) {
                // A request's first output (the output processor's
                // is_prefilling): its cached prompt tokens, vLLM's TTFT.
                let cached: u32 = prefill.getattr(names.num_cached_tokens.bind(py))?.extract()?;
                out.cached.push((rid, cached));
                if self.kv_connector {
                    let external = prefill.getattr(names.num_external_cached_tokens.bind(py)).and_then(|v| v.extract::<u32>()).unwrap_or(0);
                    out.external_cached.push((rid, external));
                }
                req.ttft_s = wall_s - req.arrival_s;
                req.first_ts = Some(core_ts);
            }
            if finished {
                let req = self.core.remove(&rid).expect("looked up above");
                if let Some(first_ts) = req.first_ts {
                    out.timings.push(EngineTiming {
                        rid,
                        ttft_s: req.ttft_s,
                        decode_s: core_ts - first_ts,
                        queued_s: (req.scheduled_ts - req.queued_ts).max(0.0),
                        generation_tokens: None,
                    });
                }
            }
        }
        Ok(preempted)
    }
}

/// [`super::request_id_of`] as a Python error.
fn parse_rid(text: &str) -> PyResult<u64> {
    super::request_id_of(text).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// (drafts, draft tokens, accepted tokens, accepted per position) of one step.
type SpecTuple = (u64, u64, u64, Vec<u64>);

/// The shim's per-step stats tuple (see its `Engine.step` docstring).
type StatsTuple = (i64, i64, i64, i64, u32, u32, Option<f64>, u64, u64, u32, Option<SpecTuple>);

impl VllmEngine {
    /// Makes later steps return each perf request's new token ids
    /// ([`StepOutput::token_ids`]); off by default (it costs a list per
    /// request per step).
    pub fn record_token_ids(&mut self, on: bool) -> Result<()> {
        self.record_ids = on;
        Python::attach(|py| self.engine.call_method1(py, "record_token_ids", (on,)).map(drop).py_context(py))
    }

    /// vLLM's own running totals of speculative decoding (its Prometheus
    /// counters, as `vllm bench serve` reads them); `None` when it keeps none
    /// or the shim is older. Never fails the run: a Python error gives `None`.
    pub fn spec_counters(&self) -> Option<SpecCounts> {
        Python::attach(|py| {
            let v = self.engine.call_method0(py, "spec_counters").ok()?;
            let t: Option<SpecTuple> = v.extract(py).ok()?;
            t.map(|(drafts, draft_tokens, accepted_tokens, accepted_per_pos)| SpecCounts {
                drafts,
                draft_tokens,
                accepted_tokens,
                accepted_per_pos,
            })
        })
    }
}

/// One `(request_id, new_tokens, finished)` tuple of the shim's step(): the
/// request id is vLLM's string (enginebench's integer id, parsed here rather
/// than in Python, where it would cost a call per request per step).
fn delta(item: &Bound<'_, PyAny>) -> PyResult<Delta> {
    let t = item.cast::<PyTuple>()?;
    let item0 = t.get_borrowed_item(0)?;
    let text = item0.cast::<PyString>()?;
    let rid = parse_rid(text.to_str()?)?;
    Ok(Delta {
        rid,
        new_tokens: t.get_borrowed_item(1)?.extract()?,
        finished: t.get_borrowed_item(2)?.is_truthy()?,
    })
}

impl super::WorkerEngine for VllmEngine {
    fn knob_report(&self, argv: &[String], request: &KnobRequest) -> Option<Result<KnobReport>> {
        Some(knob_report(argv, request))
    }

    fn info(&self) -> &EngineInfo {
        &self.info
    }
    fn allowed_token_ids(&self) -> &[u32] {
        &self.allowed_token_ids
    }
    fn record_token_ids(&mut self, on: bool) -> Result<()> {
        VllmEngine::record_token_ids(self, on)
    }
    fn spec_counters(&self) -> Option<SpecCounts> {
        VllmEngine::spec_counters(self)
    }
    fn shutdown(&mut self) -> Result<()> {
        VllmEngine::shutdown(self)
    }
    fn reset_prefix_cache(&mut self) -> Result<Option<bool>> {
        Python::attach(|py| self.engine.call_method0(py, "reset_prefix_cache").and_then(|v| v.extract(py)).py_context(py))
    }
    fn chat_frame(&mut self) -> Result<(Vec<u32>, Vec<u32>)> {
        Python::attach(|py| self.engine.call_method0(py, "chat_frame").and_then(|v| v.extract(py)).py_context(py))
    }
    fn tokenize_chat(&mut self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let pairs: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        Python::attach(|py| self.engine.call_method1(py, "tokenize_chat", (pairs,)).and_then(|v| v.extract(py)).py_context(py))
    }
    fn count_tokens(&mut self, text: &str) -> Result<u32> {
        Python::attach(|py| self.engine.call_method1(py, "count_tokens", (text,)).and_then(|v| v.extract(py)).py_context(py))
    }
}

impl super::Profiler for VllmEngine {
    fn profile_start(&mut self) -> Result<Vec<String>> {
        Python::attach(|py| self.engine.call_method0(py, "profile_start").and_then(|v| v.extract(py)).py_context(py))
    }

    fn profile_stop(&mut self, trace: &std::path::Path) -> Result<super::ProfileStop> {
        let path = trace.to_string_lossy().into_owned();
        let (stop_s, export_s, others): (f64, f64, Vec<String>) =
            Python::attach(|py| self.engine.call_method1(py, "profile_stop", (path,)).and_then(|v| v.extract(py)).py_context(py))?;
        Ok(super::ProfileStop { stop_s, export_s, other_ranks: others.into_iter().map(Into::into).collect() })
    }
}

