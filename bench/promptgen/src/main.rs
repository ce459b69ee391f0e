//! Prints the token-id prompts enginebench draws for one sweep point, so that
//! another harness (python-shim/enginebench_shim/pyloop.py) can run exactly the
//! same requests; or writes enginebench's synthetic trace set of AgentX's
//! shape (393 sessions, contexts to ~200k tokens) for bench/harness_overhead.py.
//! It compiles enginebench's own code (the modules below are
//! src/protocol/point.rs, src/workload/{lengths,prompts,sessions,synth,chains,trees,agentx_shape}.rs,
//! not copies), with the versions of rand/rand_chacha pinned by enginebench's Cargo.lock.
//!
//! Prompts:
//!   stdin: JSON list of allowed token ids (the shim's `Engine.allowed_token_ids`).
//!   args:  ISL OSL COUNT SEED   (SEED: the point seed, see `Sweep::point_seed`)
//!   stdout: {"prompts": [[...], ...], "output_lens": [...]}
//! Synthetic AgentX traces (`Shape::agentx`, with SESSIONS of them):
//!   args:  agentx SEED [SESSIONS]
//!   stdout: AgentX traces.jsonl

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

/// What `super::` is to the trace modules.
#[path = "../../../src/workload"]
mod workload {
    #[allow(dead_code)]
    #[path = "sessions.rs"]
    pub mod sessions;
    #[allow(dead_code)]
    #[path = "synth.rs"]
    pub mod synth;
    #[allow(dead_code)]
    #[path = "chains.rs"]
    pub mod chains;
    #[allow(dead_code)]
    #[path = "trees.rs"]
    pub mod trees;
    #[allow(dead_code)]
    #[path = "agentx_shape.rs"]
    pub mod agentx_shape;
}

use std::io::Read;

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some("agentx") {
        let seed: u64 = raw.get(1).and_then(|s| s.parse().ok()).expect("agentx SEED [SESSIONS]");
        let mut shape = workload::agentx_shape::Shape::agentx();
        if let Some(n) = raw.get(2) {
            shape.sessions = n.parse().expect("SESSIONS is an integer");
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        shape.write_agentx(seed, &mut out).expect("writing the traces");
        return;
    }
    let args: Vec<u64> = raw
        .iter()
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
