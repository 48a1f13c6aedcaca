// FP8 linear: quantization (kernel dispatch and its ATen twin), the two GEMM backends, the autograd Function.
// Per GEMM (M tokens, K = in, N = out), every operand quantized along the GEMM's reduction axis:
//   forward  y  [M, N] = x [M, K] . w [N, K]^T       x per token row, w per output row
//   dgrad    dx [M, K] = g [M, N] . (w^T [K, N])^T   g per token row, w per input column (transposed quantize of w)
//   wgrad    dw [N, K] = g^T [N, M] . (x^T [K, M])^T g and x per column over the tokens (transposed quantizes, the
//                                                    token axis zero-padded to a multiple of 16)
// Each result is bfloat16 (_scaled_mm's output; the emulation rounds its fp32 product the same way), then cast to the
// dtype of what it stands for (x for y and dx, w for dw). The forward's bias enters the GEMM's epilogue: added to the
// fp32 product before the one bfloat16 rounding (a separate add over [M, N] cost more than the GEMM saved at Wan's
// widths).
#include "model/kernels/fp8_linear.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/error.h"
#include "model/kernels/bias_grad.h"
#include "model/kernels/fp8_linear_cuda.h"  // the shared E4M3 constants; its launchers only with the kernels
#include "model/kernels/zeroed_scratch.h"

namespace vdt::kernels {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool use_kernel(const Tensor& t, QuantPath path) {
#ifdef VDT_WITH_CUDA_KERNELS
  return path == QuantPath::automatic && t.is_cuda() &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16) &&
         cuda::fp8_device_supported(t.get_device());
#else
  return false;
#endif
}

// The ATen twin of the kernels: rows of tf [R, C] float32 -> (q, scale), the steps the kernels take; amax [R] when
// known (a fused pass's), else taken here.
Fp8Rows aten_quantize_rows(const Tensor& tf, const Tensor& known_amax = {}) {
  const auto amax = known_amax.defined() ? known_amax : tf.abs().amax(1);                       // [R]; NaN-propagating
  const auto scale = amax.clamp_min(kFp8AmaxFloor) * static_cast<double>(kFp8InvMax);           // exact in double
  const auto q = (tf / scale.unsqueeze(1)).clamp(-kFp8Max, kFp8Max).to(torch::kFloat8_e4m3fn);  // [R, C]
  return {q, scale};
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// y [..., N] sizes for x [..., K]
std::vector<int64_t> with_last(torch::IntArrayRef sizes, int64_t last) {
  auto s = sizes.vec();
  s.back() = last;
  return s;
}

// x [..., in], w [out, in], b [out] or undefined -> act(x) w^T + b [..., out] in x's dtype
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Fp8Backend backend, bool fast_accum,
                      Fp8OperandMemo* memo, InputAct act) {
  VDT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "fp8_linear: x ", x.sizes(), " and w ", w.sizes(),
            " do not chain (expected x [..., in], w [out, in])");
  const int64_t K = w.size(1), N = w.size(0);
  const auto x2 = x.reshape({-1, K});  // [..., in] -> [M, in]
  if (x2.size(0) == 0) {
    const auto y = torch::zeros(with_last(x.sizes(), N), x.options());
    return b.defined() ? y + b : y;
  }
  const auto qp = backend == Fp8Backend::emulate ? QuantPath::aten : QuantPath::automatic;
  // x's column maxima kept for its wgrad when w trains
  const auto xq = memo ? memo->rows(x2, qp, act, w.requires_grad()) : quantize_rows(x2, qp, nullptr, act);
  const auto wq = memo ? memo->weight_rows(w, qp) : quantize_rows(w, qp);
  const auto y = fp8_gemm_nt(xq, wq, backend, fast_accum, b);  // [M, N] bf16
  return y.to(x.scalar_type()).view(with_last(x.sizes(), N));  // -> [..., out]
}

// The inputs come as a list, x [..., in], w [out, in] and, when there is one, b [out] (a custom Function takes no
// undefined tensor).
struct Fp8LinearFn : torch::autograd::Function<Fp8LinearFn> {
  static Tensor forward(AutogradContext* ctx, at::TensorList xwb, int64_t backend, bool fast_forward, bool fast_dgrad,
                        bool fast_wgrad, Fp8OperandMemo* memo, int64_t act) {
    const auto &x = xwb[0], &w = xwb[1];
    const auto b = xwb.size() == 3 ? xwb[2] : Tensor();
    ctx->saved_data["backend"] = backend;
    ctx->saved_data["has_bias"] = b.defined();
    ctx->saved_data["fast_dgrad"] = fast_dgrad;
    ctx->saved_data["fast_wgrad"] = fast_wgrad;
    ctx->saved_data["memo"] = reinterpret_cast<int64_t>(memo);  // lives as long as the Fp8Linear that owns it
    ctx->saved_data["act"] = act;
    // Only what the wanted gradients read: w for dgrad, x for wgrad (none for a frozen base weight) and, through an
    // activation, for dgrad too.
    const bool keep_x = w.requires_grad() || (x.requires_grad() && static_cast<InputAct>(act) != InputAct::none);
    ctx->save_for_backward({keep_x ? x : Tensor(), x.requires_grad() ? w : Tensor()});
    return linear_forward(x, w, b, static_cast<Fp8Backend>(backend), fast_forward, memo, static_cast<InputAct>(act));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const bool want_x = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    const bool want_b = has_bias && ctx->needs_input_grad(2);
    const auto r = fp8_linear_grads(
        grads[0], saved[0], saved[1], want_x, want_w, want_b,
        static_cast<Fp8Backend>(ctx->saved_data["backend"].toInt()),
        {.dgrad = ctx->saved_data["fast_dgrad"].toBool(), .wgrad = ctx->saved_data["fast_wgrad"].toBool()},
        reinterpret_cast<Fp8OperandMemo*>(ctx->saved_data["memo"].toInt()),
        static_cast<InputAct>(ctx->saved_data["act"].toInt()));
    variable_list out = {r.dx, r.dw};
    if (has_bias) out.push_back(r.db);  // [out]
    out.push_back(Tensor());            // backend
    out.push_back(Tensor());            // fast_forward
    out.push_back(Tensor());            // fast_dgrad
    out.push_back(Tensor());            // fast_wgrad
    out.push_back(Tensor());            // memo
    out.push_back(Tensor());            // act
    return out;
  }
};

// [0, in] grads: zeros (no GEMM over nothing)
LinearGrads empty_grads(const Tensor& g, const Tensor& w, bool want_x, bool want_w, bool want_b) {
  LinearGrads out;
  if (want_x) out.dx = torch::zeros(with_last(g.sizes(), w.size(1)), g.options());
  if (want_w) out.dw = torch::zeros_like(w);
  if (want_b) out.db = torch::zeros({w.size(0)}, g.options());
  return out;
}

}  // namespace

std::string fp8_quant_backend(const Tensor& t) { return use_kernel(t, QuantPath::automatic) ? "cuda" : "aten"; }

Fp8Rows quantize_rows(const Tensor& t, QuantPath path, Tensor* col_amax, InputAct act) {
  VDT_CHECK(t.dim() == 2 && t.is_floating_point(), "quantize_rows: expected a 2-D floating-point tensor, got ",
            t.sizes(), " ", t.scalar_type());
#ifdef VDT_WITH_CUDA_KERNELS
  if (use_kernel(t, path)) {
    Tensor amax;  // zeros: the kernels max into it (from the shared zeroed blocks: no fill launch of its own)
    if (col_amax) amax = zeroed_scratch().take(t.size(1), t.device()).view(torch::kFloat32);  // [C]
    auto [q, scale] = cuda::fp8_quantize_rows(t, amax, act == InputAct::gelu_tanh);
    if (col_amax) *col_amax = amax;
    return {q, scale};
  }
#endif
  const auto tf = input_act(t, act).to(torch::kFloat32);
  if (col_amax) *col_amax = tf.size(0) == 0 ? torch::zeros({tf.size(1)}, tf.options()) : tf.abs().amax(0);  // [C]
  return aten_quantize_rows(tf);
}

Fp8Rows quantize_cols(const Tensor& t, int64_t pad, QuantPath path, const Tensor& col_amax, Tensor* col_sum,
                      InputAct act) {
  VDT_CHECK(t.dim() == 2 && t.is_floating_point() && pad >= 1,
            "quantize_cols: expected a 2-D floating-point tensor "
            "and pad >= 1, got ",
            t.sizes(), " ", t.scalar_type(), " pad ", pad);
  VDT_CHECK(!col_amax.defined() || (col_amax.dim() == 1 && col_amax.size(0) == t.size(1)),
            "quantize_cols: col_amax must be [", t.size(1), "], got ", col_amax.sizes());
  const int64_t R = t.size(0), Rp = round_up(R, pad);
#ifdef VDT_WITH_CUDA_KERNELS
  if (use_kernel(t, path)) {
    auto [q, scale, sum] = cuda::fp8_quantize_cols(t, Rp, col_amax, col_sum != nullptr, act == InputAct::gelu_tanh);
    if (col_sum) *col_sum = sum;
    return {q, scale};
  }
#endif
  const auto a = input_act(t, act);
  if (col_sum) *col_sum = a.sum(0);  // [C] in t's dtype, as bias_grad's reference
  // Zero padding before the quantization: zeros leave each column's amax and quantize to 0, as the kernel writes.
  const auto tt = torch::constant_pad_nd(a.to(torch::kFloat32).t(), {0, Rp - R});  // [R, C] -> [C, Rp]
  return aten_quantize_rows(tt, col_amax.defined() ? col_amax.to(torch::kFloat32) : Tensor());
}

Fp8OperandMemo::Source Fp8OperandMemo::Source::of(const Tensor& t, QuantPath path, InputAct act, bool versioned) {
  Source s;
  if (t.has_storage()) s.storage = t.storage().getWeakStorageImpl();
  s.offset = t.storage_offset(), s.version = versioned ? t._version() : -1;
  s.sizes = t.sizes().vec(), s.strides = t.strides().vec(), s.dtype = t.scalar_type(), s.path = path, s.act = act;
  return s;
}

bool Fp8OperandMemo::Source::matches(const Tensor& t, QuantPath want_path, InputAct want_act) const {
  if (!storage || !t.has_storage()) return false;
  const auto held = storage->lock();  // null once the source's storage was freed
  return held && held.get() == t.storage().unsafeGetStorageImpl() && t.storage_offset() == offset &&
         t.sizes() == torch::IntArrayRef(sizes) && t.strides() == torch::IntArrayRef(strides) &&
         t.scalar_type() == dtype && (version < 0 || t._version() == version) && want_path == path && want_act == act;
}

bool Fp8OperandMemo::Source::freed() const { return !storage || storage->expired(); }

Fp8Rows Fp8OperandMemo::get(Entry& e, const Tensor& t, int64_t pad, QuantPath path, InputAct act, bool keep_maxima) {
  if (e.pad == pad && e.src.matches(t, path, act)) {
    ++hits_;
    return e.q;
  }
  e.q = {};  // the old copy goes before the new one is made
  Fp8Rows q;
  if (pad == 0) {
    Tensor amax;
    q = quantize_rows(t, path, keep_maxima ? &amax : nullptr, act);
    if (keep_maxima && t.has_storage()) activations_.keep(t, path, act, /*versioned=*/true, amax);
  } else {
    const auto amax = activations_.find(t, path, act);
    if (amax.defined()) ++maxima_hits_;
    q = quantize_cols(t, pad, path, amax, nullptr, act);
  }
  e.src = Source::of(t, path, act, /*versioned=*/true), e.pad = pad, e.q = q;
  return q;
}

void Fp8OperandMemo::Entry::drop_if_freed() {
  if (src.storage && src.freed()) drop();
}

void Fp8OperandMemo::Entry::drop() {
  src.storage.reset();
  q = {};
}

// A forward call drops the backward's copy once its source is gone. A backward call (cols, weight_cols) drops the
// forward's row-wise copy whatever its source: only forward GEMMs read it (linears sharing an input). The FP8 block
// runner drops it at each block's end too (drop_row_copy): the last FP8 block's copy (Wan's ffn.2 input, [7020, 14336]
// at 5B, ~100 MB) would otherwise wait through the last, bf16 block's backward, which calls no FP8 GEMM.
Fp8Rows Fp8OperandMemo::rows(const Tensor& t, QuantPath path, InputAct act, bool keep_maxima) {
  std::lock_guard<std::mutex> lock(mu_);
  cols_.drop_if_freed();
  return get(rows_, t, 0, path, act, keep_maxima);
}

void Fp8OperandMemo::drop_row_copy() {
  std::lock_guard<std::mutex> lock(mu_);
  rows_.drop();
}

bool Fp8OperandMemo::holds_row_copy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_.q.q.defined();
}

Fp8Rows Fp8OperandMemo::cols(const Tensor& t, int64_t pad, QuantPath path, InputAct act) {
  VDT_CHECK(pad >= 1, "Fp8OperandMemo::cols: pad must be >= 1, got ", pad);
  std::lock_guard<std::mutex> lock(mu_);
  rows_.drop();
  return get(cols_, t, pad, path, act, false);
}

int64_t Fp8OperandMemo::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t Fp8OperandMemo::maxima_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return maxima_hits_;
}

// Keyed by the storage's address: held weakly, it is not reused while the entry lives. Entries of freed tensors (a
// cast copy's weights under mixed precision, a block's activations after its backward) go once the map has doubled
// since the last sweep.
void Fp8OperandMemo::MaximaMap::keep(const Tensor& t, QuantPath path, InputAct act, bool versioned, Tensor col_amax) {
  if (entries.size() >= 2 * swept_size) {
    std::erase_if(entries, [](const auto& kv) { return kv.second.src.freed(); });
    swept_size = std::max<size_t>(entries.size(), 8);
  }
  entries.insert_or_assign(std::pair<const void*, int64_t>{t.storage().unsafeGetStorageImpl(), t.storage_offset()},
                           MaximaEntry{Source::of(t, path, act, versioned), std::move(col_amax)});
}

Tensor Fp8OperandMemo::MaximaMap::find(const Tensor& t, QuantPath path, InputAct act) const {
  if (!t.has_storage()) return {};
  const auto it = entries.find({t.storage().unsafeGetStorageImpl(), t.storage_offset()});
  return it != entries.end() && it->second.src.matches(t, path, act) ? it->second.col_amax : Tensor();
}

void Fp8OperandMemo::hold_frozen(const Tensor& w) {
  VDT_CHECK(w.defined() && w.dim() == 2 && !w.requires_grad(),
            "Fp8OperandMemo::hold_frozen: expected a frozen 2-D "
            "weight (no gradient), got ",
            w.defined() ? w.sizes() : torch::IntArrayRef{},
            w.defined() && w.requires_grad() ? " that requires a gradient" : "");
  Frozen fresh{.owner = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(w.getIntrusivePtr())};
  std::lock_guard<std::mutex> lock(mu_);
  const auto [it, added] = frozen_.try_emplace(w.unsafeGetTensorImpl(), fresh);
  if (!added && it->second.owner.expired()) it->second = std::move(fresh);  // a freed weight's entry at this address
}

namespace {
// A held frozen weight's kept copy, for the path that made it only (its own data is gone: it cannot be made again)
const Fp8Rows& kept_copy(const Fp8Rows& q, QuantPath made_by, QuantPath path, const Tensor& w) {
  VDT_CHECK(made_by == path, "Fp8OperandMemo: a held frozen weight ", w.sizes(),
            " was quantized by another path "
            "than this call's (its own data is released)");
  return q;
}
}  // namespace

Fp8OperandMemo::Frozen* Fp8OperandMemo::frozen_of(const Tensor& w) {
  if (frozen_.empty()) return nullptr;
  const auto it = frozen_.find(w.unsafeGetTensorImpl());
  if (it == frozen_.end()) return nullptr;
  if (it->second.owner.expired()) {  // another tensor at a freed parameter's address
    frozen_.erase(it);
    return nullptr;
  }
  return &it->second;
}

int64_t Fp8OperandMemo::frozen_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(frozen_.begin(), frozen_.end(), [](const auto& kv) { return kv.second.made; });
}

int64_t Fp8OperandMemo::frozen_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frozen_hits_;
}

Fp8Rows Fp8OperandMemo::weight_rows(const Tensor& w, QuantPath path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto* f = frozen_of(w)) {
      if (f->made) {
        ++frozen_hits_;
        return kept_copy(f->rows, f->path, path, w);
      }
      VDT_CHECK(!w.requires_grad(), "Fp8OperandMemo: a weight held as frozen ", w.sizes(), " requires a gradient now");
      Tensor amax;  // both copies from w's data, then the data goes
      f->rows = quantize_rows(w, path, &amax);
      f->cols = quantize_cols(w, 1, path, amax);
      f->path = path, f->made = true;
      w.set_data(torch::zeros({1}, w.options().device(torch::kCPU)).expand(w.sizes()));  // [out, in], stride 0
      return f->rows;
    }
  }
  Tensor amax;
  auto q = quantize_rows(w, path, &amax);
  if (!w.has_storage()) return q;
  std::lock_guard<std::mutex> lock(mu_);
  weights_.keep(w, path, InputAct::none, /*versioned=*/false, amax);
  return q;
}

Fp8Rows Fp8OperandMemo::weight_cols(const Tensor& w, QuantPath path) {
  Tensor amax;  // the forward's column maxima of this weight, when it left them
  {
    std::lock_guard<std::mutex> lock(mu_);
    rows_.drop();  // a backward call (see rows)
    if (auto* f = frozen_of(w); f && f->made) {
      ++frozen_hits_;
      return kept_copy(f->cols, f->path, path, w);
    }
    amax = weights_.find(w, path, InputAct::none);
    if (amax.defined()) ++weight_hits_;
  }
  return quantize_cols(w, 1, path, amax);
}

int64_t Fp8OperandMemo::weight_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return weight_hits_;
}

Tensor fp8_gemm_nt(const Fp8Rows& a, const Fp8Rows& b, Fp8Backend backend, bool fast_accum, const Tensor& bias) {
  const int64_t M = a.q.size(0), K = a.q.size(1), N = b.q.size(0);
  VDT_CHECK(b.q.size(1) == K, "fp8_gemm_nt: a [", M, ", ", K, "] and b [", N, ", ", b.q.size(1), "] do not chain");
  VDT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == N), "fp8_gemm_nt: the bias is ",
            bias.defined() ? bias.sizes() : torch::IntArrayRef{}, ", expected [", N, "]");
  if (backend == Fp8Backend::emulate) {
    const auto af = a.q.to(torch::kFloat32) * a.scale.unsqueeze(1);  // [M, K] dequantized
    const auto bf = b.q.to(torch::kFloat32) * b.scale.unsqueeze(1);  // [N, K]
    auto y = af.mm(bf.t());                                          // [M, N] float32
    if (bias.defined()) y = y + bias.to(torch::kFloat32);            // the epilogue's add, before the rounding
    return y.to(torch::kBFloat16);
  }
  VDT_CHECK(a.q.is_cuda(), "--fp8 on: the FP8 GEMM needs a CUDA device, the operands are on ", a.q.device(),
            "; use --fp8 emulate for the reference numerics on any device");
  VDT_CHECK(K % 16 == 0 && N % 16 == 0,
            "--fp8 on: at::_scaled_mm needs the reduction and output widths to be multiples "
            "of 16, this GEMM is [",
            M, ", ", K, "] x [", N, ", ", K, "]^T; use --fp8 off (or emulate) for this model");
  // mat2 column-major: the transpose of b.q's row-major [N, K]; row-wise scales [M, 1] and [1, N], float32, contiguous.
  // The bias in bfloat16 (the epilogue's type for a bfloat16 result; a float32 bias under --precision mixed rounds).
  std::optional<Tensor> bias_bf16;
  if (bias.defined()) bias_bf16 = bias.to(torch::kBFloat16).contiguous();
  return at::_scaled_mm(a.q, b.q.t(), a.scale.view({M, 1}), b.scale.view({1, N}), bias_bf16, std::nullopt,
                        torch::kBFloat16, fast_accum);
}

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, Fp8Backend backend, Fp8FastAccum accum,
                  Fp8OperandMemo* memo, InputAct act) {
  const bool any_grad = x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad());
  if (!torch::GradMode::is_enabled() || !any_grad) return linear_forward(x, w, b, backend, accum.forward, memo, act);
  std::vector<Tensor> xwb = {x, w};
  if (b.defined()) xwb.push_back(b);
  return Fp8LinearFn::apply(at::TensorList(xwb), static_cast<int64_t>(backend), accum.forward, accum.dgrad, accum.wgrad,
                            memo, static_cast<int64_t>(act));
}

LinearGrads fp8_linear_grads(const Tensor& g, const Tensor& x, const Tensor& w, bool want_x, bool want_w, bool want_b,
                             Fp8Backend backend, Fp8FastAccum accum, Fp8OperandMemo* memo, InputAct act) {
  if (!want_x && !want_w) {  // w may be undefined (not kept when neither x nor w trains)
    LinearGrads out;
    if (want_b) out.db = bias_grad(g.reshape({-1, g.size(-1)}));  // [out]
    return out;
  }
  const int64_t K = w.size(1), N = w.size(0);
  VDT_CHECK(g.size(-1) == N, "fp8_linear_grads: g ", g.sizes(), " does not match w ", w.sizes());
  const auto qp = backend == Fp8Backend::emulate ? QuantPath::aten : QuantPath::automatic;
  const auto g2 = g.reshape({-1, N});  // [..., out] -> [M, out]
  const int64_t M = g2.size(0);
  if (M == 0) return empty_grads(g, w, want_x, want_w, want_b);
  LinearGrads out;
  Tensor g_amax;  // [out]: g's column maxima from its row-wise pass, for the wgrad's column-wise one
  if (want_x) {
    const auto gq = quantize_rows(g2, qp, want_w ? &g_amax : nullptr);
    const auto wq = memo ? memo->weight_cols(w, qp) : quantize_cols(w, 1, qp);
    out.dx = fp8_gemm_nt(gq, wq, backend, accum.dgrad).to(g.scalar_type()).view(with_last(g.sizes(), K));
    if (act == InputAct::gelu_tanh) {  // dx above is act(x)'s gradient
      VDT_CHECK(x.defined() && x.sizes() == out.dx.sizes(),
                "fp8_linear_grads: dgrad through the input's activation "
                "needs x ",
                out.dx.sizes(), ", got ", x.defined() ? x.sizes() : torch::IntArrayRef{});
      out.dx = torch::gelu_backward(out.dx, x, "tanh");
    }
  }
  if (want_w) {
    VDT_CHECK(x.defined() && x.size(-1) == K && x.numel() / K == M, "fp8_linear_grads: wgrad needs x [..., ", K,
              "] with ", M, " rows, got ", x.defined() ? x.sizes() : torch::IntArrayRef{});
    const auto x2 = x.reshape({-1, K});  // [..., in] -> [M, in]
    const auto gc = quantize_cols(g2, 16, qp, g_amax, want_b ? &out.db : nullptr);
    const auto xc = memo ? memo->cols(x2, 16, qp, act) : quantize_cols(x2, 16, qp, {}, nullptr, act);
    out.dw = fp8_gemm_nt(gc, xc, backend, accum.wgrad).to(w.scalar_type());
  }
  if (want_b && !out.db.defined()) out.db = bias_grad(g2);  // [out]
  return out;
}

std::string fp8_unsupported_reason(const torch::Device& device) {
  if (!device.is_cuda()) return "this run is on " + device.str() + ", and FP8 GEMMs run on CUDA GPUs only";
  try {
    const auto opts = torch::TensorOptions().device(device);
    const auto a = torch::ones({16, 16}, opts).to(torch::kFloat8_e4m3fn);
    const auto s = torch::ones({16, 1}, opts);
    const auto y = at::_scaled_mm(a, a.t(), s, s.view({1, 16}), std::nullopt, std::nullopt, torch::kBFloat16, false);
    if (y.to(torch::kFloat32).sum().item<double>() != 16.0 * 16 * 16)
      return "a row-wise FP8 _scaled_mm on " + device.str() + " gave a wrong product";
  } catch (const std::exception& e) {
    std::string what = e.what();
    return "a row-wise FP8 _scaled_mm failed on " + device.str() + ": " + what.substr(0, what.find('\n'));
  }
  return "";
}

}  // namespace vdt::kernels
