//! Latency and throughput figures, computed as `vllm bench serve` computes
//! them (vllm/benchmarks/serve.py, `calculate_metrics`).

pub mod crosscheck;
pub mod pd;
pub mod point;
pub mod prefix_cache;
pub mod sessions;
pub mod spec;
pub mod stats;
pub mod steps;

pub use point::{FigureSpec, PointFigures, point_figures};

