#!/usr/bin/env bash
# Sets up (idempotent, cached) and runs the whole test suite: unit tests and
# end-to-end tests on real vLLM (CPU build) with the real bundled model, on
# two vLLM versions and Pythons.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# Both environments: the default (CPython 3.11, vLLM 0.32.0) and the second
# one the compatibility tests run on (CPython 3.12, vLLM 0.23.0).
"$repo/ci/setup.sh" --with-vllm023
cd "$repo"
# Engine tests serialise themselves; the rest run in parallel.
cargo test --release "$@"
