//! `enginebench doctor`: can a run start here, and on what?
//!
//! Reports the interpreter (and how it was chosen), the worker module, vLLM
//! and torch (versions, where vLLM was imported from, its git commit when it
//! is a checkout), the platform and devices, every compatibility item of the
//! shim (found where, or what is lost without it), the serve parser used by
//! `recipe check`, and the telemetry sources with why each is or is not
//! usable. Exit 0 when a run can start, 2 (with the reason) when not.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::Value;

use crate::protocol::{Message, Task};
use super::spawn::ask_worker;
use crate::error::exit;
use crate::python::{self, native};
use crate::telemetry::{Telemetry, TelemetryConfig, visible_gpus_from_env};

/// Runs the checks and prints them (`--json`: one JSON object on stdout).
/// Returns 0 when a run can start, 2 otherwise.
pub fn doctor(json: bool) -> Result<i32> {
    let mut problems: Vec<String> = Vec::new();
    let mut out = serde_json::Map::new();
    let python = match python::default_interpreter() {
        Ok(p) => p,
        Err(e) => {
            // Nothing else can be asked without an interpreter.
            errln!("error: {e:#}");
            return Ok(exit::USAGE);
        }
    };
    out.insert("python".into(), serde_json::to_value(&python)?);
    out.insert("python_chosen_by".into(), Value::String(python.origin.source().into()));
    match native::module_path() {
        Ok(p) => {
            out.insert("worker_module".into(), Value::String(p.display().to_string()));
        }
        Err(e) => problems.push(format!("{e:#}")),
    }
    let report: Option<Value> = if problems.is_empty() {
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
    Ok(if problems.is_empty() { exit::OK } else { exit::USAGE })
}

fn print_human(out: &serde_json::Map<String, Value>) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("-").to_string();
    let py = &out["python"];
    outln!("python      {} ({}, chosen by {})", s(py.get("path")), s(py.get("version")), s(out.get("python_chosen_by")));
    outln!("worker      {}", s(out.get("worker_module")));
    if let Some(e) = out.get("engine") {
        let commit = out.get("vllm_git_commit").and_then(Value::as_str).map(|c| format!(" @ {c}")).unwrap_or_default();
        outln!("vllm        {}{commit} from {}", s(e.get("vllm")), s(e.get("vllm_path")));
        outln!("torch       {}", s(e.get("torch")));
        outln!("platform    {}", s(e.get("platform")));
        if let Some(d) = e.get("devices") {
            let names: Vec<String> = d["names"].as_array().into_iter().flatten().filter_map(|n| n.as_str().map(String::from)).collect();
            outln!("devices     {} x {} {}", d["count"], s(d.get("kind")), names.join(", "));
        }
        outln!("compatibility (vLLM internals the shim uses):");
        for (name, item) in e.get("compat").and_then(Value::as_object).into_iter().flatten() {
            match item.get("found").and_then(Value::as_str) {
                Some(path) => outln!("  ok       {name:<26} {path}"),
                None => outln!("  MISSING  {name:<26} off: {}", s(item.get("loses"))),
            }
        }
        let parser = e.pointer("/compat/make_arg_parser/found").and_then(Value::as_str).unwrap_or("-");
        outln!("recipe check parser: {parser}");
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
