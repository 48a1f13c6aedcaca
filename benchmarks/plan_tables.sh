#!/usr/bin/env bash
# Measures the memory plan's cost tables on a GPU (docs/planner.md): the rows of benchmarks/plan_rows.txt through
# `vdt bench plan`, each merged into plans/<card>/<preset>.json; one log per row ($OUT/plan_NAME.log), the tables
# copied to $OUT/plans/ (commit them under plans/).
# Usage: benchmarks/plan_tables.sh NAME|PATTERN|all...      Env: ROW_S (time limit a row, 300)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
[ $# -gt 0 ] || { sed -n '2,5p' "$0"; exit 2; }
mapfile -t rows < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' benchmarks/plan_rows.txt)
rc=0
for want in "$@"; do
  for line in "${rows[@]}"; do
    read -r name flags <<< "$line"
    # shellcheck disable=SC2053  # $want is a glob on purpose
    [ "$want" = all ] || [[ $name == $want ]] || continue
    echo "$VDT bench plan $flags" > "$OUT/plan_$name.log"
    # shellcheck disable=SC2086  # the flags are a word list
    timeout "${ROW_S:-300}" $VDT bench plan $flags >> "$OUT/plan_$name.log" 2>&1 || rc=1
    say "plan $name: $(tail -1 "$OUT/plan_$name.log")"
  done
done
mkdir -p "$OUT/plans" && cp -r plans/. "$OUT/plans/"
exit $rc
