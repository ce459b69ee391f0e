//! `enginebench overhead`: the same recipe and workload through three serving
//! tiers, to show what the server costs, tier by tier:
//!
//! 1. `in-process`: enginebench drives `LLMEngine.step()` in the worker
//!    (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the default mode);
//! 2. `engine-core process`: the same, but vLLM's engine core runs in its own
//!    process behind vLLM's multiprocess client (`=1`, what `vllm serve` uses
//!    inside, without HTTP);
//! 3. `vllm serve`: a real API server on 127.0.0.1 (free port, stopped on
//!    every exit path) driven by enginebench's streaming client, timed as
//!    `vllm bench serve` times it.
//!
//! Overheads: tier 2 vs 1 is the IPC/process cost, tier 3 vs 2 the API
//! server + HTTP cost, as absolute (ms TTFT, ms TPOT) and relative numbers.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use indicatif::MultiProgress;
use serde::Serialize;

use super::finish::point_line;
use super::plan::{MP_VAR, PlannedJob, RunOptions, plan};
use super::progress::say;
use crate::protocol::{PointSpec, RawPoint};
use super::runner::local::Sequential;
use super::runner::{ExecChoice, ExecOptions, Folder, Runner, Sink, pending_job};
use crate::error::usage;
use crate::metrics::{FigureSpec, point_figures};
use crate::report::files::write_json_atomic;
use crate::report::result::{JobResult, PointResult, PointStatus, RunError, Status};
use crate::serve::{ClientConfig, ServerSpec, VllmServer, run_benchmark};
use crate::workload::arrivals::arrival_times;

const TIERS: [&str; 3] = ["in-process", "engine-core process", "vllm serve"];

/// Runs the three tiers and prints the overhead table. Returns the exit code.
///
/// Errors (usage): as `run`, and a recipe selection that is not exactly one
/// engine configuration.
pub fn overhead(opts: &RunOptions, how: &ExecOptions) -> Result<crate::error::ExitStatus> {
    if how.exec != ExecChoice::Local {
        return Err(usage(
            "overhead compares three serving tiers of one engine on one machine: it takes neither --slurm nor --parallel-jobs \
             (on a cluster, run it on a node: srun ... enginebench overhead RECIPE)",
        ));
    }
    let mut opts = opts.clone();
    opts.no_eval = true;
    let mut plan = plan(&opts, how.python.as_deref())?;
    if plan.jobs.len() != 1 {
        return Err(usage(format!(
            "overhead compares serving tiers of one engine configuration, but this selection has {} (pick one --variant and one TP)",
            plan.jobs.len()
        )));
    }
    let base = plan.jobs.remove(0);
    let mut mp = PlannedJob {
        config: base.config.clone(),
        env: base.env.clone(),
        python: base.python.clone(),
        specs: base.specs.clone(),
        run_eval: false,
        record_token_ids: false,
        label: Some(TIERS[1].into()),
        dp: base.dp.clone(),
        nodes: base.nodes.clone(),
        pd: base.pd.clone(),
    };
    mp.env.insert(MP_VAR.into(), "1".into());
    plan.jobs = vec![PlannedJob { label: Some(TIERS[0].into()), ..base }, mp];

    let name = format!("{}-overhead", plan.recipe.name);
    let mut runner = Runner::open(plan, &opts, how, Folder::New { name: &name })?;
    errln!("enginebench overhead: recipe {} -> {}", runner.plan.recipe.name, runner.dir().display());
    let heading = |_: &crate::report::result::RunResult, i: usize| Some(format!("tier {}: {}", i + 1, TIERS[i]));
    // The tiers compare one engine on one machine: they run here, one after another.
    if runner.run_jobs(&mut Sequential::default(), &[vec![0], vec![1]], &heading)? {
        return runner.finish();
    }
    let out_dir = runner.dir().to_path_buf();
    let ui = runner.ui.clone();
    let plan = &runner.plan;
    let sink = &mut runner.sink;

    // Tier 3: the same points through `vllm serve` and HTTP.
    say(&ui, &format!("tier 3: {}", TIERS[2]));
    let vocab = allowed_token_ids(&sink.result().jobs[0]);
    let mut tier3 = pending_job(&plan.jobs[0], &plan.model_path);
    tier3.label = TIERS[2].into();
    tier3.env.remove(MP_VAR);
    let outcome = match vocab {
        Some(allowed) => serve_tier(plan, &mut tier3, &allowed, &out_dir, sink, &ui),
        None => Err(anyhow::anyhow!("tier 1 did not report the vocabulary (it failed); the serving tier needs it")),
    };
    if let Err(e) = outcome {
        tier3.status = Status::Failed;
        tier3.error = Some(RunError { message: format!("{e:#}"), ..RunError::default() });
    }
    sink.push_job(tier3);

    let report = OverheadReport::from_jobs(&runner.result().jobs);
    write_json_atomic(&out_dir.join("overhead.json"), &report)?;
    std::fs::write(out_dir.join("overhead.md"), report.markdown())?;
    let code = runner.finish()?;
    outln!("{}", report.table());
    outln!("overhead: {}", out_dir.join("overhead.md").display());
    Ok(code)
}

/// The token ids random prompts draw from, rebuilt from tier 1's engine facts
/// (vocabulary size minus special tokens, as the shim computes them).
fn allowed_token_ids(job: &JobResult) -> Option<Vec<u32>> {
    job.engine.as_ref()?.allowed_token_ids()
}

/// Runs every point of the job through a real `vllm serve`, recording it
/// as the sink's next job.
fn serve_tier(plan: &super::plan::Plan, job: &mut JobResult, allowed: &[u32], out_dir: &Path, sink: &mut Sink, ui: &MultiProgress) -> Result<()> {
    let index = sink.result().jobs.len();
    job.status = Status::Running;
    // `vllm serve` from the same environment as the in-process tiers.
    let venv = PathBuf::from(&plan.jobs[0].python.prefix);
    let mut spec = ServerSpec::new(&venv, plan.model_path.clone(), job.engine_args.clone(), out_dir.join("server.log"));
    spec.env = job.env.clone();
    // The server must not inherit an in-process setting from this process's
    // environment: it is removed on the server's own command, not here.
    spec.env_remove = job.env_unset.iter().cloned().chain([MP_VAR.to_string()]).collect();
    let server = VllmServer::start(&spec).context("starting vllm serve")?;
    say(ui, &format!("  vllm serve ready on 127.0.0.1:{} (log {})", server.port(), server.log_path().display()));
    if !server.overridden_flags().is_empty() {
        say(ui, &format!("  replaced the recipe's {} (the server binds a free local port)", server.overridden_flags().join(" ")));
    }
    job.worker_pid = Some(server.pid() as u32);
    let specs: Vec<PointSpec> = plan.jobs[0].specs.clone();
    for spec in &specs {
        let raw = serve_point(&server, spec, allowed)?;
        let point = serve_point_result(&raw, &job.sweep);
        say(ui, &format!("  {}", point_line(&point)));
        sink.append_point(index, job, &point, &raw)?;
        job.points.push(point);
    }
    let group = server.processes();
    server.stop()?;
    job.worker_pid = None;
    let left: Vec<i32> = group.into_iter().filter(|&p| crate::serve::process::pid_alive(p)).collect();
    if !left.is_empty() {
        anyhow::bail!("vllm serve processes {left:?} outlived the stop");
    }
    job.status = if job.points.iter().all(|p| p.status == PointStatus::Ok) { Status::Ok } else { Status::Failed };
    Ok(())
}

fn serve_point(server: &VllmServer, spec: &PointSpec, allowed: &[u32]) -> Result<RawPoint> {
    let p = &spec.point;
    let w = spec.dataset.draw((p.warmups + p.num_prompts) as usize, allowed);
    let split = p.warmups as usize;
    let mut cfg = ClientConfig::new(server.base_url(), server.model_id(), p.conc as usize);
    cfg.ignore_eos = spec.ignore_eos;
    if split > 0 {
        run_benchmark(&cfg, &w.prompts[..split], &w.output_lens[..split], None)?;
    }
    let arrivals = spec.request_rate.map(|r| arrival_times(p.num_prompts as usize, r, spec.burstiness, spec.dataset.seed));
    let started_mono_s = crate::telemetry::mono_now_s();
    let out = run_benchmark(&cfg, &w.prompts[split..], &w.output_lens[split..], arrivals.as_deref())?;
    let n = out.records.len();
    Ok(RawPoint {
        spec: spec.clone(),
        records: out.records,
        engine_timings: vec![None; n],
        requested_output_lens: w.output_lens[split..].to_vec(),
        duration_s: out.duration_s,
        started_mono_s,
        steps: Vec::new(),
        vllm_spec: None,
        token_ids: Vec::new(),
        partial: false,
        prefix_cache_reset: None,
        turns: Vec::new(),
        trace_names: Vec::new(),
        measure_start_s: None,
        replay_stop: None,
        file_requests: None,
        pd: None,
    })
}

fn serve_point_result(raw: &RawPoint, sweep: &crate::recipe::sweep::ResolvedSweep) -> PointResult {
    // No engine steps, no vLLM timings over HTTP: only the figures.
    let mut p = super::finish::finish_point(raw, sweep, 1, false, None);
    let spec = FigureSpec { percentiles: &sweep.percentiles, gpus: p.gpus, goodput: sweep.goodput };
    p.figures = point_figures(&raw.records, raw.duration_s, spec);
    p
}

/// One point through the three tiers, and the overheads between them.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadRow {
    pub isl: u32,
    pub osl: u32,
    pub conc: u32,
    /// Per tier (in-process, engine-core process, vllm serve): output tok/s,
    /// median TTFT ms, median TPOT ms; `None` where the tier did not run.
    pub output_throughput: [Option<f64>; 3],
    pub median_ttft_ms: [Option<f64>; 3],
    pub median_tpot_ms: [Option<f64>; 3],
}

/// The overhead of one tier over the one below it.
#[derive(Debug, Clone, Serialize)]
pub struct TierCost {
    /// "IPC/process (tier 2 vs 1)" or "API server + HTTP (tier 3 vs 2)".
    pub what: String,
    /// Added median TTFT, ms, and relative to the lower tier.
    pub ttft_ms: Option<f64>,
    pub ttft_pct: Option<f64>,
    /// Added median TPOT (ms per output token) and relative.
    pub tpot_ms: Option<f64>,
    pub tpot_pct: Option<f64>,
    /// Output throughput change, % (negative: the upper tier is slower).
    pub throughput_pct: Option<f64>,
}

/// `overhead.json`.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadReport {
    pub tiers: [&'static str; 3],
    pub rows: Vec<(OverheadRow, [TierCost; 2])>,
}

impl OverheadReport {
    fn from_jobs(jobs: &[JobResult]) -> OverheadReport {
        let mut keys: Vec<(u32, u32, u32)> = Vec::new();
        for j in jobs {
            for p in &j.points {
                if !keys.contains(&(p.isl, p.osl, p.conc)) {
                    keys.push((p.isl, p.osl, p.conc));
                }
            }
        }
        let find = |tier: usize, k: (u32, u32, u32)| {
            jobs.get(tier)?.points.iter().find(|p| (p.isl, p.osl, p.conc) == k && p.status == PointStatus::Ok)
        };
        let rows = keys
            .into_iter()
            .map(|k| {
                let pick = |f: &dyn Fn(&PointResult) -> f64| [0, 1, 2].map(|t| find(t, k).map(f));
                let row = OverheadRow {
                    isl: k.0,
                    osl: k.1,
                    conc: k.2,
                    output_throughput: pick(&|p| p.figures.output_throughput),
                    median_ttft_ms: pick(&|p| p.figures.ms("median_ttft_ms")),
                    median_tpot_ms: pick(&|p| p.figures.ms("median_tpot_ms")),
                };
                let cost = |lo: usize, hi: usize, what: &str| {
                    let diff = |a: [Option<f64>; 3]| Some(a[hi]? - a[lo]?);
                    let pct = |a: [Option<f64>; 3]| Some(100.0 * (a[hi]? / a[lo]? - 1.0));
                    TierCost {
                        what: what.into(),
                        ttft_ms: diff(row.median_ttft_ms),
                        ttft_pct: pct(row.median_ttft_ms),
                        tpot_ms: diff(row.median_tpot_ms),
                        tpot_pct: pct(row.median_tpot_ms),
                        throughput_pct: pct(row.output_throughput),
                    }
                };
                let costs = [cost(0, 1, "IPC/process (tier 2 vs 1)"), cost(1, 2, "API server + HTTP (tier 3 vs 2)")];
                (row, costs)
            })
            .collect();
        OverheadReport { tiers: TIERS, rows }
    }

    fn cells(&self) -> (Vec<String>, Vec<Vec<String>>) {
        let header = [
            "ISL/OSL", "conc", "out tok/s 1 / 2 / 3", "TTFT ms 1 / 2 / 3", "TPOT ms 1 / 2 / 3",
            "IPC: TTFT / TPOT / tput", "HTTP: TTFT / TPOT / tput",
        ]
        .map(String::from)
        .to_vec();
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
        let tri = |a: [Option<f64>; 3]| format!("{} / {} / {}", f(a[0]), f(a[1]), f(a[2]));
        let c = |t: &TierCost| {
            let sign = |v: Option<f64>, unit: &str| v.map_or("-".into(), |x| format!("{x:+.2}{unit}"));
            format!("{} / {} / {}", sign(t.ttft_ms, " ms"), sign(t.tpot_ms, " ms"), sign(t.throughput_pct, "%"))
        };
        let rows = self
            .rows
            .iter()
            .map(|(r, costs)| {
                vec![
                    format!("{}/{}", r.isl, r.osl),
                    r.conc.to_string(),
                    tri(r.output_throughput),
                    tri(r.median_ttft_ms),
                    tri(r.median_tpot_ms),
                    c(&costs[0]),
                    c(&costs[1]),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The terminal table (tiers 1 in-process, 2 engine-core process, 3 vllm serve).
    pub fn table(&self) -> String {
        let (header, rows) = self.cells();
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(header);
        for r in rows {
            t.add_row(r);
        }
        format!("tiers: 1 = {}, 2 = {}, 3 = {}\n{t}", TIERS[0], TIERS[1], TIERS[2])
    }

    /// The same as Markdown.
    pub fn markdown(&self) -> String {
        let (header, rows) = self.cells();
        let mut s = format!("Tiers: 1 = {}, 2 = {}, 3 = {} (medians; costs are tier 2 - 1 and 3 - 2)\n\n", TIERS[0], TIERS[1], TIERS[2]);
        s.push_str(&format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(header.len())));
        for r in rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tput: f64, ttft: f64, tpot: f64) -> JobResult {
        let mut j: JobResult = serde_json::from_str(
            r#"{"label": "x", "status": "ok", "engine_args": [], "env": {}, "points": [],
                "sweep": {"space": [], "inferencex": false, "length_convention": "vllm", "range_ratio": 0.0,
                          "prefix_len": 0, "request_rate": null, "burstiness": 1.0, "ignore_eos": true,
                          "percentiles": [99.0], "goodput": null, "seed": 0,
                          "count": {"prompts_per_conc": null, "num_prompts": 4, "warmups_per_conc": null, "warmups": null}}}"#,
        )
        .unwrap();
        let mut figures = point_figures(&[], 1.0, FigureSpec { percentiles: &[99.0], gpus: 1, goodput: None });
        figures.output_throughput = tput;
        figures.latency_ms.insert("median_ttft_ms".into(), ttft);
        figures.latency_ms.insert("median_tpot_ms".into(), tpot);
        j.points.push(PointResult { osl: 16, ..PointResult::fixture(4, 4, figures) });
        j
    }

    #[test]
    fn costs_between_tiers() {
        let r = OverheadReport::from_jobs(&[job(100.0, 50.0, 10.0), job(95.0, 52.0, 10.5), job(80.0, 60.0, 12.0)]);
        let (row, costs) = &r.rows[0];
        assert_eq!(row.output_throughput, [Some(100.0), Some(95.0), Some(80.0)]);
        assert!((costs[0].ttft_ms.unwrap() - 2.0).abs() < 1e-9);
        assert!((costs[0].tpot_pct.unwrap() - 5.0).abs() < 1e-9);
        assert!((costs[1].tpot_ms.unwrap() - 1.5).abs() < 1e-9);
        assert!((costs[1].throughput_pct.unwrap() - (80.0 / 95.0 - 1.0) * 100.0).abs() < 1e-9);
        let md = r.markdown();
        assert!(md.contains("| 64/16 | 4 | 100.00 / 95.00 / 80.00 |"), "{md}");
        // A tier that did not run leaves its cells empty instead of failing.
        let r = OverheadReport::from_jobs(&[job(100.0, 50.0, 10.0)]);
        assert!(r.rows[0].1[0].ttft_ms.is_none());
    }
}
