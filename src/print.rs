//! Printing to stdout that survives a closed pipe.
//!
//! Rust ignores SIGPIPE, so `println!` panics when the reader has gone
//! (`enginebench doctor | head -3`). Restoring SIGPIPE's default would let a
//! worker that dies before reading its task kill enginebench through the write
//! to its stdin pipe, so instead every line printed for the user goes through
//! [`outln!`]/[`out!`] (stderr: [`errln!`]), which drop what a closed pipe can no longer take
//! and let the command finish: a run keeps measuring and writing its files.

/// `println!` that never panics: a write error on stdout (EPIPE) is dropped.
#[macro_export]
macro_rules! outln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that never panics: a write error on stdout (EPIPE) is dropped.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics: progress and error lines must not kill a
/// run whose stderr reader has gone (`enginebench run 2>&1 | head`).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
