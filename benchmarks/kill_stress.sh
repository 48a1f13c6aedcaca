#!/usr/bin/env bash
# shellcheck disable=SC2091,SC2034  # $(cmd_of ...) runs the command it prints; the kill loop counts, its k is unused
# kill -9 stress of both trainers (docs/resume.md): RUNS runs of each trainer at the tiny preset on CPU, each
# killed with SIGKILL at a random moment (up to KILLS times, each re-run killed again at a random moment), then re-run
# with the same command to the end. Every finished run is compared with one uninterrupted run: the final export / LoRA
# file and the final state slot's weights and optimizer moments must match exactly (`vdt ckpt diff`: no key differs in
# presence or shape, worst relative L2 0), and no temp file (`*.tmp*`) may be left. Prints one line per run and a
# summary; exits 1 on any inexact resume or leftover.
# Usage: benchmarks/kill_stress.sh [sft|causal|both] (default both). Env: VDT (default build/vdt), RUNS (50),
# KILLS (2), STEPS (sft 12, causal 12), WORK (a temp dir).
set -uo pipefail
what=${1:-both}
VDT=${VDT:-build/vdt}
RUNS=${RUNS:-50}
KILLS=${KILLS:-2}
WORK=${WORK:-$(mktemp -d /tmp/vdt_kill_stress.XXXXXX)}
mkdir -p "$WORK"
data="$WORK/data"
[ -f "$data/dataset.json" ] || "$VDT" data synth "$data" --latent_frames 14 --train_runs 2 --train_clips_per_run 3 \
  --n_drop 1 > "$WORK/synth.log" || { cat "$WORK/synth.log"; exit 1; }
res=$(python3 -c "import json; print(json.load(open('$data/dataset.json'))['res'])" 2>/dev/null ||
      sed -n 's/.*"res": *"\([0-9x]*\)".*/\1/p' "$data/dataset.json")

cmd_of() {  # trainer out
  if [ "$1" = sft ]; then
    echo "$VDT train sft --random-init --data_root $data --res $res --output $2 --model tiny --device cpu --precision fp32" \
         "--no-gradient_checkpointing --batch_size 1 --grad_accum 2 --num_workers 1 --lr 1e-3 --cond_lr 1e-3" \
         "--warmup_steps 2 --val_every 0 --save_every 1 --max_steps ${STEPS:-12} --resume auto"
  else
    echo "$VDT train causal --random-init --data-root $data --out $2 --model tiny --device cpu --precision fp32 --chunk-frames 1" \
         "--lora-rank 4 --lora-alpha 4 --val-clips 3 --lr 1e-2 --warmup 2 --save-every 1 --steps ${STEPS:-12}"
  fi
}
final_of() {  # trainer out
  if [ "$1" = sft ]; then echo "$2/step-${STEPS:-12}.safetensors"; else printf '%s/lora_step%05d.safetensors' "$2" "${STEPS:-12}"; fi
}
same() {  # a b: exact equality of every tensor
  local out
  out=$("$VDT" ckpt diff "$1" "$2" 2>&1) || return 1
  echo "$out" | tail -1 | grep -q "0 differ in presence or shape, worst relative L2 0.000e+00"
}
now() { date +%s.%N; }

stress() {
  local trainer=$1 ref="$WORK/$1_ref" t0 t1 secs inexact=0 leftovers=0 failed=0 kills=0
  rm -rf "$ref"
  t0=$(now)
  $(cmd_of "$trainer" "$ref") > "$WORK/$trainer.ref.log" 2>&1 || { echo "$trainer: reference run failed"; tail "$WORK/$trainer.ref.log"; return 1; }
  t1=$(now)
  secs=$(echo "$t1 - $t0" | bc)
  echo "$trainer: reference run ${secs}s; $RUNS runs, up to $KILLS kill -9 each at a random moment"
  for i in $(seq 1 "$RUNS"); do
    local out="$WORK/${trainer}_$i" log="$WORK/${trainer}_$i.log" n=0 k rc=0 why=""
    rm -rf "$out"
    local nk=$((1 + RANDOM % KILLS))
    for k in $(seq 1 "$nk"); do
      $(cmd_of "$trainer" "$out") >> "$log" 2>&1 &
      local pid=$!
      sleep "$(echo "scale=3; $secs * $RANDOM / 32767" | bc)"
      if kill -9 "$pid" 2> /dev/null; then n=$((n + 1)); fi
      wait "$pid" 2> /dev/null
    done
    kills=$((kills + n))
    $(cmd_of "$trainer" "$out") >> "$log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then failed=$((failed + 1)); why="re-run exited $rc"
    elif ! same "$(final_of "$trainer" "$ref")" "$(final_of "$trainer" "$out")"; then inexact=$((inexact + 1)); why="final weights differ"
    else
      for f in weights optimizer; do
        same "$ref/state/$f-00000-of-00001.safetensors" "$out/state/$f-00000-of-00001.safetensors" ||
          { inexact=$((inexact + 1)); why="final state ($f) differs"; break; }
      done
    fi
    local tmp
    tmp=$(find "$out" -name '*.tmp*' | wc -l)
    [ "$tmp" -gt 0 ] && { leftovers=$((leftovers + 1)); why="$why${why:+; }$tmp temp file(s) left"; }
    printf '%s run %2d: %d kill(s) -> %s\n' "$trainer" "$i" "$n" "${why:-exact, no leftovers}"
    [ -z "$why" ] && rm -rf "$out" "$log"
  done
  echo "$trainer: $RUNS runs, $kills kills: $inexact inexact resume(s), $leftovers run(s) with leftover temp files, $failed failed re-run(s)"
  [ $inexact -eq 0 ] && [ $leftovers -eq 0 ] && [ $failed -eq 0 ]
}

status=0
case $what in
  sft|causal) stress "$what" || status=1 ;;
  both) stress sft || status=1; stress causal || status=1 ;;
  *) echo "usage: $0 [sft|causal|both]"; exit 2 ;;
esac
echo "work directory: $WORK"
exit $status
