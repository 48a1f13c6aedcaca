#!/usr/bin/env bash
# The README's test command: checks the C++ layout, sets up, builds, then runs the whole suite with ctest (summary
# printed at the end).
# On a first run the Python tests' venv (scripts/py_env.sh: a download, little CPU) is made while the C++ builds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Unformatted C++ fails the run before anything builds (scripts/format.sh formats it; the check needs clang-format 14).
"$root/scripts/format.sh" --check
"$root/scripts/setup.sh" > /dev/null
venv_pid=""
if command -v python3 > /dev/null; then
  "$root/scripts/py_env.sh" > "${VDT_BUILD:-$root/build}.py_env.log" 2>&1 &
  venv_pid=$!
fi
"$root/scripts/build.sh"
# A failed venv is reported by the Python tests themselves (they run scripts/py_env.sh again, with its message).
[ -z "$venv_pid" ] || wait "$venv_pid" || echo "[vdt test] scripts/py_env.sh failed; see ${VDT_BUILD:-$root/build}.py_env.log" >&2
cd "${VDT_BUILD:-$root/build}"
ctest --output-on-failure -j "${VDT_TEST_JOBS:-2}" "$@"
