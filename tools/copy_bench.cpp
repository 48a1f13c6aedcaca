// Each measurement is the median of five timed runs after one warm-up, synchronized on the device around each.
// Overlap = (compute alone + copy alone - both at once) / the shorter of the two: 1 when the shorter one hides
// entirely, 0 when the two take as long together as one after the other.
#include "tools/copy_bench.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/error.h"
#include "distributed/fp8_base.h"

namespace vdt {
namespace {

double median_seconds(const torch::Device& d, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    torch::cuda::synchronize(d.index() < 0 ? 0 : d.index());
    const auto t0 = std::chrono::steady_clock::now();
    f();
    torch::cuda::synchronize(d.index() < 0 ? 0 : d.index());
    if (i > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

CopyCosts measure_copy_costs(const torch::Device& device) {
  VDT_CHECK(device.is_cuda(), "measure_copy_costs: needs a GPU, got ", device.str());
  torch::NoGradGuard ng;
  constexpr int64_t kBytes = int64_t{1} << 30;  // a large block's frozen weights: H3's are about 1.3 GB
  auto host = torch::empty({kBytes}, torch::dtype(torch::kUInt8).pinned_memory(true));
  host.fill_(1);
  auto dev = torch::empty({kBytes}, torch::dtype(torch::kUInt8).device(device));
  const auto side = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device, false);
  auto copy = [&] {
    c10::StreamGuard g(side);
    dev.copy_(host, /*non_blocking=*/true);
  };
  const auto a = torch::randn({8192, 8192}, torch::dtype(torch::kBFloat16).device(device));
  auto c = torch::empty_like(a);
  auto gemms = [&] {
    for (int i = 0; i < 8; ++i) at::mm_out(c, a, a);
  };
  CopyCosts out;
  const double t_copy = median_seconds(device, copy);
  const double t_gemm = median_seconds(device, gemms);
  const double t_both = median_seconds(device, [&] {
    copy();
    gemms();
  });
  out.h2d_bytes_per_second = static_cast<double>(kBytes) / t_copy;
  out.overlap = std::clamp((t_copy + t_gemm - t_both) / std::min(t_copy, t_gemm), 0.0, 1.0);
  const auto q = quantize_weight(a);
  out.dequant_bytes_per_second =
      static_cast<double>(c.nbytes()) / median_seconds(device, [&] { dequantize_weight_into(q.q, q.scale, c); });
  out.measured = true;
  return out;
}

std::string describe_copy_costs(const CopyCosts& c) {
  char b[160];
  std::snprintf(b, sizeof b, "copy h2d %.1f GB/s overlap %.2f dequant %.0f GB/s%s", c.h2d_bytes_per_second / 1e9,
                c.overlap, c.dequant_bytes_per_second / 1e9, c.measured ? "" : " (defaults: not measured)");
  return b;
}

}  // namespace vdt
