//! The shim's compatibility layer (python-shim/enginebench_shim/compat.py)
//! against stand-in vLLM trees laid out as each release lays them out
//! (util::write_fake_vllm): where it finds the `vllm serve` parser in 0.23,
//! 0.32, 0.33/0.34 and a release that moves it again, and how it names a
//! vLLM outside the range or without a platform. Run in the system's
//! Python with only the stand-in on the path: no vLLM, no engine. And the
//! fast prefill/decode count against the real vLLM's own count on
//! scheduler outputs of 0.34's shape (a resumed request among the new ones).

use std::path::Path;
use std::process::Command;

use crate::util::{FakeServe, install, repo, text, write_fake_vllm};

/// Runs `script` in `python` with `path` (then the shim) on PYTHONPATH; returns stdout.
fn run_python(python: &Path, path: &Path, script: &str) -> String {
    let pythonpath = format!("{}:{}", path.display(), repo().join("python-shim").display());
    let out = Command::new(python).arg("-c").arg(script).env("PYTHONPATH", pythonpath).output().expect("python runs");
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const RESOLVE: &str = r#"
from enginebench_shim import compat
try:
    found = compat.report()["serve_parser"]["found"]
    args = compat.serve_parser().parse_args(["org/model", "--max-model-len", "77"])
    print(found, args.model_tag, args.max_model_len)
except compat.VllmUnusable as e:
    print("unusable", e.cause, e)
"#;

#[test]
fn the_serve_parser_is_found_where_each_release_keeps_it() {
    let system = Path::new("/usr/bin/python3");
    for (serve, version, want) in [
        (FakeServe::Openai, "0.23.0", "vllm.entrypoints.openai.cli_args:make_arg_parser org/model 77"),
        (FakeServe::Launchers, "0.32.0", "vllm.entrypoints.launchers.cli_args:make_arg_parser org/model 77"),
        (FakeServe::Common, "0.33.0", "vllm.entrypoints.common.cli_args:make_arg_parser org/model 77"),
        // vLLM's own `serve` subcommand first, where there is one.
        (FakeServe::Subcommand, "0.34.0", "vllm.entrypoints.cli.serve:ServeSubcommand org/model 77"),
        // A release that moves make_arg_parser again: found the way vLLM finds it.
        (FakeServe::Moved, "0.99.0", "vllm.entrypoints.cli.serve:ServeSubcommand org/model 77"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_fake_vllm(dir.path(), version, serve, Some("cpu"));
        assert_eq!(run_python(system, dir.path(), RESOLVE).trim(), want, "{serve:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    write_fake_vllm(dir.path(), "0.99.0", FakeServe::None, Some("cpu"));
    let out = run_python(system, dir.path(), RESOLVE);
    assert!(out.starts_with("unusable range vLLM 0.99.0 in "), "{out}");
    assert!(out.contains("internal serve_parser not found (vllm.entrypoints.cli.serve:ServeSubcommand: ModuleNotFoundError"), "{out}");
    assert!(out.contains("this vLLM is outside the supported range"), "{out}");
}

/// A vLLM whose modules are there but raise on import (0.25.1 with a
/// torchaudio built for another torch: OSError from its native library,
/// through transformers) is a broken environment, cause "import", never
/// "outside the supported range" and never a bare traceback.
#[test]
fn a_module_that_raises_on_import_is_a_broken_environment() {
    let dir = tempfile::tempdir().unwrap();
    write_fake_vllm(dir.path(), "0.25.1", FakeServe::Moved, Some("cpu"));
    std::fs::write(
        dir.path().join("vllm/entrypoints/cli/serve.py"),
        "raise OSError('Could not load this library: /v/torchaudio/lib/libtorchaudio.so')\n",
    )
    .unwrap();
    let out = run_python(Path::new("/usr/bin/python3"), dir.path(), RESOLVE);
    assert!(out.starts_with("unusable import vLLM 0.25.1 is installed in "), "{out}");
    assert!(out.contains("vllm.entrypoints.cli.serve:ServeSubcommand: OSError: Could not load this library"), "{out}");
    assert!(out.contains("a package of that environment is broken"), "{out}");
}

#[test]
fn a_vllm_without_a_platform_is_named_in_words() {
    let dir = tempfile::tempdir().unwrap();
    write_fake_vllm(dir.path(), "0.34.0", FakeServe::Subcommand, None);
    let script = r#"
from enginebench_shim import compat
try:
    compat.platform()
except compat.VllmUnusable as e:
    print(e.cause, e)
"#;
    let out = run_python(Path::new("/usr/bin/python3"), dir.path(), script);
    assert!(out.starts_with("platform vLLM 0.34.0 in "), "{out}");
    assert!(out.contains("found no platform to run on (no GPU platform): this is vLLM's CUDA 13.0 build (torch 2.14.0+cu130)"), "{out}");
}

/// The shim's fast count against vLLM's own `compute_iteration_details`
/// (the set-up venv's, 0.32; 0.33 and 0.34 count the same way) on duck-typed
/// scheduler outputs: 0.34 sends a resumed request back among the new ones,
/// so both count it as prefill; a cached request with output is decode.
#[test]
fn the_fast_prefill_decode_count_matches_vllms_on_034_shaped_outputs() {
    let python = install().join("venv/bin/python3");
    let script = r#"
from types import SimpleNamespace as NS
from enginebench_shim import engine
from vllm.v1.utils import compute_iteration_details

class Cached:
    def __init__(self, req_ids, num_output_tokens):
        self.req_ids, self.num_output_tokens = req_ids, num_output_tokens
    def is_context_phase(self, rid):
        n = dict(zip(self.req_ids, self.num_output_tokens)).get(rid)
        return n is not None and n == 0

def out(new, cached, nst):
    return NS(scheduled_new_reqs=[NS(req_id=r) for r in new], scheduled_cached_reqs=cached,
              num_scheduled_tokens=nst, total_num_scheduled_tokens=sum(nst.values()),
              scheduled_encoder_input_stats=None)

cases = [
    # 0.34: request "r" was preempted and comes back with all its tokens, as a new request.
    out(["a", "r"], Cached(["b", "c"], [5, 0]), {"a": 64, "r": 80, "b": 1, "c": 32}),
    # A decode-only step.
    out([], Cached(["b", "c"], [6, 1]), {"b": 1, "c": 1}),
]
for o in cases:
    d = compute_iteration_details(o)
    print(engine._iteration_details(o), (d.num_ctx_requests, d.num_ctx_tokens, d.num_generation_requests, d.num_generation_tokens))
"#;
    let out = run_python(&python, Path::new("/nonexistent"), script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["(3, 176, 1, 1) (3, 176, 1, 1)", "(0, 0, 2, 2) (0, 0, 2, 2)"], "{out}");
}

/// `--speculative-config`'s method by vLLM's own rule: 0.34's validator
/// (built-ins or a method a plugin registered; a stand-in class of that
/// shape here, as CI has no 0.34), and 0.32's literal type (the set-up
/// venv's real SpeculativeConfig), where a plugin's name is not a method.
#[test]
fn a_speculative_method_is_judged_by_the_vllm_at_hand() {
    let script_034 = r#"
from enginebench_shim import engine
REGISTERED = []
class SpeculativeConfig:
    @classmethod
    def _validate_method(cls, value):
        if value in ("ngram", "eagle3") or value in REGISTERED:
            return value
        raise ValueError(f"Unknown speculative method {value!r}; registered custom methods: {REGISTERED}.")
print(engine._check_speculative_method(SpeculativeConfig, "myplugin"))
REGISTERED.append("myplugin")  # what a vLLM plugin's register_speculative_method does
print(engine._check_speculative_method(SpeculativeConfig, "myplugin"))
print(engine._check_speculative_method(SpeculativeConfig, "ngram"))
"#;
    let out = run_python(Path::new("/usr/bin/python3"), Path::new("/nonexistent"), script_034);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["--speculative-config: Unknown speculative method 'myplugin'; registered custom methods: [].", "None", "None"], "{out}");

    let script_032 = r#"
from enginebench_shim import engine
from vllm.config.speculative import SpeculativeConfig
print(engine._check_speculative_method(SpeculativeConfig, "ngram"))
print(engine._check_speculative_method(SpeculativeConfig, "myplugin"))
"#;
    let out = run_python(&install().join("venv/bin/python3"), Path::new("/nonexistent"), script_032);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "None", "{out}");
    assert!(lines[1].starts_with("--speculative-config: method 'myplugin' is not one of vLLM's speculative methods: "), "{out}");
}
