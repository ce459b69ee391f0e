//! Token prompts as Python lists: made at the send, or staged ahead on
//! another thread (issue 46).
//!
//! vLLM takes a token prompt as a list of Python ints. A [`TokenTable`]
//! holds one shared int per vocabulary id, and a list is filled with those.
//! Filled the ordinary way, each item is a reference-count increment on its
//! int: a write to one of ~50k objects at random, ~16 ns a token, a
//! millisecond or more per AgentX prompt between two engine steps. The
//! table's ints carry a large stock of spare references instead
//! ([`PINNED_REFS`]), and a list takes its items from that stock: filling
//! it is only pointer stores, gathered from the table, which needs no
//! object and so no GIL. [`Stager`] stages a replay's lists that way, on
//! the prefetch thread: it allocates the list's item array with Python's
//! raw allocator (which needs no GIL) and fills it; the send wraps it in a
//! list object ([`StagedList::into_list`]), a few pointer stores, so a
//! staged list never delays an engine step. (Staging with the GIL held, a
//! slice at a time, cost the device 1-3% of its time at 256-512 AgentX
//! sessions: the stager's holds fell inside the async step and delayed its
//! return. Allocating the list on the driver's thread when the prompt was
//! asked for cost ~250 us a prompt there, most of the p99 gap between two
//! steps at 256 sessions; docs/benchmarks.md, issue 46.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};
use pyo3::{ffi, Py, PyAny};

use super::{PromptStager, StageReport, Staged};
use crate::metrics::stats::Summary;

/// Prompts shorter than this are not staged: their list costs tens of
/// microseconds at the send, less than the hand-over's own bookkeeping is
/// worth. (The shim's long-prompt path starts at the same length:
/// `SWAP_MIN_TOKENS`.)
pub const STAGE_MIN_TOKENS: usize = 1024;

/// Spare references added to each table int ([`TokenTable::new`]): a list
/// item taken from the stock is never incremented, and freeing the list
/// decrements it, so the stock shrinks by one per token sent. 2^56 is 140
/// years at 16M tokens/s, and a count this large never reaches zero. On
/// CPython 3.12+ an int whose low 32 count bits wrap becomes immortal
/// (its count is then never changed), which only keeps it alive too.
pub const PINNED_REFS: isize = 1 << 56;

/// One shared Python int per token id, the items of every prompt list.
pub struct TokenTable {
    ints: Vec<Py<PyAny>>,
    /// The ints carry [`PINNED_REFS`] spare references (not on a
    /// free-threaded CPython build, whose counts are laid out otherwise).
    pinned: bool,
    /// A list's item array is where this module reads it (checked once on
    /// a probe list), so a list can be filled by pointer stores.
    direct: bool,
    /// A list can adopt an item array made off the GIL ([`adoption_holds`]),
    /// so [`Stager`] stages prompts.
    adopts: bool,
}

impl TokenTable {
    /// The ints 0..`vocab`, pinned, and the check of the list layout.
    ///
    /// Errors: Python's (memory).
    pub fn new(py: Python<'_>, vocab: u32) -> PyResult<TokenTable> {
        let ints: Vec<Py<PyAny>> = (0..vocab).map(|i| PyInt::new(py, i).into_any().unbind()).collect();
        // A free-threaded build lays the object header out otherwise (two
        // counts, whether or not its GIL is on at run time); loading an
        // abi3 module there is not supported, but the check is cheap.
        let free_threaded = py
            .import("sysconfig")
            .and_then(|sc| sc.call_method1("get_config_var", ("Py_GIL_DISABLED",)))
            .and_then(|v| v.extract::<Option<i64>>())
            .is_ok_and(|v| v == Some(1));
        let pinned = !free_threaded;
        if pinned {
            for int in &ints {
                // SAFETY: with the GIL held; a live int of ours.
                unsafe { pin(int.as_ptr()) };
            }
        }
        let direct = pinned && items_layout_holds(py)?;
        let adopts = direct && adoption_holds(py)?;
        Ok(TokenTable { ints, pinned, direct, adopts })
    }

    /// Whether every id of `prompt` is in the table.
    fn covers(&self, prompt: &[u32]) -> bool {
        let n = self.ints.len();
        prompt.iter().all(|&t| (t as usize) < n)
    }
}

/// Adds [`PINNED_REFS`] to an object's reference count, unless it is
/// immortal (CPython 3.12+: the count's low 32 bits read as a negative
/// int32; small ints are).
///
/// SAFETY: the GIL is held, `obj` is live, and the interpreter keeps its
/// count in the object's first word (every CPython but a free-threaded one).
unsafe fn pin(obj: *mut ffi::PyObject) {
    let count = obj.cast::<isize>();
    // SAFETY: the caller's.
    unsafe {
        if (*count as i32) < 0 {
            return;
        }
        *count += PINNED_REFS;
    }
}

/// The item array of a list: `PyListObject` is `PyObject_VAR_HEAD` and then
/// `PyObject **ob_item` (CPython 3.10-3.14, not in the stable ABI: checked
/// on a probe list by [`items_layout_holds`] before it is relied on).
///
/// SAFETY: `list` is a live list.
unsafe fn items_of(list: *mut ffi::PyObject) -> *mut *mut ffi::PyObject {
    // SAFETY: the caller's.
    unsafe { *items_field(list) }
}

/// Where a list keeps its item array (see [`items_of`]).
///
/// SAFETY: `list` is a live list.
unsafe fn items_field(list: *mut ffi::PyObject) -> *mut *mut *mut ffi::PyObject {
    // SAFETY: the caller's; the field follows the variable-size header.
    unsafe { list.cast::<u8>().add(std::mem::size_of::<ffi::PyVarObject>()).cast() }
}

/// Where a list keeps its `allocated` count (the item array's capacity):
/// `PyListObject`'s field after `ob_item` (CPython 3.10-3.14; checked by
/// [`adoption_holds`]).
///
/// SAFETY: `list` is a live list.
unsafe fn allocated_field(list: *mut ffi::PyObject) -> *mut ffi::Py_ssize_t {
    // SAFETY: the caller's; the field follows `ob_item`.
    unsafe { items_field(list).add(1).cast() }
}

/// Whether a two-item list made with the stable ABI has its items where
/// [`items_of`] reads them.
fn items_layout_holds(py: Python<'_>) -> PyResult<bool> {
    let (a, b) = (PyInt::new(py, 1_000_001), PyInt::new(py, 1_000_002));
    let list = PyList::new(py, [&a, &b])?;
    // SAFETY: a live list of length 2.
    let items = unsafe { items_of(list.as_ptr()) };
    // SAFETY: read only when the pointer is the list's own array: a list
    // of two has a non-null array, and its first two slots are in bounds.
    Ok(!items.is_null() && unsafe { *items == a.as_ptr() && *items.add(1) == b.as_ptr() })
}

// Python's raw-domain allocator (thread-safe with or without the GIL), and
// the allocators installed in each domain. Not in the limited API (the raw
// allocator is from 3.13), but exported by every CPython 3.10+ on Linux
// (declared here for the 3.10 stable ABI the worker is built for; on
// Windows abi3 links python3.dll, which exports neither).
unsafe extern "C" {
    fn PyMem_RawMalloc(size: usize) -> *mut std::ffi::c_void;
    fn PyMem_RawFree(ptr: *mut std::ffi::c_void);
    fn PyMem_GetAllocator(domain: std::ffi::c_int, allocator: *mut MemAllocator);
}

/// CPython's `PyMemAllocatorEx` (public since 3.5): a domain's context
/// and functions, compared by address only.
#[repr(C)]
#[derive(Clone, Copy, PartialEq)]
struct MemAllocator {
    ctx: *mut std::ffi::c_void,
    malloc: *const std::ffi::c_void,
    calloc: *const std::ffi::c_void,
    realloc: *const std::ffi::c_void,
    free: *const std::ffi::c_void,
}

/// The allocator of `PyMemAllocatorDomain` `domain` (0 raw, 1 mem, 2 obj).
fn allocator(domain: std::ffi::c_int) -> MemAllocator {
    let mut a = MemAllocator {
        ctx: std::ptr::null_mut(),
        malloc: std::ptr::null(),
        calloc: std::ptr::null(),
        realloc: std::ptr::null(),
        free: std::ptr::null(),
    };
    // SAFETY: CPython fills the struct; reading the installed allocators
    // is allowed at any time.
    unsafe { PyMem_GetAllocator(domain, &mut a) };
    a
}

/// Whether `PyMem_Free` (the mem domain's free, which frees a list's
/// array) frees a block of `PyMem_RawMalloc` as the raw allocator's free
/// would: under Python's two default configurations, and no other.
/// - malloc (`PYTHONMALLOC=malloc`): the mem domain is the raw one.
/// - pymalloc (the default): the mem and object domains are pymalloc, with
///   no context, and pymalloc hands a block from outside its arenas to the
///   raw free, as it does for the array of every list over 64 items (it
///   serves 512 bytes at most). This under-counts `sys.getallocatedblocks()`
///   by one per list freed so (a statistic only).
///
/// Refused: debug hooks (a debug build, `-X dev`, `PYTHONMALLOC=*debug`:
/// each block is tagged with its domain and a mismatch aborts; their
/// context is not null), tracemalloc (its hooks would make the raw
/// allocation wait for the GIL), mimalloc (frees only its own blocks; its
/// mem and object domains differ), an embedder's own.
fn default_allocators() -> bool {
    let (raw, mem, obj) = (allocator(0), allocator(1), allocator(2));
    let malloc = mem == raw;
    let pymalloc = mem == obj && mem.ctx.is_null() && raw.ctx.is_null() && mem.malloc != raw.malloc;
    malloc || pymalloc
}

/// Whether a list can adopt an item array from `PyMem_RawMalloc` as its own
/// ([`StagedList::into_list`]): Python's allocators are its defaults
/// ([`default_allocators`]), `allocated` lies after `ob_item` (lists of 3
/// and 5 made by the stable ABI), and a list made that way reads, grows
/// and frees as Python's own. Checked once, when the engine starts (an
/// allocator hooked later, e.g. `tracemalloc.start()`, is not seen: then
/// the prefetch thread waits for the GIL to allocate, and the lists are
/// still freed correctly).
///
/// Errors: Python's (memory).
fn adoption_holds(py: Python<'_>) -> PyResult<bool> {
    if !default_allocators() {
        return Ok(false);
    }
    for n in [3, 5] {
        let list = empty_list(py, n)?;
        // SAFETY: a live list, made with `n` slots.
        if unsafe { *allocated_field(list.as_ptr()) } != n as ffi::Py_ssize_t {
            return Ok(false);
        }
    }
    let (a, b, c) = (PyInt::new(py, 1_000_001), PyInt::new(py, 1_000_002), PyInt::new(py, 1_000_003));
    let Some(staged) = StagedList::alloc(2) else { return Ok(false) };
    // SAFETY: room for 2 items; each gets a reference of its own (the list
    // will release them).
    unsafe {
        for (i, item) in [&a, &b].into_iter().enumerate() {
            ffi::Py_IncRef(item.as_ptr());
            *staged.items.as_ptr().add(i) = item.as_ptr();
        }
    }
    let list = staged.into_list(py)?;
    list.append(&c)?;
    let same = list.len() == 3 && list.get_item(0)?.is(&a) && list.get_item(1)?.is(&b) && list.get_item(2)?.is(&c);
    // Freed here as Python frees any list: its items released, its (grown)
    // array given to PyMem_Free.
    drop(list);
    Ok(same)
}

/// An item array of a prompt's list made off the GIL (by [`Stager`], from
/// the pinned stock), owned until a list adopts it at the send
/// ([`StagedList::into_list`]). Dropped unadopted, it is freed without
/// writing any count: its items were never taken from the stock.
///
/// Invariant: outside this module every item is set (only
/// [`PromptStager::stage`] hands one out, filled).
pub struct StagedList {
    items: std::ptr::NonNull<*mut ffi::PyObject>,
    len: usize,
}

// SAFETY: the array is plain memory owned by this value alone; its items are
// only addresses until a list adopts it (on a thread holding the GIL).
unsafe impl Send for StagedList {}

impl StagedList {
    /// An uninitialised array of `len` items from Python's raw allocator
    /// (no GIL needed); `None` when it has no memory.
    fn alloc(len: usize) -> Option<StagedList> {
        let bytes = len.checked_mul(std::mem::size_of::<*mut ffi::PyObject>())?;
        // SAFETY: the raw allocator may be called from any thread.
        let items = std::ptr::NonNull::new(unsafe { PyMem_RawMalloc(bytes.max(1)) }.cast())?;
        Some(StagedList { items, len })
    }

    /// The list that owns this array: its `ob_item`, `allocated` and size
    /// set on a new empty list (untracked by the GC, as [`empty_list`]'s),
    /// a few stores on the driver's thread instead of a calloc and a fill.
    /// Needs a table that adopts ([`adoption_holds`]) and every item set.
    ///
    /// Errors: Python's, when memory runs out (the array is then freed).
    pub fn into_list<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = empty_list(py, 0)?;
        let raw = list.as_ptr();
        // SAFETY: a new empty list of ours (no array to leak); the array
        // moves into it whole, and list_dealloc frees it (adoption_holds).
        unsafe {
            *items_field(raw) = self.items.as_ptr();
            *allocated_field(raw) = self.len as ffi::Py_ssize_t;
            (*raw.cast::<ffi::PyVarObject>()).ob_size = self.len as ffi::Py_ssize_t;
        }
        std::mem::forget(self);
        Ok(list)
    }
}

impl Drop for StagedList {
    fn drop(&mut self) {
        // SAFETY: ours, from PyMem_RawMalloc, adopted by no list.
        unsafe { PyMem_RawFree(self.items.as_ptr().cast()) }
    }
}

/// A new list of `n` empty (null) items, untracked by Python's cyclic GC.
///
/// Why untracked: a new list is a young GC container, and every collection
/// of its generation visits each of its items. A replay's send of ~55k-token
/// prompts then paid ~1.9 ms, mostly collections walking the prompt lists
/// sent just before (a Python model of it: 228 such lists cost 169 ms of
/// collections tracked, 1 ms untracked). A list of ints can hold no
/// reference cycle, which is all the collector looks for; CPython untracks
/// tuples and dicts of atomic values itself for the same reason. Reference
/// counting still frees it; `PyObject_GC_UnTrack` is in the stable ABI, and
/// list_dealloc's own untrack is a no-op on it. A half-made list is then
/// never seen by the collector either.
///
/// Errors: Python's, when memory runs out.
fn empty_list(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyList>> {
    // SAFETY: PyList_New gives a new reference (or null with the error set);
    // untracking a tracked object is always allowed with the GIL held.
    unsafe {
        let raw = ffi::PyList_New(n as ffi::Py_ssize_t);
        if raw.is_null() {
            return Err(PyErr::fetch(py));
        }
        ffi::PyObject_GC_UnTrack(raw.cast());
        Ok(Bound::from_owned_ptr(py, raw).cast_into_unchecked::<PyList>())
    }
}

/// Stores the table's int of each id of `prompt` into `items`, taking each
/// from the int's spare references (no count is written: no GIL needed).
///
/// SAFETY: `items` has room for `prompt.len()` pointers, not read until
/// now (null or uninitialised), and no other thread can reach it; every id
/// is in `table` (pinned).
unsafe fn fill_pinned(items: *mut *mut ffi::PyObject, table: &TokenTable, prompt: &[u32]) {
    for (i, &t) in prompt.iter().enumerate() {
        prefetch_ahead(&table.ints, prompt, i, false);
        // SAFETY: the caller's; `i` < prompt.len().
        unsafe { *items.add(i) = table.ints[t as usize].as_ptr() };
    }
}

/// A list of `prompt`'s ids, each the table's shared int (a new int for an
/// id past the table, never drawn by enginebench), untracked by the GC
/// ([`empty_list`]).
///
/// Errors: Python's, when memory runs out.
pub fn token_list<'py>(py: Python<'py>, table: &TokenTable, prompt: &[u32]) -> PyResult<Bound<'py, PyList>> {
    let list = empty_list(py, prompt.len())?;
    if table.direct && table.covers(prompt) {
        // SAFETY: the list is new and ours, with `prompt.len()` null items.
        unsafe { fill_pinned(items_of(list.as_ptr()), table, prompt) };
        return Ok(list);
    }
    for (i, &t) in prompt.iter().enumerate() {
        prefetch_ahead(&table.ints, prompt, i, !table.pinned);
        let item = match table.ints.get(t as usize) {
            // A pinned int's item comes from its stock; otherwise a reference of its own.
            Some(obj) if table.pinned => obj.as_ptr(),
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
    Ok(list)
}

/// Starts loading what the ids a little ahead of `i` will need: their
/// table slots, then (once a slot is likely cached, and only when
/// `objects`: the int's count will be written) their int objects.
/// Otherwise each token costs a dependent cache miss or two (the table
/// holds a vocabulary's ints, read at random); prefetched, the misses of
/// tokens a few places apart overlap (lists made at the send with
/// reference increments: p50 360-377 vs 566 us at 512 AgentX sessions on
/// the null engine, issue 46). A hint only: the list made is the same.
#[inline(always)]
fn prefetch_ahead(table: &[Py<PyAny>], prompt: &[u32], i: usize, objects: bool) {
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
            if objects {
                if let Some(obj) = prompt.get(i + OBJECT_AHEAD).and_then(|&t| table.get(t as usize)) {
                    _mm_prefetch::<_MM_HINT_T0>(obj.as_ptr() as *const i8);
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (table, prompt, i, objects);
}

/// Staged lists by (prompt address, length).
type Lists = Arc<Mutex<HashMap<(usize, usize), StagedList>>>;

/// The vLLM engine's [`PromptStager`]: lists' item arrays made off the
/// driver's thread, waiting for the send that takes them ([`Stager::take`]).
pub struct Stager {
    table: Arc<TokenTable>,
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
    pub fn new(table: Arc<TokenTable>) -> Stager {
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
    /// any; the send's own ([`StagedList::into_list`] makes it a list).
    pub fn take(&self, prompt: &[u32]) -> Option<StagedList> {
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
        if prompt.len() < STAGE_MIN_TOKENS || !self.table.adopts || !self.table.covers(prompt) {
            return None;
        }
        // The array's allocation and first touch (up to 1.6 MB) happen here,
        // on the prefetch thread.
        let staged = StagedList::alloc(prompt.len())?;
        // SAFETY: a new array of `prompt.len()` items, ours alone; the
        // table is pinned and covers the prompt; the map's lock publishes
        // the stores to the send.
        unsafe { fill_pinned(staged.items.as_ptr(), &self.table, prompt) };
        let key = (prompt.as_ptr() as usize, prompt.len());
        self.lists.lock().ok()?.insert(key, staged);
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
        // Not taken: freed here, no GIL needed and no count written.
        let staged = self.lists.lock().ok().and_then(|mut lists| lists.remove(&self.key));
        drop(staged);
    }
}
