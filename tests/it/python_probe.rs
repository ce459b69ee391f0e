//! Interpreters that cannot build an engine: one without vLLM or torch is
//! refused by every command that starts engines (exit 2, naming it and how it
//! was chosen) before any worker starts or any result folder exists; one whose
//! vLLM is installed but does not import is exit 2 with that named, not "a
//! version outside the supported range"; `doctor` lists every problem and
//! says what devices it sees in words. The environments are bare venvs made
//! here (no vLLM: nothing is installed into them); no engine starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{install, read_json, text, write_recipe};

/// A CPython 3.10+ to make venvs from (the system's, as the fake-engine tests use).
fn base_python() -> PathBuf {
    ["/usr/bin/python3", "/usr/local/bin/python3"].iter().map(PathBuf::from).find(|p| p.is_file()).expect("a python3 to make venvs from")
}

/// A venv under `dir` without pip, vLLM or torch; returns its `bin/python`.
fn bare_venv(dir: &Path) -> PathBuf {
    let made = Command::new(base_python()).args(["-m", "venv", "--without-pip"]).arg(dir).output().unwrap();
    assert!(made.status.success(), "venv: {}", text(&made));
    dir.join("bin/python")
}

/// A venv where `vllm` is installed but raises on import, and `torch` imports.
fn broken_vllm_venv(dir: &Path) -> PathBuf {
    let python = bare_venv(dir);
    let site = Command::new(&python).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).output().unwrap();
    let site = PathBuf::from(String::from_utf8(site.stdout).unwrap().trim());
    for (package, body) in [
        ("vllm", "raise ImportError('libcudart.so.12: cannot open shared object file (a stub for this test)')\n"),
        ("torch", "__version__ = '0.0.0+stub'\n"),
    ] {
        std::fs::create_dir_all(site.join(package)).unwrap();
        std::fs::write(site.join(package).join("__init__.py"), body).unwrap();
    }
    python
}

/// A recipe that never gets to start an engine, with a variant in `python`.
fn recipe(dir: &Path, variant_python: &Path) -> String {
    let body = format!(
        r#"name = "probe"
model = "fake/model"
hardware = "cpu"
[engine]
args = ["--max-model-len", "512"]
[sweep]
isl = 16
osl = 8
conc = [1]
num_prompts = 2
warmups = 0
[variants.pr]
python = "{}"
"#,
        variant_python.display()
    );
    write_recipe(dir, "probe", &body)
}

/// Runs the binary from the repository root (its set-up venv is the default
/// interpreter), with `env` added.
fn enginebench(args: &[&str], env: &[(&str, &str)]) -> Output {
    install();
    let mut c = crate::util::command(args);
    c.env_remove("ENGINEBENCH_FAKE_ENGINE").env_remove("ENGINEBENCH_PYTHON");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn no_vllm_nor_torch_is_exit_2_before_any_worker_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let bare = bare_venv(&dir.path().join("bare"));
    let py = bare.to_str().unwrap();
    let r = recipe(dir.path(), &bare);
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<(&str, &str)>, &str)> = vec![
        (vec!["run", "--python", py, &r, "--no-eval", "-o", o], vec![], "(from --python)"),
        (vec!["run", &r, "--no-eval", "-o", o], vec![("ENGINEBENCH_PYTHON", py)], "(from $ENGINEBENCH_PYTHON)"),
        (vec!["eval", "--python", py, &r, "--eval-limit", "2", "-o", o], vec![], "(from --python)"),
        (vec!["overhead", "--python", py, &r, "-o", o], vec![], "(from --python)"),
        (vec!["recipe", "check", "--python", py, &r], vec![], "(from --python)"),
        // The variant names its own interpreter; the default (the set-up venv) is fine.
        (vec!["run", &r, "--variants", "pr", "--no-eval", "-o", o], vec![], "(from `python` of [variants.pr])"),
        // ab: each arm's interpreter, the default's arm being fine.
        (
            vec!["ab", &r, "--baseline", "base", "--candidate", "base", "--candidate-python", py, "--repeats", "1", "--no-eval", "-o", o],
            vec![],
            "(from --candidate-python)",
        ),
        (
            vec!["ab", &r, "--baseline", "base", "--candidate", "base", "--baseline-python", py, "--repeats", "1", "--no-eval", "-o", o],
            vec![],
            "(from --baseline-python)",
        ),
        (vec!["ab", &r, "--baseline", "base", "--candidate", "pr", "--repeats", "1", "--no-eval", "-o", o], vec![], "(from `python` of [variants.pr])"),
    ];
    for (args, env, how) in cases {
        let got = enginebench(&args, &env);
        let log = text(&got);
        assert_eq!(got.status.code(), Some(2), "{args:?}: {log}");
        assert!(log.contains(&format!("at {py} {how} cannot import vllm or torch")), "{args:?}: {log}");
        assert!(log.contains("no module named vllm; no module named torch"), "{args:?}: {log}");
        assert!(!log.contains("outside the supported range") && !log.contains("Traceback"), "{args:?}: {log}");
        // Refused before anything ran: no worker, no result folder.
        assert!(!log.contains("starting engine") && !out.exists(), "{args:?}: {log}");
    }
}

#[test]
fn doctor_lists_every_missing_package_and_devices_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let bare = bare_venv(&dir.path().join("bare"));
    let got = enginebench(&["doctor", "--python", bare.to_str().unwrap()], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(2), "{log}");
    assert!(log.contains("problem: vllm cannot be imported (no module named vllm)"), "{log}");
    assert!(log.contains("problem: torch cannot be imported (no module named torch)"), "{log}");
    assert!(log.contains("devices     unknown (torch does not import)"), "{log}");
    assert!(!log.contains("null"), "{log}");

    let json = enginebench(&["doctor", "--python", bare.to_str().unwrap(), "--json"], &[]);
    let d: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&json)));
    assert_eq!(d["problems"].as_array().unwrap().len(), 2, "{d}");
    assert_eq!(d["engine"]["missing"], serde_json::json!(["torch", "vllm"]), "{d}");

    // vLLM installed but broken: named as such, beside the devices torch sees.
    let broken = broken_vllm_venv(&dir.path().join("broken"));
    let got = enginebench(&["doctor", "--python", broken.to_str().unwrap()], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(2), "{log}");
    assert!(log.contains("problem: vllm is installed but does not import: ImportError: libcudart.so.12"), "{log}");
    assert!(log.contains("compatibility not checked: vLLM does not import"), "{log}");

    // The set-up venv (vLLM's CPU build): a run can start, on no device.
    let got = enginebench(&["doctor"], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(0), "{log}");
    assert!(log.contains("devices     none (CPU platform)"), "{log}");
}

#[test]
fn a_vllm_that_does_not_import_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let broken = broken_vllm_venv(&dir.path().join("broken"));
    let r = recipe(dir.path(), &broken);
    let out = dir.path().join("out");
    let got = enginebench(&["run", "--python", broken.to_str().unwrap(), &r, "--no-eval", "-o", out.to_str().unwrap()], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(2), "{log}");
    assert!(!log.contains("outside the supported range"), "{log}");
    let v = read_json(&out.join("result.json"));
    let error = &v["jobs"][0]["error"];
    assert_eq!(error["bad_input"], true, "{v}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("vLLM is installed in ") && message.contains("but `import vllm` fails (ImportError: libcudart.so.12"), "{message}");
    assert!(message.contains(dir.path().join("broken").to_str().unwrap()), "names the interpreter: {message}");
    // recipe check asks vLLM's parser in a worker: the same exit 2.
    let got = enginebench(&["recipe", "check", "--python", broken.to_str().unwrap(), &r], &[]);
    assert_eq!(got.status.code(), Some(2), "{}", text(&got));
    assert!(text(&got).contains("but `import vllm` fails"), "{}", text(&got));
}
