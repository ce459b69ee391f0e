//! Python exceptions as Rust errors that keep the Python message and traceback.

use pyo3::types::{PyTracebackMethods, PyTypeMethods};
use pyo3::{PyErr, Python};

/// A Python exception raised inside vLLM or the shim.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct PythonError {
    /// The exception's class name, e.g. `FlagError`.
    pub type_name: String,
    /// `ExceptionType: message`, the last line of a Python traceback.
    pub message: String,
    /// The formatted traceback (shown under `-v`).
    pub traceback: Option<String>,
}

impl PythonError {
    /// True for bad input: a `vllm serve` flag that vLLM's parser rejected
    /// (the shim's `FlagError`), an interpreter whose vLLM cannot serve
    /// (`compat.VllmUnusable`: it does not import, is outside the supported
    /// range, or finds no platform), or an lm-eval task the engine cannot
    /// run (`LmEvalTaskError`).
    pub fn is_bad_input(&self) -> bool {
        matches!(self.type_name.as_str(), "FlagError" | "VllmUnusable" | "LmEvalTaskError")
    }

    /// Captures `err` (type, message, traceback) while attached to `py`.
    pub fn from_py(py: Python<'_>, err: &PyErr) -> PythonError {
        let type_name = err
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "Exception".into());
        let value = err.value(py).to_string();
        let message =
            if value.is_empty() { type_name.clone() } else { format!("{type_name}: {value}") };
        let traceback =
            err.traceback(py).and_then(|tb| tb.format().ok()).map(|tb| format!("{tb}{message}"));
        PythonError { type_name, message, traceback }
    }
}

/// Shorthand: map a `PyResult` into `anyhow::Result` with a [`PythonError`].
pub trait PyResultExt<T> {
    fn py_context(self, py: Python<'_>) -> anyhow::Result<T>;
}

impl<T> PyResultExt<T> for pyo3::PyResult<T> {
    fn py_context(self, py: Python<'_>) -> anyhow::Result<T> {
        self.map_err(|e| PythonError::from_py(py, &e).into())
    }
}
