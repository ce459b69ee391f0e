//! Master-config entry + launcher to a recipe: every search-space point is
//! evaluated in the [sandbox](super::sandbox) with the environment
//! InferenceX's workflow gives it ([`super::workflow`]); points whose
//! `vllm serve` argv and exported environment and whose client (or
//! replay) settings are identical share one job; each other configuration
//! becomes a variant named after what differs (`tp8-ep8`, `mtp`, `8k1k`).
//! The jobs' types are in [`super::job`]. The TOML ([`super::render`]) is
//! parsed back with the recipe loader, and each job's flags, environment,
//! points and workload settings are compared with what was recorded before
//! anything is written.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::client;
use super::job::{Bench, Engine, Job, Service};
use super::master_config::Entry;
use super::sandbox::{self, Call, Script};
use super::workflow::{self, Hardware, Kind, MatrixPoint};
use crate::error::usage;
use crate::recipe::args::is_flag;

/// Flags that only the API server uses; dropped (the engine runs in-process).
pub const SERVER_FLAGS: [&str; 2] = ["--port", "--host"];

/// The outcome of an import.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The recipe, as TOML (already parsed back and compared).
    pub toml: String,
    pub jobs: Vec<Job>,
    /// For a person to read: what was dropped or assumed.
    pub notes: Vec<String>,
}

/// Picks the launcher (relative to the root) for a point.
pub type Launcher<'a> = &'a dyn Fn(&MatrixPoint) -> Result<std::path::PathBuf, String>;

/// The one call of a kind a point made (identical repeats count once).
///
/// Errors: none, or several that differ (naming their lines).
fn one_call<'a>(calls: &'a [Call], what: &str, same: impl Fn(&Call, &Call) -> bool) -> Result<&'a Call, String> {
    let mut distinct: Vec<&Call> = Vec::new();
    for c in calls {
        if !distinct.iter().any(|d| same(d, c)) {
            distinct.push(c);
        }
    }
    match distinct.as_slice() {
        [] => Err(format!("{what} never ran")),
        [one] => Ok(one),
        many => Err(format!(
            "{what} ran {} times with different arguments (lines {}): which one is the benchmark is ambiguous",
            many.len(),
            many.iter().map(|c| c.line.to_string()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// One point's evaluation: its engine, workload and helper servers.
fn evaluate_point(root: &Path, rel: &Path, p: &MatrixPoint) -> Result<(Engine, Bench, u32, u32, Vec<(u32, String)>, BTreeMap<String, String>), Vec<String>> {
    let outcome = sandbox::evaluate(&Script { root, rel }, &p.env).map_err(|e| vec![e])?;
    let mut problems: Vec<String> = outcome.problems.iter().map(|(l, w)| at_line(*l, w)).collect();
    let served = one_call(&outcome.serves, "`vllm serve`", |a, b| a.args == b.args && a.env == b.env).map_err(|e| problems.push(e)).ok();
    let bench = match p.kind {
        Kind::FixedSeqLen => one_call(&outcome.clients, "the client (run_benchmark_serving)", |a, b| a.args == b.args)
            .and_then(|c| client::client(c, p).map(|s| (Bench::Fixed(s), c.line)).map_err(|e| at_line(c.line, &e))),
        Kind::Agentic => one_call(&outcome.replays, "the agentic replay (build_replay_cmd)", |a, b| a.env == b.env).and_then(|c| {
            let trace = match one_call(&outcome.traces, "resolve_trace_source", |a, b| a.args == b.args) {
                Ok(t) => Some(t),
                Err(_) if outcome.traces.is_empty() => None,
                Err(e) => return Err(e),
            };
            client::replay(c, trace).map(|r| (Bench::Agentic(r), c.line)).map_err(|e| at_line(c.line, &e))
        }),
    };
    let bench = bench.map_err(|e| problems.push(e)).ok();
    if !problems.is_empty() {
        return Err(problems);
    }
    let (served, (bench, bench_line)) = (served.expect("no problems"), bench.expect("no problems"));
    let engine = engine_of(served, &p.env).map_err(|why| vec![at_line(served.line, &why)])?;
    let eval_env = served.env.iter().filter(|(k, _)| is_eval_var(k) && !p.env.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok((engine, bench, served.line, bench_line, outcome.services, eval_env))
}

/// Evaluates the launcher at every point and groups the points into jobs.
///
/// Errors: every problem of every point, each as `point: line N: reason`
/// (the first few points' problems; the count of the rest).
pub fn evaluate(root: &Path, launcher: Launcher, e: &Entry, points: Vec<MatrixPoint>) -> Result<Vec<Job>, String> {
    let mut jobs: Vec<Job> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut failed_points = 0;
    for p in points {
        let label = p.label();
        let evaluated = launcher(&p).map_err(|why| vec![why]).and_then(|rel| evaluate_point(root, &rel, &p).map(|ev| (rel, ev)));
        let (rel, (engine, bench, line, bench_line, services, eval_env)) = match evaluated {
            Ok(ok) => ok,
            Err(problems) => {
                failed_points += 1;
                if failed_points <= 3 {
                    failures.extend(problems.iter().map(|pr| format!("{label}: {pr}")));
                }
                continue;
            }
        };
        let shared = jobs.iter().enumerate().find_map(|(i, j)| (j.engine == engine).then(|| j.joined(&bench, p.conc).map(|b| (i, b))).flatten());
        let job = match shared {
            Some((i, joined)) => {
                jobs[i].bench = joined;
                &mut jobs[i]
            }
            None => {
                jobs.push(Job { name: String::new(), engine, bench, launcher: rel, line, bench_line, points: vec![], services: vec![], eval_env });
                jobs.last_mut().expect("just pushed")
            }
        };
        // Overlapping search-space entries list a point twice: it is run once.
        if job.points.iter().any(|q| (q.kind, q.isl, q.osl, q.conc) == (p.kind, p.isl, p.osl, p.conc)) {
            continue;
        }
        for (sline, name) in services {
            match job.services.iter_mut().find(|s| s.name == name && s.line == sline) {
                Some(s) => s.concs.push(p.conc),
                None => job.services.push(Service { name, line: sline, concs: vec![p.conc] }),
            }
        }
        job.points.push(p);
    }
    if failed_points > 0 {
        if failed_points > 3 {
            failures.push(format!("... and {} more point(s) failed", failed_points - 3));
        }
        return Err(format!("entry {}: {failed_points} point(s) could not be evaluated:\n  {}", e.key, failures.join("\n  ")));
    }
    name_jobs(&mut jobs);
    Ok(jobs)
}

fn at_line(line: u32, what: &str) -> String {
    if line > 0 { format!("line {line}: {what}") } else { what.to_string() }
}

/// The engine configuration of one recorded `vllm serve`.
fn engine_of(s: &Call, given: &BTreeMap<String, String>) -> Result<Engine, String> {
    let mut args = s.args.clone();
    let model = match args.first() {
        Some(m) if !is_flag(m) => args.remove(0),
        _ => {
            let at = args.iter().position(|a| a == "--model").ok_or("`vllm serve` has no model argument")?;
            let m = args.get(at + 1).cloned().ok_or("--model has no value")?;
            args.drain(at..at + 2);
            m
        }
    };
    if model.is_empty() {
        return Err("the model argument of `vllm serve` is empty".into());
    }
    for flag in SERVER_FLAGS {
        crate::recipe::args::remove_flag(&mut args, flag);
    }
    if let Some(c) = args.iter().position(|a| a == "--config" || a.starts_with("--config=")) {
        let file = args[c].strip_prefix("--config=").or(args.get(c + 1).map(String::as_str)).unwrap_or("");
        return Err(format!(
            "`vllm serve --config {file}` reads more flags from a file the launcher writes: not imported (its flags would be missing)"
        ));
    }
    let env = s.env.iter().filter(|(k, _)| !given.contains_key(*k) && !is_eval_var(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok(Engine { model, args, env })
}

/// InferenceX's eval settings (`EVAL_CONCURRENT_REQUESTS`, `EVAL_TASKS_DIR`,
/// ...): read by its `run_eval`, not by the engine.
fn is_eval_var(name: &str) -> bool {
    name.starts_with("EVAL_")
}

/// Names each job after what tells it apart: TP, EP (> 1), DP-attention,
/// spec-decoding and KV offload where jobs differ in them, then the
/// scenario and the concurrencies only where still needed, e.g.
/// `tp8-ep8`, `tp4-mtp-8k1k`, `tp8-vllm-simple`.
fn name_jobs(jobs: &mut [Job]) {
    type Field = fn(&MatrixPoint) -> String;
    let engine_fields: [Field; 5] = [
        |p| format!("tp{}", p.tp),
        |p| if p.ep > 1 { format!("ep{}", p.ep) } else { String::new() },
        |p| if p.dp_attn { "dpa".into() } else { String::new() },
        |p| if p.spec == "none" { String::new() } else { p.spec.replace('_', "-") },
        |p| p.offload.clone().filter(|o| o != "none").unwrap_or_default(),
    ];
    let render = |j: &Job, f: Field| {
        let mut v: Vec<String> = j.points.iter().map(f).collect();
        v.sort();
        v.dedup();
        v.retain(|s| !s.is_empty());
        v.join("_")
    };
    let concs = |j: &Job| {
        let mut c: Vec<u32> = j.points.iter().map(|p| p.conc).collect();
        c.sort_unstable();
        c.dedup();
        format!("conc{}", c.iter().map(u32::to_string).collect::<Vec<_>>().join("_"))
    };
    let mut names: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| engine_fields.iter().filter(|&&f| jobs.iter().any(|k| render(k, f) != render(&jobs[0], f))).map(|&f| render(j, f)).collect())
        .collect();
    let unique = |names: &[Vec<String>]| {
        let joined: Vec<String> = names.iter().map(|n| n.join("-")).collect();
        joined.iter().enumerate().all(|(i, n)| !joined[..i].contains(n))
    };
    if !unique(&names) {
        for (n, j) in names.iter_mut().zip(jobs.iter()) {
            n.push(render(j, |p| p.scenario()));
        }
    }
    if !unique(&names) {
        for (n, j) in names.iter_mut().zip(jobs.iter()) {
            n.push(concs(j));
        }
    }
    let mut taken: Vec<String> = Vec::new();
    for (i, (j, parts)) in jobs.iter_mut().zip(names).enumerate() {
        let parts: Vec<String> = parts.into_iter().filter(|s| !s.is_empty()).collect();
        let mut name = if parts.is_empty() { format!("job{}", i + 1) } else { parts.join("-") };
        if name == crate::recipe::config::BASE || taken.contains(&name) {
            name = format!("{name}-{}", i + 1);
        }
        taken.push(name.clone());
        j.name = name;
    }
}

/// Evaluates and renders, then parses the recipe back and checks that every
/// job's flags, environment, points and workload settings are exactly the
/// recorded ones. `hardware` is the runner's (DRAM budgets of agentic
/// offload points).
///
/// Errors: any point that cannot be evaluated (with its line), jobs with
/// different models, or a recipe that does not reproduce the jobs.
pub fn import_with(
    root: &Path,
    launcher: Launcher,
    e: &Entry,
    scenario: Option<&str>,
    hardware: Option<Hardware>,
    evals: &super::render::CheckoutEvals,
) -> Result<Imported, String> {
    let points = workflow::matrix(e, scenario, hardware)?;
    let jobs = evaluate(root, launcher, e, points)?;
    if let Some(other) = jobs.iter().find(|j| j.engine.model != jobs[0].engine.model) {
        return Err(format!(
            "jobs {} and {} serve different models ({} and {}): one recipe has one model",
            jobs[0].name, other.name, jobs[0].engine.model, other.engine.model
        ));
    }
    let mut notes = vec![format!("{} dropped: the engine runs in-process, there is no server", SERVER_FLAGS.join(" and "))];
    if jobs[0].engine.model.starts_with('/') {
        notes.push(format!("the model is a local path ({}): it must exist where the recipe runs", jobs[0].engine.model));
    }
    if let Some(r) = jobs.iter().find_map(|j| match &j.bench {
        Bench::Agentic(r) => Some(r),
        Bench::Fixed(_) => None,
    }) {
        notes.extend(super::render::agentic_notes(r));
    }
    notes.extend(jobs.iter().flat_map(Job::notes));
    let toml = super::render::render(e, &jobs, &notes, evals);
    super::render::verify(&toml, &jobs)?;
    Ok(Imported { toml, jobs, notes })
}

/// `enginebench import inferencex`: writes the recipe to `output` (or
/// stdout) and the notes to stderr. Exit 0, or 2 (nothing written) when a
/// point cannot be evaluated.
pub fn run_import(launcher: &Path, master: (&Path, &str), scenario: Option<&str>, output: Option<&Path>) -> Result<crate::error::ExitStatus> {
    let (path, key) = master;
    let yaml = std::fs::read_to_string(path).map_err(|e| usage(format!("cannot read master config {}: {e}", path.display())))?;
    let entry = super::master_config::read_entry(&yaml, key).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let abs = launcher.canonicalize().map_err(|e| usage(format!("cannot read launcher {}: {e}", launcher.display())))?;
    let (root, name) = (abs.parent().unwrap_or(Path::new("/")), abs.file_name().map(Path::new).unwrap_or(Path::new("")));
    let hardware = workflow::hardware_for(path, &entry).map_err(usage)?;
    let evals = super::render::CheckoutEvals::beside(path).map_err(usage)?;
    let imported = import_with(root, &|_| Ok(name.to_path_buf()), &entry, scenario, hardware, &evals).map_err(usage)?;
    write_out(&imported, output)
}

/// Prints the jobs and notes to stderr and writes the TOML.
pub fn write_out(imported: &Imported, output: Option<&Path>) -> Result<crate::error::ExitStatus> {
    for j in &imported.jobs {
        errln!("job {}: {} point(s), vllm serve at line {}", j.name, j.points.len(), j.line);
    }
    for n in &imported.notes {
        errln!("note: {n}");
    }
    match output {
        Some(p) => {
            std::fs::write(p, &imported.toml).map_err(|e| usage(format!("cannot write {}: {e}", p.display())))?;
            errln!("wrote {}", p.display());
        }
        None => out!("{}", imported.toml),
    }
    Ok(crate::error::ExitStatus::Ok)
}
