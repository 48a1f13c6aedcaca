// Parity harness. The fixture's timestep_mode picks the timestep path: per_token_first_frame_zero feeds the model
// per-frame timesteps [B, F] with frame 0 at 0 (the reference's per-token tensor, grouped), global feeds [B]. The loss
// is the one the fixture states in its metadata `loss` (FIXTURES.md: frames 1.. in every Wan fixture, whatever its
// timestep_mode), never inferred from the timestep mode.
#include "tools/parity.h"

#include <torch/torch.h>

#include "core/device_flag.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "diffusion/flow_match.h"
#include "model/wan_dit.h"
#include "model/weights_io.h"

namespace vdt {

void ParityConfig::validate() const {
  VDT_CHECK(dtype == "float32" || dtype == "bfloat16", "--dtype: expected float32 or bfloat16, got '", dtype, "'");
  resolve_device(device);
}

const std::vector<ConfigField<ParityConfig>>& ParityConfig::fields() {
  using C = ParityConfig;
  static const std::vector<ConfigField<C>> f = {
      {"fixture", "fixture .safetensors (weights, fixture.* tensors, metadata config)", &C::fixture, true},
      device_field(&C::device),
      {"--dtype", "float32 or bfloat16", &C::dtype},
      {"--tol", "relative L2 tolerance (< 0: Wan 1e-4 float32, 3e-2 bfloat16; H3 1e-5, 5e-2)", &C::tol},
  };
  return f;
}

double ParityConfig::tolerance() const { return tol >= 0 ? tol : (dtype == "float32" ? 1e-4 : 3e-2); }

bool ParityResult::pass() const {
  for (const auto& r : rows)
    if (!r.pass) return false;
  return !rows.empty();
}

std::vector<std::pair<std::string, torch::Tensor>> fixture_gradients(const SafetensorsSet& files,
                                                                     const torch::nn::Module& model,
                                                                     const std::string& fixture) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& kv : model.named_parameters()) params[kv.key()] = kv.value();
  const std::string prefix = "fixture.grad.";
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& k : files.keys()) {
    if (k.rfind(prefix, 0) != 0) continue;
    const std::string pname = k.substr(prefix.size());
    VDT_CHECK(params.count(pname), fixture, ": '", k, "' names no model parameter");
    const auto g = params[pname].grad();
    VDT_CHECK(g.defined(), fixture, ": no gradient reached ", pname);
    out.emplace_back(k, g);
  }
  return out;
}

bool loss_skips_first_frame(const Metadata& meta, const std::string& fixture) {
  // FIXTURES.md: "The loss is defined the same way in every Wan fixture, whatever its timestep_mode: the mean over
  // latent frames 1.. of (out - target)^2; the metadata key `loss` states it."
  if (!meta.count("loss")) return true;
  const std::string& loss = meta.at("loss");
  if (loss.find("frames 1..") != std::string::npos) return true;
  if (loss.find("all frames") != std::string::npos || loss.find("every frame") != std::string::npos) return false;
  VDT_FAIL(fixture, ": metadata 'loss' is \"", loss,
           "\"; expected a mean of (out - target)^2 over \"frames 1..\" or "
           "over \"all frames\"");
}

double rel_l2(const torch::Tensor& a, const torch::Tensor& ref) {
  auto a64 = a.detach().to(torch::kCPU, torch::kFloat64), r64 = ref.detach().to(torch::kCPU, torch::kFloat64);
  const double denom = r64.norm().item<double>();
  const double num = (a64 - r64).norm().item<double>();
  if (std::isnan(num)) return std::numeric_limits<double>::infinity();
  return denom > 0 ? num / denom : num;
}

ParityResult run_parity(const ParityConfig& cfg) {
  cfg.validate();
  auto files = SafetensorsSet::open({cfg.fixture});
  const auto& meta = files.metadata();
  VDT_CHECK(meta.count("config"), cfg.fixture, ": fixture metadata lacks 'config' (the model config JSON)");
  ModelConfig mc = ModelConfig::from_json(meta.at("config"), cfg.fixture);
  ParityResult result;
  result.timestep_mode = meta.count("timestep_mode") ? meta.at("timestep_mode") : "global";
  VDT_CHECK(result.timestep_mode == "per_token_first_frame_zero" || result.timestep_mode == "global", cfg.fixture,
            ": timestep_mode '", result.timestep_mode, "' is neither per_token_first_frame_zero nor global");
  for (const char* k : {"fixture.x", "fixture.context", "fixture.timestep", "fixture.out"})
    VDT_CHECK(files.contains(k), cfg.fixture, ": fixture tensor '", k, "' is missing");

  const torch::Device device = resolve_device(cfg.device);
  // float32 parity means float32 arithmetic: cuDNN convolutions default to TF32 on Hopper (~1e-3 relative error).
  if (cfg.dtype == "float32") {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  const auto dtype = cfg.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  WanDiT model(mc);
  load_weights(*model, files);
  model->to(device, dtype);

  auto x = files.get("fixture.x").to(device, dtype);
  auto ctx = files.get("fixture.context").to(device, dtype);
  // The exact timestep: rounding it to the compute dtype is a training policy (make_sft_example), not the model's.
  auto t = files.get("fixture.timestep").to(device, torch::kFloat32);  // [B]
  const bool first_frame_zero = result.timestep_mode == "per_token_first_frame_zero";
  if (first_frame_zero) {
    const int64_t F = model->token_grid(x.sizes())[0];
    t = t.unsqueeze(1).repeat({1, F});  // [B] -> [B, F']
    t.select(1, 0).zero_();
  }
  const bool skip_first_frame = loss_skips_first_frame(meta, cfg.fixture);
  result.loss = skip_first_frame ? "frames 1.." : "all frames";
  auto out = model->forward({x, t, ctx});
  auto add = [&](const std::string& name, const torch::Tensor& a, const torch::Tensor& ref) {
    const double e = rel_l2(a, ref);
    result.rows.push_back({name, e, e <= cfg.tolerance()});
  };
  add("fixture.out", out, files.get("fixture.out"));

  if (files.contains("fixture.target") && files.contains("fixture.loss")) {
    auto target = files.get("fixture.target").to(device, dtype);
    auto loss = flow_mse(out, target, skip_first_frame);
    add("fixture.loss", loss.reshape({1}), files.get("fixture.loss"));
    loss.backward();
    for (const auto& [k, g] : fixture_gradients(files, *model, cfg.fixture)) {
      add(k, g, files.get(k));
    }
  }
  return result;
}

}  // namespace vdt
