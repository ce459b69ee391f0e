//! `enginebench ab`: a baseline and a candidate variant on the same sweep,
//! each in its own worker, interleaved per repeat in ABBA order (baseline,
//! candidate | candidate, baseline | ...) so drift hits both alike; the eval
//! once per variant; then the comparison (deltas with 95% CIs, McNemar,
//! greedy-token agreement, gate, Markdown, perf-changelog YAML, plots).
//!
//! Three additions make its verdicts fit for a CI gate:
//!
//! * `--aa`: the baseline against a copy of itself on the same schedule; its
//!   `ab.json` is this machine's noise floor for that sweep.
//! * `--noise FILE` / `--calibrate`: a saved A/A, or one run first into
//!   `aa/` of the output folder; a verdict then also needs |delta| above the
//!   floor ([`crate::ab::compare::apply_noise`]).
//! * `--until-ci PCT --max-repeats N`: more ABBA pairs until every row's
//!   widest interval half-width is below PCT, or N repeats;
//!   `--until-ci gate`: until every gated figure is PASS or FAIL (none
//!   INCONCLUSIVE), or N repeats.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::plan::{PlannedJob, RunOptions, plan};
use super::progress::say;
use super::runner::{ExecChoice, ExecOptions, Folder, Runner, executor_for, output_path};
use crate::report::result::Status;
use crate::ab::compare::{NoiseFloor, Row, apply_noise};
use crate::ab::gate::{Needed, Outcome};
use crate::ab::{self, Comparison, Context, Options, load_arm};
use crate::error::{ExitStatus, usage};
use crate::python::{self, Interpreter};

/// What `enginebench ab` was asked.
#[derive(Debug, Clone)]
pub struct AbRequest {
    pub baseline: String,
    /// `None` with `--aa` (the baseline against itself).
    pub candidate: Option<String>,
    /// Repeats per variant (the starting count with `--until-ci`).
    pub repeats: u32,
    pub options: Options,
    pub config_key: Option<String>,
    /// A saved A/A `ab.json` whose noise floor the verdicts use.
    pub noise: Option<PathBuf>,
    /// Run the A/A first (same repeats), into `aa/`, and use its floor.
    pub calibrate: bool,
    /// What `--until-ci` adds pairs for.
    pub until_ci: Option<UntilCi>,
    /// Most repeats per variant with `--until-ci`.
    pub max_repeats: Option<u32>,
    /// The baseline's interpreter (`--baseline-python`), over the variant's own.
    pub baseline_python: Option<PathBuf>,
    /// The candidate's interpreter (`--candidate-python`), over the variant's own.
    pub candidate_python: Option<PathBuf>,
    /// Run a candidate whose every difference is a no-op (`--allow-noop`).
    pub allow_noop: bool,
}

/// What `--until-ci` adds ABBA pairs until.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UntilCi {
    /// Every row's widest 95% CI half-width is below this fraction (0.02 = 2%).
    HalfWidth(f64),
    /// Every gated figure is PASS or FAIL (`--until-ci gate`).
    Gate,
}

impl UntilCi {
    /// `gate`, or a fraction (range-checked by [`ab`]). For clap.
    pub fn parse(s: &str) -> std::result::Result<UntilCi, String> {
        if s == "gate" {
            return Ok(UntilCi::Gate);
        }
        s.parse::<f64>()
            .map(UntilCi::HalfWidth)
            .map_err(|_| format!("{s:?} is neither a half-width fraction (0.02 = ±2%) nor `gate`"))
    }
}

/// The suffix of the A/A copy's label (`base` vs `base-aa`).
pub const AA_SUFFIX: &str = "-aa";
/// The suffix of the candidate's label when both arms are one variant run in
/// two interpreters (`ab --baseline base --candidate base --candidate-python P`):
/// `base` vs `base@candidate`.
pub const PYTHON_AB_SUFFIX: &str = "@candidate";

/// Runs the A/B (or the A/A) and prints the comparison. Returns the exit
/// code: 0 the gate passed and every job ran; 1 a job failed or the gate
/// failed (accuracy did not hold, or a regression beyond the limit and the
/// noise floor, the whole CI); 3 the gate was INCONCLUSIVE (a CI straddles
/// a limit); 130 interrupted.
///
/// Errors (usage, before anything runs): bad recipe/variants/options, as
/// `run`; a bad `--noise` file; `--until-ci` without a target above 0 or
/// with `--max-repeats` below `--repeats`; `--calibrate`/`--noise` with `--aa`.
pub fn ab(opts: &RunOptions, how: &ExecOptions, req: &AbRequest) -> Result<ExitStatus> {
    if !opts.variants.is_empty() || how.resume.is_some() {
        return Err(usage("ab takes --baseline and --candidate (not --variant/--variants/--resume)"));
    }
    let same_variant = req.candidate.as_deref().is_none_or(|c| c == req.baseline);
    // One variant in two interpreters is an A/B of two vLLM builds, not an A/A.
    // (`--aa` names no candidate: both copies run in the baseline's interpreter.)
    let python_ab = req.candidate.is_some() && same_variant && req.baseline_python != req.candidate_python;
    let aa = same_variant && !python_ab;
    if req.repeats == 0 {
        return Err(usage("--repeats must be at least 1 (3 or more for verdicts that hold up)"));
    }
    if aa && (req.noise.is_some() || req.calibrate) {
        return Err(usage("--aa (or the same --baseline and --candidate) measures the noise floor: it takes neither --noise nor --calibrate"));
    }
    if req.noise.is_some() && req.calibrate {
        return Err(usage("--noise and --calibrate both give the noise floor: pick one"));
    }
    if (aa || req.calibrate) && req.repeats < 2 {
        return Err(usage("an A/A needs --repeats 2 or more: one repeat pair has no run-to-run spread to measure"));
    }
    let until = match (req.until_ci, req.max_repeats) {
        (Some(UntilCi::HalfWidth(p)), _) if !(p > 0.0 && p < 1.0) => {
            return Err(usage(format!("--until-ci {p}: give the target half-width as a fraction between 0 and 1 (0.02 = 2%)")));
        }
        (Some(p), Some(n)) if n >= req.repeats.max(2) => Some((p, n)),
        (Some(_), Some(n)) => {
            return Err(usage(format!("--max-repeats {n} is below --repeats {} (and an interval needs 2)", req.repeats)));
        }
        (Some(_), None) => return Err(usage("--until-ci needs --max-repeats N (the most repeats to spend)")),
        (None, Some(_)) => return Err(usage("--max-repeats goes with --until-ci PCT")),
        (None, None) => None,
    };
    if matches!(&how.exec, ExecChoice::Slurm(s) if s.detach) {
        return Err(usage("ab compares once every repeat has run: it takes --slurm without --detach"));
    }
    let noise = req.noise.as_deref().map(NoiseFloor::load).transpose()?;
    // Probed now: a bad interpreter is a usage error before any engine starts.
    let mut pythons = ArmPythons {
        baseline: req.baseline_python.as_deref().map(|p| python::named_interpreter(p, "--baseline-python")).transpose()?,
        candidate: req.candidate_python.as_deref().map(|p| python::named_interpreter(p, "--candidate-python")).transpose()?,
    };
    if aa {
        pythons.candidate = pythons.baseline.clone();
    }
    let candidate = match (aa, python_ab) {
        (true, _) => format!("{}{AA_SUFFIX}", req.baseline),
        (false, true) => format!("{}{PYTHON_AB_SUFFIX}", req.baseline),
        (false, false) => req.candidate.clone().unwrap_or_default(),
    };

    let mut opts = opts.clone();
    opts.variants = if same_variant { vec![req.baseline.clone()] } else { vec![req.baseline.clone(), candidate.clone()] };
    let plan0 = plan(&opts, how.python.as_deref())?;
    // Every interpreter a job will run in (the arm's override, else the
    // job's own), before the output folder exists and any engine starts.
    for job in &plan0.jobs {
        python::require_engine_packages(pythons.for_job(&job_label(job), &req.baseline).unwrap_or(&job.python))?;
        if same_variant {
            python::require_engine_packages(pythons.candidate.as_ref().unwrap_or(&job.python))?;
        }
    }
    if !aa && !python_ab {
        refuse_noop(&plan0, &req.baseline, &candidate, req.allow_noop)?;
    }
    let out_dir = output_path(how.output.as_deref(), &format!("{}-{}", plan0.recipe.name, if aa { "aa" } else { "ab" }))?;

    let noise = if req.calibrate {
        errln!("enginebench ab --calibrate: A/A of {} first ({} repeats) -> {}", req.baseline, req.repeats, out_dir.join("aa").display());
        let mut aa_opts = opts.clone();
        aa_opts.variants = vec![req.baseline.clone()];
        // The noise floor of the baseline's build: both copies in its interpreter.
        let arms = Arms {
            baseline: req.baseline.clone(),
            candidate: format!("{}{AA_SUFFIX}", req.baseline),
            aa: true,
            copy: true,
            pythons: ArmPythons { baseline: pythons.baseline.clone(), candidate: pythons.baseline.clone() },
        };
        match run_arms(&aa_opts, how, &arms, req, None, &out_dir.join("aa"), None)? {
            Finished::Interrupted => return Ok(ExitStatus::Interrupted),
            Finished::Done { code, .. } if code != ExitStatus::Ok => {
                errln!("enginebench ab --calibrate: a job of the A/A failed; no A/B run");
                return Ok(code);
            }
            Finished::Done { cmp, .. } => Some(NoiseFloor::from_comparison(&cmp, &out_dir.join("aa").join("ab.json").display().to_string())),
        }
    } else {
        noise
    };
    let arms = Arms { baseline: req.baseline.clone(), candidate, aa, copy: same_variant, pythons };
    match run_arms(&opts, how, &arms, req, until, &out_dir, noise.as_ref())? {
        Finished::Interrupted => Ok(ExitStatus::Interrupted),
        Finished::Done { cmp, code } => Ok(if code != ExitStatus::Ok { code } else { cmp.exit_status() }),
    }
}

/// Refuses (exit 2, before anything runs) a candidate whose every
/// difference from the baseline is a no-op in this vLLM build: the knob
/// reports of both arms' configurations, made in one worker (vLLM's parser
/// and config classes; no engine), compared by [`crate::knobs::diff`].
/// Skipped with `--allow-noop`, for a variant that declares `expect_noop`,
/// and where the arms run in different interpreters (two vLLM builds). When
/// the reports cannot be made (no vLLM in the interpreter, the fake engine)
/// it says so and lets the A/B run.
fn refuse_noop(plan: &super::plan::Plan, baseline: &str, candidate: &str, allow: bool) -> Result<()> {
    let arm = |label: &str| plan.jobs.iter().find(|j| job_label(j) == label);
    let (Some(a), Some(b)) = (arm(baseline), arm(candidate)) else { return Ok(()) };
    let declared = plan.recipe.variants.get(candidate).is_some_and(|v| v.expect_noop);
    if allow || declared || a.python.path != b.python.path || std::env::var_os("ENGINEBENCH_FAKE_ENGINE").is_some() {
        if declared {
            errln!("enginebench ab: `{candidate}` declares expect_noop: a deliberate null comparison");
        }
        return Ok(());
    }
    // Both arms' quick all-reduce answers, where either sets the variables.
    let qr = [a, b].iter().any(|j| j.config.env.keys().any(|k| k.starts_with("VLLM_ROCM_QUICK_REDUCE_")));
    let items: Vec<(String, crate::recipe::EngineConfig)> = [a, b].iter().map(|j| (plan.model_path.clone(), j.config.clone())).collect();
    errln!("enginebench ab: checking what differs between the arms in this vLLM (imports vLLM, builds both configs, no engine)...");
    let reports = match super::check::knob_reports_with(&a.python, &items, qr) {
        Ok(r) => r,
        Err(e) => {
            errln!("  warning: no knob report ({e:#}): cannot tell whether the candidate changes anything; running");
            return Ok(());
        }
    };
    let (ra, rb) = match (&reports[0], &reports[1]) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            errln!("  warning: no knob report ({e}): cannot tell whether the candidate changes anything; running");
            return Ok(());
        }
    };
    let diffs = crate::knobs::differences(ra, rb);
    match crate::knobs::overall(&diffs) {
        crate::knobs::Effect::NoOp => Err(usage(crate::knobs::render::refusal(&diffs, baseline, candidate))),
        effect => {
            let read = diffs.iter().filter(|d| d.effect == crate::knobs::Effect::Read).count();
            let noop = diffs.iter().filter(|d| d.effect == crate::knobs::Effect::NoOp).count();
            errln!(
                "  {} difference(s): {read} take effect, {noop} no-op{}",
                diffs.len(),
                if effect == crate::knobs::Effect::Unknown { ", the rest cannot be judged here" } else { "" }
            );
            Ok(())
        }
    }
}

/// The two labels compared (and whether the candidate is the baseline's copy).
struct Arms {
    baseline: String,
    candidate: String,
    /// The candidate is the baseline itself (an A/A: the noise floor).
    aa: bool,
    /// The candidate's jobs are copies of the baseline's, relabelled (an A/A,
    /// or one variant in two interpreters).
    copy: bool,
    pythons: ArmPythons,
}

/// Interpreters that replace an arm's own (`--baseline-python`, `--candidate-python`).
struct ArmPythons {
    baseline: Option<Interpreter>,
    candidate: Option<Interpreter>,
}

impl ArmPythons {
    /// The override for a job labelled `label` (the baseline's when it is
    /// `baseline`, else the candidate's), if that arm has one.
    fn for_job(&self, label: &str, baseline: &str) -> Option<&Interpreter> {
        if label == baseline { self.baseline.as_ref() } else { self.candidate.as_ref() }
    }
}

/// A planned job's label in an A/B: its variant's name ("base" for the recipe itself).
fn job_label(job: &PlannedJob) -> String {
    job.config.variant.clone().unwrap_or_else(|| "base".into())
}

enum Finished {
    Interrupted,
    /// `code`: the runner's exit code (0 every job ran ok).
    Done { cmp: Comparison, code: ExitStatus },
}

/// Plans the variants of `opts`, runs the ABBA schedule into `out_dir`
/// (adding pairs while `until` asks for them), compares, applies `noise`,
/// prints and writes the outputs.
fn run_arms(
    opts: &RunOptions,
    how: &ExecOptions,
    arms: &Arms,
    req: &AbRequest,
    until: Option<(UntilCi, u32)>,
    out_dir: &Path,
    noise: Option<&NoiseFloor>,
) -> Result<Finished> {
    let mut plan = plan(opts, how.python.as_deref())?;
    // Every job of a variant carries the variant's name: the comparison pairs
    // jobs by label and keeps TP sizes apart by their `tp`. An A/A runs the
    // baseline's jobs twice, the second time labelled as its copy.
    for job in &mut plan.jobs {
        job.label = Some(job_label(job));
    }
    let mut one_repeat = std::mem::take(&mut plan.jobs);
    if arms.copy {
        let copies: Vec<PlannedJob> = one_repeat.iter().cloned().map(|mut j| {
            j.label = Some(arms.candidate.clone());
            j
        }).collect();
        one_repeat.extend(copies);
    }
    for job in &mut one_repeat {
        if let Some(python) = arms.pythons.for_job(job.label.as_deref().unwrap_or_default(), &arms.baseline) {
            job.python = python.clone();
            // Recorded in the job's configuration too, as a variant's own `python` is.
            job.config.python = Some(python.path.clone());
        }
    }
    let repeat_jobs = |r: u32| -> Vec<PlannedJob> {
        // ABBA order (baseline first in even repeats, candidate first in odd
        // ones): a machine that speeds up or slows down over the run would
        // otherwise always favour whichever variant runs second.
        let mut jobs = one_repeat.clone();
        if r % 2 == 1 {
            jobs.reverse();
        }
        for j in &mut jobs {
            j.run_eval &= r == 0; // greedy: the eval's answers do not change between repeats
            // The lossless check compares the first repeat's perf outputs.
            j.record_token_ids = r == 0;
        }
        jobs
    };
    for r in 0..req.repeats {
        plan.jobs.extend(repeat_jobs(r));
    }

    let mut runner = Runner::open(plan, opts, how, Folder::At(out_dir))?;
    let mut exec = executor_for(&how.exec, &runner.plan)?;
    let most = until.map_or(req.repeats, |(_, n)| n);
    let plan_text = match until {
        Some((UntilCi::HalfWidth(p), n)) => {
            format!("{} repeats, then more until every CI half-width < {} (at most {n})", req.repeats, ab::numbers::pct_unsigned(p))
        }
        Some((UntilCi::Gate, n)) => format!("{} repeats, then more until every gated figure is PASS or FAIL (at most {n})", req.repeats),
        None => format!("{} repeat(s)", req.repeats),
    };
    errln!("enginebench ab: {} vs {}, {plan_text} -> {}", arms.candidate, arms.baseline, out_dir.display());
    let per_repeat = one_repeat.len();
    let heading = |r: &crate::report::result::RunResult, i: usize| Some(format!("repeat {}/{}: {}", i / per_repeat + 1, most, r.jobs[i].label));
    let mut next = 0;
    let path = out_dir.join("result.json");
    let mut unresolved: Vec<String> = Vec::new();
    loop {
        // One group per repeat: its baseline and candidate run back to back
        // on one node (one Slurm task), so a pair is never split across nodes.
        let indices: Vec<usize> = (next..runner.plan.jobs.len()).collect();
        let groups: Vec<Vec<usize>> = indices.chunks(per_repeat).map(<[usize]>::to_vec).collect();
        next = runner.plan.jobs.len();
        if runner.run_jobs(exec.as_mut(), &groups, &heading)? {
            runner.finish()?;
            return Ok(Finished::Interrupted);
        }
        let Some((target, max)) = until else { break };
        if runner.result().jobs.iter().any(|j| j.status != Status::Ok) {
            break;
        }
        let done = (runner.plan.jobs.len() / per_repeat) as u32;
        let cmp = compare_now(&path, arms, req, noise)?;
        unresolved = unresolved_rows(&cmp.rows, target);
        for r in &cmp.rows {
            say(&runner.ui, &progress_line(r, done, target));
        }
        if unresolved.is_empty() || done >= max {
            break;
        }
        runner.add_jobs(repeat_jobs(done))?;
    }
    let failed = runner.result().jobs.iter().any(|j| j.status != Status::Ok);
    // The per-job tables only when something failed: the comparison is the report.
    let code = runner.finish_printing(failed)?;
    let jobs_run = runner.plan.jobs.len();

    let mut cmp = compare_now(&path, arms, req, noise)?;
    if let Some(note) = node_note(runner.result(), per_repeat) {
        cmp.notes.push(note);
    }
    if let Some((target, _)) = until {
        let done = jobs_run / per_repeat;
        cmp.notes.push(match (target, unresolved.is_empty()) {
            (UntilCi::HalfWidth(p), true) => format!("--until-ci: every row's CI half-width is below {} after {done} repeats", ab::numbers::pct_unsigned(p)),
            (UntilCi::HalfWidth(p), false) => format!(
                "--until-ci: after {done} repeats (the --max-repeats limit) still wider than ±{}: {}",
                ab::numbers::pct_unsigned(p),
                unresolved.join("; ")
            ),
            (UntilCi::Gate, true) => format!("--until-ci gate: every gated figure is PASS or FAIL after {done} repeats"),
            (UntilCi::Gate, false) => format!(
                "--until-ci gate: after {done} repeats (the --max-repeats limit) still INCONCLUSIVE: {}",
                unresolved.join("; ")
            ),
        });
    }
    out!("{}", ab::markdown::terminal(&cmp));
    for f in ab::write_outputs(&cmp, out_dir)? {
        outln!("{}", f.display());
    }
    outln!("results: {}", path.display());
    Ok(Finished::Done { cmp, code })
}

/// Where each repeat ran, when the jobs ran on other machines (a Slurm
/// array): each repeat's baseline and candidate share one node, so a node
/// difference cannot be confounded with the variant within a pair.
fn node_note(result: &crate::report::result::RunResult, per_repeat: usize) -> Option<String> {
    let slurm = result.execution.as_ref().is_some_and(|e| e.executor == "slurm");
    if !slurm || per_repeat == 0 {
        return None;
    }
    let nodes: Vec<String> = result
        .jobs
        .chunks(per_repeat)
        .enumerate()
        .map(|(r, jobs)| {
            let mut n: Vec<&str> = jobs.iter().filter_map(|j| j.placement.as_ref().map(|p| p.node.as_str())).collect();
            n.dedup();
            format!("repeat {}: {}", r + 1, if n.is_empty() { "?".to_string() } else { n.join("+") })
        })
        .collect();
    Some(format!("Slurm: each repeat's baseline and candidate ran back to back in one task on one node ({})", nodes.join(", ")))
}

/// The comparison of what `result.json` holds so far.
fn compare_now(path: &Path, arms: &Arms, req: &AbRequest, noise: Option<&NoiseFloor>) -> Result<Comparison> {
    let (_, base) = load_arm(path, Some(&arms.baseline), "baseline", "--baseline")?;
    let (run, cand) = load_arm(path, Some(&arms.candidate), "candidate", "--candidate")?;
    let mut cmp = ab::compare(&base, &cand, Context { recipe: run.recipe.clone(), config_key: req.config_key.clone() }, req.options)?;
    cmp.aa = arms.aa;
    if let Some(n) = noise {
        apply_noise(&mut cmp, n);
    }
    Ok(cmp)
}

/// What `target` still waits for, in words: rows whose widest CI
/// half-width is not below it (`ISL/OSL 64/32 TP 1 conc 4: ±6.1%`), or
/// (`gate`) rows with an INCONCLUSIVE figure or not yet 2 repeats a side
/// (`ISL/OSL 64/32 TP 1 conc 4: tok/s/gpu, TTFT ms (median)`).
fn unresolved_rows(rows: &[Row], target: UntilCi) -> Vec<String> {
    match target {
        UntilCi::HalfWidth(p) => rows
            .iter()
            .filter(|r| r.half_width().is_none_or(|h| h >= p))
            .map(|r| format!("{}: ±{}", r.key_text(), r.half_width().map_or("no CI".into(), ab::numbers::pct_unsigned)))
            .collect(),
        UntilCi::Gate => rows
            .iter()
            .filter_map(|r| {
                let open = undecided(r);
                let gated = r.figures.iter().any(|f| f.gate.is_some());
                match (gated, open.is_empty()) {
                    (false, _) => Some(format!("{}: not gated yet (one repeat)", r.key_text())),
                    (true, true) => None,
                    (true, false) => Some(format!("{}: {}", r.key_text(), open.join(", "))),
                }
            })
            .collect(),
    }
}

/// The short names of a row's INCONCLUSIVE figures.
fn undecided(r: &Row) -> Vec<&'static str> {
    r.figures.iter().filter(|f| f.gate.is_some_and(|g| g.outcome == Outcome::Inconclusive)).map(|f| f.metric.short()).collect()
}

/// `after 3 repeats: ISL/OSL 64/32 TP 1 conc 4: tok/s/gpu +1.2% [-3.0%, +5.6%], widest CI ±4.3% (target ±2%): open`,
/// or with `gate`: `..., gate 3 PASS 0 FAIL 1 INCONCLUSIVE (about 9 repeats a side would decide them): open`.
fn progress_line(r: &Row, done: u32, target: UntilCi) -> String {
    let f = r.figure(crate::ab::compare::Metric::TputPerGpu);
    let head = format!("after {done} repeats: {}: {} {} {}", r.key_text(), f.metric.short(), ab::numbers::pct(f.delta), ab::numbers::ci_text(f.ci));
    match target {
        UntilCi::HalfWidth(p) => {
            let widest = r.half_width().map_or("no CI".into(), |h| format!("±{}", ab::numbers::pct_unsigned(h)));
            let state = if r.half_width().is_some_and(|h| h < p) { "resolved" } else { "open" };
            format!("{head}, widest CI {widest} (target ±{}): {state}", ab::numbers::pct_unsigned(p))
        }
        UntilCi::Gate => {
            let gates: Vec<_> = r.figures.iter().filter_map(|f| f.gate).collect();
            if gates.is_empty() {
                return format!("{head}, not gated yet (one repeat): open");
            }
            let count = |o: Outcome| gates.iter().filter(|g| g.outcome == o).count();
            let needed: Option<Needed> = gates.iter().filter_map(|g| g.repeats_needed).max();
            let estimate = needed.map_or(String::new(), |n| format!(" ({} repeats a side would decide them)", n.text()));
            let state = if count(Outcome::Inconclusive) == 0 { "decided" } else { "open" };
            format!(
                "{head}, gate {} PASS {} FAIL {} INCONCLUSIVE{estimate}: {state}",
                count(Outcome::Pass),
                count(Outcome::Fail),
                count(Outcome::Inconclusive)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_ci_parses_a_fraction_or_gate() {
        assert_eq!(UntilCi::parse("gate"), Ok(UntilCi::Gate));
        assert_eq!(UntilCi::parse("0.02"), Ok(UntilCi::HalfWidth(0.02)));
        assert!(UntilCi::parse("gates").unwrap_err().contains("nor `gate`"));
    }

    #[test]
    fn gate_target_waits_for_inconclusive_figures_only() {
        // The fixture: every figure decided (TTFT at conc 64 FAILs).
        let mut cmp = crate::ab::markdown::tests::fixture();
        assert!(unresolved_rows(&cmp.rows, UntilCi::Gate).is_empty());
        assert!(progress_line(&cmp.rows[1], 3, UntilCi::Gate).ends_with("gate 3 PASS 1 FAIL 0 INCONCLUSIVE: decided"));
        // One INCONCLUSIVE figure keeps its row open, with the estimate.
        let g = cmp.rows[0].figures[3].gate.as_mut().unwrap();
        g.outcome = Outcome::Inconclusive;
        g.repeats_needed = Some(Needed::About(6));
        assert_eq!(unresolved_rows(&cmp.rows, UntilCi::Gate), ["ISL/OSL 1024/1024 TP 8 conc 4: TTFT ms (median)"]);
        let line = progress_line(&cmp.rows[0], 3, UntilCi::Gate);
        assert_eq!(
            line,
            "after 3 repeats: ISL/OSL 1024/1024 TP 8 conc 4: tok/s/gpu +5.9% [+3.1%, +8.4%], gate 3 PASS 0 FAIL 1 INCONCLUSIVE \
             (about 6 repeats a side would decide them): open"
        );
        // A row not yet gated (one repeat) is open too.
        cmp.rows[1].figures.iter_mut().for_each(|f| f.gate = None);
        assert_eq!(unresolved_rows(&cmp.rows, UntilCi::Gate)[1], "ISL/OSL 1024/1024 TP 8 conc 64: not gated yet (one repeat)");
    }
}
