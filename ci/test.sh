#!/usr/bin/env bash
# Sets up (idempotent, cached) and runs the whole test suite: unit tests and
# end-to-end tests on real vLLM (CPU build) with the real bundled model, on
# two vLLM versions and Pythons.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# Both environments: the default (CPython 3.11, vLLM 0.32.0) and the second
# one the compatibility tests run on (CPython 3.12, vLLM 0.23.0).
"$repo/ci/setup.sh" --with-vllm023
# The real ROCm SMI library and CLI (Debian's 5.2.3) for the telemetry-source
# test: without an AMD GPU they must fail with their own messages carried.
if [ "$(id -u)" = 0 ] && ! [ -x /usr/bin/rocm-smi ]; then
    (apt-get install -y -q librocm-smi64-1 rocm-smi >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q librocm-smi64-1 rocm-smi >/dev/null; }) ||
        echo "[test] could not install rocm-smi; the ROCm SMI test will skip" >&2
fi
# A one-machine Slurm cluster for tests/it/slurm_e2e.rs (installs slurm-wlm and
# munge when missing, as root), stopped again when the tests end.
"$repo/ci/slurm.sh" start
export "$("$repo/ci/slurm.sh" env)"
trap '"$repo/ci/slurm.sh" stop' EXIT
cd "$repo"
# Engine tests serialise themselves on a lock (tests/it/util.rs engine_lock);
# the rest run in parallel. More test threads than cores, so that while one
# engine test runs and others wait on the lock, the tests that start no
# engine still have threads (with one per core they queued behind the lock).
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}
cargo test --release "$@"
