//! Prints the token-id prompts enginebench draws for one sweep point, so that
//! another harness (python-shim/enginebench_shim/pyloop.py) can run exactly the
//! same requests. It compiles enginebench's own dataset code (the modules
//! below are src/protocol/point.rs, src/workload/lengths.rs and
//! src/workload/prompts.rs, not copies),
//! with the versions of rand/rand_chacha pinned by enginebench's Cargo.lock.
//!
//! stdin: JSON list of allowed token ids (the shim's `Engine.allowed_token_ids`).
//! args:  ISL OSL COUNT SEED   (SEED: the point seed, see `Sweep::point_seed`)
//! stdout: {"prompts": [[...], ...], "output_lens": [...]}

#[allow(dead_code)]
#[path = "../../../src/protocol/point.rs"]
mod point;
/// What `crate::protocol` is to the two workload modules.
mod protocol {
    pub use crate::point::{LengthConvention, RandomDataset};
}
#[allow(dead_code)]
#[path = "../../../src/workload/lengths.rs"]
mod lengths;
#[allow(dead_code)]
#[path = "../../../src/workload/prompts.rs"]
mod prompts;

use std::io::Read;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("ISL OSL COUNT SEED are integers"))
        .collect();
    let [isl, osl, count, seed] = args[..] else {
        eprintln!("usage: enginebench-promptgen ISL OSL COUNT SEED < allowed_ids.json");
        std::process::exit(2);
    };
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("reading stdin");
    let allowed: Vec<u32> = serde_json::from_str(&input).expect("stdin: a JSON list of token ids");
    let dataset = protocol::RandomDataset {
        isl: isl as u32,
        osl: osl as u32,
        convention: protocol::LengthConvention::Vllm,
        range_ratio: 0.0,
        prefix_len: 0,
        seed,
    };
    let w = dataset.draw(count as usize, &allowed);
    let out = serde_json::json!({"prompts": w.prompts, "output_lens": w.output_lens});
    println!("{out}");
}
