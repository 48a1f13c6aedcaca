// H3's MLP activation as one autograd node: from fc1's output h [S, 2F] (gate | up) to silu(gate) * up [S, F]. The
// reference (torch::silu(gate) * up through autograd) runs silu, the multiply, their two backwards and the cat that
// joins the two halves' gradients: ~8 passes over [S, F] per MLP and ~0.4 s of the H3 step on an H200. The CUDA kernel
// pair reads h once forward and h and the gradient once backward, writing dh [S, 2F] in place of the cat. Numerics:
// the reference's (silu in float32 rounded to h's dtype, the product rounded; backward: dy * up and dy * silu rounded,
// then silu's derivative in float32, rounded once). Without the CUDA kernels (CPU, no nvcc) or with the fused-kernel
// switch off the reference ops run.
#pragma once
#include <torch/types.h>

namespace vdt::kernels {

// h [..., 2F] (float32 or bfloat16) -> [..., F]. The node on CUDA with the switch on, else the reference.
torch::Tensor swiglu(const torch::Tensor& h);
// The node on any device (aten: its ATen form, also on CUDA; tests and `vdt bench kernels`).
torch::Tensor fused_swiglu(const torch::Tensor& h, bool aten);
// The reference: torch::silu(gate) * up through autograd.
torch::Tensor swiglu_reference(const torch::Tensor& h);

}  // namespace vdt::kernels
