//! Clocks shared by every process on the machine.

/// Seconds on `CLOCK_MONOTONIC` (`clock_gettime(2)`).
///
/// The same clock in every process of the machine (it is what Rust's
/// `Instant` and Python's `time.monotonic()` read on Linux), so timestamps
/// taken in the engine worker and the telemetry samples taken in the
/// orchestrator can be compared directly. Its origin (boot, roughly) is
/// arbitrary: only differences mean something.
pub fn mono_now_s() -> f64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// CPU time consumed so far by the calling thread, in seconds
/// (`CLOCK_THREAD_CPUTIME_ID`, user + system).
pub fn thread_cpu_s() -> f64 {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn read_clock(id: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used here exist on Linux.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_close_to_instant() {
        let a = mono_now_s();
        let i = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = mono_now_s();
        let di = i.elapsed().as_secs_f64();
        assert!(b > a);
        assert!((b - a - di).abs() < 0.01, "mono {} vs instant {}", b - a, di);
    }

    #[test]
    fn thread_cpu_advances_when_busy() {
        // Busy-loop until 10 ms of this thread's CPU time accrue (the machine
        // may be loaded, so wall time is no guide); sleeping accrues almost none.
        let a = thread_cpu_s();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(thread_cpu_s() - a < 0.01);
        let b = thread_cpu_s();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while thread_cpu_s() - b < 0.01 && t.elapsed().as_secs() < 10 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_s() - b >= 0.01);
    }
}

/// Nice value of the sampler thread: it runs beside the engine, whose
/// threads (OpenMP on a CPU engine, the host loop feeding a GPU) may fill
/// every core; at nice 10 the scheduler lets a waking sample wait for a
/// running engine thread's slice rather than preempt it. The sample's
/// timestamp is taken when it runs, so a late sample is still true.
pub const SAMPLER_NICE: i32 = 10;

/// Lowers the calling thread's priority to [`SAMPLER_NICE`] (Linux keeps a
/// nice value per thread). Best effort: on failure the thread keeps its
/// priority.
pub fn lower_thread_priority() {
    // SAFETY: gettid has no preconditions; setpriority on the calling
    // thread's own id only changes its scheduling weight.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, SAMPLER_NICE);
    }
}
