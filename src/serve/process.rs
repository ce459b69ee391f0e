//! Process-group bookkeeping on Linux (`/proc`): which processes of a group
//! are alive, and stopping a whole group (SIGTERM, grace period, SIGKILL).

use std::process::Child;
use std::time::{Duration, Instant};

/// State letter and process group of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether `pid` is a live process (exists and is not a zombie).
pub fn pid_alive(pid: i32) -> bool {
    matches!(stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// Live (non-zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| matches!(stat(pid), Some((state, pg)) if pg == pgid && state != 'Z' && state != 'X'))
        .collect()
}

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Waits until no live process is left in group `pgid`, reaping `child` on
/// the way (so the group leader does not linger as a zombie). True if the
/// group emptied before `deadline`.
fn wait_group_gone(pgid: i32, child: &mut Child, deadline: Instant) -> bool {
    loop {
        let _ = child.try_wait();
        if group_members(pgid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops the process group `pgid` led by `child`: SIGTERM to the group,
/// up to `grace` for every member to exit, then SIGKILL to the group and up
/// to 5 s more. Reaps `child`. Errors if members are still alive at the end.
pub fn stop_group(pgid: i32, child: &mut Child, grace: Duration) -> Result<(), String> {
    if wait_group_gone(pgid, child, Instant::now()) {
        let _ = child.wait();
        return Ok(());
    }
    signal_group(pgid, libc::SIGTERM);
    if !wait_group_gone(pgid, child, Instant::now() + grace) {
        tracing::warn!("process group {pgid} still alive {grace:?} after SIGTERM: sending SIGKILL");
        signal_group(pgid, libc::SIGKILL);
        if !wait_group_gone(pgid, child, Instant::now() + Duration::from_secs(5)) {
            return Err(format!("process group {pgid} survived SIGKILL: {:?}", group_members(pgid)));
        }
    }
    let _ = child.wait();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn an_unreaped_child_that_exited_is_not_alive() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Exited but not reaped: a zombie, which signal 0 still reaches.
        let t0 = Instant::now();
        while matches!(stat(pid), Some((state, _)) if state != 'Z') && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: signal 0 sends nothing.
        assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the zombie still exists");
        assert!(!pid_alive(pid), "a zombie is not alive");
        child.wait().unwrap();
    }

    #[test]
    fn stops_a_group_with_a_child_that_ignores_sigterm() {
        // sh leads the group; its background child ignores SIGTERM.
        let mut child = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 60 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        while group_members(pgid).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let members = group_members(pgid);
        assert_eq!(members.len(), 2, "{members:?}");
        stop_group(pgid, &mut child, Duration::from_millis(300)).unwrap();
        assert!(group_members(pgid).is_empty());
        assert!(members.iter().all(|&p| !pid_alive(p)));
    }
}
