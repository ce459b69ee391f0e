#!/usr/bin/env bash
# The harness-overhead benchmark (issue 9): builds enginebench and the prompt
# helper, then runs bench/harness_overhead.py with the venv's Python.
# Options go to the script (see --help); e.g.
#   bench/harness_overhead.sh --rounds 3 --concs 4,64 --isl 128 --osl 64
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
home=${ENGINEBENCH_HOME:-$repo/.enginebench}
py=$home/venv/bin/python
[ -x "$py" ] || { echo "no venv at $home: run ci/setup.sh first" >&2; exit 2; }
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p enginebench-native
CARGO_TARGET_DIR=$repo/target/promptgen cargo build --release --quiet --locked \
    --manifest-path "$repo/bench/promptgen/Cargo.toml"
exec "$py" "$repo/bench/harness_overhead.py" --home "$home" "$@"
