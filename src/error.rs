//! Error kinds that decide the exit code (see the README's "Exit codes").

/// Bad input from the user: a recipe, flag, path or data file that cannot be
/// used. The message names the bad thing and what would be right. Exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Builds an [`anyhow::Error`] carrying a [`UsageError`].
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// Exit codes: 0 all points ok, 1 a point or the engine failed, 2 bad input.
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILED: i32 = 1;
    pub const USAGE: i32 = 2;
}
