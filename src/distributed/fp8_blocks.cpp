// The FP8 linear implementation outlives every block call that may still replay it: the runner's closure owns it,
// and a checkpoint keeps a copy of the wrapped call (and so of the closure's pointer) until its backward.
#include "distributed/fp8_blocks.h"

#include <torch/torch.h>

#include <memory>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "model/kept_ops.h"
#include "model/kernels/fp8_linear.h"

namespace vdt {

Fp8Mode parse_fp8(const std::string& value, const std::string& flag) {
  if (value == "off") return Fp8Mode::off;
  if (value == "on") return Fp8Mode::on;
  if (value == "fast") return Fp8Mode::fast;
  if (value == "emulate") return Fp8Mode::emulate;
  VDT_FAIL(flag,
           ": expected off, on (FP8 GEMMs on a CUDA GPU of compute capability 8.9+), fast (on, with fast "
           "accumulation in every FP8 GEMM) or emulate (the same numerics in fp32 ops on any device), got '",
           value, "'");
}

void check_fp8_device(Fp8Mode mode, const torch::Device& device, const std::string& flag) {
  if (mode != Fp8Mode::on && mode != Fp8Mode::fast) return;
  const auto why = kernels::fp8_unsupported_reason(device);
  VDT_CHECK(why.empty(), flag, mode == Fp8Mode::on ? " on: " : " fast: ", why,
            ". FP8 GEMMs need a CUDA GPU of compute capability 8.9 or newer (Ada, "
            "Hopper, Blackwell); use ",
            flag, " off, or ", flag,
            " emulate to run the same FP8 numerics in fp32 ops "
            "on any device (slow: for checks and tests)");
}

std::vector<int64_t> fp8_block_indices(int64_t n_blocks) {
  std::vector<int64_t> out;
  const int64_t first = n_blocks >= 3 ? 1 : 0, end = n_blocks >= 3 ? n_blocks - 1 : n_blocks;
  for (int64_t i = first; i < end; ++i) out.push_back(i);
  return out;
}

std::string enable_fp8_linears(Denoiser& model, Fp8Mode mode, const std::vector<int64_t>& blocks, bool hold_frozen) {
  if (mode == Fp8Mode::off) return "off";
  const auto all = model.block_modules();
  auto selected = std::make_shared<std::unordered_set<const torch::nn::Module*>>();
  for (const auto i : blocks) {
    VDT_CHECK(i >= 0 && i < static_cast<int64_t>(all.size()), "fp8: block ", i, " is not one of the model's ",
              all.size(), " blocks");
    selected->insert(all[i]);
  }
  const bool fast = mode == Fp8Mode::fast;
  auto impl = std::make_shared<kernels::Fp8Linear>(
      mode == Fp8Mode::emulate ? kernels::Fp8Backend::emulate : kernels::Fp8Backend::cuda,
      kernels::Fp8FastAccum{.forward = fast, .dgrad = fast, .wgrad = fast});
  int64_t held = 0;  // frozen weights registered (the ones the FP8 GEMMs read are held from their first forward)
  if (hold_frozen) {
    for (const auto* block : *selected)
      for (const auto& p : block->parameters(/*recurse=*/true))
        if (!p.requires_grad() && p.dim() == 2) impl->hold_frozen(p), ++held;
  }
  BlockRunner inner = model.block_runner();
  model.set_block_runner([inner, selected, impl](const BlockCall& call) {
    if (!selected->count(&call.block)) return inner ? inner(call) : call.run(call.inputs);
    BlockCall fp8 = call;
    fp8.run = [run = call.run, impl](const std::vector<torch::Tensor>& in) {
      LinearImplScope scope(impl.get());
      auto out = run(in);
      // A block's inputs are its own: its last row-wise copy (Wan's ffn.2 input, [7020, 14336] at 5B) is read by no
      // later GEMM. Kept, the last FP8 block's would wait until the next FP8 GEMM: through the last (bf16) block's
      // backward, where the most checkpointed inputs are live.
      impl->drop_row_copy();
      return out;
    };
    return inner ? inner(fp8) : fp8.run(fp8.inputs);
  });
  std::ostringstream which;  // runs of consecutive indices as "a-b"
  for (size_t k = 0; k < blocks.size(); ++k) {
    const bool run_start = k == 0 || blocks[k] != blocks[k - 1] + 1;
    const bool run_end = k + 1 == blocks.size() || blocks[k + 1] != blocks[k] + 1;
    if (run_start)
      which << (k == 0 ? "" : ",") << blocks[k];
    else if (run_end)
      which << "-" << blocks[k];
  }
  std::ostringstream out;
  out << (mode == Fp8Mode::on     ? "on"
          : mode == Fp8Mode::fast ? "fast"
                                  : "emulate")
      << ": the linears of blocks " << (blocks.empty() ? "(none)" : which.str()) << " of " << all.size()
      << " in FP8 (E4M3, row-wise scales"
      << (mode == Fp8Mode::fast ? "; fast accumulation in the forward, dgrad and wgrad GEMMs)" : ")");
  if (held > 0) out << "; their frozen weights held as FP8 from the first forward";
  return out.str();
}

}  // namespace vdt
