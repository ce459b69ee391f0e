//! Per-request input/output lengths of the random dataset, in the two
//! conventions users meet, named explicitly because they differ:
//!
//! * `vllm` (`vllm bench serve --random-range-ratio r`, vllm/benchmarks/datasets/utils.py
//!   `get_sampling_params`): uniform integers in [floor(L(1-r)), ceil(L(1+r))],
//!   0 <= r < 1, output lower bound at least 1. vLLM first subtracts the
//!   tokenizer's special tokens from the input length because it builds text
//!   prompts; enginebench sends token ids, so nothing is subtracted.
//! * `inferencex` (InferenceX utils/bench_serving/benchmark_serving.py
//!   `sample_random_requests`, their `RANDOM_RANGE_RATIO`): uniform integers in
//!   [floor(rL), L], 0 <= r <= 1.
//!
//! Either way a fixed random prefix of `prefix_len` tokens (shared by all
//! requests of a point) comes before each prompt.

use rand::Rng;

use crate::protocol::LengthConvention;


/// Draws `count` lengths uniformly from the convention's bounds around `len`.
pub fn sample_lengths(
    rng: &mut impl Rng,
    convention: LengthConvention,
    len: u32,
    ratio: f64,
    count: usize,
) -> Vec<u32> {
    let (lo, hi) = convention.bounds(len, ratio);
    (0..count).map(|_| rng.random_range(lo..=hi)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn vllm_bounds() {
        // vLLM: floor(1024 * 0.5) .. ceil(1024 * 1.5)
        assert_eq!(LengthConvention::Vllm.bounds(1024, 0.5), (512, 1536));
        assert_eq!(LengthConvention::Vllm.bounds(1000, 0.0), (1000, 1000));
        // ceil(10 * 1.25) = 13, floor(10 * 0.75) = 7
        assert_eq!(LengthConvention::Vllm.bounds(10, 0.25), (7, 13));
        assert_eq!(LengthConvention::Vllm.bounds(1, 0.9), (1, 2));
    }

    #[test]
    fn inferencex_bounds() {
        // RANDOM_RANGE_RATIO=0.8 on 1k: [819, 1024]
        assert_eq!(LengthConvention::Inferencex.bounds(1024, 0.8), (819, 1024));
        assert_eq!(LengthConvention::Inferencex.bounds(8192, 1.0), (8192, 8192));
        assert_eq!(LengthConvention::Inferencex.bounds(5, 0.0), (1, 5));
    }

    #[test]
    fn ratio_ranges() {
        assert!(LengthConvention::Vllm.check_ratio(0.99).is_ok());
        assert!(LengthConvention::Vllm.check_ratio(1.0).is_err());
        assert!(LengthConvention::Inferencex.check_ratio(1.0).is_ok());
        assert!(LengthConvention::Inferencex.check_ratio(-0.1).is_err());
    }

    #[test]
    fn samples_stay_in_bounds_and_are_seeded() {
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            sample_lengths(&mut rng, LengthConvention::Inferencex, 1024, 0.8, 2000)
        };
        let a = draw(1);
        assert_eq!(a, draw(1));
        assert_ne!(a, draw(2));
        assert!(a.iter().all(|&l| (819..=1024).contains(&l)));
        // Both ends are reachable.
        assert!(a.contains(&819) && a.contains(&1024));
    }
}
