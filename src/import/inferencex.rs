//! Master-config entry + launcher to a recipe: every search-space point is
//! evaluated in the [sandbox](super::sandbox) with the environment
//! InferenceX's workflow gives it ([`workflow_env`]); points whose
//! `vllm serve` argv and exported environment are identical share one job;
//! each other configuration becomes a variant named after what differs
//! (`tp8-ep8`, `mtp`, `8k1k`). The TOML is parsed back with the recipe
//! loader, and each job's flags, environment and points are compared with
//! what was recorded before anything is written.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::master_config::{Entry, Space};
use super::sandbox::{self, Script};
use crate::error::usage;
use crate::recipe::args::is_flag;

/// Flags that only the API server uses; dropped (the engine runs in-process).
const SERVER_FLAGS: [&str; 2] = ["--port", "--host"];
/// `PORT` as InferenceX's runners export it.
const PORT: &str = "8888";
/// `RANDOM_RANGE_RATIO` of InferenceX's benchmark workflow.
pub const RANDOM_RANGE_RATIO: f64 = 0.8;

/// One point of InferenceX's sweep matrix for an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixPoint {
    pub isl: u32,
    pub osl: u32,
    pub conc: u32,
    pub tp: u32,
    pub ep: u32,
    pub dp_attn: bool,
    /// `none`, `mtp`, `draft_model`, ...
    pub spec: String,
    /// The environment the launcher gets.
    pub env: BTreeMap<String, String>,
}

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

/// A job: one engine configuration and the points that use it.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub engine: Engine,
    /// The launcher (relative to the checkout or its folder).
    pub launcher: std::path::PathBuf,
    /// The launcher's line of `vllm serve`.
    pub line: u32,
    pub points: Vec<MatrixPoint>,
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

/// "1k", "8k", or the number (InferenceX's `seq_len_to_str`).
fn len_str(n: u32) -> String {
    if n % 1024 == 0 { format!("{}k", n / 1024) } else { n.to_string() }
}

/// The scenario name InferenceX uses, e.g. `8k1k`.
pub fn scenario_name(isl: u32, osl: u32) -> String {
    format!("{}{}", len_str(isl), len_str(osl))
}

/// The environment InferenceX's benchmark workflow (`benchmark-tmpl.yml`),
/// its sweep generator (`generate_sweep_configs.py`: EP 1, DP-attention
/// false and spec-decoding none by default, `MAX_MODEL_LEN = ISL + OSL +
/// 256`) and a single-node runner (`PORT`) give one point. `MODEL_PATH` is
/// the model id: where a runner keeps local copies is the site's, not the
/// recipe's. Benchmark context: `RUN_EVAL` and `EVAL_ONLY` false.
pub fn workflow_env(e: &Entry, sp: &Space, isl: u32, osl: u32, conc: u32) -> BTreeMap<String, String> {
    let model = e.model.clone().unwrap_or_default();
    let prefix = e.model_prefix.clone().unwrap_or_else(|| e.key.split('-').next().unwrap_or("").to_string());
    let precision = e.precision.clone().unwrap_or_default();
    let framework = e.framework.clone().unwrap_or_else(|| "vllm".into());
    let runner = e.runner.clone().unwrap_or_default();
    let exp = format!("{prefix}_{}", scenario_name(isl, osl));
    let tp = sp.tp.unwrap_or(1);
    let one = |v: Option<u32>| v.unwrap_or(1).to_string();
    let pairs: Vec<(&str, String)> = vec![
        ("MODEL", model.clone()),
        ("MODEL_PATH", model),
        ("MODEL_PREFIX", prefix),
        ("EXP_NAME", exp.clone()),
        ("IMAGE", e.image.clone().unwrap_or_default()),
        ("FRAMEWORK", framework.clone()),
        ("PRECISION", precision.clone()),
        ("RUNNER", runner.clone()),
        ("RUNNER_TYPE", runner.clone()),
        ("TP", tp.to_string()),
        ("PP_SIZE", one(sp.pp)),
        ("DCP_SIZE", one(sp.dcp)),
        ("PCP_SIZE", one(sp.pcp)),
        ("EP_SIZE", one(sp.ep)),
        ("DP_ATTENTION", sp.dp_attn.unwrap_or(false).to_string()),
        ("CONC", conc.to_string()),
        ("SPEC_DECODING", sp.spec_decoding.clone().unwrap_or_else(|| "none".into())),
        ("DISAGG", "false".into()),
        ("RUN_EVAL", "false".into()),
        ("EVAL_ONLY", "false".into()),
        ("SCENARIO_TYPE", "fixed-seq-len".into()),
        ("SCENARIO_SUBDIR", "fixed_seq_len/".into()),
        ("IS_AGENTIC", "0".into()),
        ("ISL", isl.to_string()),
        ("OSL", osl.to_string()),
        ("MAX_MODEL_LEN", (isl + osl + 256).to_string()),
        ("RANDOM_RANGE_RATIO", RANDOM_RANGE_RATIO.to_string()),
        ("PORT", PORT.into()),
        ("HF_HUB_CACHE", "/mnt/hf_hub_cache/".into()),
        ("RESULT_DIR", "/workspace/results".into()),
        ("RESULT_FILENAME", format!("{exp}_{precision}_{framework}_tp{tp}_conc{conc}_{runner}")),
        ("GITHUB_WORKSPACE", "/workspace".into()),
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
    ];
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Every point of the entry's fixed-seq-len scenarios (only `scenario`,
/// e.g. `8k1k`, when given).
///
/// Errors: a scenario name the entry does not have (naming those it has),
/// or an entry without fixed-seq-len points.
pub fn matrix(e: &Entry, scenario: Option<&str>) -> Result<Vec<MatrixPoint>, String> {
    let names: Vec<String> = e.scenarios.iter().map(|s| scenario_name(s.isl, s.osl)).collect();
    if let Some(want) = scenario {
        if !names.iter().any(|n| n == want) {
            return Err(format!("entry {} has no scenario {want:?}; it has: {}", e.key, names.join(", ")));
        }
    }
    let mut out = Vec::new();
    for (s, name) in e.scenarios.iter().zip(&names) {
        if scenario.is_some_and(|w| w != name) {
            continue;
        }
        for sp in &s.spaces {
            for conc in sp.concs() {
                out.push(MatrixPoint {
                    isl: s.isl,
                    osl: s.osl,
                    conc,
                    tp: sp.tp.unwrap_or(1),
                    ep: sp.ep.unwrap_or(1),
                    dp_attn: sp.dp_attn.unwrap_or(false),
                    spec: sp.spec_decoding.clone().unwrap_or_else(|| "none".into()),
                    env: workflow_env(e, sp, s.isl, s.osl, conc),
                });
            }
        }
    }
    if out.is_empty() {
        let why = if e.agentic { " (it has only agentic-coding scenarios: trace replay, not imported)" } else { "" };
        return Err(format!("entry {} has no fixed-seq-len search-space points{why}", e.key));
    }
    Ok(out)
}

/// Picks the launcher (relative to the root) for a point.
pub type Launcher<'a> = &'a dyn Fn(&MatrixPoint) -> Result<std::path::PathBuf, String>;

/// Evaluates the launcher at every point and groups the points into jobs.
///
/// Errors: every problem of every point, each as `point: line N: reason`
/// (the first few points' problems; the count of the rest).
pub fn evaluate(root: &Path, launcher: Launcher, e: &Entry, points: Vec<MatrixPoint>) -> Result<Vec<Job>, String> {
    let mut jobs: Vec<Job> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut failed_points = 0;
    for p in points {
        let label = format!("{} tp{} ep{} dp-attn {} spec {} conc {}", scenario_name(p.isl, p.osl), p.tp, p.ep, p.dp_attn, p.spec, p.conc);
        let rel = match launcher(&p) {
            Ok(rel) => rel,
            Err(why) => {
                failed_points += 1;
                failures.push(format!("{label}: {why}"));
                continue;
            }
        };
        let outcome = sandbox::evaluate(&Script { root, rel: &rel }, &p.env)?;
        let mut problems: Vec<String> = outcome.problems.iter().map(|(l, w)| at_line(*l, w)).collect();
        let distinct: Vec<&sandbox::Served> = {
            let mut d: Vec<&sandbox::Served> = Vec::new();
            for s in &outcome.serves {
                if !d.iter().any(|x| x.args == s.args && x.env == s.env) {
                    d.push(s);
                }
            }
            d
        };
        match distinct.len() {
            0 => problems.push("`vllm serve` never ran".into()),
            1 => {}
            n => problems.push(format!(
                "`vllm serve` ran {n} times with different flags (lines {}): which one is the benchmark is ambiguous",
                distinct.iter().map(|s| s.line.to_string()).collect::<Vec<_>>().join(", ")
            )),
        }
        if !problems.is_empty() {
            failed_points += 1;
            if failed_points <= 3 {
                failures.extend(problems.iter().map(|pr| format!("{label}: {pr}")));
            }
            continue;
        }
        let served = distinct[0];
        let engine = match engine_of(served, &p.env) {
            Ok(en) => en,
            Err(why) => {
                failed_points += 1;
                failures.push(format!("{label}: {}", at_line(served.line, &why)));
                continue;
            }
        };
        match jobs.iter_mut().find(|j| j.engine == engine) {
            // Overlapping search-space entries list a point twice: it is run once.
            Some(j) if j.points.iter().any(|q| (q.isl, q.osl, q.conc) == (p.isl, p.osl, p.conc)) => {}
            Some(j) => j.points.push(p),
            None => jobs.push(Job { name: String::new(), engine, launcher: rel, line: served.line, points: vec![p] }),
        }
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
fn engine_of(s: &sandbox::Served, given: &BTreeMap<String, String>) -> Result<Engine, String> {
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

/// Names each job after what tells it apart: TP, EP (> 1), DP-attention
/// and spec-decoding where jobs differ in them, then the scenario and the
/// concurrencies only where still needed, e.g. `tp8-ep8`, `tp4-mtp-8k1k`.
fn name_jobs(jobs: &mut [Job]) {
    type Field = fn(&MatrixPoint) -> String;
    let engine_fields: [Field; 4] = [
        |p| format!("tp{}", p.tp),
        |p| if p.ep > 1 { format!("ep{}", p.ep) } else { String::new() },
        |p| if p.dp_attn { "dpa".into() } else { String::new() },
        |p| if p.spec == "none" { String::new() } else { p.spec.replace('_', "-") },
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
            n.push(render(j, |p| scenario_name(p.isl, p.osl)));
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

/// The recipe for `jobs`: the first is the base, the others variants that
/// replace the flag list and environment; each with its own search space.
pub fn render(e: &Entry, jobs: &[Job], notes: &[String]) -> String {
    let base = &jobs[0];
    let mut t = String::new();
    t.push_str(&format!("# Imported by `enginebench import inferencex` from master-config entry {}:\n", e.key));
    t.push_str("# the launcher ran under bash at every search-space point (vllm serve recorded, not run).\n");
    if let Some(img) = &e.image {
        t.push_str(&format!("# InferenceX ran it in image {img}.\n"));
    }
    for j in jobs {
        t.push_str(&format!(
            "# job {}{}: {} line {}, {} point(s)\n",
            j.name,
            if std::ptr::eq(j, base) { " (the base)" } else { "" },
            j.launcher.display(),
            j.line,
            j.points.len()
        ));
    }
    if jobs.len() > 1 {
        let names: Vec<&str> = std::iter::once("base").chain(jobs[1..].iter().map(|j| j.name.as_str())).collect();
        t.push_str(&format!("# Run every job: enginebench run FILE --variants {}\n", names.join(",")));
    }
    for n in notes {
        t.push_str(&format!("# {n}\n"));
    }
    t.push_str(&format!("name = {}\nmodel = {}\n", q(&e.key), q(&base.engine.model)));
    if let Some(r) = &e.runner {
        t.push_str(&format!("hardware = {}\n", q(r)));
    }
    if let Some(p) = &e.precision {
        t.push_str(&format!("precision = {}\n", q(p)));
    }
    if let Some(img) = &e.image {
        t.push_str(&format!("image = {}\n", q(img)));
    }
    t.push_str("framework = \"vllm\"\n\n[env]\n");
    for (k, v) in &base.engine.env {
        t.push_str(&format!("{} = {}\n", q(k), q(v)));
    }
    t.push_str(&format!("\n[engine]\nargs = {}\n", list(&base.engine.args)));
    t.push_str(&format!(
        "\n[sweep]\ninferencex = true\nrange_ratio = {RANDOM_RANGE_RATIO}  # RANDOM_RANGE_RATIO of InferenceX's workflow\n{}\n",
        sweep_keys(&base.points)
    ));
    t.push_str("\n[eval]\ntask = \"gsm8k_inferencex\"\nmin_accuracy = 0.90\n");
    for j in &jobs[1..] {
        t.push_str(&format!("\n[variants.{}]\n", q(&j.name)));
        let removed: Vec<String> = flag_names(&base.engine.args);
        if !removed.is_empty() {
            t.push_str(&format!("args_remove = {}\n", list(&removed)));
        }
        t.push_str(&format!("args_add = {}\n", list(&j.engine.args)));
        let unset: Vec<String> = base.engine.env.keys().filter(|k| !j.engine.env.contains_key(*k)).cloned().collect();
        if !unset.is_empty() {
            t.push_str(&format!("env_unset = {}\n", list(&unset)));
        }
        let env: Vec<String> = j
            .engine
            .env
            .iter()
            .filter(|(k, v)| base.engine.env.get(*k) != Some(*v))
            .map(|(k, v)| format!("{} = {}", q(k), q(v)))
            .collect();
        if !env.is_empty() {
            t.push_str(&format!("env = {{ {} }}\n", env.join(", ")));
        }
        t.push_str(&format!("sweep = {{ {} }}\n", sweep_keys(&j.points).replace('\n', ", ")));
    }
    t
}

/// Distinct flag names of an argument list, in order.
fn flag_names(args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in args.iter().filter(|a| is_flag(a)) {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n).to_string();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// `isl_osl` and `search_space` keys for a job's points (one entry per
/// ISL/OSL pair with its concurrencies).
fn sweep_keys(points: &[MatrixPoint]) -> String {
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for p in points {
        if !pairs.contains(&(p.isl, p.osl)) {
            pairs.push((p.isl, p.osl));
        }
    }
    let entries: Vec<String> = pairs
        .iter()
        .map(|&(i, o)| {
            let mut concs: Vec<u32> = points.iter().filter(|p| (p.isl, p.osl) == (i, o)).map(|p| p.conc).collect();
            concs.sort_unstable();
            concs.dedup();
            format!("{{ conc = {concs:?}, isl_osl = [[{i}, {o}]] }}")
        })
        .collect();
    let all: Vec<String> = pairs.iter().map(|(i, o)| format!("[{i}, {o}]")).collect();
    format!("isl_osl = [{}]\nsearch_space = [{}]", all.join(", "), entries.join(", "))
}

/// A TOML string literal.
fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", "))
}

/// Evaluates and renders, then parses the recipe back and checks that every
/// job's flags, environment and points are exactly the recorded ones.
///
/// Errors: any point that cannot be evaluated (with its line), jobs with
/// different models, or a recipe that does not reproduce the jobs.
pub fn import_with(root: &Path, launcher: Launcher, e: &Entry, scenario: Option<&str>) -> Result<Imported, String> {
    let points = matrix(e, scenario)?;
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
    let toml = render(e, &jobs, &notes);
    verify(&toml, &jobs)?;
    Ok(Imported { toml, jobs, notes })
}

/// The round trip: the recipe loader must read `toml` and give each job
/// exactly its recorded flags, environment and points.
pub fn verify(toml: &str, jobs: &[Job]) -> Result<(), String> {
    let recipe = crate::recipe::Recipe::parse(toml, "the imported recipe").map_err(|e| format!("{e:#}"))?;
    for (i, j) in jobs.iter().enumerate() {
        let variant = if i == 0 { vec![] } else { vec![j.name.clone()] };
        let configs = recipe.engine_configs(&variant, &crate::recipe::Sweep::default())?;
        let [c] = configs.as_slice() else { return Err(format!("job {}: {} engine configurations, not 1", j.name, configs.len())) };
        let mut want: Vec<(u32, u32, u32)> = j.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect();
        let mut got: Vec<(u32, u32, u32)> = c.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect();
        want.sort_unstable();
        got.sort_unstable();
        let bad = |what: &str| Err(format!("job {}: the written recipe gives different {what} than the launcher", j.name));
        if c.args != j.engine.args {
            return bad("flags");
        }
        if c.env != j.engine.env || !c.env_unset.iter().all(|k| !j.engine.env.contains_key(k)) {
            return bad("environment");
        }
        if want != got {
            return bad("points");
        }
    }
    Ok(())
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
    let imported = import_with(root, &|_| Ok(name.to_path_buf()), &entry, scenario).map_err(usage)?;
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
