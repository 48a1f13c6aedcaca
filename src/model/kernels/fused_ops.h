// Fused elementwise chains of the blocks, each a custom autograd Function with a hand-written backward: Wan's
// LayerNorm + modulate, affine LayerNorm (norm3; ATen's forward) and gate + residual, H3's modulate (on the RMSNorm
// output, per-token row index) and gate + residual. Wan's norms return their input again as a second output for the
// residual add that follows, so that one node receives both branches' gradients of x and adds them in its backward
// kernel. Two implementations share one backward formula: CUDA kernels (fused_ops_cuda.cu forwards,
// fused_ops_backward_cuda.cu backwards; fp32 math, built when LibTorch has CUDA and nvcc is found:
// VDT_WITH_CUDA_KERNELS) and a CUDA-free fallback in ATen ops (any device).
// Numerics are the reference's (reference_ops.h): fp32 inside, each intermediate rounded to the dtype the reference op
// would produce, result in x's dtype. Not here: q/k RMSNorm + RoPE (*qk_norm_rope.h).
#pragma once
#include <torch/types.h>

#include <string>
#include <utility>

namespace vdt::kernels {

// The process-wide switch. On by default; `--fused-kernels off` (both trainers, `vdt bench step`) runs the
// reference path instead.
void set_fused_kernels(bool on);
bool fused_kernels_on();
// Sets the switch for its lifetime and restores the previous value (a trainer's run).
class FusedKernelsScope {
 public:
  explicit FusedKernelsScope(bool on) : previous_(fused_kernels_on()) { set_fused_kernels(on); }
  ~FusedKernelsScope() { set_fused_kernels(previous_); }
  FusedKernelsScope(const FusedKernelsScope&) = delete;
  FusedKernelsScope& operator=(const FusedKernelsScope&) = delete;

 private:
  bool previous_;
};
// Whether this binary has the CUDA kernels (nvcc found at configure time, LibTorch with CUDA).
bool cuda_kernels_built();
// Whether this directory's CUDA kernels run for t: float32 or bfloat16 on a CUDA device they have an image for (the
// single-tensor ops: swiglu.h, row_gather.h).
bool cuda_kernels_take(const torch::Tensor& t);

// Which implementation a fused op runs: automatic = the CUDA kernel when x is on a CUDA device the kernels were built
// for (sm_90a) and the dtypes are supported (x float32 or bfloat16; modulation float32 or x's dtype), else the ATen
// fallback; aten = the fallback always (tests, `vdt bench kernels`).
enum class FusedPath { automatic, aten };
// "cuda" or "aten": what FusedPath::automatic picks for these operands.
std::string fused_backend(const torch::Tensor& x, const torch::Tensor& mod);

// What the blocks call: the fused op when the switch is on, else the reference (reference_ops.h).
torch::Tensor modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                             double eps);
// (x, modulated_norm(x, ...)) where x feeds a residual add next: use the first for it. Fused, the norm's backward then
// adds the residual's gradient of x into its dx (one kernel, no accumulation add); the reference returns x itself.
std::pair<torch::Tensor, torch::Tensor> modulated_norm_branch(const torch::Tensor& x, const torch::Tensor& shift,
                                                              const torch::Tensor& scale, double eps);
// (x, layer_norm(x, weight, bias)) over the last dim: the same for an affine LayerNorm whose input feeds a residual
// add.
std::pair<torch::Tensor, torch::Tensor> layer_norm_branch(const torch::Tensor& x, const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps);
torch::Tensor gated_add(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);
torch::Tensor h3_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                          const torch::Tensor& rows);
torch::Tensor h3_gate(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                      const torch::Tensor& rows);

// The fused ops themselves, whatever the switch says. Shapes as reference_ops.h:
// x [B, L, D] (float32/bfloat16/half), shift/scale [B, G, 1, D] with G dividing L -> [B, L, D] in x's dtype
torch::Tensor fused_modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                   double eps, FusedPath path = FusedPath::automatic);
// -> (x again, a view carrying this op's node; the LayerNorm + modulate as above)
std::pair<torch::Tensor, torch::Tensor> fused_modulated_norm_branch(const torch::Tensor& x, const torch::Tensor& shift,
                                                                    const torch::Tensor& scale, double eps,
                                                                    FusedPath path = FusedPath::automatic);
// x [..., D], weight / bias [D] -> (x again, a view carrying this op's node; LayerNorm with ATen's forward)
std::pair<torch::Tensor, torch::Tensor> fused_layer_norm_branch(const torch::Tensor& x, const torch::Tensor& weight,
                                                                const torch::Tensor& bias, double eps,
                                                                FusedPath path = FusedPath::automatic);
// x, y [B, L, D] (same dtype), gate [B, G, 1, D] -> x + (y * gate).to(x's dtype)
torch::Tensor fused_gated_add(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                              FusedPath path = FusedPath::automatic);
// x [S, D], shift/scale [R, D] (same dtype), rows [S] int64 in [0, R) -> x * (1 + scale[rows]) + shift[rows]
torch::Tensor fused_h3_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                const torch::Tensor& rows, FusedPath path = FusedPath::automatic);
// x, y [S, D] (same dtype), gate [R, D], rows [S] int64 in [0, R) -> x + gate[rows] * y
torch::Tensor fused_h3_gate(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                            const torch::Tensor& rows, FusedPath path = FusedPath::automatic);

}  // namespace vdt::kernels
