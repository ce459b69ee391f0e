//! The parallel layout a `vllm serve` flag list asks for, read before any
//! engine starts: tensor, pipeline, data, prefill- and decode-context
//! parallel sizes, vLLM's world size and the GPUs the engine occupies, and
//! whether it asks for data parallelism (see [`data_parallel`], the one
//! place that decides it, for the flag and for vLLM's environment fallback).
//!
//! vLLM 0.32's names and rules (config/parallel.py `ParallelConfig`):
//! `world_size = PP x TP x PCP` (DCP reuses the TP ranks and adds no
//! process); with data parallelism every DP rank is one such world, so the
//! engine spans `world_size x DP` devices (`world_size_across_dp`).

/// Flag spellings of each size (vLLM's `vllm serve` parser, arg_utils.py).
const TP: [&str; 2] = ["--tensor-parallel-size", "-tp"];
const PP: [&str; 2] = ["--pipeline-parallel-size", "-pp"];
const DP: [&str; 2] = ["--data-parallel-size", "-dp"];
const PCP: [&str; 2] = ["--prefill-context-parallel-size", "-pcp"];
const DCP: [&str; 2] = ["--decode-context-parallel-size", "-dcp"];

/// Parallel sizes of one engine configuration (1 for a size not given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub pcp: u32,
    pub dcp: u32,
}

impl Layout {
    /// The sizes `args` give; `sweep_tp` (the sweep's TP for this engine)
    /// stands for TP when the flags do not set it (the sweep adds the flag);
    /// `vllm_dp_size` is `VLLM_DP_SIZE` as the engine would see it, which
    /// sets DP when the flags do not (see [`data_parallel`]).
    pub fn of(args: &[String], sweep_tp: Option<u32>, vllm_dp_size: Option<&str>) -> Layout {
        let size = |names: &[&str]| flag_value(args, names).and_then(|v| v.parse::<u32>().ok()).filter(|&n| n > 0);
        Layout {
            tp: size(&TP).or(sweep_tp).unwrap_or(1).max(1),
            pp: size(&PP).unwrap_or(1),
            dp: data_parallel(args, vllm_dp_size).map_or(1, |d| d.size),
            pcp: size(&PCP).unwrap_or(1),
            dcp: size(&DCP).unwrap_or(1),
        }
    }

    /// vLLM's world size: TP x PP x PCP processes per DP rank.
    pub fn world_size(&self) -> u32 {
        self.tp * self.pp * self.pcp
    }

    /// Devices the engine occupies: world size x DP (what placement reserves
    /// and telemetry expects).
    pub fn gpus(&self) -> u32 {
        self.world_size() * self.dp
    }
}

/// The value of the last occurrence of any of `names` (`--x v` or `--x=v`).
pub fn flag_value(args: &[String], names: &[&str]) -> Option<String> {
    let mut found = None;
    for (i, t) in args.iter().enumerate() {
        for n in names {
            if let Some(v) = t.strip_prefix(n).and_then(|rest| rest.strip_prefix('=')) {
                found = Some(v.to_string());
            } else if t == n {
                found = args.get(i + 1).cloned();
            }
        }
    }
    found
}

/// vLLM's environment variable for the DP size, read when the flags set none
/// (vllm/envs.py `VLLM_DP_SIZE`, default 1).
pub const DP_SIZE_VAR: &str = "VLLM_DP_SIZE";

/// A configuration that asks for data parallelism, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataParallel {
    /// The DP size, > 1.
    pub size: u32,
    /// Where the size came from.
    pub source: DpSource,
}

/// How a configuration asks for data parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpSource {
    /// `--data-parallel-size N` / `-dp N`.
    Flag,
    /// `VLLM_DP_SIZE=N` in the engine's environment, with no DP flag.
    Env,
}

impl DataParallel {
    /// How the configuration asks, as written: "--data-parallel-size 2" or
    /// "VLLM_DP_SIZE=2 in the environment".
    pub fn spelled(&self) -> String {
        match self.source {
            DpSource::Flag => format!("--data-parallel-size {}", self.size),
            DpSource::Env => format!("{DP_SIZE_VAR}={} in the environment", self.size),
        }
    }
}

/// The one decision of whether an engine configuration asks for data
/// parallelism, and of what size: `-dp N` (N > 1) in the flags, else
/// `VLLM_DP_SIZE` > 1 in the engine's environment (`vllm_dp_size`: the
/// value the engine would see), as vLLM reads them (0.32 to 0.34
/// vllm/config/parallel.py `ParallelConfig.__post_init__`: the flag when it
/// is > 1, otherwise the environment's `VLLM_DP_SIZE`). `None`: one engine.
///
/// The run plan starts one worker per DP rank from it
/// (src/orchestrate/dp/), the importer names it in a job's notes and
/// placement counts its GPUs.
pub fn data_parallel(args: &[String], vllm_dp_size: Option<&str>) -> Option<DataParallel> {
    let flag = flag_value(args, &DP).and_then(|v| v.parse::<u32>().ok()).filter(|&n| n > 1);
    if let Some(size) = flag {
        return Some(DataParallel { size, source: DpSource::Flag });
    }
    let env = vllm_dp_size.and_then(|v| v.trim().parse::<u32>().ok()).filter(|&n| n > 1);
    env.map(|size| DataParallel { size, source: DpSource::Env })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_world_and_gpus() {
        let l = Layout::of(&args("--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel"), None, None);
        assert_eq!((l.tp, l.dp, l.world_size(), l.gpus()), (1, 8, 1, 8));
        let l = Layout::of(&args("-tp=4 -pp 2 -pcp 2 -dcp 4"), None, None);
        assert_eq!((l.tp, l.pp, l.pcp, l.dcp, l.world_size(), l.gpus()), (4, 2, 2, 4, 16, 16));
        assert_eq!(Layout::of(&[], Some(8), None).gpus(), 8, "the sweep's TP when the flags have none");
        assert_eq!(Layout::of(&args("-tp 2"), Some(8), None).tp, 2, "the flag wins");
        assert_eq!(Layout::of(&args("-tp 4"), None, Some("2")).gpus(), 8, "VLLM_DP_SIZE counts as -dp");
    }

    #[test]
    fn data_parallel_is_read_from_the_flags_then_the_environment() {
        let dp = |a: &str, env: Option<&str>| data_parallel(&args(a), env).map(|d| (d.size, d.source));
        assert_eq!(dp("-tp 8 --data-parallel-size 1", None), None);
        assert_eq!(dp("-tp 1 -dp 2", None), Some((2, DpSource::Flag)));
        assert_eq!(dp("--data-parallel-size=8", None), Some((8, DpSource::Flag)));
        // vLLM's fallback: the environment when the flag asks for no DP.
        assert_eq!(dp("-tp 1", Some("2")), Some((2, DpSource::Env)));
        assert_eq!(dp("-dp 1", Some(" 4 ")), Some((4, DpSource::Env)));
        assert_eq!(dp("-dp 2", Some("4")), Some((2, DpSource::Flag)), "the flag wins over the environment");
        assert_eq!(dp("", Some("1")), None);
        assert_eq!(dp("", Some("two")), None, "vLLM would fail on it at start; not DP here");
    }
}
