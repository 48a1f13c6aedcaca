// An FP8-stored frozen base (`--base-dtype fp8`): a frozen block Linear's weight w [out, in] kept as E4M3 codes with
// one float32 scale per output channel (row), w ~ q * scale[:, None], scale = max(amax of the row, 1e-12) / 448 (the
// row-wise quantization of model/kernels/fp8_linear.h, so --fp8's GEMMs quantizing the dequantized weight again get
// the same codes back). Dequantized into the compute dtype for each use (distributed/weight_stream.h); LoRA factors,
// norms, embeddings and heads are never quantized. Also the file form of a quantized base, for reuse.
// Not here: where the codes live or when they are dequantized (weight_stream), the FP8 GEMMs.
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "model/denoiser.h"

namespace vdt {

// `--base-dtype`: bf16 (the frozen base in the compute dtype), fp8 (its block linears stored as E4M3), auto (the
// memory plan stores it as FP8 only when no bf16 plan fits the budget, and says so).
enum class BaseDtype { bf16, fp8, automatic };
inline constexpr const char* kBaseDtypeFlag = "--base-dtype";
// Throws naming the flag and the choices.
BaseDtype parse_base_dtype(const std::string& value);
const char* base_dtype_name(BaseDtype d);  // "bf16", "fp8", "auto"

// w [out, in] (any float dtype, any device) -> codes [out, in] float8_e4m3fn and scales [out] float32, on w's device.
struct Fp8Weight {
  torch::Tensor q, scale;
};
Fp8Weight quantize_weight(const torch::Tensor& w);
// The reference: q.float() * scale[:, None] in float32, rounded once to `dtype`.
torch::Tensor dequantize_weight_reference(const Fp8Weight& w, torch::ScalarType dtype);
// The same values written into out [out, in] (of the compute dtype) by one multiply in float32 (out's rounding once),
// without a float32 copy of the weight.
void dequantize_weight_into(const torch::Tensor& q, const torch::Tensor& scale, torch::Tensor& out);
// The bound quantize_weight keeps, per element: |w - dequantized| <= max(|w| * 2^-4, scale * 2^-10) (E4M3's half
// spacing: 3 mantissa bits in the normal range, 2^-9 * scale apart below it), before the rounding to the compute dtype.
torch::Tensor fp8_error_bound(const torch::Tensor& w, const torch::Tensor& scale);

// Whether a block parameter (`name` in the model's naming) is stored as FP8: the frozen 2-D weight of a Linear the LoRA
// targets (`targets`, Denoiser::lora_targets: the attention and FFN projections, the base GEMMs of --fp8). The blocks'
// other parameters (norms, modulation and AdaLN projections, biases) keep their dtype.
bool stored_as_fp8(const std::string& name, const torch::Tensor& p, const std::vector<std::string>& targets);

// The frozen 2-D block weights of `model` quantized, written to `path` (safetensors: `<name>` as F8_E4M3 and
// `<name>.fp8_scale` as F32, with metadata format "vdt-fp8-base/1" and the preset), for load_fp8_base to read
// instead of quantizing again (WeightStreamOptions::fp8_codes). Returns how many weights were written.
int64_t save_fp8_base(Denoiser& model, const std::string& path);
// The codes and scales of `path` for `model`'s frozen 2-D block weights, by parameter name; every such weight must be
// there with its shape (errors name the file and the key).
std::map<std::string, Fp8Weight> load_fp8_base(Denoiser& model, const std::string& path);

}  // namespace vdt
