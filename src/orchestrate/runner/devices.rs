//! The GPUs of this node and packing jobs onto disjoint sets of them.

use serde::{Deserialize, Serialize};

/// Whose GPUs, which decides the visibility variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Vendor {
    Nvidia,
    Amd,
}

/// The GPUs jobs may be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    pub vendor: Option<Vendor>,
    /// Device indices as the visibility variable takes them.
    pub ids: Vec<u32>,
}

impl Devices {
    /// This node's GPUs: the ones this process is limited to
    /// (`CUDA_VISIBLE_DEVICES` / `HIP_VISIBLE_DEVICES`), else NVIDIA's
    /// `/dev/nvidiaN` files, else AMD's KFD topology nodes with a GPU.
    pub fn detect() -> Devices {
        let nvidia = count_matching("/dev", |n| n.strip_prefix("nvidia").is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit())));
        let amd = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| std::fs::read_to_string(e.path().join("gpu_id")).is_ok_and(|s| s.trim() != "0"))
                    .count()
            })
            .unwrap_or(0);
        let vendor = if nvidia > 0 { Some(Vendor::Nvidia) } else if amd > 0 { Some(Vendor::Amd) } else { None };
        let limited = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]
            .iter()
            .find_map(|k| std::env::var(k).ok())
            .and_then(|v| v.split(',').map(|p| p.trim().parse::<u32>().ok()).collect::<Option<Vec<u32>>>());
        let ids = limited.unwrap_or_else(|| (0..nvidia.max(amd) as u32).collect());
        Devices { vendor: vendor.filter(|_| !ids.is_empty()), ids }
    }

    /// The variable(s) that give a job devices `ids` (positions into [`Devices::ids`]).
    pub fn env_for(&self, slots: &[usize]) -> Vec<(String, String)> {
        let list = slots.iter().map(|&s| self.ids[s].to_string()).collect::<Vec<_>>().join(",");
        match self.vendor {
            Some(Vendor::Nvidia) => vec![("CUDA_VISIBLE_DEVICES".into(), list)],
            // vLLM's ROCm platform reads HIP_VISIBLE_DEVICES (and mirrors it
            // into CUDA_VISIBLE_DEVICES); ROCR_VISIBLE_DEVICES is left as inherited.
            Some(Vendor::Amd) => vec![("HIP_VISIBLE_DEVICES".into(), list)],
            None => Vec::new(),
        }
    }
}

fn count_matching(dir: &str, f: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_str().is_some_and(&f)).count())
        .unwrap_or(0)
}

/// Which device slots are free; jobs take the lowest free ones.
#[derive(Debug, Clone)]
pub struct Packer {
    free: Vec<bool>,
}

impl Packer {
    /// `n` free device slots.
    pub fn new(n: usize) -> Packer {
        Packer { free: vec![true; n] }
    }

    /// Takes `need` free slots (lowest first, a contiguous run when there is
    /// one, so a TP group stays on neighbouring devices); `None` if too few are free.
    pub fn take(&mut self, need: usize) -> Option<Vec<usize>> {
        if need == 0 {
            return Some(Vec::new());
        }
        let run = (0..self.free.len()).find(|&s| s + need <= self.free.len() && self.free[s..s + need].iter().all(|&f| f));
        let slots: Vec<usize> = match run {
            Some(s) => (s..s + need).collect(),
            None => self.free.iter().enumerate().filter(|(_, f)| **f).map(|(i, _)| i).take(need).collect(),
        };
        if slots.len() < need {
            return None;
        }
        for &s in &slots {
            self.free[s] = false;
        }
        Some(slots)
    }

    /// Gives slots back.
    pub fn give(&mut self, slots: &[usize]) {
        for &s in slots {
            self.free[s] = true;
        }
    }
}

/// The waves in which jobs needing `needs` devices run on `n` devices, in
/// order, at most `max_at_once` at a time, if every job takes as long as the
/// others: each wave lists the device slots of the jobs running together.
pub fn waves(n: usize, needs: &[usize], max_at_once: usize) -> Vec<Vec<Vec<usize>>> {
    let mut out = Vec::new();
    let mut next = 0;
    while next < needs.len() {
        let mut packer = Packer::new(n);
        let mut wave = Vec::new();
        while next < needs.len() && wave.len() < max_at_once {
            match packer.take(needs[next]) {
                Some(slots) => wave.push(slots),
                None => break,
            }
            next += 1;
        }
        if wave.is_empty() {
            break; // a job larger than the node: the caller refuses it before
        }
        out.push(wave);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_jobs_onto_disjoint_devices_of_8_gpus() {
        // Two TP4 jobs at once, one on each half.
        assert_eq!(waves(8, &[4, 4], 8), vec![vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]]);
        // A TP8 job takes the whole node.
        assert_eq!(waves(8, &[8], 8), vec![vec![(0..8).collect::<Vec<_>>()]]);
        // Four TP2 jobs at once.
        assert_eq!(waves(8, &[2, 2, 2, 2], 8), vec![vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]]);
        // TP8 then two TP4: the TP4s wait for the node.
        assert_eq!(waves(8, &[8, 4, 4], 8).len(), 2);
        // --parallel-jobs 2 caps four TP2 jobs at two at a time.
        assert_eq!(waves(8, &[2, 2, 2, 2], 2), vec![vec![vec![0, 1], vec![2, 3]], vec![vec![0, 1], vec![2, 3]]]);
    }

    #[test]
    fn packer_reuses_freed_slots_and_refuses_too_many() {
        let mut p = Packer::new(8);
        let a = p.take(4).unwrap();
        let b = p.take(2).unwrap();
        assert_eq!(b, vec![4, 5]);
        assert!(p.take(4).is_none(), "only 2 free");
        p.give(&a);
        assert_eq!(p.take(4).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(p.take(0).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn visibility_variable_per_vendor() {
        let nv = Devices { vendor: Some(Vendor::Nvidia), ids: (0..8).collect() };
        assert_eq!(nv.env_for(&[4, 5, 6, 7]), vec![("CUDA_VISIBLE_DEVICES".to_string(), "4,5,6,7".to_string())]);
        let amd = Devices { vendor: Some(Vendor::Amd), ids: vec![2, 3, 6, 7] };
        assert_eq!(amd.env_for(&[2, 3]), vec![("HIP_VISIBLE_DEVICES".to_string(), "6,7".to_string())]);
    }
}
