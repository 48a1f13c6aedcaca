"""``plot``: a run's logs -> plot.png with matplotlib: the training loss (raw and a running mean) and the validation
MSE over steps on top; the validation gaps (uncond - cond, nulltext - cond: how much the conditions help) below."""
from __future__ import annotations

import argparse
import csv
import os
from collections import defaultdict

from .errors import VdtError


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run", help="run directory (train_log.csv, optional val_log.csv)")
    ap.add_argument("--out", default="", help="PNG to write (default <run>/plot.png)")
    ap.add_argument("--smooth", type=int, default=5, help="running-mean window of the loss, in logged steps")


def read_csv(path: str) -> dict[str, list[float]]:
    cols: dict[str, list[float]] = defaultdict(list)
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for k, v in row.items():
                try:
                    cols[k].append(float(v))
                except (TypeError, ValueError):
                    cols[k].append(float("nan"))
    return cols


def by_step(val: dict[str, list[float]], key: str) -> tuple[list[float], list[float]]:
    acc: dict[float, list[float]] = defaultdict(list)
    for s, v in zip(val["step"], val.get(key, [])):
        acc[s].append(v)
    steps = sorted(acc)
    return steps, [sum(acc[s]) / len(acc[s]) for s in steps]


def plot_run(run: str, out: str, smooth: int = 5) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_path = os.path.join(run, "train_log.csv")
    if not os.path.isfile(train_path):
        raise VdtError(f"{run}: no train_log.csv (is this a vdt run directory?)")
    tr = read_csv(train_path)
    if not tr.get("step"):
        raise VdtError(f"{train_path}: no rows yet")
    val_path = os.path.join(run, "val_log.csv")
    va = read_csv(val_path) if os.path.isfile(val_path) else {}
    has_gaps = bool(va.get("gap_uncond"))
    fig, axes = plt.subplots(2 if has_gaps else 1, 1, figsize=(8, 6.5 if has_gaps else 4), sharex=True, squeeze=False)
    ax = axes[0][0]
    steps, loss = tr["step"], tr["loss"]
    ax.plot(steps, loss, color="tab:blue", alpha=0.25, linewidth=0.8, label="train loss")
    w = max(1, smooth)
    mean = [sum(loss[max(0, i - w + 1):i + 1]) / len(loss[max(0, i - w + 1):i + 1]) for i in range(len(loss))]
    ax.plot(steps, mean, color="tab:blue", linewidth=1.6, label=f"train loss (running mean of {w})")
    if va.get("mse"):
        s, m = by_step(va, "mse")
        ax.plot(s, m, color="tab:red", marker="o", markersize=3, linewidth=1.4, label="val MSE (mean over timesteps)")
    ax.set_ylabel("loss / MSE")
    parts = os.path.abspath(run).rstrip("/").split("/")
    ax.set_title(f"training run {'/'.join(parts[-2:])}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    if has_gaps:
        ax2 = axes[1][0]
        for key, color, label in (("gap_uncond", "tab:orange", "val gap uncond - cond (ids help)"),
                                  ("gap_nulltext", "tab:green", "val gap nulltext - cond (text helps)")):
            if va.get(key):
                s, g = by_step(va, key)
                ax2.plot(s, g, color=color, marker="o", markersize=3, linewidth=1.4, label=label)
        ax2.axhline(0.0, color="grey", linewidth=0.8)
        ax2.set_ylabel("MSE gap")
        ax2.grid(True, alpha=0.3)
        ax2.legend(loc="upper left", fontsize=8)
    axes[-1][0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def run(args: argparse.Namespace) -> int:
    out = plot_run(args.run, args.out or os.path.join(args.run, "plot.png"), args.smooth)
    print(f"[plot] {out}")
    return 0
