//! Master-config entry + launcher to a recipe: every search-space point is
//! evaluated in the [sandbox](super::sandbox) with the environment
//! InferenceX's workflow gives it ([`super::workflow`]); points whose
//! `vllm serve` argv and exported environment and whose client (or
//! replay) settings are identical share one job; each other configuration
//! becomes a variant named after what differs (`tp8-ep8`, `mtp`, `8k1k`).
//! The TOML ([`super::render`]) is parsed back with the recipe loader, and
//! each job's flags, environment, points and workload settings are compared
//! with what was recorded before anything is written.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::client::{self, Client, Prompts, Replay};
use super::master_config::Entry;
use super::sandbox::{self, Call, Script};
use super::workflow::{self, Hardware, Kind, MatrixPoint};
use crate::error::usage;
use crate::recipe::args::is_flag;

/// Flags that only the API server uses; dropped (the engine runs in-process).
pub const SERVER_FLAGS: [&str; 2] = ["--port", "--host"];

/// One engine configuration the launcher produced.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Engine {
    /// The `vllm serve` model argument.
    pub model: String,
    /// The flags after the model (server-only flags removed).
    pub args: Vec<String>,
    /// Variables the launcher exported that InferenceX's workflow does not set.
    pub env: BTreeMap<String, String>,
}

impl Engine {
    /// Whether this engine asks for data parallelism, by flag or by the
    /// launcher's `VLLM_DP_SIZE` ([`crate::recipe::parallel::data_parallel`]).
    pub fn data_parallel(&self) -> Option<crate::recipe::parallel::DataParallel> {
        crate::recipe::parallel::data_parallel(&self.args, self.env.get(crate::recipe::parallel::DP_SIZE_VAR).map(String::as_str))
    }
}

/// What the points of a job send: the fixed-length client's settings or
/// the agentic replay's.
#[derive(Debug, Clone, PartialEq)]
pub enum Bench {
    Fixed(Client),
    Agentic(Replay),
}

/// A helper server a launcher starts beside the engine at some points.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    /// `mooncake_master`, `vllm-router`, `lmcache server`.
    pub name: String,
    pub line: u32,
    /// The concurrencies of the job's points that start it.
    pub concs: Vec<u32>,
}

impl Service {
    /// Why enginebench does not reproduce it.
    pub fn reason(&self) -> &'static str {
        match self.name.as_str() {
            "mooncake_master" => {
                "Mooncake's store master: a separate server the engine's MooncakeStoreConnector registers with; enginebench starts only the engine, so the connector finds no master"
            }
            "vllm-router" => {
                "vLLM's router: an HTTP front that pins each session to one data-parallel rank; in-process there is no HTTP server (requests go to the engine directly) and no data parallelism"
            }
            "lmcache server" => {
                "LMCache's multi-process cache server: the engine's LMCacheMPConnector connects to it; enginebench starts only the engine"
            }
            _ => "a separate server process; enginebench starts only the engine",
        }
    }
}

/// A job: one engine configuration, one workload setting, and the points.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub engine: Engine,
    pub bench: Bench,
    /// The launcher (relative to the checkout or its folder).
    pub launcher: std::path::PathBuf,
    /// The launcher's line of `vllm serve`.
    pub line: u32,
    /// The line of the client call or of `build_replay_cmd`.
    pub bench_line: u32,
    pub points: Vec<MatrixPoint>,
    /// Helper servers the launcher starts, not reproducible in-process.
    pub services: Vec<Service>,
}

impl Job {
    /// The workload settings of this job with a point at concurrency `conc`
    /// whose client settings are `bench` added, or `None` when they cannot
    /// share one setting. Clients that differ only in the number of prompts
    /// share a job when one rule covers every point: a multiple of the
    /// concurrency (`CONC * 10`) or one count (`64`).
    fn joined(&self, bench: &Bench, conc: u32) -> Option<Bench> {
        let (Bench::Fixed(mine), Bench::Fixed(theirs)) = (&self.bench, bench) else {
            return (self.bench == *bench).then(|| bench.clone());
        };
        if (Client { prompts: theirs.prompts, ..mine.clone() }) != *theirs {
            return None;
        }
        let mut counts: Vec<(u32, u32)> = self.points.iter().map(|p| (p.conc, mine.prompts.count(p.conc))).collect();
        counts.push((conc, theirs.prompts.count(conc)));
        let prompts = Prompts::covering(&counts)?;
        Some(Bench::Fixed(Client { prompts, ..mine.clone() }))
    }

    /// The TP all points share (InferenceX's matrix TP), if one.
    pub fn tp(&self) -> Option<u32> {
        let tp = self.points.first()?.tp;
        self.points.iter().all(|p| p.tp == tp).then_some(tp)
    }

    /// For a person: how this job's run differs from InferenceX's, beyond
    /// what the recipe holds (one line each).
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.services {
            let concs: Vec<String> = s.concs.iter().map(u32::to_string).collect();
            out.push(format!(
                "job {}: conc {}: the launcher starts {} (line {}): not reproducible in-process: {}",
                self.name,
                concs.join(","),
                s.name,
                s.line,
                s.reason()
            ));
        }
        if let Some(dp) = self.engine.data_parallel() {
            out.push(format!(
                "job {}: vLLM runs with {}: not reproducible in-process (vLLM's in-process engine waits for {} peer engine(s) that never start); run and recipe check refuse it, and a run from the checkout leaves it out",
                self.name,
                dp.spelled(),
                dp.size - 1
            ));
        }
        match &self.bench {
            Bench::Fixed(c) => {
                if c.dsv4 {
                    out.push(format!(
                        "job {}: client --dsv4: InferenceX renders each prompt with its DeepSeek-V4 encoder (encoding_dsv4, thinking mode); not reproduced: workload chat_random uses the tokenizer's chat template, so the framing tokens around the random ids differ",
                        self.name
                    ));
                } else if c.chat {
                    out.push(format!("job {}: client --use-chat-template: workload chat_random (the tokenizer's chat template)", self.name));
                }
                out.extend(c.unsupported.iter().map(|u| format!("job {}: not reproduced: {u}", self.name)));
            }
            Bench::Agentic(r) => out.extend(r.unsupported.iter().map(|u| format!("job {}: not reproduced: {u}", self.name))),
        }
        out
    }
}

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
fn evaluate_point(root: &Path, rel: &Path, p: &MatrixPoint) -> Result<(Engine, Bench, u32, u32, Vec<(u32, String)>), Vec<String>> {
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
    Ok((engine, bench, served.line, bench_line, outcome.services))
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
        let (rel, (engine, bench, line, bench_line, services)) = match evaluated {
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
                jobs.push(Job { name: String::new(), engine, bench, launcher: rel, line, bench_line, points: vec![], services: vec![] });
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
    let env = s.env.iter().filter(|(k, _)| !given.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok(Engine { model, args, env })
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
pub fn import_with(root: &Path, launcher: Launcher, e: &Entry, scenario: Option<&str>, hardware: Option<Hardware>) -> Result<Imported, String> {
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
    let toml = super::render::render(e, &jobs, &notes);
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
    let hardware = super::checkout::hardware_for(path, &entry).map_err(usage)?;
    let imported = import_with(root, &|_| Ok(name.to_path_buf()), &entry, scenario, hardware).map_err(usage)?;
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
