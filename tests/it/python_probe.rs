//! Interpreters that cannot build an engine: one without vLLM or torch is
//! refused by every command that starts engines (exit 2, naming it and how it
//! was chosen) before any worker starts or any result folder exists; one whose
//! vLLM is installed but does not import is exit 2 with that named, not "a
//! version outside the supported range"; `doctor` lists every problem and
//! says what devices it sees in words. The environments are bare venvs made
//! here (no vLLM: nothing is installed into them); no engine starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{FakeServe, install, text, write_fake_vllm, write_recipe};

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
    // The import sandbox is reported whatever the Python (issue 47): found
    // by running one, with no capability, no remount, and its limits.
    let sandbox = &d["import_sandbox"]["state"];
    assert_eq!(sandbox["inside"]["capabilities"], "0000000000000000", "{d}");
    assert_eq!(sandbox["inside"]["remount"], "refused", "{d}");
    assert_eq!(sandbox["inside"]["uid"], "1000", "{d}");
    assert_eq!(sandbox["inside"]["processes"], "128", "{d}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(sandbox["runs_as"].as_str().unwrap().contains("a uid of its own"), "{d}");
    }
    assert!(log.contains("import sandbox ") && log.contains("launchers run as uid "), "{log}");

    // vLLM installed but broken: named as such, beside the devices torch sees.
    let broken = broken_vllm_venv(&dir.path().join("broken"));
    let got = enginebench(&["doctor", "--python", broken.to_str().unwrap()], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(2), "{log}");
    assert!(log.contains("problem: vLLM is installed in ") && log.contains("but `import vllm` fails (ImportError: libcudart.so.12"), "{log}");
    assert!(log.contains("compatibility not checked: vLLM does not import"), "{log}");

    // The set-up venv (vLLM's CPU build): a run can start, on no device.
    let got = enginebench(&["doctor"], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(0), "{log}");
    assert!(log.contains("devices     none (CPU platform)"), "{log}");
}

/// A venv whose `vllm` is a stand-in laid out as `serve` says, with the
/// platform `platform` (util::write_fake_vllm).
fn fake_vllm_venv(dir: &Path, version: &str, serve: FakeServe, platform: Option<&str>) -> PathBuf {
    let python = bare_venv(dir);
    let site = Command::new(&python).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).output().unwrap();
    write_fake_vllm(Path::new(String::from_utf8(site.stdout).unwrap().trim()), version, serve, platform);
    python
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
    // Refused before the result folder, naming the interpreter and the cause.
    assert!(!out.exists(), "{log}");
    assert!(log.contains("vLLM is installed in ") && log.contains("but `import vllm` fails (ImportError: libcudart.so.12"), "{log}");
    assert!(log.contains(dir.path().join("broken").to_str().unwrap()), "names the interpreter: {log}");
    // recipe check asks vLLM's parser in a worker: the same exit 2.
    let got = enginebench(&["recipe", "check", "--python", broken.to_str().unwrap(), &r], &[]);
    assert_eq!(got.status.code(), Some(2), "{}", text(&got));
    assert!(text(&got).contains("but `import vllm` fails"), "{}", text(&got));
}

/// One cause, one exit code: a vLLM that finds no platform (its CUDA build on
/// this machine without a GPU) or that is outside the supported range is
/// exit 2 from every command that starts engines, before any result folder,
/// naming the interpreter, the versions found and why; `doctor` says the
/// same with every item it checked; `recipe check` still checks the flags
/// where only the platform is missing.
#[test]
fn a_vllm_without_a_platform_or_outside_the_range_is_exit_2_before_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cuda = fake_vllm_venv(&dir.path().join("cuda"), "0.34.0", FakeServe::Subcommand, None);
    let old = fake_vllm_venv(&dir.path().join("old"), "0.9.0", FakeServe::None, Some("cpu"));
    let r = recipe(dir.path(), &cuda);
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (py, why) in [(&cuda, "found no platform to run on (no GPU platform): this is vLLM's CUDA 13.0 build"), (&old, "this vLLM is outside the supported range")] {
        let py = py.to_str().unwrap();
        for args in [
            vec!["run", "--python", py, &r, "--no-eval", "-o", o],
            vec!["eval", "--python", py, &r, "--eval-limit", "2", "-o", o],
            vec!["overhead", "--python", py, &r, "-o", o],
            vec!["ab", &r, "--candidate-python", py, "--repeats", "1", "--no-eval", "-o", o],
        ] {
            let got = enginebench(&args, &[]);
            let log = text(&got);
            assert_eq!(got.status.code(), Some(2), "{args:?}: {log}");
            assert!(log.contains(&format!("the vLLM of Python ")) && log.contains(py) && log.contains(why), "{args:?}: {log}");
            assert!(log.contains("cannot serve (vLLM 0."), "names the versions found: {log}");
            assert!(!log.contains("Traceback") && !out.exists(), "{args:?}: {log}");
        }
    }
    // doctor: every item found, and the platform named as the one problem.
    let got = enginebench(&["doctor", "--python", cuda.to_str().unwrap()], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(2), "{log}");
    assert!(log.contains("platform    none found (see the problems)"), "{log}");
    assert!(log.contains("ok       serve_parser               vllm.entrypoints.cli.serve:ServeSubcommand"), "{log}");
    assert!(!log.contains("MISSING  serve_parser"), "{log}");
    assert_eq!(log.matches("problem: ").count(), 1, "{log}");
    assert!(log.contains("problem: vLLM 0.34.0 in ") && log.contains("(no GPU platform)"), "{log}");
    let got = enginebench(&["doctor", "--python", old.to_str().unwrap(), "--json"], &[]);
    let d: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&got)));
    assert_eq!(d["can_run"], false);
    assert!(d["problems"][0].as_str().unwrap().starts_with("vLLM internal serve_parser missing: vLLM 0.9.0 in "), "{d}");
    assert!(d["release"]["text"].as_str().unwrap().contains("0.9.0 is older than the oldest release checked"), "{d}");
    // recipe check needs only the parser: it checks the flags, and says why nothing more.
    let got = enginebench(&["recipe", "check", "--python", cuda.to_str().unwrap(), &r], &[]);
    let log = text(&got);
    assert_eq!(got.status.code(), Some(0), "{log}");
    assert!(log.contains("vLLM 0.34.0 found no platform here (no GPU)"), "{log}");
    let got = enginebench(&["recipe", "check", "--python", old.to_str().unwrap(), &r], &[]);
    assert_eq!(got.status.code(), Some(2), "{}", text(&got));
    assert!(text(&got).contains("this vLLM is outside the supported range"), "{}", text(&got));
}
