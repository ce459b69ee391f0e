//! Token prompts as Python lists: made at the send, or staged ahead on
//! another thread (issue 46).
//!
//! vLLM takes a token prompt as a list of Python ints. [`token_list`] makes
//! one from a table of shared int objects (one reference-count increment per
//! token, no new ints). At AgentX's lengths that is still a millisecond or
//! more per prompt, paid between two engine steps when the send makes it.
//! A replay knows each stream's next prompt hundreds of steps before its
//! send, so [`Stager`] makes those lists on the prefetch thread instead, a
//! slice at a time: it holds the GIL for at most [`SLICE_TOKENS`] tokens
//! and then pauses without it, so that the driver, which takes the GIL for
//! every step and send, waits at most one slice. Most of the building falls
//! in the engine's step, while vLLM waits for the device without the GIL.
//! (Building only inside steps, in 8k-token slices, was tried and measured
//! worse: fewer lists were ready in time; docs/benchmarks.md, issue 46.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::{ffi, Py, PyAny};

use super::{PromptStager, StageReport, Staged};
use crate::metrics::stats::Summary;

/// Prompts shorter than this are not staged: their list costs tens of
/// microseconds at the send, less than the hand-over's own bookkeeping is
/// worth. (The shim's long-prompt path starts at the same length:
/// `SWAP_MIN_TOKENS`.)
pub const STAGE_MIN_TOKENS: usize = 1024;

/// Tokens put into a staged list per hold of the GIL (~1 ms at the 10-20 ns
/// a token measured here).
pub const SLICE_TOKENS: usize = 65536;

/// The pause without the GIL between two slices: long enough for a driver
/// that was waiting for the GIL to wake and take it (a thread that lets the
/// GIL go and asks again at once often gets it back first).
const SLICE_PAUSE: Duration = Duration::from_micros(50);

/// A list of `prompt`'s ids, each the table's shared int (a new int for an
/// id past the table). `between` runs after every `slice` tokens but the
/// last (with `usize::MAX`, never); when it says `false` the list is
/// dropped and `None` returned. The list is not tracked by Python's cyclic
/// GC: it only holds ints, and a half-made one is then never seen.
///
/// Errors: Python's, when memory runs out.
pub fn token_list<'py>(
    py: Python<'py>,
    table: &[Py<PyAny>],
    prompt: &[u32],
    slice: usize,
    mut between: impl FnMut(Python<'py>) -> bool,
) -> PyResult<Option<Bound<'py, PyList>>> {
    // SAFETY: PyList_New gives a new reference (or null with the error set);
    // untracking a tracked object is always allowed with the GIL held.
    let list = unsafe {
        let raw = ffi::PyList_New(prompt.len() as ffi::Py_ssize_t);
        if raw.is_null() {
            return Err(PyErr::fetch(py));
        }
        ffi::PyObject_GC_UnTrack(raw.cast());
        Bound::from_owned_ptr(py, raw).cast_into_unchecked::<PyList>()
    };
    for (i, &t) in prompt.iter().enumerate() {
        if i > 0 && i % slice == 0 && !between(py) {
            return Ok(None);
        }
        prefetch_ahead(table, prompt, i);
        let item = match table.get(t as usize) {
            Some(obj) => obj.clone_ref(py).into_ptr(),
            // SAFETY: a new reference or null with the error set.
            None => unsafe { ffi::PyLong_FromUnsignedLong(t.into()) },
        };
        if item.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `list` is ours, `i` in range; SetItem steals `item`.
        if unsafe { ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t, item) } != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(Some(list))
}

/// Starts loading what the ids a little ahead of `i` will need: their
/// table slots, then (once a slot is likely cached) their int objects,
/// whose reference counts the loop writes. Otherwise each token costs two
/// dependent cache misses (the table holds a vocabulary's ints, megabytes,
/// read at random); prefetched, the misses of tokens a few places apart
/// overlap (a list made at the send: p50 360-377 vs 566 us at 512 AgentX
/// sessions on the null engine, issue 46). A hint only: the list made is
/// the same.
#[inline(always)]
fn prefetch_ahead(table: &[Py<PyAny>], prompt: &[u32], i: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        const SLOT_AHEAD: usize = 32;
        const OBJECT_AHEAD: usize = 16;
        // SAFETY: a prefetch is a hint that never faults; the slots read
        // are within the table's bounds.
        unsafe {
            if let Some(slot) = prompt.get(i + SLOT_AHEAD).and_then(|&t| table.get(t as usize)) {
                _mm_prefetch::<_MM_HINT_T0>((slot as *const Py<PyAny>).cast());
            }
            if let Some(obj) = prompt.get(i + OBJECT_AHEAD).and_then(|&t| table.get(t as usize)) {
                _mm_prefetch::<_MM_HINT_T0>(obj.as_ptr() as *const i8);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (table, prompt, i);
}

/// Staged lists by (prompt address, length).
type Lists = Arc<Mutex<HashMap<(usize, usize), Py<PyList>>>>;

/// The vLLM engine's [`PromptStager`]: lists made off the driver's thread,
/// waiting for the send that takes them ([`Stager::take`]).
pub struct Stager {
    table: Arc<Vec<Py<PyAny>>>,
    lists: Lists,
    /// Lists made, and taken by their send ([`PromptStager::report`]).
    made: AtomicU64,
    taken: AtomicU64,
    sends: Mutex<SendTimes>,
}

/// The sends' costs on the driver's thread, us (a few thousand a replay).
#[derive(Default)]
struct SendTimes {
    gil_wait_us: Vec<f64>,
    made_at_send_us: Vec<f64>,
}

/// p50, p99 and max of `xs` (the project's one summary: numpy's linear
/// percentiles); zeros when empty.
fn spread(xs: &[f64]) -> [f64; 3] {
    let s = Summary::of(xs, &[99.0, 100.0]);
    [s.median, s.percentiles[0].1, s.percentiles[1].1]
}

impl Stager {
    /// A stager over the engine's table of token ints.
    pub fn new(table: Arc<Vec<Py<PyAny>>>) -> Stager {
        Stager {
            table,
            lists: Arc::default(),
            made: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            sends: Mutex::default(),
        }
    }

    /// Notes one token send's costs (a replay's: a fixed list's prepared
    /// sends are not noted): how long it waited for the GIL, and how long
    /// it took to make the list of a prompt `tokens` long when it made one
    /// itself (`None`: staged or short).
    pub fn record_send(&self, gil_wait: Duration, tokens: usize, made: Option<Duration>) {
        if let Ok(mut t) = self.sends.lock() {
            t.gil_wait_us.push(gil_wait.as_secs_f64() * 1e6);
            if let Some(d) = made.filter(|_| tokens >= STAGE_MIN_TOKENS) {
                t.made_at_send_us.push(d.as_secs_f64() * 1e6);
            }
        }
    }

    /// The list staged for `prompt` (this buffer: address and length), if
    /// any; the send's own.
    pub fn take(&self, prompt: &[u32]) -> Option<Py<PyList>> {
        let key = (prompt.as_ptr() as usize, prompt.len());
        let list = self.lists.lock().ok()?.remove(&key);
        if list.is_some() {
            self.taken.fetch_add(1, Ordering::Relaxed);
        }
        list
    }
}


impl PromptStager for Stager {
    fn report(&self) -> StageReport {
        let mut report = StageReport {
            made: self.made.load(Ordering::Relaxed),
            taken: self.taken.load(Ordering::Relaxed),
            ..StageReport::default()
        };
        // Each report covers the sends since the last (one replay's).
        if let Ok(t) = self.sends.lock().map(|mut t| std::mem::take(&mut *t)) {
            report.sends = t.gil_wait_us.len() as u64;
            report.gil_wait_us = spread(&t.gil_wait_us);
            report.made_at_send = t.made_at_send_us.len() as u64;
            report.made_at_send_us = spread(&t.made_at_send_us);
        }
        report
    }

    fn stage(&self, prompt: &[u32]) -> Option<Staged> {
        if prompt.len() < STAGE_MIN_TOKENS {
            return None;
        }
        let list = Python::attach(|py| {
            token_list(py, &self.table, prompt, SLICE_TOKENS, |py| {
                py.detach(|| std::thread::sleep(SLICE_PAUSE));
                true
            })
            .map(|list| list.map(Bound::unbind))
        })
        .ok()??;
        let key = (prompt.as_ptr() as usize, prompt.len());
        self.lists.lock().ok()?.insert(key, list);
        self.made.fetch_add(1, Ordering::Relaxed);
        Some(Staged(Box::new(Claim { lists: Arc::clone(&self.lists), key })))
    }
}

/// Withdraws its list when dropped, if the send did not take it.
struct Claim {
    lists: Lists,
    key: (usize, usize),
}

impl Drop for Claim {
    fn drop(&mut self) {
        // A list dropped here without the GIL is released by pyo3 the next
        // time a thread holds it.
        if let Ok(mut lists) = self.lists.lock() {
            lists.remove(&self.key);
        }
    }
}
