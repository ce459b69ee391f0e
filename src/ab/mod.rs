//! A/B analysis: compare a candidate with a baseline (per-point deltas with
//! bootstrap confidence intervals and verdicts, paired accuracy with
//! McNemar's test, greedy-token agreement, a CI gate), and render it as a
//! terminal table, Markdown, a perf-changelog entry and plots.
//!
//! Use from code (the `ab` command):
//!
//! ```ignore
//! let cmp = ab::compare::compare(&baseline_arm, &candidate_arm, context, options)?;
//! out!("{}", ab::markdown::terminal(&cmp));
//! let files = ab::write_outputs(&cmp, &out_dir)?;   // ab.md, ab.json, changelog.yaml, plots
//! std::process::exit(cmp.exit_code());
//! ```

pub mod changelog;
#[cfg(test)]
mod coverage;
pub mod compare;
pub mod input;
pub mod markdown;
pub mod plot;
pub mod prefix_cache;
pub mod spec;
pub mod stats;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use compare::{Comparison, Context, Options, compare};
#[allow(unused_imports)] // the `ab` command's API
pub use input::{Arm, Repeat, RequestRow};
pub use input::load_arm;

/// Writes `ab.md` (Markdown), `ab.json` (the comparison), `changelog.yaml`
/// (perf-changelog entry) and the plots (`ab_*.png`, `ab_*.svg`) into `dir`.
/// Returns the files written.
pub fn write_outputs(c: &Comparison, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| crate::error::usage(format!("cannot create {}: {e}", dir.display())))?;
    let mut files = Vec::new();
    let mut put = |name: &str, text: String| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        files.push(path);
        Ok(())
    };
    put("ab.md", markdown::render(c))?;
    put("ab.json", serde_json::to_string_pretty(c)? + "\n")?;
    put("changelog.yaml", changelog::render(c))?;
    files.extend(plot::write_all(&plot::from_comparison(c), dir, "ab_")?);
    Ok(files)
}

/// What `enginebench compare` was asked.
#[derive(Debug, Clone)]
pub struct CompareRequest {
    pub baseline: PathBuf,
    pub candidate: PathBuf,
    pub baseline_label: Option<String>,
    pub candidate_label: Option<String>,
    pub options: Options,
    pub config_key: Option<String>,
    /// Output folder (default: the candidate result's folder).
    pub output: Option<PathBuf>,
}

/// `enginebench compare`: loads both results, compares, prints the table,
/// accuracy block and gate, writes the files. Exit code 0 (gate passed),
/// 1 (gate failed); bad input is a usage error (2).
pub fn run_compare(req: &CompareRequest) -> Result<i32> {
    let (_, base) = load_arm(&req.baseline, req.baseline_label.as_deref(), "baseline", "--baseline-label")?;
    let (cand_result, cand) = load_arm(&req.candidate, req.candidate_label.as_deref(), "candidate", "--candidate-label")?;
    if req.baseline == req.candidate && base.label == cand.label {
        return Err(crate::error::usage(format!(
            "baseline and candidate are the same job ({:?} of {}): pick two labels with --baseline-label and --candidate-label",
            base.label,
            req.baseline.display()
        )));
    }
    let context = Context { recipe: cand_result.recipe.clone(), config_key: req.config_key.clone() };
    let cmp = compare(&base, &cand, context, req.options)?;
    out!("{}", markdown::terminal(&cmp));
    let dir = match &req.output {
        Some(d) => d.clone(),
        None => req.candidate.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    for f in write_outputs(&cmp, &dir)? {
        outln!("{}", f.display());
    }
    Ok(cmp.exit_code())
}

/// `enginebench plot`: every job of one result, PNG and SVG per ISL/OSL,
/// into `output` (default: beside the result). Returns the files written.
pub fn run_plot(result: &Path, output: Option<&Path>) -> Result<Vec<PathBuf>> {
    let r = crate::report::export::read_result(result)?;
    let charts = plot::from_result(&r);
    if charts.is_empty() {
        return Err(crate::error::usage(format!("{}: no measured point to plot", result.display())));
    }
    let dir = output.map(Path::to_path_buf).unwrap_or_else(|| result.parent().map(Path::to_path_buf).unwrap_or_default());
    plot::write_all(&charts, &dir, "")
}
