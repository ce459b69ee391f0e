#!/usr/bin/env bash
# Builds the enginebench wheel (one abi3 wheel for CPython 3.10+) with
# maturin into DIR (default target/wheels). maturin itself is installed from
# PyPI into a small venv in the cache, keyed by its pinned version.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/target/wheels}
cache=${ENGINEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginebench}
maturin_version=1.16.0
tools=$cache/tools-maturin-$maturin_version
if [ ! -x "$tools/bin/maturin" ]; then
    python3 -m venv "$tools.tmp"
    "$tools.tmp/bin/pip" install --quiet --disable-pip-version-check "maturin==$maturin_version"
    rm -rf "$tools" && mv "$tools.tmp" "$tools"
    # venv scripts hard-code their path: fix them up after the rename.
    grep -rlI --null "$tools.tmp" "$tools/bin" | xargs -0 -r sed -i "s|$tools.tmp|$tools|g"
fi
# abi3 on Unix needs no interpreter at build time; maturin still wants one to
# name the wheel, any CPython 3.10+ does.
# The platform tag: the oldest glibc of the images the wheel goes into is
# Ubuntu 22.04's 2.35 (vllm/vllm-openai; rocm/vllm-dev is 22.04 or 24.04).
# maturin checks the module's versioned symbols against that policy and
# fails the build rather than tag a wheel those images cannot load (built on
# Debian 12, glibc 2.36, the module needs symbols up to GLIBC_2.34:
# `auditwheel show` says manylinux_2_34).
"$tools/bin/maturin" build --release --quiet -m "$repo/native/Cargo.toml" --out "$out" -i python3 \
    --compatibility manylinux_2_35 >&2
ls -1t "$out"/enginebench-*.whl | head -1
