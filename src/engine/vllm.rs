//! [`StepEngine`] over vLLM through the Python shim (`python-shim/enginebench_shim/engine.py`).

use std::ffi::CString;

use anyhow::{Context, Result};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use pyo3::{intern, Py, PyAny};

use super::pyerror::PyResultExt;
use super::{ChatMessage, Completion, Delta, EngineInfo, EngineTiming, Prompt, SpecCounts, StepEngine, StepOutput, StepStats};

/// The shim's source, compiled into the worker module so it can never go missing.
const SHIM_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/engine.py");
/// The shim's compatibility layer (every vLLM internal it touches), loaded first.
const COMPAT_SOURCE: &str = include_str!("../../python-shim/enginebench_shim/compat.py");

/// An in-process vLLM engine.
pub struct VllmEngine {
    engine: Py<PyAny>,
    /// Facts about the built engine (versions, model, dtype, parallel sizes), JSON.
    pub info: EngineInfo,
    /// Token ids a random prompt may use (vocabulary minus special tokens).
    pub allowed_token_ids: Vec<u32>,
}

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
            Ok(VllmEngine {
                engine: engine.unbind(),
                info: serde_json::from_str(&info)?,
                allowed_token_ids,
            })
        })
    }

    /// Shuts the engine core down; errors are returned, not raised.
    pub fn shutdown(&mut self) -> Result<()> {
        Python::attach(|py| self.engine.call_method0(py, "shutdown").map(drop).py_context(py))
    }
}

/// Loads the shim module (its compatibility layer first).
fn load_shim<'py>(py: Python<'py>) -> Result<Bound<'py, PyModule>> {
    // Registered in sys.modules as `enginebench_compat`, where the shim imports it.
    let compat = CString::new(COMPAT_SOURCE)?;
    PyModule::from_code(py, &compat, c"enginebench_shim/compat.py", c"enginebench_compat")
        .py_context(py)
        .context("loading the enginebench Python shim's compatibility layer")?;
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

impl StepEngine for VllmEngine {
    fn add_tokens(
        &mut self,
        rid: u64,
        prompt: &[u32],
        max_tokens: u32,
        ignore_eos: bool,
    ) -> Result<()> {
        Python::attach(|py| {
            let ids = PyList::new(py, prompt).py_context(py)?;
            self.engine
                .call_method1(py, intern!(py, "add_tokens"), (rid, ids, max_tokens, ignore_eos))
                .map(drop)
                .py_context(py)
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

    fn abort(&mut self, rids: &[u64]) -> Result<()> {
        Python::attach(|py| {
            self.engine.call_method1(py, intern!(py, "abort"), (rids.to_vec(),)).map(drop).py_context(py)
        })
    }

    fn step(&mut self, out: &mut StepOutput) -> Result<()> {
        out.clear();
        Python::attach(|py| {
            let result = self.engine.call_method0(py, intern!(py, "step")).py_context(py)?;
            let result = result.bind(py).cast::<PyTuple>().map_err(|e| anyhow::anyhow!("{e}"))?;
            let deltas = result.get_borrowed_item(0).py_context(py)?;
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
            let texts = result.get_item(1).py_context(py)?;
            if !texts.is_none() {
                let texts: Vec<(u64, String, Vec<u32>)> = texts.extract().py_context(py)?;
                out.completions.extend(
                    texts.into_iter().map(|(rid, text, token_ids)| Completion { rid, text, token_ids }),
                );
            }
            let (p_r, p_t, d_r, d_t, running, waiting, kv, queries, hits, preempted, spec): StatsTuple =
                result.get_item(2).and_then(|s| s.extract()).py_context(py)?;
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
                preempted,
                connector: None,
            };
            let timings = result.get_item(3).py_context(py)?;
            if !timings.is_none() {
                let flat: Vec<f64> = timings.extract().py_context(py)?;
                out.timings.extend(flat.chunks_exact(5).map(|c| EngineTiming {
                    rid: c[0] as u64,
                    ttft_s: c[1],
                    decode_s: c[2],
                    queued_s: c[3],
                    generation_tokens: c[4] as u32,
                }));
            }
            // Older shims return four items; the rest is then unknown.
            if result.len() > 4 {
                let cached = result.get_item(4).py_context(py)?;
                if !cached.is_none() {
                    let flat: Vec<u64> = cached.extract().py_context(py)?;
                    out.cached.extend(flat.chunks_exact(2).map(|c| (c[0], c[1] as u32)));
                }
                out.stats.connector = result.get_item(5).and_then(|c| c.extract()).py_context(py)?;
            }
            Ok(())
        })
    }
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
    let text = text.to_str()?;
    let rid = text.parse::<u64>().map_err(|e| {
        pyo3::exceptions::PyValueError::new_err(format!("request id {text:?} from the engine: {e}"))
    })?;
    Ok(Delta {
        rid,
        new_tokens: t.get_borrowed_item(1)?.extract()?,
        finished: t.get_borrowed_item(2)?.is_truthy()?,
    })
}

impl super::WorkerEngine for VllmEngine {
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
