//! `enginebench import inferencex`: InferenceX launchers and master-config
//! entries to recipes.

pub mod inferencex;
pub mod master_config;
pub mod shell;
