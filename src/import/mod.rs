//! `enginebench import inferencex` and `run/recipe --inferencex-checkout`:
//! InferenceX master-config entries and their shell launchers to recipes.
//!
//! How a launcher is read: it is *run*, not parsed. For each search-space
//! point of the entry (and each ISL/OSL scenario) the launcher runs under
//! real bash (`bash --noprofile --norc`) with exactly the environment
//! InferenceX's workflow gives that point ([`workflow`]),
//! in a throwaway sandbox ([`sandbox`]: bubblewrap, no network, cleared
//! environment, read-only system, time limit) where `vllm serve` and every
//! tool that touches the GPU, the network or the model is a recorder and
//! InferenceX's `benchmark_lib.sh` is replaced by a stub. So `if/elif`,
//! `case`, arrays (associative too), `$((...))` and functions resolve
//! exactly as bash resolves them; nothing is guessed.
//!
//! What it refuses (the import fails with exit 2, naming the line): a
//! command without a recorder, the output of a recorder being read
//! (`$(nvidia-smi ...)`: it depends on the machine), a bash error, a
//! non-zero exit, the time limit, `vllm serve` never running or running
//! twice with different flags, the client (`run_benchmark_serving`) or the
//! agentic replay never running or running with different settings,
//! eval-context helpers (`setup_eval_context`: they read the model's
//! config), and entries that are multi-node or not vLLM.
//!
//! Agentic-coding entries are imported as trace replays ([`client`],
//! [`render`]); helper servers their launchers start beside the engine (a
//! KV store master, a router) are recorded and named per point as not
//! reproducible in-process.

pub mod checkout;
pub mod client;
pub mod confined;
pub mod inferencex;
pub mod job;
pub mod machine;
pub mod master_config;
pub mod render;
pub mod sandbox;
pub mod srt_slurm;
pub mod workflow;

#[cfg(test)]
mod tests;
