//! The worker's call into lm-eval, and lm-eval's call back into Rust.
//!
//! [`evaluate`] runs `evaluate(spec, generate)` of the lm-eval side
//! ([`super::SOURCE`]) in the worker's interpreter. `generate` is a Python
//! callable made here ([`Generate`]) around a Rust closure borrowed for the
//! length of that one call: lm-eval's `generate_until` hands it the batch of
//! requests, the closure runs them through the driver loop and returns the
//! completions. pyo3's own closures must be `'static`; this one borrows the
//! engine, so the callable holds a pointer that is cleared before
//! [`evaluate`] returns (a later call raises instead of touching it).

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::ptr::NonNull;

use anyhow::{Context, Result};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::engine::pyerror::{PyResultExt, PythonError};
use crate::protocol::{ChatMessage, Prompt};

/// One of lm-eval's generation requests, as `EngineLM.generate_until` hands it over.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    /// lm-eval's task name.
    pub task: String,
    /// Text, or chat messages when the chat template is on.
    pub prompt: Prompt,
    /// Stop strings (lm-eval's `until`).
    pub stop: Vec<String>,
    pub max_tokens: u32,
}

/// What lm-eval's `generate` does: completions in request order.
pub type GenerateFn<'a> = dyn FnMut(Vec<GenRequest>) -> Result<Vec<String>> + 'a;

/// The Python callable lm-eval's model calls: forwards to a borrowed Rust closure.
#[pyclass(unsendable)]
struct Generate {
    /// The closure, while [`evaluate`] runs; `None` before and after.
    target: Cell<Option<NonNull<GenerateFn<'static>>>>,
    /// The Rust error behind the exception last raised, so the caller gets
    /// the error itself (a usage error stays one) rather than its text.
    error: RefCell<Option<anyhow::Error>>,
}

#[pymethods]
impl Generate {
    fn __call__(&self, requests: &Bound<'_, PyList>) -> PyResult<Vec<String>> {
        let batch = requests.iter().map(|r| gen_request(&r)).collect::<PyResult<Vec<_>>>()?;
        let Some(mut f) = self.target.take() else {
            return Err(PyRuntimeError::new_err("enginebench's generate was called outside its eval"));
        };
        // SAFETY: `target` is set only inside `evaluate`, to a closure that
        // outlives that call, and cleared before it returns; taking it out
        // while it runs keeps a nested call from aliasing it.
        let result = unsafe { f.as_mut() }(batch);
        self.target.set(Some(f));
        result.map_err(|e| {
            let message = format!("{e:#}");
            *self.error.borrow_mut() = Some(e);
            PyRuntimeError::new_err(message)
        })
    }
}

/// `(task, prompt, until, max_tokens)`, prompt a str or [(role, content)].
fn gen_request(item: &Bound<'_, PyAny>) -> PyResult<GenRequest> {
    let t = item.cast::<PyTuple>()?;
    let task: String = t.get_item(0)?.extract()?;
    let prompt = t.get_item(1)?;
    let prompt = if let Ok(text) = prompt.cast::<PyString>() {
        Prompt::Text(text.to_str()?.to_string())
    } else {
        let pairs: Vec<(String, String)> = prompt.extract()?;
        Prompt::Chat(pairs.into_iter().map(|(role, content)| ChatMessage { role, content }).collect())
    };
    Ok(GenRequest { task, prompt, stop: t.get_item(2)?.extract()?, max_tokens: t.get_item(3)?.extract()? })
}

/// Runs lm-eval on `spec_json` (an `LmEvalJob`), generating through
/// `generate`; returns lm-eval's results JSON (without samples). lm-eval's
/// files are written into the spec's `output_dir`.
///
/// Errors: the error `generate` returned (as it was), or lm-eval's exception
/// (a [`PythonError`]; `LmEvalTaskError` is bad input).
pub fn evaluate(spec_json: &str, generate: &mut GenerateFn<'_>) -> Result<String> {
    Python::attach(|py| {
        let code = CString::new(super::SOURCE)?;
        let module = PyModule::from_code(py, &code, c"enginebench_shim/lmeval.py", c"enginebench_lmeval")
            .py_context(py)
            .context("loading enginebench's lm-eval module")?;
        let ptr: NonNull<GenerateFn<'_>> = NonNull::from(generate);
        // SAFETY: only the trait object's lifetime bound changes; the pointer
        // is cleared below, before `generate`'s borrow ends (also on unwind,
        // through `Clear`).
        let ptr: NonNull<GenerateFn<'static>> = unsafe { std::mem::transmute(ptr) };
        let callable = Bound::new(py, Generate { target: Cell::new(Some(ptr)), error: RefCell::new(None) }).py_context(py)?;
        let _clear = Clear(&callable);
        let out = module.call_method1("evaluate", (spec_json, &callable));
        let error = callable.borrow().error.borrow_mut().take();
        match out {
            Ok(v) => v.extract::<String>().py_context(py),
            Err(e) => Err(error.unwrap_or_else(|| PythonError::from_py(py, &e).into())),
        }
    })
}

/// Clears the callable's closure when dropped.
struct Clear<'a, 'py>(&'a Bound<'py, Generate>);

impl Drop for Clear<'_, '_> {
    fn drop(&mut self) {
        self.0.borrow().target.set(None);
    }
}
