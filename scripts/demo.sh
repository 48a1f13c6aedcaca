#!/usr/bin/env bash
# The README's demo command: sets up, builds, then runs `vdt demo` (all arguments are passed on).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
exec "${VDT_BUILD:-$root/build}/vdt" demo "$@"
