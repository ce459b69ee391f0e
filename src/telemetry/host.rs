//! Host sampling: CPU utilisation and memory (the `sysinfo` crate), the
//! engine process tree's RSS and CPU (read from `/proc/<pid>/stat` and
//! `statm` directly: sysinfo's per-process refresh cost about 1 ms a sample
//! here, the direct read a few µs), and CPU package energy from RAPL
//! (`/sys/class/powercap/intel-rapl:N/energy_uj`, which AMD CPUs expose under
//! the same name on recent kernels).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sysinfo::System;

use super::{HostReading, SourceStatus};

/// One RAPL package zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RaplZone {
    /// Zone directory name, e.g. `intel-rapl:0`.
    pub zone: String,
    /// The zone's `name` file, e.g. `package-0`.
    pub name: String,
    /// `max_energy_range_uj`: the counter wraps to 0 past this, µJ.
    pub max_energy_range_uj: Option<u64>,
}

/// Finds the readable top-level RAPL zones under `root`
/// (`/sys/class/powercap` in production). Returns the zones and a reason when
/// none can be used.
pub fn probe_rapl(root: &Path) -> (Vec<(RaplZone, PathBuf)>, Result<(), String>) {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) => {
            return (vec![], Err(format!("no RAPL: {}: {e} (no powercap driver, or a VM/container)", root.display())));
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // Top-level zones only (intel-rapl:0, not the sub-zones intel-rapl:0:0),
        // so core/uncore/dram energy is not counted twice.
        .filter(|n| n.strip_prefix("intel-rapl:").is_some_and(|r| !r.contains(':')))
        .collect();
    names.sort();
    if names.is_empty() {
        return (vec![], Err(format!("no RAPL zones under {} (no powercap driver, or a VM)", root.display())));
    }
    let mut zones = Vec::new();
    let mut errors = Vec::new();
    for n in names {
        let dir = root.join(&n);
        let energy = dir.join("energy_uj");
        match read_u64(&energy) {
            Ok(_) => {
                let name = std::fs::read_to_string(dir.join("name")).map(|s| s.trim().to_owned()).unwrap_or_default();
                let max = read_u64(&dir.join("max_energy_range_uj")).ok();
                zones.push((RaplZone { zone: n, name, max_energy_range_uj: max }, energy));
            }
            Err(e) => errors.push(format!("{}: {e}", energy.display())),
        }
    }
    if zones.is_empty() { (zones, Err(errors.join("; "))) } else { (zones, Ok(())) }
}

fn read_u64(p: &Path) -> Result<u64, String> {
    let s = std::fs::read_to_string(p).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            "permission denied (energy_uj is root-only since Linux 5.10)".to_owned()
        } else {
            e.to_string()
        }
    })?;
    s.trim().parse().map_err(|e| format!("{s:?}: {e}"))
}

/// The host sampler, owned by the sampler thread.
pub struct HostSampler {
    sys: System,
    rapl: Vec<(RaplZone, PathBuf)>,
    /// The engine's process tree, refreshed every `TREE_EVERY` samples.
    tree: Vec<u32>,
    tree_root: u32,
    ticks: u64,
    /// CPU seconds per pid at the previous sample, and when.
    last_cpu: HashMap<u32, f64>,
    last_t: f64,
    clk_tck: f64,
    page: u64,
}

const TREE_EVERY: u64 = 10;

impl HostSampler {
    /// Probe the host sources; the status lists what works and why not.
    pub fn new(rapl_root: &Path) -> (HostSampler, Vec<SourceStatus>) {
        let mut sys = System::new();
        sys.refresh_cpu_usage();
        sys.refresh_memory();
        let (rapl, rapl_status) = probe_rapl(rapl_root);
        let mut status = vec![SourceStatus {
            name: "host".into(),
            used: true,
            reason: format!(
                "sysinfo: CPU utilisation over {} logical CPUs, system memory ({} MiB), engine process tree RSS and CPU",
                sys.cpus().len(),
                sys.total_memory() >> 20
            ),
        }];
        status.push(match &rapl_status {
            Ok(()) => SourceStatus {
                name: "rapl".into(),
                used: true,
                reason: format!(
                    "CPU package energy from {}",
                    rapl.iter().map(|(z, _)| format!("{} ({})", z.zone, z.name)).collect::<Vec<_>>().join(", ")
                ),
            },
            Err(e) => SourceStatus { name: "rapl".into(), used: false, reason: e.clone() },
        });
        // SAFETY: sysconf with valid names has no preconditions.
        let (clk_tck, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
        let sampler = HostSampler {
            sys,
            rapl,
            tree: vec![],
            tree_root: 0,
            ticks: 0,
            last_cpu: HashMap::new(),
            last_t: 0.0,
            clk_tck: if clk_tck > 0 { clk_tck as f64 } else { 100.0 },
            page: if page > 0 { page as u64 } else { 4096 },
        };
        (sampler, status)
    }

    /// The RAPL zones sampled, in the order of [`HostReading::rapl_uj`].
    pub fn rapl_zones(&self) -> Vec<RaplZone> {
        self.rapl.iter().map(|(z, _)| z.clone()).collect()
    }

    /// Take one host reading; `engine_pid` 0 means none set yet.
    pub fn read(&mut self, engine_pid: u32) -> HostReading {
        self.sys.refresh_cpu_usage();
        self.sys.refresh_memory();
        let mut r = HostReading {
            cpu_pct: Some(self.sys.global_cpu_usage() as f64),
            mem_used_bytes: Some(self.sys.used_memory()),
            mem_total_bytes: Some(self.sys.total_memory()),
            ..Default::default()
        };
        if engine_pid != 0 {
            if engine_pid != self.tree_root || self.ticks % TREE_EVERY == 0 {
                self.tree = process_tree(engine_pid);
                if engine_pid != self.tree_root {
                    self.last_cpu.clear();
                }
                self.tree_root = engine_pid;
            }
            let now = super::clock::mono_now_s();
            let dt = now - self.last_t;
            let mut rss = 0u64;
            let mut cpu_delta = 0.0;
            let mut alive = 0u32;
            let mut cpu_now = HashMap::with_capacity(self.tree.len());
            for &pid in &self.tree {
                let Some((cpu_s, rss_pages)) = read_proc(pid, self.clk_tck) else { continue };
                alive += 1;
                rss += rss_pages * self.page;
                if let Some(prev) = self.last_cpu.get(&pid) {
                    cpu_delta += (cpu_s - prev).max(0.0);
                }
                cpu_now.insert(pid, cpu_s);
            }
            if alive > 0 {
                r.engine_rss_bytes = Some(rss);
                r.engine_procs = Some(alive);
                if !self.last_cpu.is_empty() && dt > 0.0 {
                    r.engine_cpu_pct = Some(cpu_delta / dt * 100.0);
                }
            }
            self.last_cpu = cpu_now;
            self.last_t = now;
        }
        r.rapl_uj = self.rapl.iter().map(|(_, p)| read_u64(p).ok()).collect();
        self.ticks += 1;
        r
    }
}

/// CPU seconds (user + system) and resident pages of a process, from
/// `/proc/<pid>/stat` (fields 14 and 15, clock ticks) and `/proc/<pid>/statm`
/// (field 2, pages). `None` when it is gone.
fn read_proc(pid: u32, clk_tck: f64) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let rss: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(((utime + stime) / clk_tck, rss))
}

/// `pid` and its descendants, from `/proc/<pid>/task/<tid>/children`
/// (Linux 3.5+ with CONFIG_PROC_CHILDREN; without it, just `pid`).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 4096 {
        let p = out[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.filter_map(|t| t.ok()) {
                if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                    out.extend(
                        s.split_whitespace()
                            .filter_map(|c| c.parse::<u32>().ok())
                            .filter(|c| !out.contains(c))
                            .collect::<Vec<_>>(),
                    );
                }
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rapl_probe_on_fixture_tree() {
        let d = tempfile::tempdir().unwrap();
        let z0 = d.path().join("intel-rapl:0");
        let sub = d.path().join("intel-rapl:0:0");
        let z1 = d.path().join("intel-rapl:1");
        for (z, e) in [(&z0, "123"), (&sub, "5"), (&z1, "77")] {
            std::fs::create_dir_all(z).unwrap();
            std::fs::write(z.join("energy_uj"), e).unwrap();
            std::fs::write(z.join("max_energy_range_uj"), "262143328850").unwrap();
            std::fs::write(z.join("name"), "package-x\n").unwrap();
        }
        let (zones, st) = probe_rapl(d.path());
        assert!(st.is_ok());
        assert_eq!(
            zones.iter().map(|(z, _)| z.zone.as_str()).collect::<Vec<_>>(),
            vec!["intel-rapl:0", "intel-rapl:1"]
        );
        assert_eq!(zones[0].0.max_energy_range_uj, Some(262143328850));
        assert_eq!(zones[0].0.name, "package-x");
        let (zones, st) = probe_rapl(&d.path().join("absent"));
        assert!(zones.is_empty() && st.is_err());
        let empty = tempfile::tempdir().unwrap();
        assert!(probe_rapl(empty.path()).1.unwrap_err().contains("no RAPL zones"));
    }

    #[test]
    fn proc_reader_sees_this_process() {
        let (cpu, rss) = read_proc(std::process::id(), 100.0).unwrap();
        assert!(cpu >= 0.0 && rss > 0);
        assert!(read_proc(u32::MAX - 1, 100.0).is_none());
    }

    #[test]
    fn process_tree_finds_children() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let tree = process_tree(std::process::id());
        child.kill().ok();
        child.wait().ok();
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?} lacks {}", child.id());
    }
}
