#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for a run on a lent GPU machine whose image has no Debian -dev packages:
# CLI11 and nlohmann-json headers with their CMake configs, GoogleTest (headers, static libraries, CMake config: for
# `gpu_run.sh tests`), and the shared fixtures. Carry it with the call.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
d="$root/.deps"
mkdir -p "$d/usr/include" "$d/usr/share/cmake" "$d/fixtures"
cp -r /usr/include/CLI /usr/include/nlohmann "$d/usr/include/"
cp -r /usr/share/cmake/CLI11 "$d/usr/share/cmake/"
cp -r /usr/share/cmake/nlohmann_json "$d/usr/share/cmake/" 2>/dev/null || cp -r /usr/lib/cmake/nlohmann_json "$d/usr/share/cmake/"
arch=$(gcc -print-multiarch)
mkdir -p "$d/usr/lib/$arch/cmake"
cp -r /usr/include/gtest /usr/include/gmock "$d/usr/include/"
cp /usr/lib/"$arch"/libgtest*.a /usr/lib/"$arch"/libgmock*.a "$d/usr/lib/$arch/"
cp -r /usr/lib/"$arch"/cmake/GTest "$d/usr/lib/$arch/cmake/"
cp "$root"/tests/fixtures/*.safetensors "$d/fixtures/"
echo "prepared $d"
