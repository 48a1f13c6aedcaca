#!/usr/bin/env python3
"""Times candidate forms of small ops at the 5B SFT geometry on one GPU (CUDA events, median of 20): the bias gradient
(sum over rows vs a GEMV with ones), the per-cell text gather's backward (index_add_ vs a one-hot GEMM), gradient
clipping (per-tensor mul_ vs _foreach_mul_ vs AdamW's grad_scale), GELU forward/backward. Usage: micro_ops.py"""
import torch

dev = "cuda"
bf = torch.bfloat16


def t(fn, n=20):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


for cols in (3072, 14336):
    g = torch.randn(8190, cols, device=dev, dtype=bf)
    ones = torch.ones(8190, device=dev, dtype=bf)
    ones2 = torch.ones(1, 8190, device=dev, dtype=bf)
    print(f"bias grad [8190, {cols}]: sum(0) {t(lambda: g.sum(0)):.4f} ms, mv {t(lambda: g.t().mv(ones)):.4f} ms, "
          f"mm {t(lambda: ones2.mm(g)):.4f} ms")

R, N, Lt, D = 21, 21, 512, 3072
for rows in (1, 21):
    ids = torch.randint(0, rows, (N,), device=dev) if rows > 1 else torch.zeros(N, dtype=torch.long, device=dev)
    g = torch.randn(N, Lt, D, device=dev, dtype=bf)
    onehot = (torch.arange(rows, device=dev).unsqueeze(1) == ids.unsqueeze(0)).to(bf)
    ia = lambda: torch.zeros(rows, Lt, D, device=dev, dtype=bf).index_add_(0, ids, g)
    mm = lambda: onehot.mm(g.reshape(N, -1))
    print(f"gather backward R={rows}: index_add_ {t(ia):.4f} ms, one-hot mm {t(mm):.4f} ms")

h = torch.randn(8190, 14336, device=dev, dtype=bf)
dy = torch.randn_like(h)
print(f"gelu tanh fwd {t(lambda: torch.nn.functional.gelu(h, approximate='tanh')):.4f} ms, "
      f"bwd {t(lambda: torch.ops.aten.gelu_backward(dy, h, approximate='tanh')):.4f} ms")

# 5B parameters as 241 tensors of the Wan block shapes (bf16 params, grads and moments)
shapes = []
for _ in range(30):
    shapes += [(3072, 3072)] * 8 + [(14336, 3072), (3072, 14336)]
shapes = shapes[:241]
ps = [torch.randn(s, device=dev, dtype=bf) for s in shapes]
gs = [torch.randn_like(p) for p in ps]
ms = [torch.zeros_like(p) for p in ps]
vs = [torch.zeros_like(p) for p in ps]
ss = [torch.zeros((), device=dev) for _ in ps]
coef = torch.tensor(0.5, device=dev)
print(f"params {sum(p.numel() for p in ps) / 1e9:.2f} B")
print(f"clip: mul_ per tensor {t(lambda: [g.mul_(coef.to(bf)) for g in gs]):.3f} ms, "
      f"_foreach_mul_ {t(lambda: torch._foreach_mul_(gs, coef.to(bf))):.3f} ms")
print(f"_foreach_norm {t(lambda: torch._foreach_norm(gs, 2)):.3f} ms")
adam = lambda scale: torch._fused_adamw_(ps, gs, ms, vs, [], ss, lr=1e-5, beta1=0.9, beta2=0.999, weight_decay=0.01,
                                         eps=1e-8, amsgrad=False, maximize=False, grad_scale=scale, found_inf=None)
print(f"_fused_adamw_ {t(lambda: adam(None)):.3f} ms, with grad_scale {t(lambda: adam(coef)):.3f} ms")
