#!/usr/bin/env bash
# Sets up (idempotent, cached) and runs the whole test suite: unit tests and
# end-to-end tests on real vLLM (CPU build) with the real bundled model.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/ci/setup.sh"
cd "$repo"
# Engine tests serialise themselves; the rest run in parallel.
PYO3_PYTHON=$repo/.enginebench/venv/bin/python cargo test --release "$@"
