#!/usr/bin/env bash
# One traced step of a benchmark row (benchmarks/rows.txt): the row runs 2 warm-up and 3 timed steps with
# VDT_TRACE_STEP=4, then benchmarks/trace_top.py sums the step's kernel time (GEMM / attention / elementwise /
# optimizer split, heaviest kernels) and benchmarks/trace_ops.py lists the elementwise time by launching op.
# Usage: benchmarks/trace_row.sh NAME     Env: GAPS=1 (the GPU's idle gaps and the host time outside the step),
# MEMORY=1 (what is live at the allocation peak), KEEP_TRACE=1 (keep the trace, gzipped, in $OUT), TOPN (30), VDT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
name=${1:?usage: benchmarks/trace_row.sh NAME}
trace="$OUT/$name.trace.json"
# The row's own command line (rows file, NPROC, DEVICE ...), with the step counts the trace needs.
line=$(STEPS=3 WARMUP=2 benchmarks/bench_rows.sh --dry-run "$name" | head -1)
[ -n "$line" ] || exit 2
cmd=${line#"$name: "}
fresh_dir "$WORK/$name"
echo "$cmd" > "$OUT/$name.trace.log"
# shellcheck disable=SC2086  # the command is a word list
VDT_TRACE=$trace VDT_TRACE_STEP=4 VDT_TRACE_MEMORY=${MEMORY:-0} timeout "${ROW_S:-400}" $cmd \
  >> "$OUT/$name.trace.log" 2>&1
[ "${NPROC:-1}" -gt 1 ] && trace="$OUT/$name.trace.rank0.json"  # each rank writes its own file
[ -f "$trace" ] || { tail -20 "$OUT/$name.trace.log"; exit 1; }
grep -E "^  step|^result" "$OUT/$name.trace.log"
python3 benchmarks/trace_top.py "$trace" 60 > "$OUT/$name.top.txt"
grep -E "^kernels|^split" "$OUT/$name.top.txt" | sed "s/^/$name trace: /" | tee -a "$SUMMARY"
head -"${TOPN:-30}" "$OUT/$name.top.txt"
python3 benchmarks/trace_ops.py "$trace" elementwise 40 > "$OUT/$name.elementwise.txt"
head -"${TOPN:-30}" "$OUT/$name.elementwise.txt"
if [ "${GAPS:-0}" = 1 ]; then
  python3 benchmarks/trace_ops.py "$trace" gaps 12 | tee "$OUT/$name.gaps.txt" | head -40
  python3 benchmarks/trace_ops.py "$trace" host 12 | tee "$OUT/$name.host.txt" | head -40
fi
[ "${MEMORY:-0}" = 1 ] && python3 benchmarks/trace_ops.py "$trace" memory 20 | tee "$OUT/$name.memory.txt"
if [ "${KEEP_TRACE:-0}" = 1 ]; then gzip -f "$OUT/$name".trace*.json; else rm -f "$OUT/$name".trace*.json; fi
rm -rf "${WORK:?}/$name"
