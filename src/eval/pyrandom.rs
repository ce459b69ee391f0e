//! CPython's `random.Random`, bit for bit, for the calls lm-eval's few-shot
//! sampler makes: seeding from an int, `getrandbits`, `_randbelow` and
//! `sample`.
//!
//! The orchestrator never imports Python, so this is a port of CPython 3.11:
//! `Modules/_randommodule.c` (MT19937 with `init_by_array`, `random_seed` for
//! an int, `getrandbits`) and `Lib/random.py` (`_randbelow_with_getrandbits`,
//! `sample` with its pool-vs-set branch). `evals/fixtures/pyrandom.json`,
//! written by the real interpreter (`evals/fixtures/make_fixtures.py`), pins
//! the output.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// `random.Random` (the Mersenne Twister behind it).
#[derive(Clone)]
pub struct PyRandom {
    mt: [u32; N],
    mti: usize,
}

impl std::fmt::Debug for PyRandom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyRandom").field("mti", &self.mti).finish_non_exhaustive()
    }
}

impl PyRandom {
    /// `random.Random(seed)` for an int seed: the key is `abs(seed)` as
    /// little-endian 32-bit words (at least one), fed to `init_by_array`.
    pub fn new(seed: i128) -> Self {
        let mut n = seed.unsigned_abs();
        let mut key = Vec::new();
        while n > 0 {
            key.push(n as u32);
            n >>= 32;
        }
        if key.is_empty() {
            key.push(0);
        }
        let mut r = PyRandom { mt: [0; N], mti: N + 1 };
        r.init_by_array(&key);
        r
    }

    fn init_genrand(&mut self, s: u32) {
        self.mt[0] = s;
        for i in 1..N {
            let prev = self.mt[i - 1];
            self.mt[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        self.mti = N;
    }

    fn init_by_array(&mut self, key: &[u32]) {
        self.init_genrand(19_650_218);
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = self.mt[i - 1];
            self.mt[i] = (self.mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                self.mt[0] = self.mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = self.mt[i - 1];
            self.mt[i] =
                (self.mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                self.mt[0] = self.mt[N - 1];
                i = 1;
            }
        }
        self.mt[0] = 0x8000_0000;
    }

    /// `genrand_uint32`: the next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        let mag01 = |y: u32| if y & 1 == 0 { 0 } else { MATRIX_A };
        if self.mti >= N {
            for kk in 0..N - M {
                let y = (self.mt[kk] & UPPER_MASK) | (self.mt[kk + 1] & LOWER_MASK);
                self.mt[kk] = self.mt[kk + M] ^ (y >> 1) ^ mag01(y);
            }
            for kk in N - M..N - 1 {
                let y = (self.mt[kk] & UPPER_MASK) | (self.mt[kk + 1] & LOWER_MASK);
                self.mt[kk] = self.mt[kk + M - N] ^ (y >> 1) ^ mag01(y);
            }
            let y = (self.mt[N - 1] & UPPER_MASK) | (self.mt[0] & LOWER_MASK);
            self.mt[N - 1] = self.mt[M - 1] ^ (y >> 1) ^ mag01(y);
            self.mti = 0;
        }
        let mut y = self.mt[self.mti];
        self.mti += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `getrandbits(k)` for 0 <= k <= 64: whole 32-bit words, least
    /// significant first; the last word keeps its top bits.
    pub fn getrandbits(&mut self, k: u32) -> u64 {
        assert!(k <= 64, "getrandbits: k = {k} > 64 is not supported");
        if k == 0 {
            return 0;
        }
        if k <= 32 {
            return u64::from(self.next_u32() >> (32 - k));
        }
        let lo = u64::from(self.next_u32());
        let hi = u64::from(self.next_u32() >> (64 - k));
        lo | (hi << 32)
    }

    /// `_randbelow_with_getrandbits(n)`: uniform in [0, n), n > 0, by
    /// rejection on `n.bit_length()` bits.
    pub fn randbelow(&mut self, n: u64) -> u64 {
        assert!(n > 0, "randbelow: n must be > 0");
        let k = 64 - n.leading_zeros();
        let mut r = self.getrandbits(k);
        while r >= n {
            r = self.getrandbits(k);
        }
        r
    }

    /// `sample(range(n), k)`: k distinct indices in selection order, exactly
    /// as `Lib/random.py` draws them (a pool for small n, else a set of
    /// selected indices with redraws). `None` when k > n (Python's
    /// ValueError).
    pub fn sample(&mut self, n: usize, k: usize) -> Option<Vec<usize>> {
        if k > n {
            return None;
        }
        let mut result = Vec::with_capacity(k);
        let mut setsize: u128 = 21;
        if k > 5 {
            // 4 ** _ceil(_log(k * 3, 4)), with math.log(x, base) = log(x) / log(base)
            let exp = ((k as f64 * 3.0).ln() / 4f64.ln()).ceil() as u32;
            setsize = setsize.saturating_add(4u128.saturating_pow(exp));
        }
        if (n as u128) <= setsize {
            let mut pool: Vec<usize> = (0..n).collect();
            for i in 0..k {
                let j = self.randbelow((n - i) as u64) as usize;
                result.push(pool[j]);
                pool[j] = pool[n - i - 1];
            }
        } else {
            let mut selected = std::collections::HashSet::with_capacity(k);
            for _ in 0..k {
                let mut j = self.randbelow(n as u64) as usize;
                while selected.contains(&j) {
                    j = self.randbelow(n as u64) as usize;
                }
                selected.insert(j);
                result.push(j);
            }
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Fixture {
        python: String,
        cases: Vec<Case>,
    }
    #[derive(Deserialize)]
    struct Case {
        seed: i128,
        calls: Vec<Call>,
    }
    #[derive(Deserialize)]
    #[serde(tag = "call", rename_all = "lowercase")]
    enum Call {
        Getrandbits { k: u32, result: u64 },
        Randbelow { n: u64, result: u64 },
        Sample { n: usize, k: usize, result: Vec<usize> },
    }

    fn fixture() -> Fixture {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/evals/fixtures/pyrandom.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn equals_cpython_fixtures() {
        let f = fixture();
        assert!(f.python.starts_with("3.11"), "fixture made by {}", f.python);
        let mut checked = 0;
        for case in &f.cases {
            let mut r = PyRandom::new(case.seed);
            for (i, call) in case.calls.iter().enumerate() {
                let ctx = format!("seed {} call {i}", case.seed);
                match call {
                    Call::Getrandbits { k, result } => assert_eq!(r.getrandbits(*k), *result, "{ctx}"),
                    Call::Randbelow { n, result } => assert_eq!(r.randbelow(*n), *result, "{ctx}"),
                    Call::Sample { n, k, result } => {
                        assert_eq!(r.sample(*n, *k).as_ref(), Some(result), "{ctx}: sample({n}, {k})")
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 100);
    }

    #[test]
    fn lm_eval_gsm8k_first_draws() {
        // Random(1234), sample(train[7473], 5) for test docs 0 and 1, from the fixture.
        let mut r = PyRandom::new(1234);
        assert_eq!(r.sample(7473, 5).unwrap(), vec![6374, 3610, 957, 61, 742]);
        assert_eq!(r.sample(7473, 5).unwrap(), vec![7462, 6610, 4769, 286, 5501]);
    }

    #[test]
    fn deterministic_and_bounded() {
        let a: Vec<_> = (0..10)
            .map({
                let mut r = PyRandom::new(7);
                move |_| r.sample(50, 10).unwrap()
            })
            .collect();
        let b: Vec<_> = (0..10)
            .map({
                let mut r = PyRandom::new(7);
                move |_| r.sample(50, 10).unwrap()
            })
            .collect();
        assert_eq!(a, b);
        for s in &a {
            let mut u = s.clone();
            u.sort();
            u.dedup();
            assert_eq!(u.len(), 10);
            assert!(u.iter().all(|&x| x < 50));
        }
        assert_eq!(PyRandom::new(1).sample(3, 4), None);
        assert_eq!(PyRandom::new(1).sample(3, 0), Some(vec![]));
    }
}
