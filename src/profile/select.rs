//! Choosing what to profile, checked before any engine starts: which points
//! (`--profile-point`), where in each point the window goes ([`Window`]), and
//! whether the trace folder can be written.

use std::path::{Path, PathBuf};

use anyhow::Result;


use super::ProfileOptions;
use crate::protocol::{ProfileTarget, Window};
use crate::error::usage;
use crate::protocol::PointSpec;
use crate::protocol::Point;

/// Unprofiled steady-state decode steps before the reference steps: the
/// first decode steps after the last prefill still settle (allocator,
/// caches).
pub const WARM_STEPS: u32 = 2;

/// A `--profile-point` filter: every key given must match (conc, isl, osl, tp).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PointFilter {
    pub conc: Option<u32>,
    pub isl: Option<u32>,
    pub osl: Option<u32>,
    pub tp: Option<u32>,
    /// As given on the command line.
    pub text: String,
}

impl PointFilter {
    /// Parses `conc=64,isl=1024` (keys conc, isl, osl, tp).
    ///
    /// Errors: an unknown key, a value that is not a whole number, no key.
    pub fn parse(s: &str) -> Result<PointFilter, String> {
        let mut f = PointFilter { text: s.to_string(), ..PointFilter::default() };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("{part:?}: give KEY=VALUE, e.g. conc=64,isl=1024"))?;
            let n: u32 = v.trim().parse().map_err(|_| format!("{part:?}: {v:?} is not a whole number"))?;
            let slot = match k.trim() {
                "conc" => &mut f.conc,
                "isl" => &mut f.isl,
                "osl" => &mut f.osl,
                "tp" => &mut f.tp,
                other => return Err(format!("{other:?}: unknown key (use conc, isl, osl, tp)")),
            };
            *slot = Some(n);
        }
        if f.conc.is_none() && f.isl.is_none() && f.osl.is_none() && f.tp.is_none() {
            return Err(format!("{s:?}: give at least one of conc=, isl=, osl=, tp="));
        }
        Ok(f)
    }

    /// Whether the point (on an engine of TP `tp`) matches.
    pub fn matches(&self, p: &Point, tp: Option<u32>) -> bool {
        let ok = |want: Option<u32>, have: u32| want.is_none_or(|w| w == have);
        ok(self.conc, p.conc) && ok(self.isl, p.isl) && ok(self.osl, p.osl) && ok(self.tp, p.tp.or(tp).unwrap_or(1))
    }
}

/// Places an `n`-step window in a point whose requests have `decode_steps`
/// steady-state decode steps each (the shortest output length - 1).
///
/// Errors (a message naming both numbers): `n` is 0, or the warm-up,
/// reference and profiled steps do not fit in the point's decode steps.
pub fn place(n: u32, decode_steps: u32) -> Result<Window, String> {
    if n == 0 {
        return Err("--profile-steps 0: profile at least 1 step".into());
    }
    let w = Window { warm: WARM_STEPS, reference: n, profiled: n };
    if w.decode_steps() > decode_steps {
        return Err(format!(
            "--profile-steps {n} needs {} decode steps per request ({} warm-up + {n} unprofiled reference + {n} profiled) but this point's requests have only {decode_steps} (shortest output length - 1): use --profile-steps {} or less, or a longer --osl",
            w.decode_steps(),
            w.warm,
            decode_steps.saturating_sub(WARM_STEPS) / 2
        ));
    }
    Ok(w)
}

/// Decode steps per request of a point: its shortest output length - 1.
pub fn decode_steps_of(spec: &PointSpec) -> u32 {
    let d = &spec.dataset;
    d.convention.bounds(d.osl, d.range_ratio).0.saturating_sub(1)
}

/// The points to profile of one job: (index into `specs`, window).
///
/// Errors (usage): a window that does not fit a chosen point.
pub fn choose(opts: &ProfileOptions, specs: &[PointSpec], tp: Option<u32>) -> Result<Vec<(usize, Window)>> {
    let mut out = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let chosen = opts.points.is_empty() || opts.points.iter().any(|f| f.matches(&spec.point, tp));
        if !chosen {
            continue;
        }
        let p = &spec.point;
        let w = place(opts.steps, decode_steps_of(spec))
            .map_err(|e| usage(format!("point isl={} osl={} conc={}: {e}", p.isl, p.osl, p.conc)))?;
        out.push((i, w));
    }
    Ok(out)
}

/// Checks every `--profile-point` against the jobs' sweeps (`(specs, tp)`
/// per job) and every chosen window, and that the trace folder (when given)
/// can be written.
///
/// Errors (usage, exit 2): a filter that matches no point of any job (with
/// the sweep's points named), a window longer than a chosen point's decode
/// steps, an unwritable `--profile-dir`.
pub fn check(opts: &ProfileOptions, jobs: &[(&[PointSpec], Option<u32>)]) -> Result<()> {
    for f in &opts.points {
        let hit = jobs.iter().any(|(specs, tp)| specs.iter().any(|s| f.matches(&s.point, *tp)));
        if !hit {
            let mut points: Vec<String> = jobs
                .iter()
                .flat_map(|(specs, _)| specs.iter().map(|s| format!("isl={} osl={} conc={}", s.point.isl, s.point.osl, s.point.conc)))
                .collect();
            points.dedup();
            return Err(usage(format!(
                "--profile-point {}: no point of the sweep matches (points: {})",
                f.text,
                if points.is_empty() { "none".to_string() } else { points.join("; ") }
            )));
        }
    }
    for (specs, tp) in jobs {
        choose(opts, specs, *tp)?;
    }
    if let Some(dir) = &opts.dir {
        check_dir(dir)?;
    }
    Ok(())
}

/// Creates `dir` if needed and writes (and removes) a probe file in it.
///
/// Errors (usage): the folder cannot be created or written, with the reason.
pub fn check_dir(dir: &Path) -> Result<()> {
    let bad = |e: std::io::Error| usage(format!("--profile-dir {}: the trace folder cannot be written ({e})", dir.display()));
    std::fs::create_dir_all(dir).map_err(bad)?;
    let probe = dir.join(format!(".enginebench-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(bad)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `<job>-<point>` of the file names: the job label (and its file suffix,
/// e.g. the repeat's index in an `ab`) and the point.
pub fn file_stem(label: &str, suffix: &str, p: &Point) -> String {
    let label: String = label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    format!("{label}{suffix}-isl{}-osl{}-conc{}", p.isl, p.osl, p.conc)
}

/// The targets to send to a job's worker: its chosen points, each with its
/// trace file in `dir` (made absolute).
///
/// Errors (usage): as [`choose`].
pub fn targets(opts: &ProfileOptions, specs: &[PointSpec], tp: Option<u32>, dir: &Path, label: &str, suffix: &str) -> Result<Vec<ProfileTarget>> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| PathBuf::from(dir));
    Ok(choose(opts, specs, tp)?
        .into_iter()
        .map(|(point, window)| ProfileTarget {
            point,
            window,
            trace: dir.join(format!("trace-{}.json.gz", file_stem(label, suffix, &specs[point].point))),
        })
        .collect())
}

/// The targets of one job of a run: none without `--profile` or when an
/// earlier job had the same label (the repeats of `ab` profile their first
/// run only); else [`targets`] into `--profile-dir` or the output folder.
///
/// Errors (usage): as [`choose`].
pub fn job_targets(
    opts: Option<&ProfileOptions>,
    first_of_label: bool,
    specs: &[PointSpec],
    tp: Option<u32>,
    out_dir: &Path,
    label: &str,
) -> Result<Vec<ProfileTarget>> {
    match opts {
        Some(o) if first_of_label => targets(o, specs, tp, o.dir.as_deref().unwrap_or(out_dir), label, ""),
        _ => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LengthConvention;
    use crate::protocol::RandomDataset;

    fn spec(isl: u32, osl: u32, conc: u32, range_ratio: f64) -> PointSpec {
        PointSpec {
            point: Point { tp: None, isl, osl, conc, num_prompts: 4, warmups: 1 },
            dataset: RandomDataset { isl, osl, convention: LengthConvention::Vllm, range_ratio, prefix_len: 0, seed: 0 },
            workload: Default::default(),
            reset_prefix_cache: false,
            request_rate: None,
            burstiness: 1.0,
            ignore_eos: true,
        }
    }

    #[test]
    fn parses_point_filters() {
        let f = PointFilter::parse("conc=64,isl=1024").unwrap();
        assert_eq!((f.conc, f.isl, f.osl, f.tp), (Some(64), Some(1024), None, None));
        assert!(PointFilter::parse("conc=x").unwrap_err().contains("not a whole number"));
        assert!(PointFilter::parse("batch=4").unwrap_err().contains("unknown key"));
        assert!(PointFilter::parse("conc").unwrap_err().contains("KEY=VALUE"));
        assert!(PointFilter::parse("").is_err());
        let p = spec(64, 16, 4, 0.0).point;
        assert!(PointFilter::parse("conc=4").unwrap().matches(&p, None));
        assert!(PointFilter::parse("conc=4,tp=1").unwrap().matches(&p, None));
        assert!(!PointFilter::parse("conc=4,tp=8").unwrap().matches(&p, None));
        assert!(PointFilter::parse("conc=4,tp=8").unwrap().matches(&p, Some(8)));
        assert!(!PointFilter::parse("conc=4,isl=128").unwrap().matches(&p, None));
    }

    #[test]
    fn window_placement_fits_inside_the_point() {
        // OSL 32: 31 decode steps per request.
        let w = place(8, 31).unwrap();
        assert_eq!(w, Window { warm: WARM_STEPS, reference: 8, profiled: 8 });
        assert_eq!(w.decode_steps(), 18);
        assert_eq!(w.max_tokens(), 19, "the pass's requests end right after the window");
        assert!(w.max_tokens() <= 32, "never longer than the point's own requests");
        // Exactly fits, one more does not, and the message names the numbers.
        assert!(place(14, 30).is_ok());
        let e = place(15, 30).unwrap_err();
        assert!(e.contains("--profile-steps 15 needs 32") && e.contains("only 30") && e.contains("--profile-steps 14 or less"), "{e}");
        assert!(place(0, 100).is_err());
        // Range ratio: the shortest request decides.
        assert_eq!(decode_steps_of(&spec(64, 32, 2, 0.0)), 31);
        assert_eq!(decode_steps_of(&spec(64, 32, 2, 0.5)), 15);
    }

    #[test]
    fn choose_and_check_name_the_bad_thing() {
        let specs = vec![spec(64, 32, 1, 0.0), spec(64, 32, 4, 0.0), spec(64, 8, 4, 0.0)];
        let opts = |points: &[&str], steps: u32| ProfileOptions {
            steps,
            points: points.iter().map(|p| PointFilter::parse(p).unwrap()).collect(),
            dir: None,
        };
        let chosen = choose(&opts(&["conc=4,osl=32"], 4), &specs, None).unwrap();
        assert_eq!(chosen.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1]);
        // No filter: every point, and the short one cannot hold 4 steps.
        let e = check(&opts(&[], 4), &[(&specs, None)]).unwrap_err();
        assert!(e.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(format!("{e}").contains("osl=8 conc=4"), "{e}");
        let e = check(&opts(&["conc=3"], 2), &[(&specs, None)]).unwrap_err();
        assert!(format!("{e}").contains("--profile-point conc=3: no point of the sweep matches"), "{e}");
        assert!(format!("{e}").contains("isl=64 osl=32 conc=1"), "{e}");
        check(&opts(&["osl=32"], 4), &[(&specs, None)]).unwrap();
    }

    #[test]
    fn trace_dir_must_be_writable() {
        let dir = tempfile::tempdir().unwrap();
        check_dir(&dir.path().join("new/sub")).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let e = check_dir(&file.join("under-a-file")).unwrap_err();
        assert!(format!("{e}").contains("under-a-file") && format!("{e}").contains("cannot be written"), "{e}");
        let t = targets(&ProfileOptions { steps: 2, points: vec![], dir: None }, &[spec(64, 16, 2, 0.0)], None, dir.path(), "bf16 x", "-1").unwrap();
        assert_eq!(t.len(), 1);
        assert!(t[0].trace.ends_with("trace-bf16_x-1-isl64-osl16-conc2.json.gz"), "{:?}", t[0].trace);
        assert!(t[0].trace.is_absolute());
    }
}
