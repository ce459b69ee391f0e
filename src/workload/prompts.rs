//! Seeded random token-id prompts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `count` prompts of exactly `isl` token ids each, drawn uniformly from
/// `allowed` (the vocabulary minus special tokens, as vLLM's RandomDataset
/// draws them). The same `seed` gives the same prompts on every machine.
///
/// Panics if `allowed` is empty.
pub fn random_prompts(seed: u64, count: usize, isl: usize, allowed: &[u32]) -> Vec<Vec<u32>> {
    assert!(!allowed.is_empty(), "no token ids to draw prompts from");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| (0..isl).map(|_| allowed[rng.random_range(0..allowed.len())]).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_lengths_and_ids() {
        let allowed: Vec<u32> = (5..100).collect();
        let a = random_prompts(7, 3, 16, &allowed);
        let b = random_prompts(7, 3, 16, &allowed);
        let c = random_prompts(8, 3, 16, &allowed);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|p| p.len() == 16));
        assert!(a.iter().flatten().all(|t| allowed.contains(t)));
        assert_ne!(a[0], a[1]);
    }
}
