//! The GPUs of this node and packing jobs onto disjoint sets of them.

use std::collections::BTreeMap;

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
    /// This node's GPUs: NVIDIA's `/dev/nvidiaN` files, else AMD's KFD
    /// topology nodes with a GPU, limited as this process is ([`Devices::from_env`]).
    pub fn detect() -> Devices {
        let nvidia = count_matching("/dev", |n| n.strip_prefix("nvidia").is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit())));
        let amd = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| std::fs::read_to_string(e.path().join("gpu_id")).is_ok_and(|s| s.trim() != "0"))
                    .count()
            })
            .unwrap_or(0);
        Devices::from_env(&std::env::vars().collect(), nvidia, amd)
    }

    /// The GPUs jobs may be given, from this process's environment `env` and
    /// the device counts found (`nvidia`, `amd`).
    ///
    /// NVIDIA: `CUDA_VISIBLE_DEVICES` when set, else `0..nvidia`.
    /// AMD: HIP indices, which are relative to `ROCR_VISIBLE_DEVICES` when
    /// that is set (Slurm sets it; ROCm's runtime applies it first and HIP's
    /// list selects among what it leaves): `HIP_VISIBLE_DEVICES` (else
    /// `CUDA_VISIBLE_DEVICES`, which vLLM's ROCm platform keeps equal to it,
    /// vllm/platforms/rocm.py:138-157) when set, else `0..` the number of
    /// `ROCR_VISIBLE_DEVICES` entries, else `0..amd`.
    pub fn from_env(env: &BTreeMap<String, String>, nvidia: usize, amd: usize) -> Devices {
        let list = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let indices = |v: &str| v.split(',').map(|p| p.trim().parse::<u32>().ok()).collect::<Option<Vec<u32>>>();
        let (vendor, ids) = if nvidia > 0 {
            let ids = list("CUDA_VISIBLE_DEVICES").and_then(indices).unwrap_or_else(|| (0..nvidia as u32).collect());
            (Some(Vendor::Nvidia), ids)
        } else if amd > 0 {
            let rocr = list("ROCR_VISIBLE_DEVICES").map(|v| v.split(',').count());
            let ids = list("HIP_VISIBLE_DEVICES")
                .or_else(|| list("CUDA_VISIBLE_DEVICES"))
                .and_then(indices)
                .unwrap_or_else(|| (0..rocr.unwrap_or(amd) as u32).collect());
            (Some(Vendor::Amd), ids)
        } else {
            (None, Vec::new())
        };
        Devices { vendor: vendor.filter(|_| !ids.is_empty()), ids }
    }

    /// The variable(s) that give a job devices `ids` (positions into [`Devices::ids`]).
    ///
    /// AMD: `HIP_VISIBLE_DEVICES` and `CUDA_VISIBLE_DEVICES` both, to the same
    /// list: vLLM's ROCm platform raises "Inconsistent GPU visibility env
    /// vars" when both are set and differ (vllm/platforms/rocm.py:146-151),
    /// and a container often sets `CUDA_VISIBLE_DEVICES` to all GPUs.
    /// `ROCR_VISIBLE_DEVICES` stays as inherited: the indices are relative to it.
    pub fn env_for(&self, slots: &[usize]) -> Vec<(String, String)> {
        let list = slots.iter().map(|&s| self.ids[s].to_string()).collect::<Vec<_>>().join(",");
        match self.vendor {
            Some(Vendor::Nvidia) => vec![("CUDA_VISIBLE_DEVICES".into(), list)],
            Some(Vendor::Amd) => vec![("HIP_VISIBLE_DEVICES".into(), list.clone()), ("CUDA_VISIBLE_DEVICES".into(), list)],
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
        assert_eq!(
            amd.env_for(&[2, 3]),
            vec![("HIP_VISIBLE_DEVICES".to_string(), "6,7".to_string()), ("CUDA_VISIBLE_DEVICES".to_string(), "6,7".to_string())],
            "both set alike: vLLM's ROCm platform raises when they differ"
        );
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn amd_devices_are_hip_indices_relative_to_rocr() {
        // Slurm gave this job physical GPUs 4-7 through ROCR_VISIBLE_DEVICES
        // (the KFD topology still lists all 8): HIP numbers them 0-3.
        let d = Devices::from_env(&env(&[("ROCR_VISIBLE_DEVICES", "4,5,6,7")]), 0, 8);
        assert_eq!((d.vendor, d.ids.clone()), (Some(Vendor::Amd), vec![0, 1, 2, 3]));
        let e = d.env_for(&[2, 3]);
        assert!(e.contains(&("HIP_VISIBLE_DEVICES".into(), "2,3".into())) && e.contains(&("CUDA_VISIBLE_DEVICES".into(), "2,3".into())), "{e:?}");
        // The engine's sampled GPUs follow: ROCR 4-7, HIP 2,3 -> physical 6, 7.
        let mut task_env = env(&[("ROCR_VISIBLE_DEVICES", "4,5,6,7")]);
        task_env.extend(e);
        assert_eq!(crate::telemetry::visible_gpus_from_env(&task_env), Some(vec![6, 7]));
        // A container's CUDA_VISIBLE_DEVICES on AMD, no HIP: its indices.
        let d = Devices::from_env(&env(&[("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")]), 0, 8);
        assert_eq!(d.ids, (0..8).collect::<Vec<u32>>());
        // HIP within ROCR.
        let d = Devices::from_env(&env(&[("ROCR_VISIBLE_DEVICES", "4,5,6,7"), ("HIP_VISIBLE_DEVICES", "1,3")]), 0, 8);
        assert_eq!(d.ids, vec![1, 3]);
        // NVIDIA ignores the ROCm variables.
        let d = Devices::from_env(&env(&[("CUDA_VISIBLE_DEVICES", "4,5"), ("HIP_VISIBLE_DEVICES", "0")]), 8, 0);
        assert_eq!((d.vendor, d.ids), (Some(Vendor::Nvidia), vec![4, 5]));
        assert_eq!(Devices::from_env(&env(&[]), 0, 0).vendor, None);
    }
}
