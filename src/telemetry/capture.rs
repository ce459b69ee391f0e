//! Capturing what a C library prints on stderr during one call.
//!
//! ROCm SMI prints its own lines ("Exception caught: rsmi_init.") to fd 2
//! when there is no GPU; they belong in the source's reason, not in the
//! user's terminal. fd 2 is process-wide, so this is used only around the
//! short library initialisations at probe time.

use std::io::Read;
use std::os::fd::FromRawFd;

/// Runs `f` with fd 2 pointed at a pipe; returns its result and the text it
/// (or anything else in the process) wrote there meanwhile, trimmed.
/// If the pipe cannot be made, `f` runs with stderr untouched.
pub fn stderr_of<T>(f: impl FnOnce() -> T) -> (T, String) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe/dup/dup2/close on fds this function owns; fd 2 is restored
    // before returning. The reader thread drains the pipe so a chatty
    // library can never block on a full pipe. The pipe and the saved fd 2
    // are close-on-exec: a process another thread spawns meanwhile must not
    // keep a write end, which would hold the reader (and this call) open as
    // long as that process lives.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return (f(), String::new());
        }
        let saved = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 0);
        if saved < 0 || libc::dup2(fds[1], 2) < 0 {
            libc::close(fds[0]);
            libc::close(fds[1]);
            if saved >= 0 {
                libc::close(saved);
            }
            return (f(), String::new());
        }
        libc::close(fds[1]);
        let mut reader = std::fs::File::from_raw_fd(fds[0]);
        let drain = std::thread::Builder::new().name("eb-capture".into()).spawn(move || {
            let mut text = String::new();
            let _ = reader.read_to_string(&mut text);
            text
        }).expect("starting a thread"); // as std::thread::spawn would
        let out = f();
        // Restoring fd 2 closes the pipe's last write end: the reader ends.
        libc::dup2(saved, 2);
        libc::close(saved);
        let text = drain.join().unwrap_or_default();
        (out, text.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_what_a_call_prints_on_fd_2() {
        let (value, text) = stderr_of(|| {
            // SAFETY: writes a static buffer to fd 2.
            unsafe { libc::write(2, b"Exception caught: init.\n".as_ptr().cast(), 24) };
            7
        });
        assert_eq!(value, 7);
        assert_eq!(text, "Exception caught: init.");
    }
}
