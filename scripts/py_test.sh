#!/usr/bin/env bash
# Runs python/tests with pytest in the venv of scripts/py_env.sh (vdt_py from python/src). Arguments go to pytest
# (default: all of python/tests). ctest runs this with VDT_BINARY set; exit 77 (skipped) when there is no python3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command -v python3 >/dev/null || { echo "[vdt py_test] no python3 on PATH: skipped"; exit 77; }
py=$("$root/scripts/py_env.sh" | tail -n 1)
cd "$root/python"
export PYTHONPATH="$root/python/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m pytest -q -p no:cacheprovider "${@:-tests}"
