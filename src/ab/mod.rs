//! A/B analysis: compare a candidate with a baseline.

pub mod stats;
