//! Progress of jobs running in other processes: a line per point as each
//! task's `points.jsonl` grows.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::merge::points_so_far;

/// What a progress line needs of a point line (`points.jsonl`: the point's
/// figures are flattened into it).
#[derive(Deserialize)]
struct PointLine {
    label: String,
    isl: u32,
    osl: u32,
    conc: u32,
    status: crate::report::result::PointStatus,
    output_throughput: f64,
}

/// Points already shown, per task.
#[derive(Default)]
pub struct Watch {
    shown: BTreeMap<u32, usize>,
}

impl Watch {
    /// Lines for the points task `key` finished since the last call
    /// (`where_`: e.g. "on node1"), e.g. `[task 2 on node1] base: 64/32 conc 2: 51.3 output tok/s (ok)`.
    pub fn new_points(&mut self, dir: &Path, key: u32, where_: &str) -> Vec<String> {
        let lines = points_so_far(dir, key);
        let seen = self.shown.entry(key).or_default();
        let fresh: Vec<String> = lines
            .iter()
            .skip(*seen)
            .filter_map(|l| serde_json::from_str::<PointLine>(l).ok())
            .map(|p| {
                format!(
                    "  [task {key}{}] {}: {}/{} conc {}: {:.1} output tok/s ({})",
                    if where_.is_empty() { String::new() } else { format!(" {where_}") },
                    p.label,
                    p.isl,
                    p.osl,
                    p.conc,
                    p.output_throughput,
                    p.status
                )
            })
            .collect();
        *seen = lines.len();
        fresh
    }

    /// Points shown for task `key` so far.
    pub fn count(&self, key: u32) -> usize {
        self.shown.get(&key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{FigureSpec, point_figures};
    use crate::report::result::PointResult;

    #[test]
    fn a_line_per_new_point_of_a_task() {
        let dir = tempfile::tempdir().unwrap();
        let tdir = super::super::task::task_dir(dir.path(), 3);
        std::fs::create_dir_all(&tdir).unwrap();
        let mut figures = point_figures(&[], 1.0, FigureSpec { percentiles: &[99.0], gpus: 1, goodput: None });
        figures.output_throughput = 51.3;
        let point = PointResult { osl: 16, ..PointResult::fixture(2, 4, figures) };
        // As OutputFiles::append_point writes it.
        let mut line = serde_json::to_value(&point).unwrap();
        line["job"] = 0.into();
        line["label"] = "base".into();
        line["point"] = 0.into();
        std::fs::write(tdir.join("points.jsonl"), format!("{line}\n")).unwrap();
        let mut w = Watch::default();
        let lines = w.new_points(dir.path(), 3, "on vm");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("[task 3 on vm] base: ") && lines[0].contains("conc 2: 51.3 output tok/s (ok)"), "{lines:?}");
        assert!(w.new_points(dir.path(), 3, "on vm").is_empty(), "shown once");
        assert_eq!(w.count(3), 1);
    }
}
