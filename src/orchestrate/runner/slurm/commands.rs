//! Slurm's own tools: `sbatch`, `scontrol`, `scancel`, from PATH or `--slurm-bin DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::state::{TaskRecord, parse_scontrol};
use crate::error::usage;

/// Where Slurm's commands are.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    pub bin: Option<PathBuf>,
}

impl Tools {
    fn command(&self, name: &str) -> Command {
        Command::new(self.bin.as_ref().map_or_else(|| PathBuf::from(name), |b| b.join(name)))
    }

    /// Checks that `sbatch --version` runs.
    ///
    /// Errors (usage): it does not, naming where it was looked for.
    pub fn check(&self) -> Result<String> {
        let out = self.command("sbatch").arg("--version").output();
        match out {
            Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
            Ok(o) => Err(usage(format!("sbatch --version failed: {}", String::from_utf8_lossy(&o.stderr).trim()))),
            Err(e) => Err(usage(format!(
                "--slurm: cannot run sbatch ({e}) from {}: put Slurm's commands on PATH or pass --slurm-bin DIR",
                self.bin.as_ref().map_or("PATH".to_string(), |b| b.display().to_string())
            ))),
        }
    }

    /// Submits `script`; returns the array's job id.
    ///
    /// Errors: sbatch refused it (its message is carried).
    pub fn sbatch(&self, script: &Path) -> Result<u64> {
        let out = self.command("sbatch").arg("--parsable").arg(script).output().context("running sbatch")?;
        if !out.status.success() {
            bail!("sbatch {} refused the array: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // `--parsable` prints `ID` or `ID;CLUSTER`.
        text.trim().split(';').next().and_then(|id| id.parse().ok()).with_context(|| format!("sbatch printed no job id: {text:?}"))
    }

    /// Every task record Slurm still knows of array `id` (empty once it forgot it).
    ///
    /// Errors: scontrol failed for another reason.
    pub fn tasks(&self, id: u64) -> Result<Vec<TaskRecord>> {
        let out = self.command("scontrol").args(["-o", "show", "job", &id.to_string()]).output().context("running scontrol")?;
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if err.contains("Invalid job id") {
                return Ok(Vec::new());
            }
            bail!("scontrol show job {id}: {}", err.trim());
        }
        Ok(parse_scontrol(&String::from_utf8_lossy(&out.stdout)))
    }

    /// `scancel ID` (the whole array).
    pub fn scancel(&self, id: u64) -> Result<()> {
        let out = self.command("scancel").arg(id.to_string()).output().context("running scancel")?;
        if !out.status.success() {
            bail!("scancel {id}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }
}
