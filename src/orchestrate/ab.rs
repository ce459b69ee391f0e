//! `enginebench ab`: a baseline and a candidate variant on the same sweep,
//! each in its own worker, interleaved per repeat in ABBA order (baseline,
//! candidate | candidate, baseline | ...) so drift hits both alike; the eval
//! once per variant; then the
//! comparison (deltas with 95% CIs, McNemar, greedy-token agreement, gate,
//! Markdown, perf-changelog YAML, plots).

use anyhow::Result;
use indicatif::MultiProgress;

use super::interrupt::Interrupts;
use super::job::{JobOutcome, Session, run_job};
use super::outputs::OutputFiles;
use super::plan::{RunOptions, plan};
use super::progress::say;
use super::run::{new_result, now_rfc3339, output_dir, print_summary};
use crate::ab::{self, Context, Options, load_arm};
use crate::error::{exit, usage};

/// Runs the A/B and prints the comparison. Returns the exit code: 0 the
/// gate passed and every job ran; 1 a job failed or the gate failed
/// (accuracy did not hold, or a significant regression beyond the limit);
/// 130 interrupted.
///
/// Errors (usage): bad recipe/variants/options, as `run`.
pub fn ab(opts: &RunOptions, baseline: &str, candidate: &str, repeats: u32, options: Options, config_key: Option<String>) -> Result<i32> {
    if !opts.variants.is_empty() || opts.resume.is_some() {
        return Err(usage("ab takes --baseline and --candidate (not --variant/--variants/--resume)"));
    }
    if baseline == candidate {
        return Err(usage(format!("--baseline and --candidate are both {baseline:?}: pick two variants")));
    }
    if repeats == 0 {
        return Err(usage("--repeats must be at least 1 (3 or more for verdicts that hold up)"));
    }
    let mut opts = opts.clone();
    opts.variants = vec![baseline.to_string(), candidate.to_string()];
    let mut plan = plan(&opts)?;
    // Every job of a variant carries the variant's name: the comparison pairs
    // jobs by label and keeps TP sizes apart by their `tp`.
    for job in &mut plan.jobs {
        job.label = Some(job.config.variant.clone().unwrap_or_else(|| "base".into()));
    }
    let one_repeat = std::mem::take(&mut plan.jobs);
    for r in 0..repeats {
        // ABBA order (baseline first in even repeats, candidate first in odd
        // ones): a machine that speeds up or slows down over the run would
        // otherwise always favour whichever variant runs second.
        let mut jobs = one_repeat.clone();
        if r % 2 == 1 {
            jobs.reverse();
        }
        for mut j in jobs {
            j.run_eval &= r == 0; // greedy: the eval's answers do not change between repeats
            // The lossless check compares the first repeat's perf outputs.
            j.record_token_ids = r == 0;
            plan.jobs.push(j);
        }
    }

    let out_dir = output_dir(opts.output.as_deref(), &format!("{}-ab", plan.recipe.name))?;
    let mut result = new_result(&plan);
    let mut files = OutputFiles::create(&out_dir, opts.step_trace)?;
    files.write_result(&result)?;
    let ui = MultiProgress::new();
    let interrupts = Interrupts::install();
    eprintln!("enginebench ab: {candidate} vs {baseline}, {repeats} repeat(s) -> {}", out_dir.display());
    let per_repeat = one_repeat.len();
    let mut failed = false;
    for index in 0..plan.jobs.len() {
        say(&ui, &format!("repeat {}/{repeats}: {}", index / per_repeat + 1, result.jobs[index].label));
        let session = Session { ui: &ui, interrupts: &interrupts, verbose: opts.verbose };
        match run_job(&plan, index, &mut result, &mut files, &session)? {
            JobOutcome::Ok => {}
            JobOutcome::Interrupted => {
                result.status = "interrupted".into();
                result.finished_at = Some(now_rfc3339());
                files.write_result(&result)?;
                print_summary(&result, &out_dir, opts.verbose);
                return Ok(130);
            }
            _ => failed = true,
        }
    }
    result.status = if failed { "failed" } else { "ok" }.into();
    result.finished_at = Some(now_rfc3339());
    files.write_result(&result)?;
    if failed {
        print_summary(&result, &out_dir, opts.verbose);
    }

    let path = out_dir.join("result.json");
    let base_label = if baseline == "base" { "base" } else { baseline };
    let (_, base) = load_arm(&path, Some(base_label), "baseline", "--baseline")?;
    let (run, cand) = load_arm(&path, Some(candidate), "candidate", "--candidate")?;
    let cmp = ab::compare(&base, &cand, Context { recipe: run.recipe.clone(), config_key }, options)?;
    print!("{}", ab::markdown::terminal(&cmp));
    for f in ab::write_outputs(&cmp, &out_dir)? {
        println!("{}", f.display());
    }
    println!("results: {}", path.display());
    Ok(if failed { exit::FAILED } else { cmp.exit_code() })
}
