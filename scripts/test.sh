#!/usr/bin/env bash
# The README's test command: sets up, builds, then runs the whole suite with ctest (summary printed at the end).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
cd "${VDT_BUILD:-$root/build}"
ctest --output-on-failure -j "${VDT_TEST_JOBS:-2}" "$@"
