//! Launcher (+ master-config entry) to a recipe, as TOML text with comments
//! that list everything not imported.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::master_config::{Entry, read_entry};
use super::shell::{Launcher, expand, parse_launcher};
use crate::error::usage;

/// Launcher variables that become recipe placeholders instead of values.
const SWEEP_VARS: [&str; 2] = ["TP", "MAX_MODEL_LEN"];
/// Flags that only the API server uses; dropped (the engine runs in-process).
const SERVER_FLAGS: [&str; 2] = ["--port", "--host"];

/// The outcome of an import.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The recipe, as TOML.
    pub toml: String,
    /// Everything a person should look at: not imported, dropped, unresolved.
    pub notes: Vec<String>,
    /// Placeholders left empty under `[vars]` (the recipe needs editing).
    pub unresolved: Vec<String>,
}

/// Imports a launcher script, with an optional master-config entry.
///
/// Errors: the script has no `vllm serve` command, or the model cannot be
/// determined (neither a literal in the command, nor `model_override`, nor the
/// master-config entry).
pub fn import(script: &str, script_name: &str, entry: Option<&Entry>, model_override: Option<&str>) -> Result<Imported, String> {
    let l = parse_launcher(script);
    let mut notes: Vec<String> = l
        .skipped
        .iter()
        .map(|(n, text, why)| format!("line {n}: not imported ({why}): {}", shorten(text)))
        .collect();
    let Some((serve_line, tokens)) = &l.serve else {
        return Err(format!("{script_name}: no `vllm serve` command found at the top level of the script"));
    };

    let mut vars = l.vars.clone();
    for v in SWEEP_VARS {
        vars.insert(v.to_string(), format!("${{{v}}}"));
    }
    let model_token = tokens.first().map(|t| expand(t, &vars)).unwrap_or_default();
    let model = model_override
        .map(String::from)
        .or_else(|| (!model_token.contains("${")).then(|| model_token.clone()).filter(|m| !m.is_empty()))
        .or_else(|| entry.and_then(|e| e.model.clone()))
        .ok_or_else(|| {
            format!("the model is {model_token:?} (from the environment): give --master-config and --key, or --model")
        })?;

    let (args, mut unresolved) = serve_args(&tokens[1..], &l, &vars, &mut notes);
    let mut env: Vec<(String, String)> = Vec::new();
    for (k, v) in &l.exports {
        collect_unresolved(v, &mut unresolved);
        env.push((k.clone(), v.clone()));
    }
    let mut recipe_vars: BTreeMap<String, String> = BTreeMap::new();
    let uses = |name: &str| args.iter().chain(env.iter().map(|(_, v)| v)).any(|a| a.contains(&format!("${{{name}}}")));
    if uses("MAX_MODEL_LEN") {
        match entry.and_then(|e| e.scenarios.iter().map(|s| s.isl + s.osl).max()) {
            // InferenceX's sweep generator sets MAX_MODEL_LEN = ISL + OSL + 256.
            Some(longest) => {
                recipe_vars.insert("MAX_MODEL_LEN".into(), (longest + 256).to_string());
            }
            None => unresolved.push("MAX_MODEL_LEN".into()),
        }
    }
    unresolved.retain(|u| u != "TP" && !(u == "MAX_MODEL_LEN" && recipe_vars.contains_key(u)));
    unresolved.sort();
    unresolved.dedup();
    for u in &unresolved {
        notes.push(format!("${u} has no value in the launcher: set it under [vars] (left empty)"));
        recipe_vars.insert(u.clone(), String::new());
    }

    let mut t = String::new();
    t.push_str(&format!("# Imported by `enginebench import inferencex` from {script_name}"));
    if let Some(e) = entry {
        t.push_str(&format!(" and master-config entry {}", e.key));
    }
    t.push_str(&format!(" (vllm serve at line {serve_line}).\n"));
    if let Some(img) = entry.and_then(|e| e.image.as_ref()) {
        t.push_str(&format!("# InferenceX ran it in image {img}.\n"));
    }
    for n in &notes {
        t.push_str(&format!("# {n}\n"));
    }
    let name = entry.map(|e| e.key.clone()).unwrap_or_else(|| {
        Path::new(script_name).file_stem().map_or("imported".into(), |s| s.to_string_lossy().replace('_', "-"))
    });
    t.push_str(&format!("name = {}\nmodel = {}\n", q(&name), q(&model)));
    if let Some(r) = entry.and_then(|e| e.runner.as_ref()) {
        t.push_str(&format!("hardware = {}\n", q(r)));
    }
    if let Some(p) = entry.and_then(|e| e.precision.as_ref()) {
        t.push_str(&format!("precision = {}\n", q(p)));
    }
    t.push_str("framework = \"vllm\"\n");
    if !recipe_vars.is_empty() {
        t.push_str("\n[vars]\n");
        for (k, v) in &recipe_vars {
            t.push_str(&format!("{k} = {}\n", q(v)));
        }
    }
    t.push_str("\n[env]\n");
    for (k, v) in &env {
        t.push_str(&format!("{k} = {}\n", q(v)));
    }
    t.push_str("\n[engine]\nargs = [\n");
    for a in &args {
        t.push_str(&format!("    {},\n", q(a)));
    }
    t.push_str("]\n\n[sweep]\n");
    t.push_str(&sweep_toml(entry, &args));
    t.push_str("\n[eval]\ntask = \"gsm8k\"\nmin_accuracy = 0.90\n");
    Ok(Imported { toml: t, notes, unresolved })
}

/// The `vllm serve` flags: arrays expanded, variables expanded (TP and
/// MAX_MODEL_LEN become placeholders), server-only flags dropped.
fn serve_args(
    tokens: &[String],
    l: &Launcher,
    vars: &BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    for tok in tokens {
        if let Some(name) = tok.strip_prefix("${").and_then(|s| s.strip_suffix("[@]}")) {
            match l.arrays.get(name) {
                Some(items) => out.extend(items.iter().map(|i| expand(i, vars))),
                None => notes.push(format!("array {name} is not assigned at the top level: its flags are missing")),
            }
            continue;
        }
        out.push(expand(tok, vars));
    }
    for flag in SERVER_FLAGS {
        if crate::recipe::args::remove_flag(&mut out, flag) {
            notes.push(format!("{flag} dropped: the engine runs in-process, there is no server"));
        }
    }
    let mut unresolved = Vec::new();
    for a in &out {
        collect_unresolved(a, &mut unresolved);
    }
    (out, unresolved)
}

fn collect_unresolved(text: &str, into: &mut Vec<String>) {
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        into.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
}

fn sweep_toml(entry: Option<&Entry>, args: &[String]) -> String {
    let mut t = String::from("inferencex = true\nrange_ratio = 0.8  # RANDOM_RANGE_RATIO of InferenceX's workflows\n");
    let Some(e) = entry.filter(|e| !e.scenarios.is_empty()) else {
        t.push_str("# No master config given: fill in the lengths and concurrencies.\nisl = 1024\nosl = 1024\nconc = [1]\n");
        if args.iter().any(|a| a.contains("${TP}")) {
            t.push_str("tp = [8]  # the launcher takes TP from the sweep\n");
        }
        return t;
    };
    let pairs: Vec<String> = e.scenarios.iter().map(|s| format!("[{}, {}]", s.isl, s.osl)).collect();
    t.push_str(&format!("isl_osl = [{}]\nsearch_space = [\n", pairs.join(", ")));
    for s in &e.scenarios {
        for sp in &s.spaces {
            let mut fields = Vec::new();
            if let Some(tp) = sp.tp {
                fields.push(format!("tp = {tp}"));
            }
            match (&sp.conc_list, sp.conc_range) {
                (Some(list), _) => fields.push(format!("conc = {list:?}")),
                (None, Some([a, b])) => fields.push(format!("conc_range = [{a}, {b}]")),
                (None, None) => fields.push("conc = [1]".into()),
            }
            fields.push(format!("isl_osl = [[{}, {}]]", s.isl, s.osl));
            let mut line = format!("    {{ {} }},", fields.join(", "));
            let mut extra = Vec::new();
            if let Some(ep) = sp.ep.filter(|&ep| ep > 1) {
                extra.push(format!("ep {ep}: add --enable-expert-parallel in a variant"));
            }
            if let Some(sd) = sp.spec_decoding.as_ref().filter(|s| s.as_str() != "none") {
                extra.push(format!("spec-decoding {sd}: the launcher's speculative flags apply"));
            }
            if !extra.is_empty() {
                line.push_str(&format!("  # {}", extra.join("; ")));
            }
            t.push_str(&line);
            t.push('\n');
        }
    }
    t.push_str("]\n");
    t
}

/// A TOML string literal.
fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 100 { format!("{}...", s.chars().take(100).collect::<String>()) } else { s.to_string() }
}

/// `enginebench import inferencex`: writes the recipe to `output` (or stdout)
/// and the notes to stderr. Returns the exit code: 0 when the recipe loads,
/// 2 when it needs editing first (it is still written).
pub fn run_import(
    launcher: &Path,
    master: Option<(&Path, &str)>,
    model: Option<&str>,
    output: Option<&Path>,
) -> Result<i32> {
    let script = std::fs::read_to_string(launcher)
        .map_err(|e| usage(format!("cannot read launcher {}: {e}", launcher.display())))?;
    let entry = match master {
        Some((path, key)) => {
            let yaml = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read master config {}: {e}", path.display())))?;
            Some(read_entry(&yaml, key).map_err(|e| usage(format!("{}: {e}", path.display())))?)
        }
        None => None,
    };
    let imported = import(&script, &launcher.display().to_string(), entry.as_ref(), model).map_err(usage)?;
    for n in &imported.notes {
        eprintln!("note: {n}");
    }
    match output {
        Some(p) => {
            std::fs::write(p, &imported.toml).map_err(|e| usage(format!("cannot write {}: {e}", p.display())))?;
            eprintln!("wrote {}", p.display());
        }
        None => print!("{}", imported.toml),
    }
    match crate::recipe::Recipe::parse(&imported.toml, "the imported recipe") {
        Ok(_) if imported.unresolved.is_empty() => Ok(crate::error::exit::OK),
        Ok(_) => {
            eprintln!("error: fill in [vars] {} before running the recipe", imported.unresolved.join(", "));
            Ok(crate::error::exit::USAGE)
        }
        Err(e) => {
            eprintln!("error: the imported recipe needs editing before it runs: {e:#}");
            Ok(crate::error::exit::USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{Recipe, Sweep};

    const LAUNCHER: &str = include_str!("../../tests/fixtures/inferencex/demo_fp4_mi355x_vllm.sh");
    const MASTER: &str = include_str!("../../tests/fixtures/inferencex/demo-master.yaml");

    #[test]
    fn launcher_round_trips_to_the_same_env_and_flags() {
        let entry = read_entry(MASTER, "demo-fp4-mi355x-vllm").unwrap();
        let imported = import(LAUNCHER, "demo.sh", Some(&entry), None).unwrap();
        let recipe = Recipe::parse(&imported.toml, "imported").unwrap();
        assert_eq!(recipe.model, "example/Demo-MXFP4");
        assert_eq!(recipe.hardware.as_deref(), Some("mi355x"));
        let configs = recipe.engine_configs(&[], &Sweep::default()).unwrap();
        assert_eq!(configs.iter().map(|c| c.tp).collect::<Vec<_>>(), vec![Some(8), Some(4)]);
        // What the launcher would pass to `vllm serve` at TP 8 (minus --port), with
        // MAX_MODEL_LEN = ISL + OSL + 256 of the longest scenario, as InferenceX sets it.
        let expected: Vec<String> = [
            "--tensor-parallel-size", "8", "--trust-remote-code", "--block-size", "128",
            "--max-model-len", "9472", "--hf-overrides", r#"{"index_topk_freq": 4, "use_index_cache": true}"#,
            "--attention-backend", "TRITON_ATTN",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(configs[0].args, expected);
        // What it would export at the top level (the conditional ones are reported instead).
        let env: Vec<(&str, &str)> = configs[0].env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            env,
            vec![
                ("DEMO_CACHE_DIR", "/cache/"),
                ("NCCL_MIN_NCHANNELS", "112"),
                ("VLLM_ROCM_USE_AITER", "1"),
                ("VLLM_ROCM_USE_AITER_MOE", "1"),
            ]
        );
        // Points: TP8 1k/1k 1..32 (6), TP4 1k/1k 1..256 (9) + 8k/1k 1..64 (7).
        assert_eq!(configs[0].points.len(), 6);
        assert_eq!(configs[1].points.len(), 16);
        assert_eq!(imported.unresolved, vec!["USER_TAG"]);
    }

    #[test]
    fn reports_what_was_not_imported_by_line() {
        let entry = read_entry(MASTER, "demo-fp4-mi355x-vllm").unwrap();
        let notes = import(LAUNCHER, "demo.sh", Some(&entry), None).unwrap().notes;
        let has = |s: &str| notes.iter().any(|n| n.contains(s));
        assert!(has("line 14: not imported") && has("HIP_VISIBLE_DEVICES"), "{notes:?}");
        assert!(has("line 25: not imported") && has("--enable-expert-parallel"), "{notes:?}");
        assert!(has("line 26: not imported") && has("DEMO_EP_ON"), "{notes:?}");
        assert!(has("--port dropped"), "{notes:?}");
        assert!(!has("$PORT"), "the dropped flag's variable is not reported: {notes:?}");
    }

    #[test]
    fn model_must_come_from_somewhere() {
        let e = import(LAUNCHER, "demo.sh", None, None).unwrap_err();
        assert!(e.contains("--master-config") && e.contains("--model"), "{e}");
        let ok = import(LAUNCHER, "demo.sh", None, Some("org/m")).unwrap();
        assert!(ok.unresolved.contains(&"MAX_MODEL_LEN".to_string()));
        assert!(import("echo hi", "x.sh", None, None).unwrap_err().contains("no `vllm serve`"));
    }
}
