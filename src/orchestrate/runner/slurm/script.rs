//! The batch script of a run's job array.

use std::path::Path;

/// What goes into the array's batch script.
#[derive(Debug, Clone)]
pub struct ScriptSpec<'a> {
    /// The job name (`enginebench-<recipe>`).
    pub name: &'a str,
    /// The run folder (shared with the nodes).
    pub dir: &'a Path,
    /// The array indices (task keys).
    pub keys: &'a [u32],
    pub partition: Option<&'a str>,
    pub account: Option<&'a str>,
    /// `--time` as Slurm takes it (`30`, `1:00:00`, `1-0`).
    pub time: Option<&'a str>,
    /// GPUs each task gets (0: none asked for); per node when `nodes` > 1.
    pub gpus_per_task: u32,
    /// Nodes each task's allocation spans (jobs over several nodes,
    /// docs/multi-node.md): the batch script runs on the first, which starts
    /// one `srun` step per node.
    pub nodes: u32,
    /// The whole node per task: CPU engines use every core, so two on one
    /// node would corrupt each other's numbers.
    pub exclusive: bool,
    /// `--slurm-arg` values, one `#SBATCH` line each.
    pub extra: &'a [String],
    /// The enginebench binary the tasks run (on the shared filesystem).
    pub exe: &'a Path,
    /// `--python` of the submitting command.
    pub python: Option<&'a Path>,
    /// The shared-filesystem probe's token.
    pub probe: &'a str,
}

/// The array's batch script.
pub fn render(s: &ScriptSpec<'_>) -> String {
    let keys = s.keys.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name={}", s.name),
        format!("#SBATCH --array={keys}"),
        format!("#SBATCH --output={}/slurm/%A_%a.out", s.dir.display()),
    ];
    if s.nodes > 1 {
        lines.push(format!("#SBATCH --nodes={}", s.nodes));
        lines.push("#SBATCH --ntasks-per-node=1".to_string());
    } else {
        lines.push("#SBATCH --ntasks=1".to_string());
    }
    for (flag, v) in [("partition", s.partition), ("account", s.account), ("time", s.time)] {
        if let Some(v) = v {
            lines.push(format!("#SBATCH --{flag}={v}"));
        }
    }
    if s.gpus_per_task > 0 {
        let per = if s.nodes > 1 { "node" } else { "task" };
        lines.push(format!("#SBATCH --gpus-per-{per}={}", s.gpus_per_task));
    }
    if s.exclusive {
        lines.push("#SBATCH --exclusive".to_string());
    }
    for a in s.extra {
        lines.push(format!("#SBATCH {a}"));
    }
    let python = s.python.map(|p| format!(" --python {}", quote(&p.display().to_string()))).unwrap_or_default();
    lines.push(format!(
        "exec {}{python} __task {} \"$SLURM_ARRAY_TASK_ID\" --probe {}",
        quote(&s.exe.display().to_string()),
        quote(&s.dir.display().to_string()),
        quote(s.probe)
    ));
    lines.join("\n") + "\n"
}

/// Quotes `s` for bash where it needs it.
fn quote(s: &str) -> String {
    shell_words::quote(s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_lines_exactly() {
        let extra = vec!["--constraint=mi355x".to_string(), "--qos=high".to_string()];
        let spec = ScriptSpec {
            name: "enginebench-minimax",
            dir: Path::new("/shared/runs/r1"),
            keys: &[0, 2, 4],
            partition: Some("gpu"),
            account: Some("perf"),
            time: Some("2:00:00"),
            gpus_per_task: 8,
            nodes: 1,
            exclusive: false,
            extra: &extra,
            exe: Path::new("/shared/bin/enginebench"),
            python: Some(Path::new("/shared/venv/bin/python")),
            probe: "abc123",
        };
        assert_eq!(
            render(&spec),
            "#!/bin/bash\n\
             #SBATCH --job-name=enginebench-minimax\n\
             #SBATCH --array=0,2,4\n\
             #SBATCH --output=/shared/runs/r1/slurm/%A_%a.out\n\
             #SBATCH --ntasks=1\n\
             #SBATCH --partition=gpu\n\
             #SBATCH --account=perf\n\
             #SBATCH --time=2:00:00\n\
             #SBATCH --gpus-per-task=8\n\
             #SBATCH --constraint=mi355x\n\
             #SBATCH --qos=high\n\
             exec /shared/bin/enginebench --python /shared/venv/bin/python __task /shared/runs/r1 \"$SLURM_ARRAY_TASK_ID\" --probe abc123\n"
        );
        // A CPU run: no GPUs, the whole node per task, nothing optional.
        let cpu = ScriptSpec { partition: None, account: None, time: None, gpus_per_task: 0, exclusive: true, extra: &[], python: None, keys: &[1], dir: Path::new("/r/it's"), ..spec };
        let text = render(&cpu);
        assert!(text.contains("#SBATCH --array=1\n#SBATCH --output=/r/it's/slurm/%A_%a.out\n#SBATCH --ntasks=1\n#SBATCH --exclusive\nexec"), "{text}");
        assert!(text.contains(r"__task '/r/it'\''s'"), "{text}");
    }

    #[test]
    fn a_two_node_job_is_one_allocation_of_two_nodes() {
        let spec = ScriptSpec {
            name: "enginebench-moe",
            dir: Path::new("/shared/runs/r2"),
            keys: &[0],
            partition: None,
            account: None,
            time: None,
            gpus_per_task: 4,
            nodes: 2,
            exclusive: false,
            extra: &[],
            exe: Path::new("/shared/bin/enginebench"),
            python: None,
            probe: "p",
        };
        assert_eq!(
            render(&spec),
            "#!/bin/bash\n\
             #SBATCH --job-name=enginebench-moe\n\
             #SBATCH --array=0\n\
             #SBATCH --output=/shared/runs/r2/slurm/%A_%a.out\n\
             #SBATCH --nodes=2\n\
             #SBATCH --ntasks-per-node=1\n\
             #SBATCH --gpus-per-node=4\n\
             exec /shared/bin/enginebench __task /shared/runs/r2 \"$SLURM_ARRAY_TASK_ID\" --probe p\n"
        );
    }
}
