//! The figures a comparison compares per point (tok/s/gpu, output tok/s,
//! median TPOT and TTFT): their names, units and direction, and how each
//! is read from a point of `result.json`. A leaf: it knows the result
//! document, not the comparison.

use serde::Serialize;

use crate::report::result::PointResult;

/// A figure of a point that is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Total (input + output) tokens per second per GPU, tok/s/gpu
    /// (InferenceX `tput_per_gpu`); higher is better.
    TputPerGpu,
    /// Output tokens per second of the engine, tok/s; higher is better.
    OutputTput,
    /// Median time per output token, ms; lower is better.
    MedianTpot,
    /// Median time to first token, ms; lower is better.
    MedianTtft,
}

/// Every compared figure, in table order.
pub const METRICS: [Metric; 4] = [Metric::TputPerGpu, Metric::OutputTput, Metric::MedianTpot, Metric::MedianTtft];

impl Metric {
    /// Long name with unit, for table captions.
    pub fn title(self) -> &'static str {
        match self {
            Metric::TputPerGpu => "Total throughput per GPU (tok/s/gpu)",
            Metric::OutputTput => "Output throughput (tok/s)",
            Metric::MedianTpot => "Median TPOT (ms)",
            Metric::MedianTtft => "Median TTFT (ms)",
        }
    }

    /// Short name with unit, for column heads.
    pub fn short(self) -> &'static str {
        match self {
            Metric::TputPerGpu => "tok/s/gpu",
            Metric::OutputTput => "out tok/s",
            Metric::MedianTpot => "TPOT ms (median)",
            Metric::MedianTtft => "TTFT ms (median)",
        }
    }

    /// Throughputs: higher is better; latencies: lower is better.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::TputPerGpu | Metric::OutputTput)
    }

    /// The figure as `result.json` reports it for the point.
    pub fn of_point(self, p: &PointResult) -> f64 {
        match self {
            Metric::TputPerGpu => p.figures.tput_per_gpu,
            Metric::OutputTput => p.figures.output_throughput,
            Metric::MedianTpot => p.figures.ms("median_tpot_ms"),
            Metric::MedianTtft => p.figures.ms("median_ttft_ms"),
        }
    }
}
