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
use std::time::{Duration, Instant};

use anyhow::Result;

use super::client;
use super::job::{Bench, Engine, Job, Service};
use super::machine::{Facts, Source};
use super::master_config::Entry;
use super::sandbox::{self, Call, Script, Settings};
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

/// One point's evaluation.
struct PointEval {
    engine: Engine,
    bench: Bench,
    /// Lines of `vllm serve` and of the client or replay call.
    line: u32,
    bench_line: u32,
    /// Helper servers, machine facts read, stubbed checkpoint downloads
    /// (`(line, what)`, see [`sandbox::Outcome`]).
    services: Vec<(u32, String)>,
    facts_used: Vec<(u32, String)>,
    checkpoints: Vec<(u32, String)>,
    /// InferenceX's eval settings the launcher exported (`EVAL_*`) that the
    /// matrix point did not set.
    eval_env: BTreeMap<String, String>,
}

/// Why a point could not be evaluated: its problems, and the machine
/// commands it read that had no fact yet.
struct PointFailure {
    problems: Vec<String>,
    facts_needed: Vec<(u32, String)>,
    /// The launcher was stopped at its time limit.
    timed_out: bool,
}

impl From<String> for PointFailure {
    fn from(why: String) -> Self {
        PointFailure { problems: vec![why], facts_needed: vec![], timed_out: false }
    }
}

/// One point's evaluation with the machine facts `facts`, for at most `limit`.
fn evaluate_point(
    root: &Path,
    rel: &Path,
    p: &MatrixPoint,
    facts: &BTreeMap<String, String>,
    limit: Duration,
    settings: &Settings,
) -> Result<PointEval, PointFailure> {
    let outcome = sandbox::evaluate(&Script { root, rel }, &p.env, facts, limit, settings)?;
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
        return Err(PointFailure { problems, facts_needed: outcome.facts_needed, timed_out: outcome.timed_out });
    }
    let (served, (bench, bench_line)) = (served.expect("no problems"), bench.expect("no problems"));
    let engine = engine_of(served, &p.env).map_err(|why| at_line(served.line, &why))?;
    let eval_env = served.env.iter().filter(|(k, _)| is_eval_var(k) && !p.env.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok(PointEval {
        engine,
        bench,
        line: served.line,
        bench_line,
        services: outcome.services,
        facts_used: outcome.facts_used,
        checkpoints: outcome.checkpoints,
        eval_env,
    })
}

/// Rounds of evaluation: a fact can open a branch that reads another, and
/// file facts come one per round (the launcher stops at the first unknown
/// file: the Kimi-K3 B300 launcher tries up to 16 RDMA rails in turn).
const FACT_ROUNDS: usize = 20;

/// Evaluates the launcher at every point, resolving the machine facts the
/// points read ([`super::machine`]: given, or run here, then every point
/// again), and groups the points into jobs.
///
/// Each point runs for at most the settings' point limit and what is left
/// until `deadline`; after a point stopped at its limit, or past the
/// deadline, the remaining points are not run (they fail, saying why).
///
/// Errors: a machine fact without a value here (the command, its line and
/// the flag); otherwise every problem of every point, each as `point: line
/// N: reason` (the first few points' problems; the count of the rest).
pub fn evaluate(
    root: &Path,
    launcher: Launcher,
    e: &Entry,
    points: Vec<MatrixPoint>,
    facts: &mut Facts,
    settings: &Settings,
    deadline: Instant,
) -> Result<Vec<Job>, String> {
    let past_deadline = || {
        format!("not evaluated: the import ran past its limit of {} (--import-timeout)", sandbox::seconds(settings.import_limit))
    };
    for round in 1..=FACT_ROUNDS {
        let known: BTreeMap<String, String> = facts.known.iter().map(|(c, f)| (c.clone(), f.output.clone())).collect();
        // Why the points left are not run, once one is.
        let mut stop: Option<String> = None;
        let evaluated: Vec<(MatrixPoint, Result<(std::path::PathBuf, PointEval), PointFailure>)> = points
            .iter()
            .map(|p| {
                let left = deadline.saturating_duration_since(Instant::now());
                if stop.is_none() && left.is_zero() {
                    stop = Some(past_deadline());
                }
                if let Some(why) = &stop {
                    return (p.clone(), Err(PointFailure::from(why.clone())));
                }
                let limit = settings.point_limit.min(left);
                let ev = launcher(p)
                    .map_err(PointFailure::from)
                    .and_then(|rel| evaluate_point(root, &rel, p, &known, limit, settings).map(|ev| (rel, ev)));
                if let Err(f) = &ev {
                    if f.timed_out {
                        stop = Some(if limit < settings.point_limit {
                            past_deadline()
                        } else {
                            "not evaluated: an earlier point ran past the launcher's time limit (--launcher-timeout)".to_string()
                        });
                    }
                }
                (p.clone(), ev)
            })
            .collect();
        if stop.is_some() {
            return group(e, evaluated);
        }
        let mut needed: Vec<(String, u32, String)> = Vec::new();
        for (p, ev) in &evaluated {
            if let Err(f) = ev {
                let rel = launcher(p).map(|r| r.display().to_string()).unwrap_or_default();
                needed.extend(f.facts_needed.iter().filter(|(_, c)| !known.contains_key(c)).map(|(l, c)| (c.clone(), *l, rel.clone())));
            }
        }
        needed.sort();
        needed.dedup_by(|a, b| a.0 == b.0);
        if needed.is_empty() || round == FACT_ROUNDS {
            return group(e, evaluated);
        }
        let missing: Vec<String> = needed
            .iter()
            .filter_map(|(cmd, line, rel)| {
                facts.resolve(cmd).err().map(|why| {
                    if super::machine::is_file_fact(cmd) {
                        format!(
                            "{rel} line {line}: the launcher reads the file {cmd}, which depends on the machine it runs on, and here it {why}: import on the machine the recipe is for, or give its content: --machine-fact '{cmd}=CONTENT'"
                        )
                    } else {
                        format!(
                            "{rel} line {line}: the output of `{cmd}` is used, but it depends on the machine it runs on, and here `{cmd}` {why}: import on the machine the recipe is for, or give its output: --machine-fact '{cmd}=OUTPUT'"
                        )
                    }
                })
            })
            .collect();
        if !missing.is_empty() {
            return Err(format!("entry {}: {} machine fact(s) unknown:\n  {}", e.key, missing.len(), missing.join("\n  ")));
        }
    }
    unreachable!("the last round returns")
}

/// Groups evaluated points into jobs (points whose engine and workload
/// settings agree share one).
///
/// Errors: see [`evaluate`].
fn group(e: &Entry, evaluated: Vec<(MatrixPoint, Result<(std::path::PathBuf, PointEval), PointFailure>)>) -> Result<Vec<Job>, String> {
    let mut jobs: Vec<Job> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut failed_points = 0;
    for (p, ev) in evaluated {
        let (rel, ev) = match ev {
            Ok(ok) => ok,
            Err(f) => {
                failed_points += 1;
                if failed_points <= 3 {
                    let label = p.label();
                    failures.extend(f.problems.iter().map(|pr| format!("{label}: {pr}")));
                }
                continue;
            }
        };
        let PointEval { engine, bench, line, bench_line, services, facts_used, checkpoints, eval_env } = ev;
        let shared = jobs.iter().enumerate().find_map(|(i, j)| (j.engine == engine).then(|| j.joined(&bench, p.conc).map(|b| (i, b))).flatten());
        let job = match shared {
            Some((i, joined)) => {
                jobs[i].bench = joined;
                &mut jobs[i]
            }
            None => {
                jobs.push(Job {
                    name: String::new(),
                    engine,
                    bench,
                    launcher: rel,
                    line,
                    bench_line,
                    points: vec![],
                    services: vec![],
                    facts_used: vec![],
                    checkpoints: vec![],
                    eval_env,
                    roles: None,
                });
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
        for f in facts_used {
            if !job.facts_used.contains(&f) {
                job.facts_used.push(f);
            }
        }
        for c in checkpoints {
            if !job.checkpoints.contains(&c) {
                job.checkpoints.push(c);
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
/// offload points); `machine_facts` are the `--machine-fact` values;
/// `settings` the sandbox's time limits (the import's counted from here).
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
    machine_facts: &[String],
    settings: &Settings,
) -> Result<Imported, String> {
    let deadline = Instant::now() + settings.import_limit;
    let points = workflow::matrix(e, scenario, hardware)?;
    // This machine answers for the recipe's only when it is that kind of machine.
    let target = super::machine::Target::of(e.runner.as_deref(), &crate::report::host::Host::detect().gpus);
    let mut facts = Facts::new(machine_facts, target)?;
    let jobs = evaluate(root, launcher, e, points, &mut facts, settings, deadline)?;
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
    notes.extend(fact_notes(&jobs, &facts));
    notes.extend(jobs.iter().flat_map(Job::notes));
    let doc = super::render::render(e, &jobs, &notes, evals);
    super::render::verify(&doc, &jobs)?;
    Ok(Imported { toml: doc.toml, jobs, notes })
}

/// The machine facts the jobs read (command, lines, output, source) and the
/// checkpoints counted as present, one note each; and `--machine-fact`
/// values no launcher read.
fn fact_notes(jobs: &[Job], facts: &Facts) -> Vec<String> {
    let mut used: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut checkpoints: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for j in jobs {
        for (line, cmd) in &j.facts_used {
            used.entry(cmd).or_default().push(*line);
        }
        for (line, what) in &j.checkpoints {
            checkpoints.entry(what).or_default().push(*line);
        }
    }
    let lines = |l: &mut Vec<u32>| {
        l.sort_unstable();
        l.dedup();
        l.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    };
    let mut out = Vec::new();
    for (cmd, mut at) in used {
        let Some(f) = facts.known.get(cmd) else { continue };
        let source = match f.source {
            Source::Given => "given with --machine-fact",
            Source::Ran => "run on the machine that imported",
            Source::Read => "read on the machine that imported",
        };
        out.push(format!("machine fact: `{cmd}` (line {}) read as {:?} ({source}): the recipe holds what the launcher made of it", lines(&mut at), f.output.trim_end()));
    }
    for (what, mut at) in checkpoints {
        let dir = what.split_whitespace().skip_while(|w| *w != "--local-dir").nth(1).or_else(|| what.split("--local-dir=").nth(1)).unwrap_or("");
        out.push(format!(
            "checkpoint: `{what}` (line {}) is not run in the import: the checkpoint at {dir} is counted as present (the launcher's own completeness check passes on a placeholder config.json; no weights were looked at); it must be there where the recipe runs",
            lines(&mut at)
        ));
    }
    for g in facts.unused_given() {
        out.push(format!("--machine-fact {g:?}: no launcher read that command's output or that file"));
    }
    out
}

/// `enginebench import inferencex`: writes the recipe to `output` (or
/// stdout) and the notes to stderr. Exit 0, or 2 (nothing written) when a
/// point cannot be evaluated.
pub fn run_import(
    launcher: &Path,
    master: (&Path, &str),
    scenario: Option<&str>,
    machine_facts: &[String],
    settings: &Settings,
    output: Option<&Path>,
) -> Result<crate::error::ExitStatus> {
    let (path, key) = master;
    let yaml = std::fs::read_to_string(path).map_err(|e| usage(format!("cannot read master config {}: {e}", path.display())))?;
    let entry = super::master_config::read_entry(&yaml, key).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let abs = launcher.canonicalize().map_err(|e| usage(format!("cannot read launcher {}: {e}", launcher.display())))?;
    let (root, name) = (abs.parent().unwrap_or(Path::new("/")), abs.file_name().map(Path::new).unwrap_or(Path::new("")));
    let checkout = super::confined::root_of_master(path).map_err(usage)?;
    let hardware = workflow::hardware_for(path, &entry, &checkout).map_err(usage)?;
    let evals = super::render::CheckoutEvals::beside(path, &checkout).map_err(usage)?;
    let imported =
        import_with(root, &|_| Ok(name.to_path_buf()), &entry, scenario, hardware, &evals, machine_facts, settings).map_err(usage)?;
    write_out(&imported, output)
}

/// Prints the jobs and notes to stderr and writes the TOML.
pub fn write_out(imported: &Imported, output: Option<&Path>) -> Result<crate::error::ExitStatus> {
    for j in &imported.jobs {
        errln!("job {}: {} point(s), vllm serve at line {}", j.name, j.points.len(), j.line);
    }
    for n in &imported.notes {
        errln!("note: {}", super::render::printable(n));
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
