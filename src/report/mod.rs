//! The outputs of a run: the result document, its files on disk, and the
//! terminal table.

pub mod export;
pub mod files;
pub mod host;
pub mod kernels;
pub mod placement;
pub mod result;
pub mod table;
