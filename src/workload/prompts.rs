//! Seeded random token-id prompts (the random dataset).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;


use super::lengths::sample_lengths;
use crate::protocol::RandomDataset;

/// Requests drawn from a [`RandomDataset`].
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Full prompts (prefix + random tokens).
    pub prompts: Vec<Vec<u32>>,
    /// Requested output length per request, tokens.
    pub output_lens: Vec<u32>,
}

impl RandomDataset {
    /// Draws `count` requests with token ids from `allowed` (the vocabulary
    /// minus special tokens, as vLLM's RandomDataset draws them). The same
    /// seed gives the same requests on every machine.
    ///
    /// Panics if `allowed` is empty.
    pub fn draw(&self, count: usize, allowed: &[u32]) -> Workload {
        assert!(!allowed.is_empty(), "no token ids to draw prompts from");
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let token = |rng: &mut ChaCha8Rng| allowed[rng.random_range(0..allowed.len())];
        let prefix: Vec<u32> = (0..self.prefix_len).map(|_| token(&mut rng)).collect();
        let input_lens = sample_lengths(&mut rng, self.convention, self.isl, self.range_ratio, count);
        let output_lens = sample_lengths(&mut rng, self.convention, self.osl, self.range_ratio, count);
        let prompts = input_lens
            .iter()
            .map(|&len| {
                let mut p = prefix.clone();
                p.extend((0..len).map(|_| token(&mut rng)));
                p
            })
            .collect();
        Workload { prompts, output_lens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LengthConvention;

    fn dataset(convention: LengthConvention, ratio: f64, prefix_len: u32) -> RandomDataset {
        RandomDataset { isl: 100, osl: 20, convention, range_ratio: ratio, prefix_len, seed: 5 }
    }

    #[test]
    fn fixed_lengths_and_seeded() {
        let allowed: Vec<u32> = (5..1000).collect();
        let d = dataset(LengthConvention::Vllm, 0.0, 0);
        let a = d.draw(4, &allowed);
        assert_eq!(a, d.draw(4, &allowed));
        assert_ne!(a, RandomDataset { seed: 6, ..d }.draw(4, &allowed));
        assert!(a.prompts.iter().all(|p| p.len() == 100));
        assert_eq!(a.output_lens, vec![20; 4]);
        assert!(a.prompts.iter().flatten().all(|t| allowed.contains(t)));
        assert_ne!(a.prompts[0], a.prompts[1]);
    }

    #[test]
    fn ranges_and_shared_prefix() {
        let allowed: Vec<u32> = (0..50).collect();
        let w = dataset(LengthConvention::Inferencex, 0.8, 7).draw(300, &allowed);
        assert!(w.prompts.iter().all(|p| (7 + 80..=7 + 100).contains(&p.len())));
        assert!(w.output_lens.iter().all(|&o| (16..=20).contains(&o)));
        assert!(w.prompts.iter().all(|p| p[..7] == w.prompts[0][..7]));
        let v = dataset(LengthConvention::Vllm, 0.5, 0).draw(300, &allowed);
        assert!(v.prompts.iter().all(|p| (50..=150).contains(&p.len())));
        assert!(v.output_lens.iter().all(|&o| (10..=30).contains(&o)));
    }
}
