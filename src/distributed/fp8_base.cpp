// The codes and scales are kernels::quantize_rows' (the CUDA kernel on a GPU, ATen ops elsewhere; the two agree bit
// for bit, model/kernels/fp8_linear.h). A weight on the host is quantized on its own device: the caller moves it first
// where that is faster.
#include "distributed/fp8_base.h"

#include <torch/torch.h>

#include <set>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/kernels/fp8_linear.h"
#include "model/lora.h"

namespace vdt {
namespace {

constexpr const char* kFileFormat = "vdt-fp8-base/1";

// The frozen 2-D parameters of the blocks, by name, in the model's order.
std::vector<std::pair<std::string, torch::Tensor>> fp8_params(Denoiser& model) {
  std::set<const c10::TensorImpl*> in_blocks;
  for (auto* b : model.block_modules())
    for (const auto& p : b->parameters()) in_blocks.insert(p.unsafeGetTensorImpl());
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& kv : model.named_parameters())
    if (in_blocks.count(kv.value().unsafeGetTensorImpl()) && stored_as_fp8(kv.key(), kv.value(), model.lora_targets()))
      out.emplace_back(kv.key(), kv.value());
  return out;
}

}  // namespace

BaseDtype parse_base_dtype(const std::string& value) {
  if (value == "bf16") return BaseDtype::bf16;
  if (value == "fp8") return BaseDtype::fp8;
  if (value == "auto") return BaseDtype::automatic;
  VDT_FAIL(kBaseDtypeFlag,
           ": expected bf16 (the frozen base in the compute dtype), fp8 (its block linears stored as E4M3 with a "
           "scale per output channel) or auto (FP8 only when no bf16 plan fits --memory), got '",
           value, "'");
}

const char* base_dtype_name(BaseDtype d) {
  return d == BaseDtype::bf16 ? "bf16" : d == BaseDtype::fp8 ? "fp8" : "auto";
}

bool stored_as_fp8(const std::string& name, const torch::Tensor& p, const std::vector<std::string>& targets) {
  const std::string suffix = ".weight";
  if (p.dim() != 2 || p.requires_grad() || !p.is_floating_point() || name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  return is_lora_target(name.substr(0, name.size() - suffix.size()), targets);
}

Fp8Weight quantize_weight(const torch::Tensor& w) {
  VDT_CHECK(w.dim() == 2, "quantize_weight: expected a weight [out, in], got ", w.sizes());
  torch::NoGradGuard ng;
  const auto r = kernels::quantize_rows(w.detach().contiguous());
  return {r.q, r.scale};
}

torch::Tensor dequantize_weight_reference(const Fp8Weight& w, torch::ScalarType dtype) {
  return (w.q.to(torch::kFloat32) * w.scale.unsqueeze(1)).to(dtype);  // [out, in]
}

void dequantize_weight_into(const torch::Tensor& q, const torch::Tensor& scale, torch::Tensor& out) {
  VDT_CHECK(q.dim() == 2 && out.sizes() == q.sizes() && scale.dim() == 1 && scale.size(0) == q.size(0),
            "dequantize_weight_into: codes ", q.sizes(), ", scales ", scale.sizes(), ", out ", out.sizes());
  torch::NoGradGuard ng;
  // E4M3 values are exact in bfloat16 and float32; the multiply runs in float32 (the common dtype with the scales)
  // and rounds once, into out's dtype (ATen does not promote float8 types: the codes are copied in first)
  out.copy_(q);
  out.mul_(scale.unsqueeze(1));  // [out, in] *= [out, 1]
}

torch::Tensor fp8_error_bound(const torch::Tensor& w, const torch::Tensor& scale) {
  const auto wf = w.to(torch::kFloat32);
  return torch::maximum(wf.abs() * (1.0 / 16), scale.unsqueeze(1).expand_as(wf) * (1.0 / 1024));
}

int64_t save_fp8_base(Denoiser& model, const std::string& path) {
  NamedTensors out;
  for (const auto& [name, p] : fp8_params(model)) {
    VDT_CHECK(p.numel() > 0, "save_fp8_base: ", name,
              " is empty (its weights are streamed or sharded); save before "
              "the base is streamed");
    const auto q = quantize_weight(p);
    out.emplace_back(name, q.q);
    out.emplace_back(name + ".fp8_scale", q.scale);
  }
  save_safetensors(path, out, {{"format", kFileFormat}, {"preset", model.preset()}});
  return static_cast<int64_t>(out.size() / 2);
}

std::map<std::string, Fp8Weight> load_fp8_base(Denoiser& model, const std::string& path) {
  auto f = SafetensorsFile::open(path);
  const auto it = f->metadata().find("format");
  VDT_CHECK(it != f->metadata().end() && it->second == kFileFormat, path, ": not an FP8 base (metadata format '",
            it == f->metadata().end() ? "" : it->second, "', expected ", kFileFormat,
            ")\n---> HINT: write one with `vdt ckpt quantize-base --weights W --out F`");
  std::map<std::string, Fp8Weight> out;
  for (const auto& [name, p] : fp8_params(model)) {
    VDT_CHECK(f->contains(name) && f->contains(name + ".fp8_scale"), path, ": key '", name,
              "' (or its .fp8_scale) is missing: the file is of another base (", model.preset(), " here)");
    Fp8Weight w{f->get(name), f->get(name + ".fp8_scale")};
    VDT_CHECK(w.q.scalar_type() == torch::kFloat8_e4m3fn && w.q.sizes() == p.sizes(), path, ": key '", name, "' is ",
              w.q.sizes(), " ", w.q.scalar_type(), ", the model's weight is ", p.sizes(), " (expected F8_E4M3)");
    VDT_CHECK(w.scale.scalar_type() == torch::kFloat32 && w.scale.dim() == 1 && w.scale.size(0) == p.size(0), path,
              ": key '", name, ".fp8_scale' is ", w.scale.sizes(), ", expected [", p.size(0), "] F32");
    out[name] = std::move(w);
  }
  return out;
}

}  // namespace vdt
