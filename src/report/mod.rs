//! The outputs of a run: the result document, its files on disk, the
//! terminal table and the charts.

pub mod export;
pub mod files;
pub mod host;
pub mod kernels;
pub mod placement;
pub mod plot;
pub mod result;
pub mod table;
