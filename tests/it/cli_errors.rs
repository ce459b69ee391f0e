//! Bad input that is caught before any engine starts: exit code 2 and a
//! message naming the problem.

use crate::util::{enginebench, text};

#[test]
fn missing_recipe_file() {
    let out = enginebench(&["run", "/nonexistent/recipe.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("/nonexistent/recipe.toml"), "{}", text(&out));
}

#[test]
fn recipe_with_unknown_key_names_line() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(&recipe, "name = \"x\"\nmodel = \"m\"\nmodle = \"typo\"\n[sweep]\nisl = 1\nosl = 1\nconc = [1]\n").unwrap();
    let out = enginebench(&["run", recipe.to_str().unwrap()]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("r.toml:3:1") && log.contains("modle"), "{log}");
}

#[test]
fn zero_concurrency_override() {
    let out = enginebench(&["run", "--conc", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("--conc"), "{}", text(&out));
}

#[test]
fn unknown_bundled_model() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(&recipe, "name = \"x\"\nmodel = \"bundled:nope\"\n[sweep]\nisl = 1\nosl = 1\nconc = [1]\n").unwrap();
    let out = enginebench(&["run", recipe.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("bundled model `nope`"), "{}", text(&out));
}

#[test]
fn telemetry_interval_out_of_range() {
    let out = enginebench(&["run", "--telemetry-interval-ms", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let log = text(&out);
    assert!(log.contains("--telemetry-interval-ms") && log.contains("10..=60000"), "{log}");
}

/// A reader that has gone (`enginebench recipe show | head -1`) is not a
/// crash: before `outln!`, `println!` panicked on EPIPE with exit 101.
#[test]
fn closed_stdout_is_not_a_panic() {
    crate::util::install();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // every write to `writer` is now EPIPE (Rust ignores SIGPIPE)
    let out = crate::util::command(&["recipe", "show", "recipes/cpu/smollm2-135m.toml", "--no-knobs"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Bad trace input is refused before any engine starts, naming the file,
/// the line and the field; a dataset address that neither the Hugging Face
/// cache nor the (offline) download has says how to fetch it by hand.
#[test]
fn bad_traces_and_unreachable_datasets() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"id":"a","block_size":64,"requests":[{"t":0,"type":"s","in":128,"out":4,"hash_ids":[0,1],"api_time":1}]}"#;
    let cases = [
        (format!("{good}\n{{\"id\":\"b\",\"requests\":[{{\"t\":0,\"in\":5"), ":2"),
        (good.replace("\"t\":0", "\"t\":-3"), "-3"),
        (good.replace("[0,1]", "[0,1,2]"), "3 hash_ids but `in` = 128 tokens"),
    ];
    for (i, (text_of_trace, says)) in cases.iter().enumerate() {
        let trace = dir.path().join(format!("t{i}.jsonl"));
        std::fs::write(&trace, text_of_trace).unwrap();
        let out = enginebench(&["run", "--trace-file", trace.to_str().unwrap(), "--conc", "1", "--no-eval"]);
        let log = text(&out);
        assert_eq!(out.status.code(), Some(2), "{log}");
        assert!(log.contains(&format!("t{i}.jsonl")) && log.contains(says), "case {i}: {log}");
        assert!(!log.contains("Traceback") && !log.contains("engine started"), "{log}");
    }
    let out = crate::util::enginebench_env(
        &["run", "--trace-file", "hf://datasets/nobody-here/no-such-traces", "--conc", "1", "--no-eval"],
        &[("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", dir.path().to_str().unwrap())],
    );
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("nobody-here/no-such-traces") && log.contains("hf download") && log.contains("--trace-file DIR"), "{log}");
}

/// `doctor --releases` prints the compiled-in table of releases checked
/// (no FILE: the flag's value is optional), and a FILE that is not such a
/// table is exit 2 naming it.
#[test]
fn doctor_releases_prints_the_table_or_names_a_bad_file() {
    let out = enginebench(&["doctor", "--releases"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("| vLLM | build |") && stdout.contains("| 0.34.0 | cuda |"), "{stdout}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("not-a-table.toml");
    std::fs::write(&bad, "checked = 3\n").unwrap();
    let out = enginebench(&["doctor", "--releases", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not-a-table.toml"), "{}", text(&out));
}

/// A bad value given on the command line is blamed on its flag, not on the
/// recipe (which holds none of them).
#[test]
fn bad_sweep_flags_name_the_flag_not_the_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let bad_trace = dir.path().join("notes.jsonl");
    std::fs::write(&bad_trace, "{\"prompt\": \"hi\"}\n").unwrap();
    let missing = dir.path().join("missing.jsonl");
    let cases: [(&[&str], &str); 7] = [
        (&["--num-prompts", "0"], "--num-prompts"),
        (&["--percentiles", "50,150"], "--percentiles"),
        (&["--range-ratio", "2"], "--range-ratio"),
        (&["--request-rate=-1"], "--request-rate"),
        (&["--trace-file", bad_trace.to_str().unwrap()], "--trace-file"),
        (&["--trace-file", missing.to_str().unwrap()], "--trace-file"),
        // Valid alone, not with the recipe's vllm length convention: the flags are named.
        (&["--range-ratio", "1"], "the command line's sweep flags"),
    ];
    for (flags, names) in cases {
        let mut args = vec!["run", "--no-eval"];
        args.extend(flags);
        let out = enginebench(&args);
        let log = text(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {log}");
        assert!(log.contains(names), "{flags:?}: {log}");
        assert!(!log.contains("[sweep]:") && !log.contains("recipes/cpu/smollm2-135m.toml: "), "{flags:?} blamed on the recipe: {log}");
    }
}

/// An interpreter that runs and exits 0 but is no Python (a shell script)
/// is named with what it printed, not as "no output".
#[test]
fn a_python_that_is_a_script_is_named_with_what_it_printed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho 'hello from a script'\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = enginebench(&["--python", script.to_str().unwrap(), "run", "--no-eval"]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("it printed \"hello from a script\" instead of the probe's report"), "{log}");
    assert!(!log.contains("no output"), "{log}");
}
