// FP8 linears (`--fp8`): y = x w^T with both operands quantized row-wise to E4M3 (x per token, w per output row: a
// scale = amax / 448 each), multiplied by at::_scaled_mm with fp32 accumulation and a bfloat16 result, and a custom
// autograd Function whose backward runs in FP8 too: dgrad dY W with dY per token and W per input column, wgrad
// dY^T X with both per output/input column over the tokens (all E4M3: the row-wise _scaled_mm path is only sure to
// take e4m3 x e4m3). Operands quantized along columns come transposed from one fused cast+transpose kernel
// (fp8_linear_cols_cuda.cu). Two backends share every formula: cuda (the kernels and _scaled_mm; a GPU of compute
// capability 8.9+) and emulate (ATen quantization, then the dequantized product in fp32 ops, rounded to bfloat16: the
// reference, on any device). The bias is added in the forward GEMM's epilogue (to the fp32 product, before the bfloat16
// rounding; _scaled_mm's bias argument). Not here: which linears take FP8 (distributed/fp8_blocks.h).
#pragma once
#include <torch/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/kept_ops.h"

namespace vdt::kernels {

enum class Fp8Backend { cuda, emulate };

// A matrix quantized along its rows: q [R, C] float8_e4m3fn, scale [R] float32; row r ~ q[r] * scale[r].
struct Fp8Rows {
  torch::Tensor q, scale;
};

// Which implementation quantizes: automatic = the CUDA kernel when t is on a CUDA device the kernels were built for
// (sm_90a) and t is float32 or bfloat16, else ATen ops; aten = ATen always (the reference, tests). Both agree bit for
// bit: scale = max(amax, 1e-12) * (1 / 448) in float32, q = e4m3(clamp(t / scale, -448, 448)) rounded to nearest even.
enum class QuantPath { automatic, aten };
std::string fp8_quant_backend(const torch::Tensor& t);  // "cuda" or "aten": what QuantPath::automatic picks

// t [R, C] (float32, bfloat16 or half) -> q [R, C], scale [R] (amax over each row). col_amax (or nullptr): set to the
// maxima of |t| over each column, [C] float32 (NaN-propagating), taken in the same pass on the CUDA path (bfloat16) for
// a later quantize_cols of t. act: the rows of act(t) (model/kept_ops.h: act(t) in t's dtype, as input_act makes it;
// on the CUDA path applied on the way, act(t) not written, its GELU within a few float32 ulps of ATen's before the
// rounding to t's dtype: fp8_quantize_common.cuh); col_amax then holds act(t)'s maxima.
Fp8Rows quantize_rows(const torch::Tensor& t, QuantPath path = QuantPath::automatic, torch::Tensor* col_amax = nullptr,
                      InputAct act = InputAct::none);
// t [R, C] -> its columns as rows: q [C, Rp], scale [C] (amax over each column), Rp = R rounded up to a multiple of
// `pad` with zeros past R (a _scaled_mm reduction over tokens needs a multiple of 16). col_amax: t's column maxima when
// quantize_rows took them (the CUDA path then reads t once), else undefined. col_sum (or nullptr): set to the sums
// over t's rows, [C] in t's dtype (float32 accumulation; a linear's bias gradient), taken on the way on the CUDA path.
// act: the columns of act(t), as quantize_rows (col_amax and col_sum then of act(t)).
Fp8Rows quantize_cols(const torch::Tensor& t, int64_t pad, QuantPath path = QuantPath::automatic,
                      const torch::Tensor& col_amax = {}, torch::Tensor* col_sum = nullptr,
                      InputAct act = InputAct::none);

// The last activation quantized each way (row-wise for a forward GEMM, column-wise for a wgrad) with the storage it
// came from: while the same tensor comes again (same storage, offset, sizes, strides, dtype and version), its
// quantization is handed back instead of made again. q, k and v multiply one x, cross-attention's k and v one text:
// two of three quantizations of it go. Holds no source alive (a weak reference to its storage), only the last
// quantized copy; a source freed or changed in place (its version moved) is quantized afresh. For activations only:
// a weight the optimizer's kernel updates in place keeps its version.
class Fp8OperandMemo {
 public:
  // quantize_rows(t, path, nullptr, act), or the one remembered (for the same t and act). keep_maxima: t's column
  // maxima (act(t)'s) taken on the way and remembered for the same tensor's column-wise quantization (its wgrad, cols
  // below), which then skips its maxima pass; by storage, layout, version and act, several tensors at once (an entry
  // goes when its tensor is freed). The wgrad reads the forward's own tensor where the autograd graph keeps it
  // (--checkpointing none; block's recompute) and, under selective checkpointing, where the recorder kept it (a GEMM's
  // or an attention's output: ffn.2's h, the output projections' inputs); a recomputed one is another tensor.
  // The row-wise copy is kept for the next forward GEMM only: any backward call (cols, weight_cols) lets it go, and so
  // does drop_row_copy (the FP8 block runner's, at each block's end: a block's inputs are its own).
  Fp8Rows rows(const torch::Tensor& t, QuantPath path, InputAct act = InputAct::none, bool keep_maxima = false);
  // quantize_cols(t, pad, path, maxima, nullptr, act), likewise; maxima: those a rows call kept for t, if any
  Fp8Rows cols(const torch::Tensor& t, int64_t pad, QuantPath path, InputAct act = InputAct::none);
  void drop_row_copy();
  bool holds_row_copy() const;
  int64_t hits() const;         // quantizations handed back so far
  int64_t maxima_hits() const;  // column-wise quantizations of an activation that found its forward's maxima

  // A weight's row-wise quantization (the forward GEMM's), its column maxima taken on the way and remembered for the
  // same weight's column-wise quantization (the dgrad's; pad 1), which then reads w once instead of twice. Remembered
  // by storage and layout, not by version: the optimizer updates weights in place, between steps, never between a
  // forward and its backward, and every forward of w replaces what its last one left. Several weights at once (one
  // entry each; an entry goes when its weight is freed).
  Fp8Rows weight_rows(const torch::Tensor& w, QuantPath path);
  Fp8Rows weight_cols(const torch::Tensor& w, QuantPath path);
  int64_t weight_hits() const;  // weight_cols calls that found their forward's maxima

  // A frozen weight (no gradient, never changed: a LoRA's base), by identity (the parameter itself, not a copy): at its
  // first weight_rows both quantizations are made as above (the column-wise one from the row-wise pass's maxima) and
  // kept, and w's own data is released (set to a CPU tensor of its shape with one element: every later weight_rows /
  // weight_cols of w hands the kept ones back, byte for byte what re-quantizing w would give; anything else that reads
  // w computes with zeros, or on a GPU run fails on the device). Two FP8 copies weigh what one bf16 w did, and a step
  // no longer quantizes w three times (forward, block recompute, dgrad). Registering a tensor that needs a gradient is
  // an error.
  void hold_frozen(const torch::Tensor& w);
  int64_t frozen_held() const;  // frozen weights whose copies are made (their own data released)
  int64_t frozen_hits() const;  // weight_rows / weight_cols calls handed a kept copy

 private:
  // The tensor a remembered result came from, held weakly (storage, offset, layout, dtype and, when versioned, its
  // version), and how it was quantized (path, activation).
  struct Source {
    std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> storage;
    int64_t offset = 0, version = -1;  // -1: the version not checked
    std::vector<int64_t> sizes, strides;
    at::ScalarType dtype = at::kFloat;
    QuantPath path = QuantPath::automatic;
    InputAct act = InputAct::none;
    static Source of(const torch::Tensor& t, QuantPath path, InputAct act, bool versioned);
    bool matches(const torch::Tensor& t, QuantPath path, InputAct act) const;  // t is it, unchanged, quantized alike
    bool freed() const;
  };
  struct Entry {  // the last quantization of one kind
    Source src;
    int64_t pad = 0;
    Fp8Rows q;
    void drop_if_freed();  // the copy goes once its source's storage was freed
    void drop();           // the copy goes
  };
  // A tensor's column maxima, by (storage, offset): weights' without their version (see weight_rows), activations'
  // with it.
  struct MaximaEntry {
    Source src;
    torch::Tensor col_amax;  // [C] float32
  };
  struct MaximaMap {
    std::map<std::pair<const void*, int64_t>, MaximaEntry> entries;
    size_t swept_size = 8;
    void keep(const torch::Tensor& t, QuantPath path, InputAct act, bool versioned, torch::Tensor col_amax);
    torch::Tensor find(const torch::Tensor& t, QuantPath path, InputAct act) const;  // undefined: none
  };
  // A held frozen weight: the parameter (weakly) and, once made, its quantizations and the path that made them.
  struct Frozen {
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> owner;
    bool made = false;
    QuantPath path = QuantPath::automatic;
    Fp8Rows rows, cols;
  };
  Fp8Rows get(Entry& e, const torch::Tensor& t, int64_t pad, QuantPath path, InputAct act, bool keep_maxima);
  Frozen* frozen_of(const torch::Tensor& w);  // the held entry of w itself, or nullptr; under mu_
  mutable std::mutex mu_;
  Entry rows_, cols_;
  MaximaMap weights_, activations_;
  std::map<const c10::TensorImpl*, Frozen> frozen_;
  int64_t hits_ = 0, weight_hits_ = 0, maxima_hits_ = 0, frozen_hits_ = 0;
};

// Where at::_scaled_mm accumulates fast (Hopper's FP8 tensor-core accumulation without the periodic promotion to fp32:
// faster, less exact over a long reduction; the cuda backend only, the emulation ignores it): the forward GEMMs
// (K = the layer's input width), the dgrad GEMMs (K = its output width: the lengths the forward already sums fast) and
// the wgrad GEMMs (K = the tokens, 8190 at Wan 5B, padded to 8192: the longest sums; a GPU test bounds what fast
// accumulation adds there to FP8's own error at Wan 5B's shapes). `--fp8 fast` sets all three.
struct Fp8FastAccum {
  bool forward = false, dgrad = false, wgrad = false;
};

// a [M, K], b [N, K] (quantized along K) -> a b^T [M, N] bfloat16. cuda: at::_scaled_mm(a.q, b.q^T (column-major),
// a.scale [M, 1], b.scale [1, N]); K and N must be multiples of 16 (its rule). emulate: (a.q a.scale) (b.q b.scale)^T
// in fp32, rounded to bfloat16. fast_accum (cuda only; the emulation ignores it): _scaled_mm's use_fast_accum (see
// Fp8FastAccum). bias [N] or
// undefined: added to the fp32 product before the rounding (cuda: in bfloat16, _scaled_mm's epilogue).
torch::Tensor fp8_gemm_nt(const Fp8Rows& a, const Fp8Rows& b, Fp8Backend backend, bool fast_accum = false,
                          const torch::Tensor& bias = {});

// x [..., in], w [out, in], b [out] or undefined -> act(x) w^T + b [..., out] in x's dtype; differentiable in x, w (the
// FP8 backward) and b (the column sum of the output gradient). Frozen w (no grad): no wgrad and x is not kept for it
// (unless act needs it for dx). memo (or nullptr): x's quantizations (row-wise here, column-wise in the wgrad) and w's
// column maxima go through it. act: applied as x is quantized (act(x) is never written, forward or backward; the
// backward keeps x, not act(x)).
torch::Tensor fp8_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, Fp8Backend backend,
                         Fp8FastAccum accum = {}, Fp8OperandMemo* memo = nullptr, InputAct act = InputAct::none);
// The gradients fp8_linear's backward computes for the output gradient g [..., out] (in x's dtype): dx [..., in] in
// g's dtype when want_x, dw [out, in] in w's dtype when want_w (x [..., in] is read only then, or for dx when act is
// not none: dx = act'(x) * (g w), by ATen's activation backward), db [out] in g's dtype when want_b. g is read twice
// when dx and dw (or db) are wanted: its row-wise quantization takes its column maxima, its column-wise one its column
// sums (db).
LinearGrads fp8_linear_grads(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& w, bool want_x,
                             bool want_w, bool want_b, Fp8Backend backend, Fp8FastAccum accum = {},
                             Fp8OperandMemo* memo = nullptr, InputAct act = InputAct::none);

// The FP8 linear as a block GEMM implementation (model/kept_ops.h), installed from outside (distributed/fp8_blocks.h);
// its memo shares one activation's quantizations between the GEMMs that read it, and a weight's column maxima between
// its forward and its dgrad.
class Fp8Linear : public LinearImpl {
 public:
  explicit Fp8Linear(Fp8Backend backend, Fp8FastAccum accum = {}) : backend_(backend), accum_(accum) {}
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                       InputAct act = InputAct::none) override {
    return fp8_linear(x, w, b, backend_, accum_, &memo_, act);
  }
  LinearGrads grads(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& w, bool want_x, bool want_w,
                    bool want_b, InputAct act = InputAct::none) override {
    return fp8_linear_grads(g, x, w, want_x, want_w, want_b, backend_, accum_, &memo_, act);
  }
  // w's FP8 copies kept from its first forward and its own data released (Fp8OperandMemo::hold_frozen)
  void hold_frozen(const torch::Tensor& w) { memo_.hold_frozen(w); }
  void drop_row_copy() { memo_.drop_row_copy(); }  // Fp8OperandMemo::drop_row_copy
  Fp8Backend backend() const { return backend_; }
  Fp8FastAccum accum() const { return accum_; }
  const Fp8OperandMemo& memo() const { return memo_; }

 private:
  Fp8Backend backend_;
  Fp8FastAccum accum_;
  Fp8OperandMemo memo_;
};

// Empty when `device` runs the cuda backend (a row-wise FP8 _scaled_mm is tried there once), else why not, in words.
std::string fp8_unsupported_reason(const torch::Device& device);

}  // namespace vdt::kernels
