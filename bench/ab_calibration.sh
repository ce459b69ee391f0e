#!/usr/bin/env bash
# The A/B calibration benchmark (issue 15): builds enginebench, then runs
# bench/ab_calibration.py, which runs K `enginebench ab` comparisons per
# change on the default recipe and prints how often each is called a change,
# by the new interval (paired t over repeats), the new interval with the A/A
# noise floor, and the old percentile bootstrap recomputed on the same runs.
# Options go to the script (see --help); e.g.
#   bench/ab_calibration.sh --runs 8 --repeats 3 --conc 4 --isl 64 --osl 32 --num-prompts 8
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
home=${ENGINEBENCH_HOME:-$repo/.enginebench}
py=$home/venv/bin/python
[ -x "$py" ] || { echo "no venv at $home: run ci/setup.sh first" >&2; exit 2; }
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p enginebench-native
exec "$py" "$repo/bench/ab_calibration.py" --bin "$repo/target/release/enginebench" "$@"
