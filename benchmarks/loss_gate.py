"""The FP8 accuracy gate: two train logs (train_log.csv of `vdt train sft`, or train_log.jsonl of `vdt train causal`)
of the same run (same seed, data order and timesteps), a reference (bf16) and a candidate (fp8). Compares their
running-mean loss (trailing window, paired step by step) and prints one line per check, then PASS when the running
means stay within the tolerance everywhere past the first window.

A gate needs a run that learns: the reference's running mean at the last step must be at most --fall (default 0.5)
times its first full window's, else the verdict is NO GATE (a curve that barely falls says little about a
candidate that follows it).

With --floor REF2 (a second reference run, the same configuration and seed): the largest difference between the two
references too, which is the run-to-run spread of the reference itself (a CUDA backward is not bitwise deterministic,
and the trajectories part within a few dozen steps); the candidate's largest difference is then printed against it,
and a line says so when the spread itself exceeds the tolerance. The verdict stays the tolerance's.

The seeds gate (--seeds; the FP8 base's, and --fp8's before the plan may pick it): REF and CAND are each a
comma-separated list of logs, the same configuration with several seeds (three each). PASS when every candidate's
final running mean lies inside the references' final range widened by half its width on each side, and no candidate's
running mean strays further from the references' mean (at any step past the first window) than the references stray
from each other (their largest max - min over those steps). The references must learn (their mean falls to --fall).

Usage: python3 benchmarks/loss_gate.py REF.csv|REF.jsonl CAND.csv|CAND.jsonl [--window 100] [--tol 0.02] [--points 10]
       [--fall 0.5] [--floor REF2.csv|REF2.jsonl]
       python3 benchmarks/loss_gate.py --seeds REF1,REF2,REF3 CAND1,CAND2,CAND3 [--window 100] [--fall 0.5]
"""
import argparse
import csv
import json
import statistics


def read(path):
    """step -> {"loss", "step_time"}: `vdt train sft`'s train_log.csv, or `vdt train causal`'s train_log.jsonl
    (loss_v; step time from the elapsed seconds `sec`)."""
    if path.endswith(".jsonl"):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        out, prev = {}, 0.0
        for r in rows:
            out[int(r["step"])] = {"loss": r["loss_v"], "step_time": r["sec"] - prev}
            prev = r["sec"]
        return out
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {int(r["step"]): r for r in rows}


def running_mean(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def largest_difference(ref, cand, steps, window):
    """(running means of ref, of cand, relative differences past the first window, index of the largest)"""
    r = running_mean([float(ref[s]["loss"]) for s in steps], window)
    c = running_mean([float(cand[s]["loss"]) for s in steps], window)
    rel = [abs(y - x) / abs(x) for x, y in zip(r[window:], c[window:])]
    return r, c, rel, max(range(len(rel)), key=rel.__getitem__)


def seeds_gate(refs, cands, window, fall):
    """The seeds gate's lines and exit code (0 PASS, 1 FAIL or no verdict, 2 NO GATE)."""
    logs = [read(p) for p in refs + cands]
    steps = sorted(set.intersection(*(set(log) for log in logs)))
    if len(steps) <= window:
        print(f"gate: only {len(steps)} steps common to all {len(logs)} logs (need more than the window {window}): "
              "no verdict")
        return 1
    means = [running_mean([float(log[s]["loss"]) for s in steps], window) for log in logs]
    r, c = means[:len(refs)], means[len(refs):]
    past = range(window - 1, len(steps))
    ref_mean = [statistics.mean(m[i] for m in r) for i in range(len(steps))]
    spread = max(max(m[i] for m in r) - min(m[i] for m in r) for i in past)
    lo, hi = min(m[-1] for m in r), max(m[-1] for m in r)
    lo_w, hi_w = lo - (hi - lo) / 2, hi + (hi - lo) / 2
    print(f"gate: {len(refs)} reference and {len(cands)} candidate seeds, {len(steps)} common steps; running mean "
          f"over {window} steps")
    print(f"  references end at {lo:.5f} .. {hi:.5f} (widened by half: {lo_w:.5f} .. {hi_w:.5f}); they stray from "
          f"each other by up to {spread:.5f}")
    ok = True
    for path, m in zip(cands, c):
        stray = max(abs(m[i] - ref_mean[i]) for i in past)
        inside = lo_w <= m[-1] <= hi_w
        ok = ok and inside and stray <= spread
        print(f"  candidate {path}: ends at {m[-1]:.5f} ({'inside' if inside else 'OUTSIDE'} the range), strays up to "
              f"{stray:.5f} from the references' mean ({'within' if stray <= spread else 'BEYOND'} their spread)")
    share = ref_mean[-1] / ref_mean[window - 1]
    print(f"learns: the references' mean {ref_mean[window - 1]:.5f} (step {steps[window - 1]}) -> {ref_mean[-1]:.5f} "
          f"(step {steps[-1]}), {share * 100:.1f} % of its start (a gate needs <= {fall * 100:.0f} %)")
    if share > fall:
        print("gate: NO GATE (the references did not learn enough; use a more learnable root or more steps)")
        return 2
    print(f"gate: {'PASS' if ok else 'FAIL'} (seeds)")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--tol", type=float, default=0.02)
    ap.add_argument("--points", type=int, default=10, help="running-mean values printed along the run")
    ap.add_argument("--fall", type=float, default=0.5, help="the reference must end at most this share of its start")
    ap.add_argument("--floor", help="a second reference run: the reference's own run-to-run spread")
    ap.add_argument("--seeds", action="store_true", help="REF and CAND are comma-separated logs of several seeds")
    a = ap.parse_args()
    if a.seeds:
        return seeds_gate(a.ref.split(","), a.cand.split(","), a.window, a.fall)
    ref, cand = read(a.ref), read(a.cand)
    steps = sorted(set(ref) & set(cand))
    if len(steps) <= a.window:
        print(f"gate: only {len(steps)} common steps (need more than the window {a.window}): no verdict")
        return 1
    r, c, rel, worst = largest_difference(ref, cand, steps, a.window)
    t_ref = statistics.median(float(ref[s]["step_time"]) for s in steps[10:])
    t_cand = statistics.median(float(cand[s]["step_time"]) for s in steps[10:])
    print(f"gate: {len(steps)} common steps (ref {len(ref)}, cand {len(cand)}); running mean over {a.window} steps")
    stride = max(1, len(steps) // a.points)
    for i in list(range(a.window - 1, len(steps), stride)) + [len(steps) - 1]:
        print(f"  step {steps[i]:5d}: ref {r[i]:.5f}  cand {c[i]:.5f}  ({(c[i] - r[i]) / r[i] * 100:+.2f} %)")
    print(f"gate: largest running-mean difference {rel[worst] * 100:.2f} % at step {steps[worst + a.window]}; "
          f"median step time ref {t_ref:.3f} s, cand {t_cand:.3f} s")
    if a.floor:
        ref2 = read(a.floor)
        both = sorted(set(steps) & set(ref2))
        if len(both) > a.window:
            _, _, frel, fworst = largest_difference(ref, ref2, both, a.window)
            print(f"floor: the two references differ by up to {frel[fworst] * 100:.2f} % (step {both[fworst + a.window]});"
                  f" the candidate {'within' if rel[worst] <= frel[fworst] else 'beyond'} that spread")
            if frel[fworst] > a.tol:
                print(f"floor: the reference does not stay within the tolerance {a.tol * 100:.1f} % of itself, so no "
                      "candidate can be expected to (a configuration whose runs part less, or a tolerance at its spread)")
        else:
            print(f"floor: only {len(both)} steps common with {a.floor}: no floor")
    share = r[-1] / r[a.window - 1]
    learns = share <= a.fall
    print(f"learns: the reference's running mean {r[a.window - 1]:.5f} (step {steps[a.window - 1]}) -> {r[-1]:.5f} "
          f"(step {steps[-1]}), {share * 100:.1f} % of its start (a gate needs <= {a.fall * 100:.0f} %)")
    if not learns:
        print("gate: NO GATE (the reference did not learn enough; use a more learnable root or more steps)")
        return 2
    ok = rel[worst] <= a.tol
    print(f"gate: {'PASS' if ok else 'FAIL'} (tolerance {a.tol * 100:.1f} %)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
