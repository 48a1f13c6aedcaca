#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for a build on a GPU machine whose image has no Debian -dev packages: CLI11 and
# nlohmann-json headers with their CMake configs, GoogleTest (headers, static libraries, CMake config: for
# `benchmarks/gpu_build.sh --tests`). Copy .deps/ to the GPU machine with the tree; benchmarks/gpu_build.sh uses it.
# Usage: benchmarks/prepare_gpu_carry.sh (on a machine with those Debian packages installed)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
d="$root/.deps"
mkdir -p "$d/usr/include" "$d/usr/share/cmake"
cp -r /usr/include/CLI /usr/include/nlohmann "$d/usr/include/"
cp -r /usr/share/cmake/CLI11 "$d/usr/share/cmake/"
cp -r /usr/share/cmake/nlohmann_json "$d/usr/share/cmake/" 2>/dev/null || cp -r /usr/lib/cmake/nlohmann_json "$d/usr/share/cmake/"
arch=$(gcc -print-multiarch)
mkdir -p "$d/usr/lib/$arch/cmake"
cp -r /usr/include/gtest /usr/include/gmock "$d/usr/include/"
cp /usr/lib/"$arch"/libgtest*.a /usr/lib/"$arch"/libgmock*.a "$d/usr/lib/$arch/"
cp -r /usr/lib/"$arch"/cmake/GTest "$d/usr/lib/$arch/cmake/"
echo "prepared $d"
