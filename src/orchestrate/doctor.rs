//! `enginebench doctor`: can a run start here, and on what?
//!
//! Reports the interpreter (and how it was chosen), the worker module, vLLM
//! and torch (versions, where vLLM was imported from, its git commit when it
//! is a checkout), the platform and devices, every compatibility item of the
//! shim (found where, or what is lost without it), the step path a run would
//! use (vLLM's engine core directly, or `LLMEngine.step()` and why), the serve parser used by
//! `recipe check`, and the telemetry sources with why each is or is not
//! usable. Exit 0 when a run can start, 2 (with every problem found) when
//! not: a missing vLLM and a missing torch are two problems, and the worker
//! is still asked what it can tell (torch's devices without vLLM, ...).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::protocol::doctor::{DoctorReport, SERVE_PARSER};
use crate::protocol::{Message, Task};
use super::spawn::ask_worker;
use crate::error::ExitStatus;
use crate::python::releases;
use crate::python::{self, Interpreter, native};
use crate::telemetry::{SourceStatus, Telemetry, TelemetryConfig, visible_gpus_from_env};

/// What `doctor` found (`--json` prints it as one object).
#[derive(Debug, Serialize)]
struct Findings {
    python: Interpreter,
    python_chosen_by: &'static str,
    worker_module: Option<String>,
    /// The worker's report; absent when no worker could be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    engine: Option<DoctorReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vllm_git_commit: Option<String>,
    /// The devices in words ([`devices_in_words`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<String>,
    /// Where this vLLM stands against the releases checked
    /// (src/python/vllm_releases.toml); absent without a vLLM version.
    #[serde(skip_serializing_if = "Option::is_none")]
    release: Option<ReleaseLine>,
    telemetry_sources: Vec<SourceStatus>,
    /// The InferenceX importer's sandbox: how it runs launchers here, or
    /// why it cannot (not a problem for a run).
    import_sandbox: ImportSandbox,
    problems: Vec<String>,
    can_run: bool,
}

/// The import sandbox's state ([`crate::import::sandbox::probe::report`]).
#[derive(Debug, Serialize)]
struct ImportSandbox {
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<crate::import::sandbox::probe::Report>,
    /// Why `import inferencex` cannot run launchers here (without `--unsafe-import`).
    #[serde(skip_serializing_if = "Option::is_none")]
    unavailable: Option<String>,
}

/// One line on where the release stands, and whether it is a warning.
#[derive(Debug, Serialize)]
struct ReleaseLine {
    warning: bool,
    text: String,
}

/// Asks a worker in `python` for its [`DoctorReport`] (imports vLLM and
/// torch, builds no engine), with `env` added to its environment.
///
/// Errors: the worker module is missing, or the worker failed or ended
/// without a report.
pub fn ask_report(python: &Interpreter, env: &BTreeMap<String, String>) -> Result<DoctorReport> {
    native::module_path()?;
    let report = ask_worker(python, &Task::Doctor, "doctor", env, |m| match m {
        Message::Doctor { report } => Some(report),
        _ => None,
    })?;
    Ok(*report)
}

/// Runs the checks and prints them (`--json`: one JSON object on stdout).
/// Returns ok when a run can start, bad input (exit code 2) otherwise.
pub fn doctor(json: bool, python: Option<&std::path::Path>) -> Result<ExitStatus> {
    let mut problems: Vec<String> = Vec::new();
    let python = match python::default_interpreter(python) {
        Ok(p) => p,
        Err(e) => {
            // Nothing else can be asked without an interpreter.
            errln!("error: {e:#}");
            return Ok(ExitStatus::Usage);
        }
    };
    for m in &python.missing {
        problems.push(format!(
            "{} cannot be imported ({}): install vLLM into {} (torch comes with it), or choose an interpreter that has it with --python",
            m.name, m.problem, python.prefix
        ));
    }
    let worker_module = match native::module_path() {
        Ok(p) => Some(p.display().to_string()),
        Err(e) => {
            problems.push(format!("{e:#}"));
            None
        }
    };
    let engine = match worker_module {
        Some(_) => match ask_report(&python, &BTreeMap::new()) {
            Ok(r) => Some(r),
            Err(e) => {
                problems.push(format!("{e:#}"));
                None
            }
        },
        None => None,
    };
    problems.extend(engine.iter().flat_map(DoctorReport::cannot_serve).map(|c| c.message().to_string()));
    let table = releases::table();
    let release = engine.as_ref().and_then(|r| r.vllm.as_deref()).map(|v| {
        let (warning, text) = releases::standing(v, &table).line(v, &table);
        ReleaseLine { warning, text }
    });
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let telemetry = Telemetry::start(TelemetryConfig {
        interval: std::time::Duration::from_millis(100),
        visible_gpus: visible_gpus_from_env(&env),
        gpu_count_hint: None,
    });
    let telemetry_sources = telemetry.sources().to_vec();
    drop(telemetry.stop());
    let import_sandbox = match crate::import::sandbox::probe::report(false) {
        Ok(state) => ImportSandbox { state: Some(state), unavailable: None },
        Err(why) => ImportSandbox { state: None, unavailable: Some(why) },
    };
    let found = Findings {
        python_chosen_by: python.origin.source(),
        python,
        worker_module,
        vllm_git_commit: engine.as_ref().and_then(|r| r.vllm_path.as_deref()).and_then(python::git_commit),
        devices: engine.as_ref().map(devices_in_words),
        engine,
        release,
        telemetry_sources,
        import_sandbox,
        can_run: problems.is_empty(),
        problems,
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        print_human(&found);
    }
    Ok(if found.can_run { ExitStatus::Ok } else { ExitStatus::Usage })
}

/// `doctor --releases [FILE]`: the releases checked (compiled in, or those
/// of `file`), as the README shows them.
///
/// Errors (usage): `file` cannot be read or is not such a table.
pub fn print_releases(file: Option<&std::path::Path>) -> Result<ExitStatus> {
    let table = match file {
        Some(f) => releases::read(f)?,
        None => releases::table(),
    };
    out!("{}", table.markdown());
    Ok(ExitStatus::Ok)
}

fn print_human(f: &Findings) {
    let s = |v: Option<&str>| v.unwrap_or("-").to_string();
    let py = &f.python;
    outln!("python      {} ({}, chosen by {})", py.path.display(), py.version, f.python_chosen_by);
    outln!("worker      {}", s(f.worker_module.as_deref()));
    if let Some(e) = &f.engine {
        let commit = f.vllm_git_commit.as_deref().map(|c| format!(" @ {c}")).unwrap_or_default();
        match &e.vllm_path {
            Some(path) => outln!("vllm        {}{commit} from {path}", s(e.vllm.as_deref())),
            None => outln!("vllm        not importable (see the problems)"),
        }
        if let Some(r) = &f.release {
            outln!("release     {}", r.text);
        }
        match &e.torch {
            Some(t) => outln!("torch       {t}"),
            None => outln!("torch       not importable (see the problems)"),
        }
        if let Some(b) = &e.build {
            outln!("build       {b}");
        }
        match (&e.platform, &e.no_platform) {
            (Some(p), _) => outln!("platform    {p}"),
            (None, Some(_)) => outln!("platform    none found (see the problems)"),
            (None, None) => outln!("platform    -"),
        }
        outln!("devices     {}", s(f.devices.as_deref()));
        if let Some(step) = &e.step_path {
            match &step.reason {
                Some(reason) => outln!("step path   {} ({reason})", step.path),
                None => outln!("step path   {} (vLLM's engine core driven directly; LLMEngine.step() for text requests)", step.path),
            }
        }
        match &e.compat {
            Some(compat) => {
                outln!("compatibility (vLLM internals the shim uses):");
                for (name, item) in compat {
                    match &item.found {
                        Some(path) => outln!("  ok       {name:<26} {path}"),
                        None => outln!("  MISSING  {name:<26} off: {}", s(item.loses.as_deref())),
                    }
                }
                let parser = compat.get(SERVE_PARSER).and_then(|i| i.found.as_deref());
                outln!("recipe check parser: {}", s(parser));
            }
            None => outln!("compatibility not checked: vLLM does not import"),
        }
    }
    outln!("telemetry sources:");
    for src in &f.telemetry_sources {
        let used = if src.used { "used" } else { "not used" };
        outln!("  {:<9} {:<8} {}", src.name, used, src.reason);
    }
    match (&f.import_sandbox.state, &f.import_sandbox.unavailable) {
        (Some(r), _) => {
            let inside: Vec<String> = r.inside.iter().map(|(k, v)| format!("{k} {v}")).collect();
            outln!("import sandbox {}: launchers run as {}", r.bwrap, r.runs_as);
            outln!("  inside: {}", inside.join(", "));
            outln!("  limits: {}", r.limits);
        }
        (None, why) => outln!("import sandbox unavailable: {}", why.as_deref().unwrap_or("-")),
    }
    if let Some(r) = f.release.as_ref().filter(|r| r.warning) {
        outln!("warning: {}", r.text);
    }
    if f.problems.is_empty() {
        outln!("ok: a run can start");
    } else {
        for p in &f.problems {
            outln!("problem: {p}");
        }
        outln!("not ready: fix the problems above");
    }
}

/// The devices of a doctor report in words a person reads: "8 x NVIDIA H200
/// (CUDA)", "none (CPU platform)", "unknown (torch does not import)". From
/// the report's `devices` (torch's view) and `platform` (vLLM's device type).
fn devices_in_words(report: &DoctorReport) -> String {
    let platform = report.platform.as_deref();
    let Some(d) = &report.devices else {
        return if report.torch.is_none() {
            "unknown (torch does not import)".into()
        } else {
            "unknown (the device query failed: see the problems)".into()
        };
    };
    if d.names.is_empty() {
        return match (platform, &report.no_platform) {
            (None, Some(_)) => "none (and vLLM found no platform: see the problems)".into(),
            (None | Some("cpu"), _) => "none (CPU platform)".into(),
            (Some(p), _) => format!("none visible to torch (vLLM's platform: {p})"),
        };
    }
    // Runs of one name: "8 x NVIDIA H200", "1 x A, 1 x B".
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for n in &d.names {
        match runs.last_mut() {
            Some((last, count)) if *last == n => *count += 1,
            _ => runs.push((n, 1)),
        }
    }
    let list: Vec<String> = runs.iter().map(|(n, c)| format!("{c} x {n}")).collect();
    let backend = match d.kind.as_str() {
        "cuda" => " (CUDA)",
        "rocm" => " (ROCm)",
        _ => "",
    };
    format!("{}{backend}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::devices_in_words;
    use crate::protocol::DoctorReport;
    use serde_json::json;

    fn report(v: serde_json::Value) -> DoctorReport {
        let mut full = json!({"vllm": null, "vllm_path": null, "torch": null, "platform": null, "devices": null, "compat": null});
        full.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(full).unwrap()
    }

    #[test]
    fn devices_read_as_words() {
        let cpu = report(json!({"torch": "2.13.0", "platform": "cpu", "devices": {"kind": "cpu", "count": 0, "names": []}}));
        assert_eq!(devices_in_words(&cpu), "none (CPU platform)");
        let h200 = report(json!({"torch": "2.9.0", "platform": "cuda", "devices": {"kind": "cuda", "count": 8, "names": vec!["NVIDIA H200"; 8]}}));
        assert_eq!(devices_in_words(&h200), "8 x NVIDIA H200 (CUDA)");
        let mixed = report(json!({"torch": "2.9.0", "platform": "rocm", "devices": {"kind": "rocm", "count": 2, "names": ["AMD Instinct MI300X", "AMD Instinct MI355X"]}}));
        assert_eq!(devices_in_words(&mixed), "1 x AMD Instinct MI300X, 1 x AMD Instinct MI355X (ROCm)");
        let lost = report(json!({"torch": "2.9.0", "platform": "cuda", "devices": {"kind": "cpu", "count": 0, "names": []}}));
        assert_eq!(devices_in_words(&lost), "none visible to torch (vLLM's platform: cuda)");
        let no_vllm = report(json!({"torch": "2.9.0", "devices": {"kind": "cpu", "count": 0, "names": []}}));
        assert_eq!(devices_in_words(&no_vllm), "none (CPU platform)");
        let cuda_build_here = report(json!({"torch": "2.14.0+cu130", "no_platform": "found no platform", "devices": {"kind": "cpu", "count": 0, "names": []}}));
        assert_eq!(devices_in_words(&cuda_build_here), "none (and vLLM found no platform: see the problems)");
        let no_torch = report(json!({}));
        assert_eq!(devices_in_words(&no_torch), "unknown (torch does not import)");
    }
}
