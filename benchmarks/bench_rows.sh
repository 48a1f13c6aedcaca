#!/usr/bin/env bash
# Runs benchmark rows from benchmarks/rows.txt through `vdt bench step`: one log per row ($OUT/NAME.log) and one
# summary line per row in $OUT/summary.txt (the `result` line: median_s, peak_gib, mfu against PEAK_TFLOPS ...).
# Usage: benchmarks/bench_rows.sh [--dry-run] NAME|PATTERN...    e.g. sft_selective 'causal5b_*' all
# Env: ROWS_FILE (benchmarks/rows.txt), STEPS / WARMUP / DEVICE (replace the rows' own), NPROC (ranks under
# torchrun, default 1), CLOCKS=1 (sample the SM clock, power and temperature), ROW_S (time limit a row, 300), VDT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
ROWS_FILE=${ROWS_FILE:-benchmarks/rows.txt}
dry=0
[ "${1:-}" = --dry-run ] && { dry=1; shift; }
[ $# -gt 0 ] || { sed -n '2,6p' "$0"; exit 2; }

# set_flag FLAGS FLAG VALUE: FLAGS with FLAG's value replaced (or FLAG VALUE appended)
set_flag() {
  local flags=" $1 " flag=$2 value=$3
  if [[ $flags == *" $flag "* ]]; then
    flags=$(sed -E "s/ $flag [^ ]+/ $flag $value/" <<< "$flags")
  else
    flags="$flags $flag $value"
  fi
  local words
  read -r -a words <<< "$flags"
  echo "${words[*]}"
}

# the rows' names and flags, comments and blank lines dropped
mapfile -t rows < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$ROWS_FILE")
selected=()
for want in "$@"; do
  n=0
  for line in "${rows[@]}"; do
    name=${line%%[[:space:]]*}
    # shellcheck disable=SC2053  # $want is a glob on purpose
    if [ "$want" = all ] || [[ $name == $want ]]; then selected+=("$line"); n=$((n + 1)); fi
  done
  [ $n -gt 0 ] || { echo "no row matches '$want' in $ROWS_FILE" >&2; exit 2; }
done

clocks_summary() {  # NAME CSV: min / median / max over the samples taken while the GPU works
  python3 - "$2" << 'PY' | sed "s/^/$1: /"
import statistics, sys
rows = [[float(v) for v in l.split(",")] for l in open(sys.argv[1]) if l.count(",") == 2 and "N/A" not in l]
busy = [r for r in rows if r[1] > 150]  # samples while the GPU works (an idle H200 draws ~80 W)
for i, what in enumerate(["sm_mhz", "power_w", "temp_c"]):
    v = sorted(r[i] for r in busy) or [0]
    print(f"{what} min {v[0]:.0f} median {statistics.median(v):.0f} max {v[-1]:.0f} ({len(busy)} busy samples)")
PY
}

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | head -1)
[ $dry = 1 ] || say "# $(date -u +%F) commit $(commit_id) ${gpu:-no GPU} NPROC ${NPROC:-1}"
rc=0
for line in "${selected[@]}"; do
  read -r name flags <<< "$line"
  [ -n "${STEPS:-}" ] && flags=$(set_flag "$flags" --steps "$STEPS")
  [ -n "${WARMUP:-}" ] && flags=$(set_flag "$flags" --warmup "$WARMUP")
  [ -n "${DEVICE:-}" ] && flags=$(set_flag "$flags" --device "$DEVICE")
  flags=$(set_flag "$flags" --peak-tflops "${PEAK_TFLOPS:-989.4}")
  run=$(launcher)
  cmd="${run:+$run }$VDT bench step $flags --work-dir $WORK/$name"
  if [ $dry = 1 ]; then echo "$name: $cmd"; continue; fi
  fresh_dir "$WORK/$name"
  smi=""
  if [ "${CLOCKS:-0}" = 1 ]; then
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 200 \
      > "$OUT/$name.clocks.csv" 2> /dev/null &
    smi=$!
  fi
  echo "$cmd" > "$OUT/$name.log"
  # shellcheck disable=SC2086  # the command is a word list
  timeout "${ROW_S:-300}" $cmd >> "$OUT/$name.log" 2>&1 || rc=1
  result=$(grep -m1 '^result' "$OUT/$name.log" | cut -d' ' -f2-)
  error=$(grep -m1 -iE 'out of memory|error' "$OUT/$name.log" | cut -c1-160)
  say "$name: ${result:-no result} ${error}"
  if [ -n "$smi" ]; then
    kill "$smi" 2> /dev/null; wait "$smi" 2> /dev/null
    clocks_summary "$name" "$OUT/$name.clocks.csv" | tee -a "$SUMMARY"
  fi
  rm -rf "${WORK:?}/$name"
done
exit $rc
