//! A/B analysis: compare a candidate with a baseline (per-point deltas with
//! confidence intervals and verdicts, paired accuracy with its interval and
//! McNemar's test, greedy-token agreement, a CI gate that ends PASS, FAIL or
//! INCONCLUSIVE), and render it as a terminal table, Markdown, a
//! perf-changelog entry and plots.
//!
//! Use from code (the `ab` command):
//!
//! ```ignore
//! let cmp = ab::compare::compare(&baseline_arm, &candidate_arm, context, options)?;
//! out!("{}", ab::markdown::terminal(&cmp));
//! let files = ab::write_outputs(&cmp, &out_dir)?;   // ab.md, ab.json, changelog.yaml, plots
//! std::process::exit(cmp.exit_status().code());
//! ```

pub mod changelog;
#[cfg(test)]
mod coverage;
pub mod compare;
pub mod config_diff;
pub mod distributions;
pub mod foreign;
pub mod gate;
pub mod input;
pub mod markdown;
pub mod metric;
pub mod numbers;
pub mod plot;
pub mod prefix_cache;
pub mod source;
pub mod spec;
pub mod stats;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use compare::{Comparison, Context, Options, compare};
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
    files.extend(crate::report::plot::write_all(&plot::from_comparison(c), dir, "ab_")?);
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
    /// A saved A/A `ab.json` whose noise floor the verdicts and the gate use
    /// ([`compare::apply_noise`]).
    pub noise: Option<PathBuf>,
    /// Output folder (default: the candidate result's folder).
    pub output: Option<PathBuf>,
    /// What another tool's file may not record (`--foreign-isl-osl`, `--foreign-tp`).
    pub hints: foreign::Hints,
}

/// `enginebench compare`: loads both sides (our `result.json`, or another
/// tool's file: [`foreign::load`]), compares, prints the table, accuracy
/// block and gate, writes the files. Exit code 0 (gate PASS), 1 (FAIL),
/// 3 (INCONCLUSIVE); bad input is a usage error (2).
pub fn run_compare(req: &CompareRequest) -> Result<crate::error::ExitStatus> {
    let noise = req.noise.as_deref().map(compare::NoiseFloor::load).transpose()?;
    let side = |path: &Path, label: Option<&str>, role: &str, flag: &str| -> Result<(Option<crate::report::result::RecipeInfo>, input::Arm)> {
        Ok(match foreign::load(path, label, role, flag, req.hints)? {
            foreign::Side::Ours(result, arm) => (Some(result.recipe), arm),
            foreign::Side::Foreign(arm) => (None, arm),
        })
    };
    let (base_recipe, base) = side(&req.baseline, req.baseline_label.as_deref(), "baseline", "--baseline-label")?;
    let (cand_recipe, cand) = side(&req.candidate, req.candidate_label.as_deref(), "candidate", "--candidate-label")?;
    if req.baseline == req.candidate && base.label == cand.label {
        return Err(crate::error::usage(format!(
            "baseline and candidate are the same job ({:?} of {}): pick two labels with --baseline-label and --candidate-label",
            base.label,
            req.baseline.display()
        )));
    }
    let recipe = cand_recipe.or(base_recipe).unwrap_or_else(|| foreign::recipe_of(&cand, &req.candidate));
    let context = Context { recipe, config_key: req.config_key.clone() };
    let mut cmp = compare(&base, &cand, context, req.options)?;
    if let Some(n) = &noise {
        compare::apply_noise(&mut cmp, n);
    }
    out!("{}", markdown::terminal(&cmp));
    let dir = match &req.output {
        Some(d) => d.clone(),
        None if req.candidate.is_dir() => req.candidate.clone(),
        None => req.candidate.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    for f in write_outputs(&cmp, &dir)? {
        outln!("{}", f.display());
    }
    Ok(cmp.exit_status())
}
