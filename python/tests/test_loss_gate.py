"""benchmarks/loss_gate.py, the FP8 accuracy gate's verdicts on made-up train logs: PASS within the tolerance, FAIL
beyond it, NO GATE when the reference does not halve its loss (whatever the candidate does), no verdict on too short
a run; both log formats (train sft's train_log.csv, train causal's train_log.jsonl) and the --floor line; the seeds
gate (--seeds: three references, three candidates) passes inside the references' widened range and spread, fails
outside either, and gives no gate when the references do not halve."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from conftest import REPO

GATE = os.path.join(REPO, "benchmarks", "loss_gate.py")


def curve(steps: int, start: float, end: float, scale: float = 1.0) -> list[float]:
    """An exponential fall from start to end over the run, with a small deterministic wobble; times scale."""
    return [scale * (end + (start - end) * math.exp(-5 * s / steps)) * (1 + 0.05 * math.sin(s)) for s in range(steps)]


def write_csv(path, losses) -> str:
    with open(path, "w") as f:
        f.write("step,loss,mse,step_time\n")
        for s, v in enumerate(losses, 1):
            f.write(f"{s},{v:.6f},{v:.6f},0.2\n")
    return str(path)


def write_jsonl(path, losses) -> str:
    with open(path, "w") as f:
        for s, v in enumerate(losses, 1):
            f.write(json.dumps({"step": s, "loss_v": v, "sec": 0.3 * s}) + "\n")
    return str(path)


def gate(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, GATE, *map(str, args)], capture_output=True, text=True)


def test_a_candidate_within_the_tolerance_passes(tmp_path):
    ref = write_csv(tmp_path / "ref.csv", curve(400, 1.5, 0.2))
    cand = write_csv(tmp_path / "cand.csv", curve(400, 1.5, 0.2, scale=1.01))
    r = gate(ref, cand)
    assert r.returncode == 0, r.stdout
    assert "gate: PASS" in r.stdout and "largest running-mean difference 1.00 %" in r.stdout


def test_a_candidate_beyond_the_tolerance_fails(tmp_path):
    ref = write_csv(tmp_path / "ref.csv", curve(400, 1.5, 0.2))
    cand = write_csv(tmp_path / "cand.csv", curve(400, 1.5, 0.2, scale=1.05))
    r = gate(ref, cand)
    assert r.returncode == 1, r.stdout
    assert "gate: FAIL" in r.stdout
    assert gate(ref, cand, "--tol", "0.06").returncode == 0   # the same pair under a looser tolerance


def test_a_reference_that_does_not_halve_gives_no_gate(tmp_path):
    ref = write_csv(tmp_path / "ref.csv", curve(400, 1.2, 1.0))   # ends at ~85 % of its first window
    r = gate(ref, ref)
    assert r.returncode == 2, r.stdout
    assert "NO GATE" in r.stdout and "gate: PASS" not in r.stdout
    assert gate(ref, ref, "--fall", "0.9").returncode == 0   # it does fall below 90 %


def test_causal_logs_and_the_floor_line(tmp_path):
    ref = write_jsonl(tmp_path / "ref.jsonl", curve(400, 2.0, 0.1))
    ref2 = write_jsonl(tmp_path / "ref2.jsonl", curve(400, 2.0, 0.1, scale=1.04))
    cand = write_jsonl(tmp_path / "cand.jsonl", curve(400, 2.0, 0.1, scale=0.97))
    r = gate(ref, cand, "--floor", ref2)
    assert r.returncode == 1, r.stdout   # 3 % off fails the 2 % tolerance even inside the references' 4 % spread
    assert "floor: the two references differ by up to 4.00 %" in r.stdout and "within that spread" in r.stdout
    assert "median step time ref 0.300 s" in r.stdout
    assert "the reference does not stay within the tolerance 2.0 % of itself" in r.stdout   # its 4 % spread
    ref3 = write_jsonl(tmp_path / "ref3.jsonl", curve(400, 2.0, 0.1, scale=1.01))
    assert "does not stay within" not in gate(ref, cand, "--floor", ref3).stdout   # a 1 % spread is within 2 %


def test_too_short_a_run_has_no_verdict(tmp_path):
    ref = write_csv(tmp_path / "ref.csv", curve(80, 1.5, 0.2))
    r = gate(ref, ref)
    assert r.returncode == 1 and "no verdict" in r.stdout


def test_the_seeds_gate(tmp_path):
    refs = [write_jsonl(tmp_path / f"ref{i}.jsonl", curve(300, 2.0, 0.2, scale=k)) for i, k in
            enumerate([0.98, 1.0, 1.02])]
    near = [write_jsonl(tmp_path / f"near{i}.jsonl", curve(300, 2.0, 0.2, scale=k)) for i, k in
            enumerate([0.99, 1.01, 1.025])]   # 1.025: past the range, inside its widening by half (1.03)
    r = gate("--seeds", ",".join(refs), ",".join(near))
    assert r.returncode == 0 and "gate: PASS (seeds)" in r.stdout, r.stdout
    far = near[:2] + [write_jsonl(tmp_path / "far.jsonl", curve(300, 2.0, 0.2, scale=1.05))]
    r = gate("--seeds", ",".join(refs), ",".join(far))
    assert r.returncode == 1 and "OUTSIDE the range" in r.stdout and "BEYOND their spread" in r.stdout, r.stdout
    flat = [write_jsonl(tmp_path / f"flat{i}.jsonl", curve(300, 1.2, 1.0, scale=k)) for i, k in
            enumerate([0.98, 1.0, 1.02])]
    assert gate("--seeds", ",".join(flat), ",".join(flat)).returncode == 2
    short = [write_jsonl(tmp_path / "short.jsonl", curve(80, 2.0, 0.2))]
    assert "no verdict" in gate("--seeds", ",".join(short), ",".join(short)).stdout
