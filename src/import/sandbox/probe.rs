//! What a launcher finds in the import sandbox on this machine, found by
//! running a sandbox (`sandbox/probe.sh`): its uid inside, its
//! capabilities, its process limit, whether it may make a user namespace
//! or remount `/usr` read-write, whether it may write to `/proc` or sees
//! `/proc/sys`. `doctor` prints it ([`report`]); as root,
//! [`switched`] tells (once per process) whether a sandbox runs as a uid of
//! its own here at all.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

use super::launch::{self, Identity, Spec, Status};

const PROBE: &str = include_str!("probe.sh");
/// How long the probe may take.
const PROBE_LIMIT: Duration = Duration::from_secs(10);

/// The sandbox's state, as `doctor` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `bwrap` and its version, e.g. `/usr/bin/bwrap (bubblewrap 0.8.0)`.
    pub bwrap: String,
    /// Whom launchers run as ([`Identity::describe`]).
    pub runs_as: String,
    /// `KEY -> VALUE` from inside: `uid`, `capabilities` (CapEff, hex),
    /// `processes` (`ulimit -u`), `user_namespaces`, `remount`, `proc`
    /// (`read-only`), `proc_sys` (`hidden`).
    pub inside: BTreeMap<String, String>,
    /// The limits, in words.
    pub limits: String,
}

/// Runs the probe as `identity`: what it found.
///
/// Errors: the sandbox could not run (bubblewrap's message), or the probe
/// left nothing.
pub fn run(identity: Identity) -> Result<BTreeMap<String, String>, String> {
    let env = BTreeMap::from([("PATH".to_string(), "/usr/bin".to_string())]);
    let argv = ["/usr/bin/bash", "--noprofile", "--norc", "-c", PROBE].iter().map(|s| s.to_string()).collect();
    let ended = launch::run(&Spec { ro: vec![], env: &env, argv, chdir: "/workspace", limit: PROBE_LIMIT, identity })?;
    if ended.status != Status::Exited(0) {
        return Err(format!("the probe ended with {:?}: {}", ended.status, ended.stderr.trim()));
    }
    let text = ended.records.as_ref().ok_or("the probe did not start in time")?.text("probe")?;
    let found: BTreeMap<String, String> =
        text.lines().filter_map(|l| l.split_once('\t')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    if found.is_empty() {
        return Err("the probe wrote nothing".into());
    }
    Ok(found)
}

/// Whether a sandbox runs here as a uid of its own with no capability and
/// cannot remount `/usr` (asked of root; the answer is kept).
///
/// Errors: why not (bubblewrap's message, or what the sandbox kept).
pub fn switched() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(|| unprivileged(&run(Identity::Switched(launch::sandbox_uid()))?)).clone()
}

/// Errors: the probe's findings show a privilege (capabilities, a
/// remount, a visible /proc/sys, a writable /proc).
fn unprivileged(found: &BTreeMap<String, String>) -> Result<(), String> {
    let caps = found.get("capabilities").map(String::as_str).unwrap_or("");
    if caps.is_empty() || caps.chars().any(|c| c != '0') {
        return Err(format!("the sandbox kept capabilities (CapEff {caps:?})"));
    }
    if found.get("remount").map(String::as_str) == Some("allowed") {
        return Err("the sandbox could remount /usr read-write".into());
    }
    if found.get("proc_sys").map(String::as_str) != Some("hidden") {
        return Err("the sandbox could see /proc/sys".into());
    }
    if found.get("proc").map(String::as_str) != Some("read-only") {
        return Err("the sandbox could write to /proc".into());
    }
    Ok(())
}

/// The sandbox as `import` would run it now (`unsafe_import`: as with
/// `--unsafe-import`), for `doctor`.
///
/// Errors: no bubblewrap, no way to run it (the message `import` gives),
/// or the probe failed.
pub fn report(unsafe_import: bool) -> Result<Report, String> {
    let bwrap = launch::bwrap()?;
    let version = std::process::Command::new(&bwrap)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let identity = super::identity(unsafe_import)?;
    let inside = run(identity)?;
    let settings = super::Settings::default();
    let processes = match identity {
        Identity::RootWithoutCaps => "no process limit (uid 0)".to_string(),
        _ => format!("{} processes", launch::PROCESSES),
    };
    Ok(Report {
        bwrap: format!("{} ({version})", bwrap.display()),
        runs_as: identity.describe(),
        inside,
        limits: format!(
            "{processes}, {} MiB of scratch (/, /tmp, /workspace), {} MiB of records, {} KiB of standard error kept, {} per point (--launcher-timeout), {} per import (--import-timeout)",
            launch::SCRATCH_BYTES >> 20,
            launch::RECORD_BYTES >> 20,
            launch::STDERR_BYTES >> 10,
            super::seconds(settings.point_limit),
            super::seconds(settings.import_limit)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a sandbox runs holds no privilege inside: no capability,
    /// no remount of /usr, no user namespace; with a uid of its own (root)
    /// or the caller's, the process limit is in force; as root with
    /// `--unsafe-import`'s identity there is none (uid 0), the rest holds;
    /// /proc/sys is hidden from all, and the rest of /proc read-only.
    #[test]
    fn sandboxes_hold_no_privilege() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let identities = if euid == 0 {
            vec![Identity::Switched(launch::sandbox_uid()), Identity::RootWithoutCaps]
        } else {
            vec![Identity::Caller(euid)]
        };
        for identity in identities {
            let found = run(identity).unwrap();
            let get = |k: &str| found.get(k).map(String::as_str).unwrap_or("");
            assert_eq!(get("uid"), launch::INNER_UID.to_string(), "{identity:?} {found:?}");
            assert!(unprivileged(&found).is_ok(), "{identity:?} {found:?}");
            assert_eq!((get("remount"), get("user_namespaces")), ("refused", "refused"), "{identity:?} {found:?}");
            assert_eq!((get("proc"), get("proc_sys")), ("read-only", "hidden"), "{identity:?} {found:?}");
            match identity {
                Identity::Switched(_) => assert_eq!(get("processes"), launch::PROCESSES.to_string()),
                // Whatever root's limit is: the kernel does not apply it to uid 0.
                Identity::RootWithoutCaps => assert_ne!(get("processes"), launch::PROCESSES.to_string()),
                Identity::Caller(_) => assert!(get("processes").parse::<u64>().is_ok_and(|n| n >= launch::PROCESSES), "{found:?}"),
            }
        }
    }
}
