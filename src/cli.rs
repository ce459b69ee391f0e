//! Command-line interface.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use crate::orchestrate::plan::RunOptions;
use crate::recipe::overrides;
pub use crate::recipe::overrides::{EvalFlags, List, SweepArgs, WorkloadArgs};

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
    /// The Python interpreter the engine runs in (its vLLM, torch and plugins); default: $ENGINEBENCH_PYTHON, the set-up venv, else the first python3 on PATH that imports vllm.
    #[arg(long, global = true, value_name = "PATH")]
    pub python: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a recipe: the perf sweep, then GSM8K, on one in-process engine.
    Run(RunArgs),
    /// Run only the eval (GSM8K) on the recipe's engine.
    Eval(EvalArgs),
    /// The same sweep in-process, with the engine core in its own process, and through `vllm serve`: what the server costs.
    Overhead(RunArgs),
    /// Check or show a recipe without loading a model.
    #[command(subcommand)]
    Recipe(RecipeCommand),
    /// Turn an InferenceX launcher (+ master-config entry) into a recipe, without running it.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Write a result in InferenceX's aggregate shape or vllm bench serve's result shape.
    Export(ExportArgs),
    /// List the telemetry sources (GPU, host) and sample them, to check a node before a sweep.
    Telemetry(TelemetryArgs),
    /// Run a baseline and a candidate variant, interleaved per repeat, and compare them.
    Ab(AbArgs),
    /// Compare two results (before/after): deltas with 95% CIs, accuracy (McNemar), token agreement, gate.
    Compare(CompareArgs),
    /// Check the Python, vLLM, torch, devices, compatibility items and telemetry a run would use (exit 0: a run can start).
    Doctor(DoctorArgs),
    /// Plot every job of a result: tok/s/gpu vs tok/s/user, tok/s/gpu and TPOT vs concurrency (PNG, SVG).
    Plot(PlotArgs),
    /// The Slurm tasks of a run submitted with --slurm: state, node, points so far.
    Status(DirArgs),
    /// Wait for a run submitted with --slurm (--detach), merge its tasks into result.json and print it (exit code as `run`).
    Collect(DirArgs),
    /// Run one task of a saved plan into its run folder (what a Slurm array task or a --parallel-jobs child runs).
    #[command(name = "__task", hide = true)]
    Task(TaskArgs),
    /// Run one node's part of a job that spans nodes (its task on stdin; what the job's watcher starts per node, through srun under Slurm).
    #[command(name = "__node", hide = true)]
    Node,
}

/// A run folder.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// The run folder (holding result.json, plan.json and slurm/).
    pub dir: PathBuf,
}

/// `enginebench __task DIR KEY`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    pub dir: PathBuf,
    pub key: u32,
    /// The token the submitter wrote into DIR/slurm/probe.
    #[arg(long)]
    pub probe: Option<String>,
}

/// How the jobs are executed: here one after another (default), several at
/// once on disjoint GPUs, or as a Slurm job array.
#[derive(Debug, Args, Default, Clone)]
pub struct ExecArgs {
    /// Run the jobs as the tasks of one Slurm job array (sbatch); the run folder must be on a filesystem the nodes share.
    #[arg(long, help_heading = "Cluster")]
    pub slurm: bool,
    /// Slurm partition.
    #[arg(long, requires = "slurm", help_heading = "Cluster")]
    pub partition: Option<String>,
    /// Slurm account.
    #[arg(long, requires = "slurm", help_heading = "Cluster")]
    pub account: Option<String>,
    /// Each task's time limit (sbatch --time: 30, 2:00:00, 1-0).
    #[arg(long = "time", requires = "slurm", value_name = "TIME", help_heading = "Cluster")]
    pub slurm_time: Option<String>,
    /// GPUs per task: auto (the largest TP x PP of the jobs; none for a CPU recipe) or N.
    #[arg(long, requires = "slurm", value_name = "auto|N", help_heading = "Cluster")]
    pub gpus_per_job: Option<crate::orchestrate::runner::slurm::GpusPerJob>,
    /// One more #SBATCH line, e.g. --slurm-arg=--constraint=mi355x (repeatable).
    #[arg(long = "slurm-arg", requires = "slurm", allow_hyphen_values = true, value_name = "ARG", help_heading = "Cluster")]
    pub slurm_arg: Vec<String>,
    /// The folder holding sbatch, scontrol and scancel (default: PATH).
    #[arg(long, requires = "slurm", value_name = "DIR", help_heading = "Cluster")]
    pub slurm_bin: Option<PathBuf>,
    /// Submit and return; `enginebench status DIR` / `collect DIR` pick the run up.
    #[arg(long, requires = "slurm", help_heading = "Cluster")]
    pub detach: bool,
    /// Run up to N jobs at once on disjoint GPU sets of this node (auto: as many as fit).
    #[arg(long, conflicts_with = "slurm", value_name = "N|auto", help_heading = "Cluster")]
    pub parallel_jobs: Option<crate::orchestrate::runner::parallel::ParallelJobs>,
    /// With --parallel-jobs on CPU: run engines at once although they share the cores (their perf numbers disturb each other).
    #[arg(long, requires = "parallel_jobs", help_heading = "Cluster")]
    pub share_cpu: bool,
}

/// A recipe taken straight from an InferenceX checkout.
#[derive(Debug, Args, Default, Clone)]
pub struct CheckoutArgs {
    /// An InferenceX checkout: the recipe is the master-config entry --key
    /// with the launcher its runner scripts pick, evaluated per point.
    #[arg(long, value_name = "DIR", requires = "key")]
    pub inferencex_checkout: Option<PathBuf>,
    /// The master-config entry, e.g. dsv4-fp4-mi355x-vllm.
    #[arg(long, requires = "inferencex_checkout")]
    pub key: Option<String>,
    /// Only this scenario of the entry: an ISL/OSL pair, e.g. 8k1k, or
    /// `agentic` (its agentic-coding configs, replayed as traces).
    #[arg(long, requires = "inferencex_checkout")]
    pub scenario: Option<String>,
    /// The output of a command a launcher reads off the machine
    /// (`$(rocm-smi --showfw)`), for an import away from that machine:
    /// 'CMD=OUTPUT', CMD exactly as the launcher runs it; or the content
    /// of a machine file it reads, 'PATH=CONTENT' (a path under /sys/, e.g.
    /// /sys/class/infiniband/mlx5_0/ports/1/state); repeatable. Without it,
    /// read-only machine commands run here and files are read here.
    #[arg(long, value_name = "CMD=OUTPUT", requires = "inferencex_checkout")]
    pub machine_fact: Vec<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// How `import inferencex` (and `--inferencex-checkout`) runs launchers in
/// its sandbox (docs/import.md, "The sandbox").
#[derive(Debug, Args, Clone)]
pub struct SandboxArgs {
    /// Seconds one launcher evaluation (one search-space point) may take.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::import::sandbox::POINT_LIMIT.as_secs_f64(), value_parser = positive_seconds)]
    pub launcher_timeout: f64,
    /// Seconds the whole import (every point) may take.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::import::sandbox::IMPORT_LIMIT.as_secs_f64(), value_parser = positive_seconds)]
    pub import_timeout: f64,
    /// As root where bubblewrap cannot run launchers as an unprivileged user:
    /// run them as root (every capability dropped, but no process limit).
    #[arg(long)]
    pub unsafe_import: bool,
}

impl Default for SandboxArgs {
    fn default() -> Self {
        let d = crate::import::sandbox::Settings::default();
        SandboxArgs { launcher_timeout: d.point_limit.as_secs_f64(), import_timeout: d.import_limit.as_secs_f64(), unsafe_import: false }
    }
}

impl SandboxArgs {
    /// The sandbox settings these flags ask for.
    pub fn settings(&self) -> crate::import::sandbox::Settings {
        crate::import::sandbox::Settings {
            point_limit: std::time::Duration::from_secs_f64(self.launcher_timeout),
            import_limit: std::time::Duration::from_secs_f64(self.import_timeout),
            unsafe_import: self.unsafe_import,
        }
    }
}

/// A number of seconds above 0 (at most a day).
fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?}: give a number of seconds above 0 and at most 86400, e.g. 20")),
    }
}

/// `run`, `overhead` and the run part of `ab`: the recipe and the variants,
/// what to run ([`RunOptions`]: the sweep, workload and eval overrides and
/// the run's behaviour, declared there), and where the results go.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Recipe file (TOML); default: recipes/cpu/smollm2-135m.toml.
    #[arg(conflicts_with = "inferencex_checkout")]
    pub recipe: Option<PathBuf>,
    #[command(flatten)]
    pub checkout: CheckoutArgs,
    /// Run this variant of the recipe instead of the base.
    #[arg(long, conflicts_with = "variants")]
    pub variant: Option<String>,
    /// Run several variants, each in its own engine, e.g. before,aiter.
    #[arg(long, value_parser = overrides::names)]
    pub variants: Option<List<String>>,
    #[command(flatten)]
    pub options: RunOptions,
    /// Continue an earlier run folder: only missing or failed points (and a missing eval) run.
    #[arg(long, conflicts_with = "output")]
    pub resume: Option<PathBuf>,
    /// With --resume: continue even if a job's model, flags or env changed.
    #[arg(long, requires = "resume")]
    pub force: bool,
    /// Output folder (default results/<recipe>-<UTC time>).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub profile: ProfileArgs,
}

/// `--profile` and its options (run, ab): a profiler window per point.
#[derive(Debug, Args, Default, Clone)]
pub struct ProfileArgs {
    /// After each chosen point's measured requests, profile N steady-state
    /// decode steps of it (vLLM's worker profiler on every rank: CPU, plus CUDA/ROCm on a GPU):
    /// trace-<job>-<point>.json.gz and a top-kernels table.
    #[arg(long)]
    pub profile: bool,
    /// Profiled decode steps per point (as many unprofiled steps around
    /// them, half before and half after, measure the profiler's overhead).
    #[arg(long, value_name = "N", default_value_t = crate::profile::DEFAULT_STEPS, requires = "profile")]
    pub profile_steps: u32,
    /// Profile only points matching KEY=VALUE,... (keys conc, isl, osl, tp),
    /// e.g. conc=64,isl=1024; repeat for several. Default: every point.
    #[arg(long, value_name = "conc=..,isl=..", value_parser = crate::profile::PointFilter::parse, requires = "profile")]
    pub profile_point: Vec<crate::profile::PointFilter>,
    /// Folder for the traces and kernel tables (default: the output folder).
    #[arg(long, value_name = "DIR", requires = "profile")]
    pub profile_dir: Option<PathBuf>,
}


impl ProfileArgs {
    /// The options, when `--profile` is given.
    pub fn options(&self) -> Option<crate::profile::ProfileOptions> {
        self.profile.then(|| crate::profile::ProfileOptions {
            steps: self.profile_steps,
            points: self.profile_point.clone(),
            dir: self.profile_dir.clone(),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum RecipeCommand {
    /// Check recipes with vLLM's own serve parser, before any model loads (exit 2 on error).
    Check(CheckArgs),
    /// Print the effective env, flags and sweep matrix, one line per point.
    Show(RecipeArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Recipe files (TOML).
    #[arg(required_unless_present = "inferencex_checkout")]
    pub recipes: Vec<PathBuf>,
    #[command(flatten)]
    pub checkout: CheckoutArgs,
    /// Only this variant (default: the base and every variant).
    #[arg(long)]
    pub variant: Option<String>,
}

#[derive(Debug, Args)]
pub struct RecipeArgs {
    /// Recipe file (TOML).
    #[arg(required_unless_present = "inferencex_checkout", conflicts_with = "inferencex_checkout")]
    pub recipe: Option<PathBuf>,
    #[command(flatten)]
    pub checkout: CheckoutArgs,
    /// Only this variant (default: the base and every variant).
    #[arg(long)]
    pub variant: Option<String>,
    /// Leave out the knob report (what this vLLM does with each env var, flag
    /// and hf-override; it imports vLLM and builds its config: ~15 s).
    #[arg(long)]
    pub no_knobs: bool,
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// An InferenceX master-config entry and its launcher: the launcher runs in a
    /// sandbox (bash, recorders for vllm and every tool, no network) once per point.
    Inferencex(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The launcher script (with --master-config); omit with --inferencex-checkout.
    #[arg(requires = "master_config", conflicts_with = "inferencex_checkout")]
    pub launcher: Option<PathBuf>,
    /// InferenceX master config (configs/*-master.yaml) holding --key.
    #[arg(long, requires = "launcher")]
    pub master_config: Option<PathBuf>,
    /// An InferenceX checkout: master config and launcher found as its runners find them.
    #[arg(long, value_name = "DIR")]
    pub inferencex_checkout: Option<PathBuf>,
    /// The master-config entry, e.g. minimaxm3-fp4-mi355x-vllm.
    #[arg(long)]
    pub key: String,
    /// Only this scenario of the entry: an ISL/OSL pair, e.g. 8k1k, or
    /// `agentic` (its agentic-coding configs, replayed as traces).
    #[arg(long)]
    pub scenario: Option<String>,
    /// The output of a command a launcher reads off the machine
    /// (`$(rocm-smi --showfw)`), for an import away from that machine:
    /// 'CMD=OUTPUT', CMD exactly as the launcher runs it; or the content
    /// of a machine file it reads, 'PATH=CONTENT' (a path under /sys/, e.g.
    /// /sys/class/infiniband/mlx5_0/ports/1/state); repeatable. Without it,
    /// read-only machine commands run here and files are read here.
    #[arg(long, value_name = "CMD=OUTPUT")]
    pub machine_fact: Vec<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Write the recipe here (default: stdout).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// inferencex (process_result.py's aggregate keys) or vllm-bench (bench serve's result JSON).
    #[arg(long, value_enum)]
    pub format: crate::report::export::Format,
    /// The result.json of a run (requests.jsonl is read from beside it).
    pub result: PathBuf,
    /// Write one file per point into this folder (default: a JSON array on stdout).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AbArgs {
    /// The baseline variant (`base`: the recipe itself).
    #[arg(long, default_value = "base")]
    pub baseline: String,
    /// The candidate variant (the same as --baseline, or --aa: an A/A); with
    /// --baseline-python/--candidate-python it defaults to the baseline's
    /// variant (one variant in two interpreters).
    #[arg(long, required_unless_present_any = ["aa", "baseline_python", "candidate_python"])]
    pub candidate: Option<String>,
    /// A/A: run the baseline against a copy of itself on the same ABBA
    /// schedule; its ab.json is this machine's noise floor (for --noise).
    #[arg(long, conflicts_with = "candidate")]
    pub aa: bool,
    /// Repeats of each variant, interleaved in ABBA order (baseline, candidate, candidate, baseline, ...).
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Run the A/A (baseline vs itself, same repeats) first into aa/ and use its noise floor.
    #[arg(long)]
    pub calibrate: bool,
    /// Keep adding ABBA pairs until every row's widest 95% CI half-width is
    /// below this fraction (0.02 = 2%), or with `gate` until every gated
    /// figure is PASS or FAIL (none INCONCLUSIVE); at most --max-repeats.
    #[arg(long, value_name = "PCT|gate", value_parser = crate::orchestrate::ab::UntilCi::parse)]
    pub until_ci: Option<crate::orchestrate::ab::UntilCi>,
    /// Most repeats per variant with --until-ci.
    #[arg(long, value_name = "N")]
    pub max_repeats: Option<u32>,
    /// Run the baseline in this Python (its vLLM, torch and plugins), over
    /// --python and the variant's own `python`.
    #[arg(long, value_name = "PATH")]
    pub baseline_python: Option<PathBuf>,
    /// Run the candidate in this Python: `--baseline base --candidate base
    /// --candidate-python /opt/pr/bin/python` compares two vLLM builds on the
    /// base recipe (the candidate is labelled `base@candidate`).
    #[arg(long, value_name = "PATH", conflicts_with = "aa")]
    pub candidate_python: Option<PathBuf>,
    /// Run even when every difference between the arms is a no-op in this
    /// vLLM (the knob report; without it `ab` refuses such a candidate with
    /// exit 2 before any engine starts).
    #[arg(long)]
    pub allow_noop: bool,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of the A/B statistics and gate, shared by `ab` and `compare`.
#[derive(Debug, Args)]
pub struct GateArgs {
    /// Largest accepted drop of either exact_match, as a fraction (0.01 = 1
    /// point), against the paired 95% CI of the difference (as --max-regression).
    #[arg(long, default_value_t = 0.01)]
    pub max_accuracy_drop: f64,
    /// Largest accepted perf regression, as a fraction (0.05 = 5%): FAIL
    /// (exit 1) when a figure's whole 95% CI lies beyond it, PASS when the CI
    /// excludes it, INCONCLUSIVE (exit 3) when the CI straddles it.
    #[arg(long, default_value_t = 0.05)]
    pub max_regression: f64,
    /// Bootstrap resamples for the confidence intervals.
    #[arg(long, default_value_t = crate::ab::stats::DEFAULT_RESAMPLES)]
    pub resamples: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = crate::ab::stats::DEFAULT_SEED)]
    pub seed: u64,
    /// The perf-changelog config key (default: the recipe name).
    #[arg(long)]
    pub config_key: Option<String>,
    /// A saved A/A ab.json (from `ab --aa`): a verdict also needs |delta|
    /// above its noise floor, and a figure's gate limit is raised to it.
    #[arg(long, value_name = "FILE")]
    pub noise: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline: a result.json (requests.jsonl and gsm8k_samples.jsonl are
    /// read from beside it), or another tool's file or folder of files: a `vllm
    /// bench serve` result, InferenceX aggregate rows, an lm-eval results file.
    pub baseline: PathBuf,
    /// The candidate, as the baseline (a result.json may be the same file, with two labels).
    pub candidate: PathBuf,
    /// The baseline's job label (needed when its file has several).
    #[arg(long)]
    pub baseline_label: Option<String>,
    /// The candidate's job label (needed when its file has several).
    #[arg(long)]
    pub candidate_label: Option<String>,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Write ab.md, ab.json, changelog.yaml and the plots here (default: beside the candidate).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// ISL/OSL of another tool's bench-serve file that records none (vLLM's
    /// writes no ISL/OSL unless `--metadata isl=.. osl=..` put them there), e.g. 1024/1024.
    #[arg(long, value_name = "ISL/OSL", value_parser = parse_one_isl_osl)]
    pub foreign_isl_osl: Option<(u32, u32)>,
    /// TP (GPU count) of another tool's bench-serve file that records none:
    /// without it tok/s/gpu is not compared.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub foreign_tp: Option<u32>,
}

/// One `ISL/OSL` pair (`--foreign-isl-osl 1024/1024`).
fn parse_one_isl_osl(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("give one ISL/OSL pair in tokens, e.g. 1024/1024 (got {s:?})");
    match crate::recipe::sweep::parse_isl_osl(s).map_err(|_| bad())?.as_slice() {
        [[i, o]] => Ok((*i, *o)),
        _ => Err(bad()),
    }
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The result.json of a run.
    pub result: PathBuf,
    /// Write the PNG and SVG files here (default: beside the result).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TelemetryArgs {
    /// How long to sample, seconds.
    #[arg(long, visible_alias = "duration", default_value_t = 5.0)]
    pub seconds: f64,
    /// Time between samples, ms.
    #[arg(long, visible_alias = "interval", default_value_t = 100)]
    pub interval_ms: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `enginebench eval`: the eval alone on the recipe's engine.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Recipe file (TOML); default: recipes/cpu/smollm2-135m.toml.
    pub recipe: Option<PathBuf>,
    /// Run this variant of the recipe instead of the base.
    #[arg(long, conflicts_with = "variants")]
    pub variant: Option<String>,
    /// Several variants, each on its own engine.
    #[arg(long, value_parser = overrides::names)]
    pub variants: Option<List<String>>,
    #[command(flatten)]
    pub eval: EvalFlags,
    /// Output folder (default results/<recipe>-<UTC time>).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Print the vLLM releases checked with bench/vllm_matrix.sh (a Markdown
    /// table: each check's outcome per release) and check nothing; with a
    /// FILE, the table in that file (what the script just wrote).
    #[arg(long, value_name = "FILE", num_args = 0..=1, conflicts_with = "json")]
    pub releases: Option<Option<PathBuf>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Command {
        let mut all = vec!["enginebench"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap_or_else(|e| panic!("{args:?}: {e}")).command
    }

    #[test]
    fn the_eval_limit_answers_to_the_names_people_reach_for() {
        for flag in ["--eval-limit", "--limit", "--gsm8k-limit"] {
            let Command::Run(r) = parse(&["run", flag, "5"]) else { panic!("run") };
            assert_eq!(r.options.eval.eval_limit, Some(5), "{flag}");
        }
    }

    #[test]
    fn doctor_releases_takes_an_optional_file() {
        let Command::Doctor(d) = parse(&["doctor", "--releases"]) else { panic!("doctor") };
        assert_eq!(d.releases, Some(None));
        let Command::Doctor(d) = parse(&["doctor", "--releases", "t.toml"]) else { panic!("doctor") };
        assert_eq!(d.releases, Some(Some(PathBuf::from("t.toml"))));
        let Command::Doctor(d) = parse(&["doctor"]) else { panic!("doctor") };
        assert_eq!(d.releases, None);
    }

    #[test]
    fn ab_between_two_interpreters_needs_no_variant_names() {
        let Command::Ab(a) = parse(&["ab", "r.toml", "--baseline-python", "/p", "--candidate-python", "/q"]) else { panic!("ab") };
        assert_eq!((a.baseline.as_str(), a.candidate.as_deref()), ("base", None));
        let Command::Ab(a) = parse(&["ab", "r.toml", "--candidate-python", "/q"]) else { panic!("ab") };
        assert_eq!(a.baseline, "base");
        // Without an interpreter flag a candidate (or --aa) is still required.
        assert!(Cli::try_parse_from(["enginebench", "ab", "r.toml"]).is_err());
        let Command::Ab(a) = parse(&["ab", "r.toml", "--aa"]) else { panic!("ab") };
        assert!(a.aa && a.candidate.is_none());
    }
}
