#!/usr/bin/env bash
# Configures and builds vdt into $VDT_BUILD (default build/) after scripts/setup.sh; quiet when up to date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
torch_dir=$("$root/scripts/setup.sh" | tail -n 1)
build=${VDT_BUILD:-$root/build}
jobs=${VDT_JOBS:-$(nproc)}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${VDT_BUILD_TYPE:-Release} -DTorch_DIR="$torch_dir" \
    ${VDT_CMAKE_ARGS:-} > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
if ! ninja -C "$build" -n 2>/dev/null | grep -q 'no work to do'; then
  echo "[vdt build] building in $build ($jobs jobs; log: $build.build.log)" >&2
  cmake --build "$build" -j "$jobs" > "$build.build.log" 2>&1 || { tail -n 80 "$build.build.log"; exit 1; }
fi
