//! The machine a run happened on.

use serde::{Deserialize, Serialize};

/// Host identity recorded with every result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    /// CPU model name.
    pub cpu: String,
    pub logical_cpus: usize,
    /// GPU model names, one per device the driver lists (NVIDIA from
    /// `/proc/driver/nvidia/gpus/*/information`, AMD from the KFD topology);
    /// empty on a CPU-only host.
    #[serde(default)]
    pub gpus: Vec<String>,
}

impl Host {
    /// Reads the host name, CPU model and GPU names (Linux).
    pub fn detect() -> Host {
        let hostname = read("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .and_then(|s| field(&s, "model name", ':'))
            .unwrap_or_default();
        let logical_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Host { hostname, cpu, logical_cpus, gpus: gpu_names() }
    }
}

fn read(path: impl AsRef<std::path::Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The value of the first `key<sep> value` line.
fn field(text: &str, key: &str, sep: char) -> Option<String> {
    text.lines()
        .find(|l| l.trim_start().starts_with(key))
        .and_then(|l| l.split_once(sep))
        .map(|(_, v)| v.trim().to_string())
}

fn sorted_dirs(path: &str) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(path)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn gpu_names() -> Vec<String> {
    let nvidia: Vec<String> = sorted_dirs("/proc/driver/nvidia/gpus")
        .into_iter()
        .filter_map(|d| read(d.join("information")).and_then(|s| field(&s, "Model", ':')))
        .collect();
    if !nvidia.is_empty() {
        return nvidia;
    }
    // AMD: KFD topology nodes with a GPU id (CPU nodes have gpu_id 0).
    sorted_dirs("/sys/class/kfd/kfd/topology/nodes")
        .into_iter()
        .filter(|d| read(d.join("gpu_id")).is_some_and(|s| s.trim() != "0"))
        .filter_map(|d| read(d.join("name")).map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields() {
        let info = "Model: \t\t NVIDIA H200\nIRQ: 5\n";
        assert_eq!(field(info, "Model", ':').as_deref(), Some("NVIDIA H200"));
        assert_eq!(field("model name\t: AMD EPYC\n", "model name", ':').as_deref(), Some("AMD EPYC"));
        assert_eq!(field("x", "Model", ':'), None);
    }

    #[test]
    fn detects_this_machine() {
        let h = Host::detect();
        assert!(h.logical_cpus >= 1);
        assert!(!h.cpu.is_empty());
    }
}
