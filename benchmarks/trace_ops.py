#!/usr/bin/env python3
"""Reads a VDT_TRACE chrome trace (recorded with input shapes, and VDT_TRACE_MEMORY=1 for the memory part).
  trace_ops.py TRACE.json kernels PATTERN [N]  which ops launched the kernels whose name contains PATTERN: op, its
                                               enclosing autograd node, input dims and strides, summed kernel time
  trace_ops.py TRACE.json elementwise [N]      the non-GEMM, non-attention kernel time by launching op and its
                                               enclosing autograd node (no shapes): where the small kernels come from
  trace_ops.py TRACE.json gaps [N]             the GPU's idle time inside the traced span: the N longest gaps between
                                               consecutive kernels/copies, each with the op that launched the kernel
                                               after it and that op's enclosing ops (what the GPU waited for)
  trace_ops.py TRACE.json host [N]             the step's wall time outside the GPU's span: from the first host op to
                                               the first kernel (what the host did before the GPU had work), after the
                                               last kernel, and the N longest CUDA runtime calls (syncs inside a step)
  trace_ops.py TRACE.json memory [N]           the CUDA allocation peak of the traced span: when, inside which ops,
                                               and the N largest allocations live at that moment with the op that
                                               made them"""
import bisect
import collections
import json
import signal
import sys


def load(path):
    events = json.load(open(path))["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and "dur" in e]
    return events, ops


def enclosing(ops_by_tid, tid, ts):
    """The cpu ops of thread tid that contain ts, outermost first (walks up the nesting from the last op begun)."""
    if tid not in ops_by_tid:
        return []
    v, starts = ops_by_tid[tid]
    i = bisect.bisect_right(starts, ts) - 1
    out = []
    while i >= 0:
        o = v[i]
        if o["ts"] <= ts <= o["ts"] + o["dur"]:
            out.append(o)
        i = o["_parent"]
    return out[::-1]


def index_ops(ops):
    """Per thread: ops sorted by start, each with the index of the op that encloses it (-1 for none)."""
    by = collections.defaultdict(list)
    for o in ops:
        by[o["tid"]].append(o)
    out = {}
    for tid, v in by.items():
        v.sort(key=lambda o: (o["ts"], -o["dur"]))
        stack = []
        for i, o in enumerate(v):
            while stack and v[stack[-1]]["ts"] + v[stack[-1]]["dur"] < o["ts"]:
                stack.pop()
            o["_parent"] = stack[-1] if stack else -1
            stack.append(i)
        out[tid] = (v, [o["ts"] for o in v])
    return out


def is_elementwise(name):
    low = name.lower()
    return not any(w in low for w in ("sdpa", "flash", "fmha", "cudnn", "nvjet", "gemm", "cutlass"))


def kernels(events, ops, pattern, top, shapes=True):
    by_ext = {o["args"].get("External id"): o for o in ops if "External id" in o.get("args", {})}
    ops_by_tid = index_ops(ops)
    groups = collections.defaultdict(lambda: [0.0, 0])
    for k in events:
        if k.get("cat") != "kernel" or (pattern not in k["name"] if pattern else not is_elementwise(k["name"])):
            continue
        op = by_ext.get(k.get("args", {}).get("External id"))
        if op is None:
            groups[("?", "", "", "")][0] += k["dur"]
            groups[("?", "", "", "")][1] += 1
            continue
        stack = enclosing(ops_by_tid, op["tid"], op["ts"])
        parent = next((s["name"] for s in reversed(stack) if "Backward" in s["name"] or "backward" in s["name"]), "forward")
        key = ((op["name"], parent, str(op["args"].get("Input Dims")), str(op["args"].get("Input Strides", "")))
               if shapes else (op["name"], parent, "", ""))
        groups[key][0] += k["dur"]
        groups[key][1] += 1
    for (name, parent, dims, strides), (dur, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{dur / 1e3:9.2f} ms {n:5d}x  {name} in {parent}" +
              (f"\n      dims {dims}\n      strides {strides}" if shapes else ""))


def gaps(events, ops, top, floor_us=10.0):
    by_ext = {o["args"].get("External id"): o for o in ops if "External id" in o.get("args", {})}
    ops_by_tid = index_ops(ops)
    work = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
                  key=lambda e: e["ts"])
    if not work:
        sys.exit("no GPU kernels in the trace")
    found, end, total = [], work[0]["ts"] + work[0]["dur"], 0.0
    for prev, k in zip(work, work[1:]):
        gap = k["ts"] - end
        end = max(end, k["ts"] + k["dur"])
        if gap < floor_us:
            continue
        total += gap
        op = by_ext.get(k.get("args", {}).get("External id"))
        where = " > ".join(o["name"] for o in enclosing(ops_by_tid, op["tid"], op["ts"])[-4:]) if op else "?"
        found.append((gap, k["ts"] - work[0]["ts"], prev["name"][:60], k["name"][:60], where))
    span = end - work[0]["ts"]
    print(f"span {span / 1e3:.1f} ms, idle in gaps >= {floor_us:.0f} us: {total / 1e3:.2f} ms in {len(found)} gaps")
    by_where = collections.defaultdict(lambda: [0.0, 0])
    for gap, _, _, _, where in found:
        by_where[where][0] += gap
        by_where[where][1] += 1
    print("by the op launching the next kernel:")
    for where, (g, n) in sorted(by_where.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{g / 1e3:8.2f} ms {n:5d}x  {where}")
    print("longest:")
    for gap, at, prev, nxt, where in sorted(found, reverse=True)[:top]:
        print(f"{gap / 1e3:8.2f} ms at +{at / 1e3:7.1f} ms  after {prev}\n      before {nxt}\n      launched in {where}")


def host(events, ops, top):
    work = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
                  key=lambda e: e["ts"])
    if not work or not ops:
        sys.exit("no GPU kernels or host ops in the trace")
    h0, h1 = min(o["ts"] for o in ops), max(o["ts"] + o["dur"] for o in ops)
    g0, g1 = work[0]["ts"], max(k["ts"] + k["dur"] for k in work)
    print(f"host ops {(h1 - h0) / 1e3:.1f} ms, GPU span {(g1 - g0) / 1e3:.1f} ms; before the first kernel "
          f"{(g0 - h0) / 1e3:.2f} ms, after the last {(h1 - g1) / 1e3:.2f} ms")
    ops_by_tid = index_ops(ops)
    lead = collections.defaultdict(lambda: [0.0, 0])
    for tid, (v, _) in ops_by_tid.items():
        for o in v:
            if o["_parent"] == -1 and o["ts"] < g0:
                lead[o["name"]][0] += min(o["ts"] + o["dur"], g0) - o["ts"]
                lead[o["name"]][1] += 1
    print("top-level host ops before the first kernel:")
    for name, (d, n) in sorted(lead.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{d / 1e3:8.2f} ms {n:5d}x  {name}")
    rt = [e for e in events if e.get("cat") == "cuda_runtime" and "dur" in e]
    print("longest CUDA runtime calls:")
    for e in sorted(rt, key=lambda e: -e["dur"])[:top]:
        where = " > ".join(o["name"] for o in enclosing(ops_by_tid, e["tid"], e["ts"])[-3:])
        print(f"{e['dur'] / 1e3:8.2f} ms at +{(e['ts'] - h0) / 1e3:7.1f} ms  {e['name']}  in {where or '-'}")


def memory(events, ops, top):
    mem = [e for e in events if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 1]
    if not mem:
        sys.exit("no CUDA [memory] events: record with VDT_TRACE_MEMORY=1")
    mem.sort(key=lambda e: e["ts"])
    ops_by_tid = index_ops(ops)
    peak = max(mem, key=lambda e: e["args"]["Total Allocated"])
    start = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    gib = 1 << 30
    print(f"allocated at trace start {start / gib:.2f} GiB, peak {peak['args']['Total Allocated'] / gib:.2f} GiB "
          f"at +{(peak['ts'] - mem[0]['ts']) / 1e3:.1f} ms, end {mem[-1]['args']['Total Allocated'] / gib:.2f} GiB")
    print("inside: " + " > ".join(o["name"] for o in enclosing(ops_by_tid, peak["tid"], peak["ts"])))
    live = {}
    for e in mem:
        a = e["args"]
        if a["Bytes"] > 0:
            stack = enclosing(ops_by_tid, e["tid"], e["ts"])
            outer = next((s["name"] for s in stack if "Backward" in s["name"]), stack[0]["name"] if stack else "?")
            live[a["Addr"]] = (a["Bytes"], (stack[-1]["name"] if stack else "?"), outer)
        else:
            live.pop(a["Addr"], None)
        if e is peak:
            break
    by = collections.defaultdict(lambda: [0, 0])
    for b, inner, outer in live.values():
        by[(inner, outer, b)][0] += b
        by[(inner, outer, b)][1] += 1
    total = sum(b for b, _, _ in live.values())
    print(f"live at the peak, allocated inside the trace: {total / gib:.2f} GiB in {len(live)} blocks")
    for (inner, outer, b), (s, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{s / gib:8.3f} GiB {n:5d} x {b / (1 << 20):9.1f} MiB  {inner}  (in {outer})")
    # the timeline, coarse: total allocated every ~2 % of the span
    t0, t1 = mem[0]["ts"], mem[-1]["ts"]
    marks = [t0 + (t1 - t0) * i / 50 for i in range(51)]
    tss = [e["ts"] for e in mem]
    line = []
    for m in marks:
        i = max(0, bisect.bisect_right(tss, m) - 1)
        line.append(f"{mem[i]['args']['Total Allocated'] / gib:.1f}")
    print("timeline GiB (50 steps): " + " ".join(line))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly, no BrokenPipeError trace
    events, ops = load(sys.argv[1])
    mode, n = sys.argv[2], (lambda i, default: int(sys.argv[i]) if len(sys.argv) > i else default)
    if mode == "elementwise":
        kernels(events, ops, None, n(3, 40), shapes=False)
    elif mode in ("gaps", "host"):
        (gaps if mode == "gaps" else host)(events, ops, n(3, 20 if mode == "gaps" else 15))
    elif mode == "kernels":
        kernels(events, ops, sys.argv[3], n(4, 20))
    else:
        memory(events, ops, n(3, 25))
