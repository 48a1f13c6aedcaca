#!/usr/bin/env python3
"""Sums a chrome trace's GPU kernel time by kernel name (VDT_TRACE files): total, busy share of the traced span,
and the top kernels, and the split GEMM / attention / elementwise / optimizer. Usage: trace_top.py TRACE.json [N]"""
import collections
import json
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly

events = json.load(open(sys.argv[1]))["traceEvents"]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
if not kernels:
    sys.exit("no GPU kernels in the trace")
start = min(e["ts"] for e in kernels)
end = max(e["ts"] + e["dur"] for e in kernels)
busy = sum(e["dur"] for e in kernels)
by = collections.defaultdict(lambda: [0.0, 0])
for e in kernels:
    name = e["name"]
    by[name[:110]][0] += e["dur"]
    by[name[:110]][1] += 1
print(f"kernels {len(kernels)}  span {(end - start) / 1e3:.1f} ms  busy {busy / 1e3:.1f} ms ({100 * busy / (end - start):.0f} %)")
for name, (dur, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"{dur / 1e3:9.2f} ms {100 * dur / busy:5.1f} % {n:6d}x  {name}")

split = collections.defaultdict(float)
for name, (dur, n) in by.items():
    low = name.lower()
    kind = ("attention" if "sdpa" in low or "flash" in low or "fmha" in low or "cudnn" in low else
            "gemm" if "nvjet" in low or "gemm" in low or "cutlass" in low else
            "optimizer" if "multi_tensor_apply" in low or "fusedopti" in low or "optim_cuda" in low else
            "elementwise and copies")
    split[kind] += dur
print("split: " + ", ".join(f"{k} {v / 1e3:.0f} ms" for k, v in sorted(split.items(), key=lambda kv: -kv[1])))
