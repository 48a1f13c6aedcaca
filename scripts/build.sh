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
# Quiet when up to date: the "building" line appears only once ninja starts compiling or linking something.
announce() {
  local line shown=0
  while IFS= read -r line; do
    if [ $shown = 0 ] && [[ $line =~ ^\[[0-9]+/[0-9]+\]\ (Building|Linking) ]]; then
      echo "[vdt build] building in $build ($jobs jobs; log: $build.build.log)" >&2
      shown=1
    fi
  done
}
if ! cmake --build "$build" -j "$jobs" 2>&1 | tee "$build.build.log" | announce; then
  tail -n 80 "$build.build.log"
  exit 1
fi
