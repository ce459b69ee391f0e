//! Progress of jobs running in other processes: a line per point as each
//! task's `points.jsonl` grows.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::merge::points_so_far;

/// What a progress line needs of a point line.
#[derive(Deserialize)]
struct PointLine {
    label: String,
    isl: u32,
    osl: u32,
    conc: u32,
    status: String,
    figures: Figures,
}

#[derive(Deserialize)]
struct Figures {
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
                    p.figures.output_throughput,
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
