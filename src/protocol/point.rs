//! What one sweep point asks of the engine: its [`Point`] (ISL/OSL,
//! concurrency, prompts) and the random dataset it draws from, with the
//! length convention its range ratio is read in.

use serde::{Deserialize, Serialize};

/// One point of the matrix: an ISL/OSL pair at one concurrency (and TP).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Tensor-parallel size of the engine this point runs on, when the sweep sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    pub isl: u32,
    pub osl: u32,
    pub conc: u32,
    pub num_prompts: u32,
    pub warmups: u32,
}

/// The random dataset of one point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RandomDataset {
    /// Mean input length, tokens (without the prefix).
    pub isl: u32,
    /// Mean output length, tokens.
    pub osl: u32,
    pub convention: LengthConvention,
    pub range_ratio: f64,
    /// A random prefix of this many tokens, the same for every request.
    pub prefix_len: u32,
    pub seed: u64,
}

impl RandomDataset {
    /// The most tokens one request of this dataset can need, prompt and
    /// output: the shared prefix plus the upper bounds of the input and
    /// output lengths under the range ratio. What must fit the engine's
    /// max_model_len (checked before any engine starts, and again by the
    /// worker against the engine it built).
    pub fn longest_request(&self) -> u64 {
        let (_, isl) = self.convention.bounds(self.isl, self.range_ratio);
        let (_, osl) = self.convention.bounds(self.osl, self.range_ratio);
        u64::from(self.prefix_len) + u64::from(isl) + u64::from(osl)
    }
}

/// Which range a range ratio describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LengthConvention {
    /// [floor(L(1-r)), ceil(L(1+r))], r in [0, 1).
    #[default]
    Vllm,
    /// [floor(rL), L], r in [0, 1].
    Inferencex,
}

impl LengthConvention {
    /// The default ratio: fixed lengths (vllm 0.0, inferencex 1.0).
    pub fn fixed_ratio(self) -> f64 {
        match self {
            LengthConvention::Vllm => 0.0,
            LengthConvention::Inferencex => 1.0,
        }
    }

    /// Checks a ratio; the error says what range is valid.
    pub fn check_ratio(self, r: f64) -> Result<(), String> {
        let ok = match self {
            LengthConvention::Vllm => (0.0..1.0).contains(&r),
            LengthConvention::Inferencex => (0.0..=1.0).contains(&r),
        };
        if ok {
            Ok(())
        } else {
            Err(match self {
                LengthConvention::Vllm => format!("range_ratio {r} is outside [0, 1) (vllm convention)"),
                LengthConvention::Inferencex => {
                    format!("range_ratio {r} is outside [0, 1] (inferencex convention)")
                }
            })
        }
    }

    /// Inclusive bounds for a mean length `len` (tokens). `at_least_one` keeps
    /// the lower bound >= 1 (vLLM does so for output lengths; enginebench also
    /// for inputs, since a prompt cannot be empty).
    pub fn bounds(self, len: u32, r: f64) -> (u32, u32) {
        let l = f64::from(len);
        let (lo, hi) = match self {
            LengthConvention::Vllm => ((l * (1.0 - r)).floor(), (l * (1.0 + r)).ceil()),
            LengthConvention::Inferencex => ((l * r).floor(), l),
        };
        let hi = (hi as u32).max(1);
        ((lo as u32).clamp(1, hi), hi)
    }
}
