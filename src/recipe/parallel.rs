//! The parallel layout a `vllm serve` flag list asks for, read before any
//! engine starts: tensor, pipeline, data, prefill- and decode-context
//! parallel sizes, vLLM's world size and the GPUs the engine occupies, and
//! whether it asks for data parallelism (see [`data_parallel`]).
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
    /// stands for TP when the flags do not set it (the sweep adds the flag).
    pub fn of(args: &[String], sweep_tp: Option<u32>) -> Layout {
        let size = |names: &[&str]| flag_value(args, names).and_then(|v| v.parse::<u32>().ok()).filter(|&n| n > 0);
        Layout {
            tp: size(&TP).or(sweep_tp).unwrap_or(1).max(1),
            pp: size(&PP).unwrap_or(1),
            dp: size(&DP).unwrap_or(1),
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

/// The DP size when a configuration asks for data parallelism (`-dp N`,
/// N > 1), which does not run in-process: vLLM's in-process `LLMEngine`
/// joins a DP group in its constructor and waits for peer engines that are
/// never started. The shim refuses such flags as bad input, at engine start
/// and in `recipe check` (python-shim engine.py
/// `_refuse_in_process_data_parallel`); the importer uses this to leave
/// such jobs out of a default run and say why.
pub fn data_parallel(args: &[String]) -> Option<u32> {
    let dp = Layout::of(args, None).dp;
    (dp > 1).then_some(dp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_world_and_gpus() {
        let l = Layout::of(&args("--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel"), None);
        assert_eq!((l.tp, l.dp, l.world_size(), l.gpus()), (1, 8, 1, 8));
        let l = Layout::of(&args("-tp=4 -pp 2 -pcp 2 -dcp 4"), None);
        assert_eq!((l.tp, l.pp, l.pcp, l.dcp, l.world_size(), l.gpus()), (4, 2, 2, 4, 16, 16));
        assert_eq!(Layout::of(&[], Some(8)).gpus(), 8, "the sweep's TP when the flags have none");
        assert_eq!(Layout::of(&args("-tp 2"), Some(8)).tp, 2, "the flag wins");
    }

    #[test]
    fn data_parallel_is_read_from_the_flags() {
        assert_eq!(data_parallel(&args("-tp 8 --data-parallel-size 1")), None);
        assert_eq!(data_parallel(&args("-tp 1 -dp 2")), Some(2));
        assert_eq!(data_parallel(&args("--data-parallel-size=8")), Some(8));
    }
}
