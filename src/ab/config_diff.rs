//! What differs between two jobs' engine configurations, one phrase each:
//! the vLLM builds, environment variables and `vllm serve` flags. The
//! comparison records it; the Markdown and the changelog entry print it.

use std::collections::BTreeMap;

use crate::report::result::JobResult;

/// What differs between two jobs' engine configurations, one phrase each:
/// environment variables set, changed or unset, and `vllm serve` flags added,
/// changed or removed (a flag's value is the next argument unless that starts
/// with `--`).
pub fn config_changes(baseline: &JobResult, candidate: &JobResult) -> Vec<String> {
    let mut out = Vec::new();
    // Two vLLM builds (a variant with its own `python`): name both, with the
    // checkout's commit where vLLM is one - the first thing a reviewer reads.
    if let (Some(b), Some(c)) = (&baseline.python, &candidate.python) {
        let (bd, cd) = (b.describe(), c.describe());
        if bd != cd {
            out.push(format!("{bd} -> {cd}"));
        } else if b.path != c.path {
            out.push(format!("python {} -> {}", b.path, c.path));
        }
    }
    for (k, v) in &candidate.env {
        match baseline.env.get(k) {
            None => out.push(format!("set {k}={v}")),
            Some(old) if old != v => out.push(format!("{k} {old} -> {v}")),
            _ => {}
        }
    }
    for k in baseline.env.keys().filter(|k| !candidate.env.contains_key(*k)) {
        out.push(format!("unset {k}"));
    }
    for k in candidate.env_unset.iter().filter(|k| !baseline.env_unset.contains(k) && !baseline.env.contains_key(*k)) {
        out.push(format!("unset {k}"));
    }
    let (b, c) = (flags(&baseline.engine_args), flags(&candidate.engine_args));
    for (f, v) in &c {
        match b.get(f) {
            None => out.push(format!("add {}", flag_text(f, v))),
            Some(old) if old != v => out.push(format!("{f} {} -> {}", old.as_deref().unwrap_or("(on)"), v.as_deref().unwrap_or("(on)"))),
            _ => {}
        }
    }
    for (f, v) in b.iter().filter(|(f, _)| !c.contains_key(*f)) {
        out.push(format!("remove {}", flag_text(f, v)));
    }
    out
}

fn flag_text(f: &str, v: &Option<String>) -> String {
    match v {
        Some(v) => format!("{f} {v}"),
        None => f.to_string(),
    }
}

/// `--flag value` / `--flag` / `--flag=value` pairs; positional arguments keyed by themselves.
fn flags(args: &[String]) -> BTreeMap<String, Option<String>> {
    let mut m = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some((f, v)) = a.strip_prefix("--").and_then(|_| a.split_once('=')) {
            m.insert(f.to_string(), Some(v.to_string()));
        } else if a.starts_with('-') {
            let v = args.get(i + 1).filter(|n| !n.starts_with("--")).cloned();
            if v.is_some() {
                i += 1;
            }
            m.insert(a.clone(), v);
        } else {
            m.insert(a.clone(), None);
        }
        i += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_between_jobs() {
        let job = |env: &[(&str, &str)], args: &[&str]| -> JobResult {
            let mut j: JobResult = serde_json::from_value(serde_json::json!({
                "label": "x", "status": "ok", "engine_args": [], "env": {},
                "sweep": serde_json::from_str::<serde_json::Value>(SWEEP).unwrap(), "points": []
            }))
            .unwrap();
            j.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            j.engine_args = args.iter().map(|s| s.to_string()).collect();
            j
        };
        let b = job(&[("A", "1"), ("B", "x")], &["--dtype", "float32", "--enforce-eager", "--kv-cache-dtype=auto"]);
        let c = job(&[("A", "2"), ("C", "y")], &["--dtype", "bfloat16", "--kv-cache-dtype=fp8", "--async-scheduling"]);
        assert_eq!(
            config_changes(&b, &c),
            vec![
                "A 1 -> 2",
                "set C=y",
                "unset B",
                "add --async-scheduling",
                "--dtype float32 -> bfloat16",
                "--kv-cache-dtype auto -> fp8",
                "remove --enforce-eager"
            ]
        );
        assert!(config_changes(&b, &b).is_empty());

        // Two builds of vLLM: both versions (and the checkout's commit) named.
        let info = |path: &str, vllm: &str, commit: Option<&str>, py: &str| crate::report::result::PythonInfo {
            path: path.into(),
            executable: path.into(),
            version: py.into(),
            origin: crate::python::Origin::Flag,
            vllm: Some(vllm.into()),
            torch: None,
            vllm_path: None,
            vllm_git_commit: commit.map(String::from),
        };
        let (mut b2, mut c2) = (b.clone(), b.clone());
        b2.python = Some(info("/a/python", "0.32.0", None, "3.11.7"));
        c2.python = Some(info("/b/python", "0.23.0", Some("0123456789abcdef0123"), "3.12.1"));
        assert_eq!(config_changes(&b2, &c2), vec!["vLLM 0.32.0 (Python 3.11.7) -> vLLM 0.23.0 @ 0123456789ab (Python 3.12.1)"]);
        c2.python = Some(info("/b/python", "0.32.0", None, "3.11.7"));
        assert_eq!(config_changes(&b2, &c2), vec!["python /a/python -> /b/python"]);
    }

    const SWEEP: &str = r#"{"space":[{"pairs":[[64,16]],"concs":[1]}],"inferencex":false,"length_convention":"vllm",
        "range_ratio":0.0,"prefix_len":0,"request_rate":null,"burstiness":1.0,"ignore_eos":true,"percentiles":[99.0],
        "goodput":null,"seed":0,"count":{"prompts_per_conc":null,"num_prompts":4,"warmups_per_conc":null,"warmups":2}}"#;
}
