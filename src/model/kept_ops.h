// The blocks' GEMM and attention calls, marked: an activation-checkpointing policy installed from outside
// (distributed/activation_checkpoint, `--checkpointing selective`) keeps their outputs and recomputes only the
// elementwise work between them (norms, modulation, RoPE, gates, activations) in backward; a linear implementation
// installed from outside (distributed/fp8_blocks, `--fp8`) runs the GEMMs of base weights in another number format.
// With nothing installed (the default) kept_linear is torch::linear and kept_attention calls its function: the model
// carries no training state. Not here: what is kept or how it is replayed, or how an FP8 GEMM is computed.
#pragma once
#include <torch/types.h>

#include <functional>
#include <utility>
#include <vector>

namespace vdt {

// A pure function of its inputs (a parameter it uses comes as an input: a policy may differentiate it with respect to
// its inputs only). Constants (index tensors, RoPE tables) may be captured.
using AttentionFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// What a GEMM's input goes through first: y = act(x) w^T + b. gelu_tanh: GELU with the tanh approximation, in x's
// dtype (Wan's FFN between ffn.0 and ffn.2). A LinearImpl may apply it on the way (the FP8 linear quantizes gelu(x) as
// it reads x, so gelu(x) is never written); everything else computes it first (input_act).
enum class InputAct { none, gelu_tanh };
torch::Tensor input_act(const torch::Tensor& x, InputAct act);  // act(x); x itself for none

// Whose weight a GEMM multiplies: a block Linear's own weight (a LinearImpl may take it) or a LoRA factor (always
// torch::linear, in the compute dtype).
enum class GemmRole { base, lora };

class KeptOps {
 public:
  virtual ~KeptOps() = default;
  // x [..., in], w [out, in], b [out] or undefined -> act(x) w^T + b [..., out]
  virtual torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, GemmRole role,
                               InputAct act) = 0;
  // inputs (q, k, v, ...) -> fn(inputs)
  virtual torch::Tensor attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn) = 0;
};

// A linear's gradients: dx [..., in], dw [out, in], db [out]; each undefined when not wanted.
struct LinearGrads {
  torch::Tensor dx, dw, db;
};

// How the GEMM of a base weight runs when it is not torch::linear (the FP8 linear, model/kernels/fp8_linear.h).
class LinearImpl {
 public:
  virtual ~LinearImpl() = default;
  // x [..., in], w [out, in], b [out] or undefined -> act(x) w^T + b [..., out], differentiable in x, w and b
  virtual torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                               InputAct act) = 0;
  // The gradients of linear(x, w, b, act) for the output gradient g [..., out], as its own backward computes them (a
  // kept output's backward under selective checkpointing): dx (through act: with respect to x itself) when want_x, dw
  // when want_w, db (the sum of g over its rows, in g's dtype) when want_b. x is read only for dw, and for dx when act
  // is not none.
  virtual LinearGrads grads(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& w, bool want_x,
                            bool want_w, bool want_b, InputAct act) = 0;
};

// What the model calls: torch::linear / fn(inputs) unless a KeptOps is installed on this thread; a base GEMM goes
// through the installed LinearImpl (base_linear).
torch::Tensor kept_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {},
                          GemmRole role = GemmRole::base, InputAct act = InputAct::none);
torch::Tensor kept_attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn);

// The GEMM of a base weight on this thread: the installed LinearImpl's linear, else torch::linear of act(x) (what a
// KeptOps runs for a GemmRole::base call).
torch::Tensor base_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                          InputAct act = InputAct::none);
LinearImpl* current_linear_impl();  // nullptr: none

// Sets a thread-local pointer for the scope's life; the previous value comes back after (the two scopes below).
template <typename T>
class ThreadSlotScope {
 public:
  ThreadSlotScope(T*& slot, T* value) : slot_(slot), prev_(slot) { slot = value; }
  ~ThreadSlotScope() { slot_ = prev_; }
  ThreadSlotScope(const ThreadSlotScope&) = delete;
  ThreadSlotScope& operator=(const ThreadSlotScope&) = delete;

 private:
  T*& slot_;  // this thread's slot
  T* prev_;
};

// Installs `ops` (nullptr: none) on this thread for the scope's life; the previous one comes back after.
class KeptOpsScope : ThreadSlotScope<KeptOps> {
 public:
  explicit KeptOpsScope(KeptOps* ops);
};

// Installs `impl` (nullptr: none) on this thread for the scope's life; the previous one comes back after.
class LinearImplScope : ThreadSlotScope<LinearImpl> {
 public:
  explicit LinearImplScope(LinearImpl* impl);
};

}  // namespace vdt
