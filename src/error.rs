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

/// How a command ended, and so the process's exit code (the README's
/// "Exit codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: every point, job and gate passed.
    Ok,
    /// 1: a point, job, engine or gate failed.
    Failed,
    /// 2: bad input ([`UsageError`]): a recipe, flag, path or data file that
    /// cannot be used.
    Usage,
    /// 3: an `ab`/`compare` gate that could not decide: a gated figure's
    /// interval straddles its threshold (INCONCLUSIVE), and none failed.
    /// Not 1, so a CI can tell "no evidence" from "a regression".
    Inconclusive,
    /// 130 (128 + SIGINT, as shells report a Ctrl-C): stopped by Ctrl-C.
    Interrupted,
}

impl ExitStatus {
    /// The process exit code: 0, 1, 2, 3 or 130.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Ok => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Inconclusive => 3,
            ExitStatus::Interrupted => 130,
        }
    }

    /// The status of a command that ended with `e`: bad input when it
    /// carries a [`UsageError`], else failed.
    pub fn of_error(e: &anyhow::Error) -> ExitStatus {
        if e.downcast_ref::<UsageError>().is_some() { ExitStatus::Usage } else { ExitStatus::Failed }
    }
}
