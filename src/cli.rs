//! Command-line interface.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "enginebench",
    version,
    about = "Drive vLLM's engine in-process: raw engine throughput and latency plus GSM8K accuracy in one command"
)]
pub struct Cli {
    /// Show the engine's log live and Python tracebacks on failure.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a recipe: the perf sweep, then GSM8K, on one in-process engine.
    Run(RunArgs),
    /// Internal: the engine worker process (reads a job on stdin).
    #[command(name = "__worker", hide = true)]
    Worker,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Recipe file (TOML); default: recipes/cpu/smollm2-135m.toml.
    pub recipe: Option<PathBuf>,
    /// Concurrencies to sweep, e.g. 1,4,16 (overrides sweep.conc).
    #[arg(long, value_delimiter = ',')]
    pub conc: Option<Vec<u32>>,
    /// Input sequence length, tokens (overrides sweep.isl).
    #[arg(long)]
    pub isl: Option<u32>,
    /// Output sequence length, tokens (overrides sweep.osl).
    #[arg(long)]
    pub osl: Option<u32>,
    /// Measured requests per point (overrides the recipe's count).
    #[arg(long)]
    pub num_prompts: Option<u32>,
    /// GSM8K questions to score (overrides eval.limit).
    #[arg(long)]
    pub eval_limit: Option<u32>,
    /// Skip the eval.
    #[arg(long)]
    pub no_eval: bool,
    /// Output folder (default results/<recipe>-<UTC time>).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}
