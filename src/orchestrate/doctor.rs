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
use serde_json::Value;

use crate::protocol::{Message, Task};
use super::spawn::ask_worker;
use crate::error::ExitStatus;
use crate::python::{self, native};
use crate::telemetry::{Telemetry, TelemetryConfig, visible_gpus_from_env};

/// Runs the checks and prints them (`--json`: one JSON object on stdout).
/// Returns ok when a run can start, bad input (exit code 2) otherwise.
pub fn doctor(json: bool, python: Option<&std::path::Path>) -> Result<ExitStatus> {
    let mut problems: Vec<String> = Vec::new();
    let mut out = serde_json::Map::new();
    let python = match python::default_interpreter(python) {
        Ok(p) => p,
        Err(e) => {
            // Nothing else can be asked without an interpreter.
            errln!("error: {e:#}");
            return Ok(ExitStatus::Usage);
        }
    };
    out.insert("python".into(), serde_json::to_value(&python)?);
    out.insert("python_chosen_by".into(), Value::String(python.origin.source().into()));
    for m in &python.missing {
        problems.push(format!(
            "{} cannot be imported ({}): install vLLM into {} (torch comes with it), or choose an interpreter that has it with --python",
            m.name, m.problem, python.prefix
        ));
    }
    match native::module_path() {
        Ok(p) => {
            out.insert("worker_module".into(), Value::String(p.display().to_string()));
        }
        Err(e) => problems.push(format!("{e:#}")),
    }
    let worker_module = out.contains_key("worker_module");
    let report: Option<Value> = if worker_module {
        match ask_worker(&python, &Task::Doctor, "doctor", |m| match m {
            Message::Doctor { report } => Some(report),
            _ => None,
        }) {
            Ok(text) => Some(serde_json::from_str(&text)?),
            Err(e) => {
                problems.push(format!("{e:#}"));
                None
            }
        }
    } else {
        None
    };
    if let Some(r) = &report {
        for e in r.get("errors").and_then(Value::as_array).into_iter().flatten() {
            problems.push(e.as_str().unwrap_or_default().to_string());
        }
        let compat = r.get("compat").and_then(Value::as_object);
        for (name, item) in compat.into_iter().flatten() {
            let missing = item.get("found").is_none_or(Value::is_null);
            if missing && item.get("required").and_then(Value::as_bool) == Some(true) {
                problems.push(format!("vLLM internal {name} missing: {}", item["missing"].as_str().unwrap_or("")));
            }
        }
        let commit = r.get("vllm_path").and_then(Value::as_str).and_then(python::git_commit);
        out.insert("vllm_git_commit".into(), commit.map(Value::String).unwrap_or(Value::Null));
        out.insert("devices".into(), Value::String(devices_in_words(r)));
        out.insert("engine".into(), r.clone());
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let telemetry = Telemetry::start(TelemetryConfig {
        interval: std::time::Duration::from_millis(100),
        visible_gpus: visible_gpus_from_env(&env),
        gpu_count_hint: None,
    });
    let sources = telemetry.sources().to_vec();
    drop(telemetry.stop());
    out.insert("telemetry_sources".into(), serde_json::to_value(&sources)?);
    out.insert("problems".into(), serde_json::to_value(&problems)?);
    out.insert("can_run".into(), Value::Bool(problems.is_empty()));

    if json {
        outln!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    } else {
        print_human(&out);
    }
    Ok(if problems.is_empty() { ExitStatus::Ok } else { ExitStatus::Usage })
}

fn print_human(out: &serde_json::Map<String, Value>) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("-").to_string();
    let py = &out["python"];
    outln!("python      {} ({}, chosen by {})", s(py.get("path")), s(py.get("version")), s(out.get("python_chosen_by")));
    outln!("worker      {}", s(out.get("worker_module")));
    if let Some(e) = out.get("engine") {
        let commit = out.get("vllm_git_commit").and_then(Value::as_str).map(|c| format!(" @ {c}")).unwrap_or_default();
        match e.get("vllm_path").and_then(Value::as_str) {
            Some(path) => outln!("vllm        {}{commit} from {path}", s(e.get("vllm"))),
            None => outln!("vllm        not importable (see the problems)"),
        }
        match e.get("torch").filter(|t| !t.is_null()) {
            Some(t) => outln!("torch       {}", t.as_str().unwrap_or("-")),
            None => outln!("torch       not importable (see the problems)"),
        }
        outln!("platform    {}", s(e.get("platform")));
        outln!("devices     {}", s(out.get("devices")));
        if let Some(path) = e.get("step_path").and_then(|p| p.get("path")).and_then(Value::as_str) {
            match e.pointer("/step_path/reason").and_then(Value::as_str) {
                Some(reason) => outln!("step path   {path} ({reason})"),
                None => outln!("step path   {path} (vLLM's engine core driven directly; LLMEngine.step() for text requests)"),
            }
        }
        match e.get("compat").and_then(Value::as_object) {
            Some(compat) => {
                outln!("compatibility (vLLM internals the shim uses):");
                for (name, item) in compat {
                    match item.get("found").and_then(Value::as_str) {
                        Some(path) => outln!("  ok       {name:<26} {path}"),
                        None => outln!("  MISSING  {name:<26} off: {}", s(item.get("loses"))),
                    }
                }
                let parser = e.pointer("/compat/make_arg_parser/found").and_then(Value::as_str).unwrap_or("-");
                outln!("recipe check parser: {parser}");
            }
            None => outln!("compatibility not checked: vLLM does not import"),
        }
    }
    outln!("telemetry sources:");
    for src in out["telemetry_sources"].as_array().into_iter().flatten() {
        let used = if src["used"].as_bool() == Some(true) { "used" } else { "not used" };
        outln!("  {:<9} {:<8} {}", s(src.get("name")), used, s(src.get("reason")));
    }
    let problems = out["problems"].as_array().cloned().unwrap_or_default();
    if problems.is_empty() {
        outln!("ok: a run can start");
    } else {
        for p in problems {
            outln!("problem: {}", p.as_str().unwrap_or_default());
        }
        outln!("not ready: fix the problems above");
    }
}

/// The devices of a doctor report in words a person reads: "8 x NVIDIA H200
/// (CUDA)", "none (CPU platform)", "unknown (torch does not import)". From
/// the shim's `devices` ({kind, count, names}, torch's view) and `platform`
/// (vLLM's device type).
fn devices_in_words(report: &Value) -> String {
    let platform = report.get("platform").and_then(Value::as_str);
    let Some(d) = report.get("devices").filter(|d| !d.is_null()) else {
        return if report.get("torch").is_none_or(Value::is_null) {
            "unknown (torch does not import)".into()
        } else {
            "unknown (the device query failed: see the problems)".into()
        };
    };
    let names: Vec<&str> = d["names"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if names.is_empty() {
        return match platform {
            None | Some("cpu") => "none (CPU platform)".into(),
            Some(p) => format!("none visible to torch (vLLM's platform: {p})"),
        };
    }
    // Runs of one name: "8 x NVIDIA H200", "1 x A, 1 x B".
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for n in names {
        match runs.last_mut() {
            Some((last, count)) if *last == n => *count += 1,
            _ => runs.push((n, 1)),
        }
    }
    let list: Vec<String> = runs.iter().map(|(n, c)| format!("{c} x {n}")).collect();
    let backend = match d.get("kind").and_then(Value::as_str) {
        Some("cuda") => " (CUDA)",
        Some("rocm") => " (ROCm)",
        _ => "",
    };
    format!("{}{backend}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::devices_in_words;
    use serde_json::json;

    #[test]
    fn devices_read_as_words() {
        let cpu = json!({"torch": "2.13.0", "platform": "cpu", "devices": {"kind": "cpu", "count": 0, "names": []}});
        assert_eq!(devices_in_words(&cpu), "none (CPU platform)");
        let h200 = json!({"torch": "2.9.0", "platform": "cuda", "devices": {"kind": "cuda", "count": 8, "names": vec!["NVIDIA H200"; 8]}});
        assert_eq!(devices_in_words(&h200), "8 x NVIDIA H200 (CUDA)");
        let mixed = json!({"torch": "2.9.0", "platform": "rocm", "devices": {"kind": "rocm", "count": 2, "names": ["AMD Instinct MI300X", "AMD Instinct MI355X"]}});
        assert_eq!(devices_in_words(&mixed), "1 x AMD Instinct MI300X, 1 x AMD Instinct MI355X (ROCm)");
        let lost = json!({"torch": "2.9.0", "platform": "cuda", "devices": {"kind": "cpu", "count": 0, "names": []}});
        assert_eq!(devices_in_words(&lost), "none visible to torch (vLLM's platform: cuda)");
        let no_vllm = json!({"torch": "2.9.0", "platform": null, "devices": {"kind": "cpu", "count": 0, "names": []}});
        assert_eq!(devices_in_words(&no_vllm), "none (CPU platform)");
        let no_torch = json!({"torch": null, "platform": null, "devices": null});
        assert_eq!(devices_in_words(&no_torch), "unknown (torch does not import)");
    }
}
