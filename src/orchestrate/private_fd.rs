//! A file descriptor kept from child processes: close-on-exec for children
//! that exec, and closed in every child forked from this process (a
//! `pthread_atfork` child handler) for those that do not, such as vLLM's
//! multiprocessing workers (`VLLM_WORKER_MULTIPROC_METHOD=fork` by default,
//! vllm/envs.py:956; vllm/utils/system_utils.py:164-177). The worker's
//! message channel is one: the orchestrator learns that the worker died
//! from the channel's end-of-file, which a child's copy would hold off.
//!
//! One fd per process can be private this way (the worker has one channel).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{Result, bail};

/// The private fd, which a forked child closes; -1: none.
static PRIVATE_FD: AtomicI32 = AtomicI32::new(-1);

/// `pthread_atfork` child handler: runs in the child right after `fork()`
/// (Python's `os.fork()` included); `close` is async-signal-safe.
extern "C" fn close_in_child() {
    let fd = PRIVATE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: closing the child's copy of the parent's private fd.
        unsafe { libc::close(fd) };
    }
}

/// An owned fd that no child process gets a copy of.
#[derive(Debug)]
pub struct PrivateFd {
    file: File,
}

impl PrivateFd {
    /// Takes `fd` over and keeps it from children from now on.
    ///
    /// Errors: fcntl or pthread_atfork failed (with the OS's words).
    ///
    /// # Safety
    /// `fd` must be an open fd that nothing else owns.
    pub unsafe fn new(fd: RawFd) -> Result<PrivateFd> {
        static AT_FORK: Once = Once::new();
        // SAFETY: fcntl on the fd handed over; pthread_atfork with a handler
        // that only calls close(2).
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
                bail!("cannot make fd {fd} close-on-exec: {}", std::io::Error::last_os_error());
            }
            let mut rc = 0;
            AT_FORK.call_once(|| rc = libc::pthread_atfork(None, None, Some(close_in_child)));
            if rc != 0 {
                bail!("cannot keep fd {fd} from forked children: pthread_atfork error {rc}");
            }
            PRIVATE_FD.store(fd, Ordering::Relaxed);
            Ok(PrivateFd { file: File::from_raw_fd(fd) })
        }
    }

    /// The fd as a file, for writing.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }
}

impl Drop for PrivateFd {
    fn drop(&mut self) {
        // The number is about to be free for reuse: a forked child must not
        // close whatever gets it next.
        let _ = PRIVATE_FD.compare_exchange(self.file.as_raw_fd(), -1, Ordering::Relaxed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// The reader of a private fd sees end-of-file as soon as this process
    /// closes it, though a child forked before (as vLLM's workers are) still
    /// lives; and the fd is close-on-exec.
    #[test]
    fn forked_child_holds_no_copy() {
        // SAFETY: a fresh pipe; its write end moves to a high fd number no
        // other test is likely to reuse while this one runs. Both ends are
        // close-on-exec from birth: a process another test spawns meanwhile
        // (the telemetry tests start engines) must not inherit a copy, which
        // would hold the end-of-file off as long as it lives.
        let (read_end, private) = unsafe {
            let mut fds = [0; 2];
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let high = libc::fcntl(fds[1], libc::F_DUPFD_CLOEXEC, 1000);
            assert!(high >= 1000);
            libc::close(fds[1]);
            (File::from_raw_fd(fds[0]), PrivateFd::new(high).unwrap())
        };
        let fd = private.file.as_raw_fd();
        // SAFETY: F_GETFD on our own fd.
        assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, 0, "close-on-exec");
        // SAFETY: the child only calls async-signal-safe functions (fcntl,
        // sleep, _exit) before it ends.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            unsafe {
                let still_open = libc::fcntl(fd, libc::F_GETFD) >= 0;
                libc::sleep(3);
                libc::_exit(if still_open { 1 } else { 0 });
            }
        }
        drop(private);
        let t = Instant::now();
        let mut buf = [0u8; 8];
        let n = std::io::Read::read(&mut &read_end, &mut buf).unwrap();
        let waited = t.elapsed();
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(n, 0, "end of file");
        assert!(waited < Duration::from_secs(2), "end of file came only after {waited:?}: the forked child held the fd");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the forked child still had the fd open");
        assert_eq!(PRIVATE_FD.load(Ordering::Relaxed), -1, "forgotten once closed");
    }
}
