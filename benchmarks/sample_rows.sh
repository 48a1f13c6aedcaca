#!/usr/bin/env bash
# Runs streaming rows from benchmarks/sample_rows.txt through `vdt bench sample`: one log per row ($OUT/NAME.log) and
# its `result` line (median_chunk_s, frames_per_s, cache_gib, peak_gib ...) in $OUT/summary.txt. TRACE=1 also records
# chunk TRACE_CHUNK (default 8: the window full; left out of the row's timing) of each row and sums its kernels with
# benchmarks/trace_top.py ($OUT/NAME.top.txt).
# Usage: benchmarks/sample_rows.sh NAME|PATTERN...    e.g. 'wan5b_4*' h3_4 all      Env: ROW_S (time limit a row, 300)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
[ $# -gt 0 ] || { sed -n '2,5p' "$0"; exit 2; }
mapfile -t rows < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' benchmarks/sample_rows.txt)
say "# $(date -u +%F) commit $(commit_id) $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)"
rc=0
for want in "$@"; do
  for line in "${rows[@]}"; do
    read -r name flags <<< "$line"
    # shellcheck disable=SC2053  # $want is a glob on purpose
    [ "$want" = all ] || [[ $name == $want ]] || continue
    echo "$VDT bench sample $flags" > "$OUT/$name.log"
    trace=()
    [ "${TRACE:-0}" = 1 ] && trace=(env VDT_TRACE="$OUT/$name.trace.json" VDT_TRACE_STEP="${TRACE_CHUNK:-8}")
    # shellcheck disable=SC2086  # the flags are a word list
    timeout "${ROW_S:-300}" "${trace[@]}" $VDT bench sample $flags >> "$OUT/$name.log" 2>&1 || rc=1
    say "$name: $(grep -m1 '^result' "$OUT/$name.log" | cut -d' ' -f2- || echo "no result: $(tail -1 "$OUT/$name.log")")"
    if [ -f "$OUT/$name.trace.json" ]; then
      python3 benchmarks/trace_top.py "$OUT/$name.trace.json" 40 > "$OUT/$name.top.txt"
      grep -E "^kernels|^split" "$OUT/$name.top.txt" | sed "s/^/$name trace: /" | tee -a "$SUMMARY"
      rm -f "$OUT/$name.trace.json"
    fi
  done
done
exit $rc
