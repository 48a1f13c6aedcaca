#!/usr/bin/env bash
# Formats the tracked C++ (*.h, *.cpp, *.cu, *.cuh) with .clang-format; --check changes nothing and fails, listing the
# files, when one is not formatted. The layout is clang-format 14's (Debian's clang-format-14): another major version
# lays some lines out differently, so the check runs only with 14 and says so when it is missing.
# Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=""
for c in clang-format-14 clang-format; do
  if command -v "$c" > /dev/null && "$c" --version | grep -q 'version 14\.'; then fmt=$c; break; fi
done
if [ -z "$fmt" ]; then
  echo "[vdt format] skipped: clang-format 14 not found (apt install clang-format-14)" >&2
  exit 0
fi
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "${1:-}" = --check ]; then
  # one call for the tree: each file that would change is named in a -Werror diagnostic ("FILE:LINE:COL: error: ...")
  mapfile -t bad < <("$fmt" --dry-run -Werror "${files[@]}" 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
  if [ ${#bad[@]} -gt 0 ]; then
    printf '[vdt format] not formatted: %s\n' "${bad[@]}" >&2
    echo "[vdt format] run scripts/format.sh to format them (clang-format 14 with .clang-format)" >&2
    exit 1
  fi
  exit 0
fi
"$fmt" -i "${files[@]}"
