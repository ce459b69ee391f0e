//! The orchestrator's side of a profile pass: read the worker's trace back,
//! build the top-kernels table, write `kernels-<job>-<point>.md` and
//! `.json` beside the trace, and put the summary into the point's result.

use std::path::Path;

use anyhow::{Context, Result};

use super::table::top_kernels;
use super::{PLACEMENT, overhead};
use crate::report::kernels::{PointProfile, SHOWN};
use crate::protocol::ProfileRaw;
use crate::protocol::Point;
use crate::report::result::JobResult;

/// Attaches the profile pass `raw` of `point` to the job's latest result of
/// that point, writing the table files into the trace's folder. Returns the
/// text to show in the terminal (the table, the overhead, the files).
///
/// Errors: no measured result of that point in the job, the trace cannot be
/// read back, or a table file cannot be written.
pub fn attach(raw: &ProfileRaw, point: &Point, job: &mut JobResult, result_dir: &Path) -> Result<String> {
    // A profiler that recorded a device activity must find device kernels.
    let expect_device = raw.activities.iter().any(|a| a != "CPU");
    let totals = super::trace::read(&raw.trace, expect_device)?;
    let overhead = overhead(raw);
    let kernels = top_kernels(&totals, raw.window.profiled, overhead.profiled_step_ms, super::groups::builtin());
    let trace_name = raw.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = trace_name.trim_start_matches("trace-").trim_end_matches(".json.gz").to_string();
    let dir = raw.trace.parent().unwrap_or(result_dir);
    let (md, json) = (dir.join(format!("kernels-{stem}.md")), dir.join(format!("kernels-{stem}.json")));
    let rel = |p: &Path| p.strip_prefix(result_dir).unwrap_or(p).display().to_string();
    let title = format!(
        "### Top kernels: {} ISL/OSL {}/{} conc {} (batch {})\n\n",
        job.label, point.isl, point.osl, point.conc, raw.batch
    );
    let overhead_text = format!(
        "profiler overhead: profiled steps median {:.2} ms (mean {:.2}) vs unprofiled reference steps median {:.2} ms (mean {:.2}): {:+.1}% ({} steps each; the reference steps are half before, half after the window); start {:.3} s, stop {:.3} s, trace export {:.2} s outside the steps; no profiler outside the window",
        overhead.profiled_median_ms,
        overhead.profiled_step_ms,
        overhead.reference_median_ms,
        overhead.reference_step_ms,
        overhead.fraction * 100.0,
        raw.window.profiled,
        overhead.start_s,
        overhead.stop_s,
        overhead.export_s
    );
    let others: Vec<String> = raw.rank_traces.iter().map(|p| rel(p)).collect();
    let others_text = if others.is_empty() {
        String::new()
    } else {
        format!(" The table is rank 0's; the other ranks' traces of the same window: {}.", others.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", "))
    };
    std::fs::write(&md, format!("{title}{}\n{overhead_text}.\n\nTrace: `{}`.{others_text} {PLACEMENT}.\n", kernels.markdown(SHOWN), rel(&raw.trace)))
        .with_context(|| format!("writing {}", md.display()))?;
    std::fs::write(&json, serde_json::to_string_pretty(&kernels)? + "\n").with_context(|| format!("writing {}", json.display()))?;
    let profile = PointProfile {
        trace: rel(&raw.trace),
        placement: PLACEMENT.into(),
        window: raw.window,
        batch: raw.batch,
        prefill_steps: raw.prefill_steps,
        activities: raw.activities.clone(),
        overhead,
        kernels,
        files: vec![rel(&md), rel(&json)],
        other_ranks: others,
    };
    let text = format!(
        "top kernels, {} {}/{} conc {} (batch {}): {}\n{overhead_text}\ntrace: {}{}",
        job.label,
        point.isl,
        point.osl,
        point.conc,
        raw.batch,
        profile.kernels.terminal(SHOWN),
        raw.trace.display(),
        if raw.rank_traces.is_empty() { String::new() } else { format!(" (rank 0; {} other rank trace(s) beside it)", raw.rank_traces.len()) }
    );
    let target = job
        .points
        .iter_mut()
        .rev()
        .find(|p| (p.isl, p.osl, p.conc) == (point.isl, point.osl, point.conc))
        .with_context(|| format!("no measured point isl={} osl={} conc={} to attach the profile to", point.isl, point.osl, point.conc))?;
    target.profile = Some(profile);
    Ok(text)
}
