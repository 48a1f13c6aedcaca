// The weight candidates around the activation search: every (FP8 or not, streamed blocks, prefetch) the run and the
// given flags allow, each with its fixed part and the activation plan that fits beside it; the fastest total wins.
#include "train/plan/weight_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace vdt {
namespace {

constexpr double kWeightPlanGiB = double(int64_t{1} << 30);

std::string gib_of(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", bytes / kWeightPlanGiB);
  return b;
}

std::string secs_of(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s);
  return b;
}

struct WeightCandidate {
  int64_t streamed = 0, prefetch = 1;
  bool fp8 = false;
  Plan plan;         // the activation plan beside it, its time and peak with the weights included
  double extra = 0;  // the seconds the weights add
};

// The activation plan for candidate c, or nothing when none fits.
std::optional<WeightCandidate> try_candidate(const PlanRequest& req, const BlockWeights& w, const CostTable& costs,
                                             int64_t streamed, int64_t prefetch, bool fp8, std::string* error) {
  PlanRequest r = req;
  r.fixed.static_bytes += weight_device_bytes(w, streamed, prefetch, fp8) - w.blocks * w.bytes;
  try {
    WeightCandidate c{streamed, prefetch, fp8, make_plan(r, costs), 0};
    c.extra = weight_seconds(w, streamed, prefetch, fp8, c.plan.step_seconds, costs.copy);
    c.plan.step_seconds += c.extra;
    return c;
  } catch (const Error& e) {
    if (error && error->empty()) *error = e.what();
    return std::nullopt;
  }
}

// The smallest budget with which a candidate fits (bisection over the budget; a larger budget only adds candidates).
int64_t smallest_budget(const PlanRequest& req, const BlockWeights& w, const CostTable& costs, int64_t streamed,
                        bool fp8) {
  int64_t lo = 0, hi = int64_t{1} << 50;  // 1 PiB fits anything
  PlanRequest r = req;
  while (hi - lo > (int64_t{1} << 24)) {  // to 16 MiB
    r.budget_bytes = lo + (hi - lo) / 2;
    (try_candidate(r, w, costs, streamed, 1, fp8, nullptr) ? hi : lo) = r.budget_bytes;
  }
  return hi;
}

}  // namespace

int64_t weight_device_bytes(const BlockWeights& w, int64_t streamed, int64_t prefetch, bool fp8) {
  const int64_t stored = fp8 ? w.fp8_bytes : w.bytes;
  int64_t bytes = (w.blocks - streamed) * stored;
  if (fp8) bytes += w.bytes;  // the block in use, dequantized
  if (streamed > 0)           // copies in flight, and (bf16) the block in use
    bytes += std::min(streamed, prefetch) * stored + (fp8 ? 0 : w.bytes);
  return bytes;
}

double weight_seconds(const BlockWeights& w, int64_t streamed, int64_t prefetch, bool fp8, double block_seconds,
                      const CopyCosts& copy) {
  double s = 0;
  if (fp8)  // every block dequantized for its forward and its recompute
    s += 2.0 * static_cast<double>(w.blocks) * static_cast<double>(w.bytes) / copy.dequant_bytes_per_second;
  if (streamed == 0) return s;
  const double n = static_cast<double>(streamed);
  const double c = static_cast<double>(fp8 ? w.fp8_bytes : w.bytes) / copy.h2d_bytes_per_second;  // one copy
  for (const double pass : {block_seconds / 3, block_seconds * 2 / 3}) {    // forward; recompute + backward
    const double bandwidth = n * c - copy.overlap * std::min(n * c, pass);  // the copies beside the pass
    const double window = static_cast<double>(prefetch) * pass / n;         // compute between a copy's start and use
    const double latency = n * std::max(0.0, c - window);
    s += std::max(bandwidth, latency);
  }
  return s;
}

int64_t clamp_budget(int64_t budget, int64_t device_total, const std::string& device_name, std::string* note) {
  if (device_total <= 0) return budget;
  const int64_t most = auto_budget_bytes(device_total);
  if (budget <= most) return budget;
  if (note)
    *note = "--memory " + gib_of(static_cast<double>(budget)) + " is more than this " + device_name + " offers (" +
            gib_of(static_cast<double>(device_total)) + " GiB less the " +
            gib_of(static_cast<double>(device_total - most)) + " GiB auto keeps free): planned for " +
            gib_of(static_cast<double>(most)) + " GiB, as auto";
  return most;
}

Plan make_weight_plan(const PlanRequest& req, const BlockWeights& w, const CostTable& costs, WeightPlan* out) {
  const PlanChoices& given = req.given;
  const int64_t n = w.blocks;
  const bool asked = (given.stream_blocks && *given.stream_blocks > 0) || given.base_dtype == BaseDtype::fp8;
  VDT_CHECK(w.streamable || !asked, given.base_dtype == BaseDtype::fp8 ? "--base-dtype fp8" : "--stream-blocks",
            ": streaming and the FP8 base apply to a frozen base held whole by each rank (the causal trainer's LoRA; "
            "full-parameter training keeps its weights on the GPU: every weight trains; a base sharded over the "
            "ranks gathers its blocks instead)\n---> HINT: leave the flag out, or give --shard-base off");
  if (given.stream_blocks)
    VDT_CHECK(*given.stream_blocks >= 0 && *given.stream_blocks <= n, "--stream-blocks ", *given.stream_blocks,
              ": expected 0 to the model's ", n, " blocks");
  if (given.stream_prefetch)
    VDT_CHECK(*given.stream_prefetch >= 1, "--stream-prefetch ", *given.stream_prefetch, ": expected >= 1");

  std::vector<int64_t> counts;
  if (given.stream_blocks) {
    counts = {*given.stream_blocks};
  } else {
    for (int64_t k = 0; k <= (w.streamable ? n : 0); ++k) counts.push_back(k);
  }
  const std::vector<int64_t> prefetches =
      given.stream_prefetch ? std::vector<int64_t>{*given.stream_prefetch} : std::vector<int64_t>{1, 2};
  std::string first_error;
  auto search = [&](bool fp8) {
    std::optional<WeightCandidate> best;
    for (const auto k : counts)
      for (const auto d : prefetches) {
        if (k == 0 && d > 1 && !given.stream_prefetch) continue;  // nothing streams: the prefetch changes nothing
        auto c = try_candidate(req, w, costs, k, d, fp8, &first_error);
        if (c && (!best || c->plan.step_seconds < best->plan.step_seconds ||
                  (c->plan.step_seconds == best->plan.step_seconds && c->plan.peak_bytes < best->plan.peak_bytes)))
          best = std::move(c);
      }
    return best;
  };
  std::optional<WeightCandidate> best;
  bool auto_fp8 = false;
  if (given.base_dtype != BaseDtype::fp8) best = search(false);
  if (!best && given.base_dtype != BaseDtype::bf16 && w.streamable) {
    best = search(true);
    auto_fp8 = given.base_dtype == BaseDtype::automatic && best.has_value();
  }
  if (!best) {
    const bool fp8_ok = given.base_dtype != BaseDtype::bf16 && w.streamable;
    const int64_t k = given.stream_blocks ? *given.stream_blocks : (w.streamable ? n : 0);
    const int64_t smallest = smallest_budget(req, w, costs, k, fp8_ok);
    char up[32];  // rounded up to 0.1 GiB: the number given back fits
    std::snprintf(up, sizeof up, "%.1f", std::ceil(static_cast<double>(smallest) / kWeightPlanGiB * 10) / 10);
    std::string msg = first_error.empty() ? "--memory: nothing fits" : first_error;
    msg += std::string("\n  - the smallest budget that works: ") + up + " GiB (--memory " + up + ", with " +
           std::to_string(k) + " of " + std::to_string(n) + " blocks streamed" + (fp8_ok ? " and an FP8 base" : "") +
           ")";
    if (w.streamable && given.base_dtype == BaseDtype::bf16)
      msg += "\n  - --base-dtype fp8 or auto (the frozen block linears stored as E4M3: half their memory)";
    VDT_FAIL(msg);
  }

  WeightPlan wp;
  wp.streamed_blocks = best->streamed, wp.prefetch = best->prefetch, wp.fp8_base = best->fp8;
  wp.fp8_because_bf16_cannot = auto_fp8;
  wp.device_bytes = weight_device_bytes(w, best->streamed, best->prefetch, best->fp8);
  wp.host_bytes = best->streamed * (best->fp8 ? w.fp8_bytes : w.bytes);
  wp.seconds = best->extra;
  const std::string stream_value = best->streamed == 0 ? "0 (every block resident)"
                                                       : std::to_string(best->streamed) + " of " + std::to_string(n) +
                                                             " blocks, " + std::to_string(best->prefetch) + " ahead";
  std::string stream_why = given.stream_blocks ? "given" : w.streamable ? "plan: fastest that fits" : "full training";
  if (best->streamed > 0)
    stream_why += "; " + gib_of(static_cast<double>(wp.host_bytes)) + " GiB of pinned host memory, the copies add " +
                  secs_of(best->extra) + " s a step";
  wp.why.emplace_back("--stream-blocks", stream_value + "  (" + stream_why + ")");
  std::string base_why = given.base_dtype == BaseDtype::automatic ? "auto" : "given";
  if (auto_fp8)
    base_why = "AUTO CHOSE FP8: no bf16 plan fits " + gib_of(static_cast<double>(req.budget_bytes)) +
               " GiB; the frozen block linears are stored as E4M3 with a scale per output channel (quality: "
               "docs/BENCHMARKS.md, the FP8-base gate)";
  wp.why.emplace_back("--base-dtype", std::string(best->fp8 ? "fp8" : "bf16") + "  (" + base_why + ")");
  if (out) *out = wp;

  Plan p = best->plan;
  p.host_bytes += wp.host_bytes;
  p.knobs.stream_blocks = wp.streamed_blocks, p.knobs.stream_prefetch = wp.prefetch, p.knobs.fp8_base = wp.fp8_base;
  p.why.insert(p.why.begin(), wp.why.begin(), wp.why.end());
  return p;
}

}  // namespace vdt
