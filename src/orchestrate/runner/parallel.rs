//! The local parallel executor (`--parallel-jobs N|auto`): several jobs at
//! once on one node, each a task process (`enginebench __task`) given a
//! disjoint set of GPUs through its visibility variable.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::super::plan::{Plan, gpus_of};
use super::super::progress::say;
use super::devices::{Devices, Packer};
use super::merge::{Fault, TaskEnd};
use super::task::{CONCURRENT_VAR, save};
use super::watch::Watch;
use super::{Executor, Run, Sink};
use crate::error::usage;
use crate::report::result::Execution;

/// `--parallel-jobs`: a number, or as many as the GPUs allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParallelJobs {
    Auto,
    N(u32),
}

impl std::str::FromStr for ParallelJobs {
    type Err = String;
    fn from_str(s: &str) -> Result<ParallelJobs, String> {
        match s {
            "auto" => Ok(ParallelJobs::Auto),
            _ => match s.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(ParallelJobs::N(n)),
                _ => Err(format!("{s:?}: give a number of jobs (1 or more) or auto")),
            },
        }
    }
}

/// Several jobs at once on disjoint devices of this node.
pub struct Parallel {
    devices: Devices,
    /// At most this many jobs at once.
    max_at_once: usize,
    share_cpu: bool,
    /// Devices each job needs (0 on CPU).
    needs: Vec<usize>,
}

impl Parallel {
    /// Checks the plan against this node's devices.
    ///
    /// Errors (usage): no GPUs and no `--share-cpu` (jobs would share the
    /// cores and corrupt each other's numbers), `auto` without GPUs, a job
    /// needing more GPUs than the node has.
    pub fn new(plan: &Plan, jobs: ParallelJobs, share_cpu: bool) -> Result<Parallel> {
        let devices = Devices::detect();
        let cpu = plan.recipe.is_cpu() || devices.ids.is_empty();
        if cpu {
            let why = if plan.recipe.is_cpu() { "this is a CPU recipe" } else { "this machine has no GPUs" };
            match (jobs, share_cpu) {
                (ParallelJobs::Auto, _) => {
                    return Err(usage(format!("--parallel-jobs auto packs jobs onto GPUs and {why}: give a number with --share-cpu to run CPU engines at once anyway")));
                }
                (_, false) => {
                    return Err(usage(format!(
                        "--parallel-jobs: {why}, so parallel engines would share its CPU cores and corrupt each other's numbers; add --share-cpu to run them at once anyway"
                    )));
                }
                _ => {}
            }
        }
        let needs: Vec<usize> = plan.jobs.iter().map(|j| if cpu { 0 } else { gpus_of(j, false) as usize }).collect();
        if let Some((i, n)) = needs.iter().enumerate().find(|(_, n)| **n > devices.ids.len()) {
            return Err(usage(format!(
                "--parallel-jobs: job {} needs {n} GPUs (TP x PP) but this node has {}",
                plan.jobs[i].label.clone().unwrap_or_else(|| plan.jobs[i].config.label()),
                devices.ids.len()
            )));
        }
        let max_at_once = match jobs {
            ParallelJobs::N(n) => n as usize,
            ParallelJobs::Auto => {
                let smallest = needs.iter().copied().filter(|&n| n > 0).min().unwrap_or(1);
                (devices.ids.len() / smallest).max(1)
            }
        };
        Ok(Parallel { devices, max_at_once, share_cpu: share_cpu && cpu, needs })
    }
}

struct Running {
    key: u32,
    jobs: Vec<usize>,
    child: Child,
    slots: Vec<usize>,
}

impl Executor for Parallel {
    fn execute(&mut self, run: &Run<'_>, sink: &mut Sink, groups: &[Vec<usize>]) -> Result<()> {
        let tasks: BTreeMap<u32, Vec<usize>> = groups.iter().enumerate().map(|(k, g)| (k as u32, g.clone())).collect();
        save(run, sink, &tasks, None)?;
        let exe = std::env::current_exe().context("locating the enginebench binary")?;
        let mut packer = Packer::new(self.devices.ids.len());
        let mut pending: Vec<u32> = tasks.keys().copied().collect();
        pending.reverse();
        let mut running: Vec<Running> = Vec::new();
        let mut watch = Watch::default();
        let seen = run.interrupts.count();
        let mut forwarded = 0;
        say(run.ui, &format!("running up to {} jobs at once{}", self.max_at_once, if self.share_cpu { " (sharing the CPU cores: perf figures disturb each other)" } else { "" }));
        loop {
            let pressed = run.interrupts.count() - seen;
            if pressed > 0 {
                sink.interrupt();
                pending.clear();
            }
            // Forward each Ctrl-C: the first stops each task gracefully, the second kills its engine.
            while forwarded < pressed.min(2) {
                forwarded += 1;
                for r in &running {
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(r.child.id() as i32, libc::SIGINT) };
                }
            }
            while running.len() < self.max_at_once {
                let Some(&key) = pending.last() else { break };
                let need = tasks[&key].iter().map(|&i| self.needs[i]).max().unwrap_or(0);
                let Some(slots) = packer.take(need) else { break };
                pending.pop();
                let env = self.devices.env_for(&slots);
                for &i in &tasks[&key] {
                    if let Some(h) = (run.heading)(sink.result(), i) {
                        let on = env.iter().map(|(k, v)| format!(" ({k}={v})")).collect::<String>();
                        say(run.ui, &format!("{h}{on}"));
                    }
                }
                let log = std::fs::File::create(sink.dir().join(format!("task-{key}.log")))?;
                let mut cmd = Command::new(&exe);
                if let Some(p) = &run.how.python {
                    cmd.arg("--python").arg(p);
                }
                cmd.arg("__task").arg(sink.dir()).arg(key.to_string());
                // The task records its jobs as sharing the node when they can.
                if self.max_at_once > 1 {
                    cmd.env(CONCURRENT_VAR, "1");
                } else {
                    cmd.env_remove(CONCURRENT_VAR);
                }
                cmd.envs(env).process_group(0);
                cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
                let child = cmd.spawn().context("starting a task process")?;
                running.push(Running { key, jobs: tasks[&key].clone(), child, slots });
            }
            for r in &running {
                for line in watch.new_points(sink.dir(), r.key, "") {
                    say(run.ui, &line);
                }
            }
            let mut still = Vec::new();
            for mut r in running.drain(..) {
                match r.child.try_wait()? {
                    None => still.push(r),
                    Some(status) => {
                        packer.give(&r.slots);
                        let fault = (!status.success() && status.code() != Some(1) && status.code() != Some(2) && status.code() != Some(130)).then(|| Fault {
                            message: format!("task {} ended with {} (log: task-{}.log)", r.key, super::super::job::describe_exit(status), r.key),
                            slurm: None,
                        });
                        sink.merge_task(run.plan, r.key, &r.jobs, &TaskEnd { fault, ..TaskEnd::default() })?;
                        for &i in &r.jobs {
                            let job = &sink.result().jobs[i];
                            say(run.ui, &format!("  {}: {}", job.label, job.status));
                        }
                    }
                }
            }
            running = still;
            if running.is_empty() && pending.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        sink.write()?;
        Ok(())
    }

    fn describe(&self) -> Execution {
        Execution { executor: "local-parallel".into(), max_concurrent_jobs: self.max_at_once as u32, shared_cpu: self.share_cpu }
    }
}
