// The planner's search: every candidate (checkpointing mode and keeping blocks, offload, attention keep, kernel) the
// trainer and the given flags allow, its peak and time from the cost table, the fastest that fits.
#include "train/plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "core/error.h"

namespace vdt {
namespace {

constexpr double kGiB = double(int64_t{1} << 30);
// The margin a plan keeps free beside its predicted peak: what a per-block model can miss (allocator rounding, the
// loss and head's tensors, the optimizer's temporaries): 512 MiB plus 5 % of the activations and transient. A plan
// fits when its peak and margin fit the budget; the peak it reports is the prediction alone.
constexpr int64_t kMarginBase = int64_t{512} << 20;
constexpr double kMarginShare = 0.05;

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", bytes / kGiB);
  return b;
}

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s < 10 ? "%.3f" : "%.2f", s);
  return b;
}

std::string keep_text(double k) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", k);
  return b;
}

struct Candidate {
  Checkpointing mode = Checkpointing::block;
  int64_t k = 0;  // keeping blocks (selective); n: all
  bool offload = false;
  double keep = 0;
  std::string attn = "full";
  // predicted (need: peak + margin, what must fit)
  int64_t peak = 0, need = 0, host = 0, activations = 0, transient = 0, margin = 0;
  double seconds = 0;
  bool extrapolated = false;

  std::string checkpointing_text(int64_t n) const {
    if (mode == Checkpointing::none) return "none";
    if (mode == Checkpointing::block || k == 0) return "block";
    return k == n ? "selective, all " + std::to_string(n) + " blocks keep"
                  : "selective, " + std::to_string(k) + " of " + std::to_string(n) + " blocks keep";
  }
  std::string flags(int64_t n, bool causal, bool allow_offload) const {
    std::string s = "--checkpointing ";
    s += checkpointing_name(mode == Checkpointing::selective && k == 0 ? Checkpointing::block : mode);
    if (mode == Checkpointing::selective && k > 0) s += " --selective-blocks " + std::to_string(k == n ? -1 : k);
    if (allow_offload) s += std::string(" --act-offload ") + (offload ? "on" : "off");
    if (causal) s += " --attn-keep " + keep_text(keep) + " --attn " + attn;
    return s;
  }
};

// Peak and time of c (memory_plan.h; docs/planner.md "The prediction"). Returns false when the table has no rows
// for one of c's keys (`missing` says which).
bool evaluate(Candidate& c, const PlanRequest& req, const CostTable& costs, int64_t rows, std::string& missing) {
  const int64_t n = req.blocks;
  const double G = static_cast<double>(req.fixed.grad_bytes);
  const double after_backward = static_cast<double>(req.fixed.after_backward_bytes);
  double kept = 0, transient = 0, seconds = 0, outside = 0, host = 0, act = 0;
  auto take = [&](const CostKey& key, int64_t count, BlockCost& out) {
    if (count == 0) return true;
    if (!costs.has(key)) {
      missing = costs.source + ": no rows for '" + key.describe() + "'";
      return false;
    }
    out = costs.at(key, rows);
    out.kept_bytes = out.kept_for_text(req.text_rows);
    c.extrapolated = c.extrapolated || out.extrapolated;
    transient = std::max(transient, out.transient_bytes);
    outside = std::max(outside, out.outside_seconds);
    seconds += count * out.seconds, kept += count * out.kept_bytes, host += count * out.host_bytes;
    return true;
  };
  if (c.mode == Checkpointing::none) {
    BlockCost b;
    if (!take({req.training, "none", c.attn, false, 0}, n, b)) return false;
    act = std::max({kept, G, after_backward});
  } else {
    BlockCost sel, blk;
    if (!take({req.training, "selective", c.attn, c.offload, 0}, c.k, sel)) return false;
    if (!take({req.training, "block", c.attn, c.offload, c.keep}, n - c.k, blk)) return false;
    // Backward runs the blocks last to first: the recomputing blocks (the last n - k) give their kept tensors back
    // while gradients grow, then the keeping ones. The sum is linear between these points, so its largest is one of
    // them.
    const double after_blocks = c.k * sel.kept_bytes + G * static_cast<double>(n - c.k) / n;
    act = std::max({kept, after_blocks, G, after_backward});
  }
  c.activations = static_cast<int64_t>(act);
  c.transient = static_cast<int64_t>(transient);
  c.margin = kMarginBase + static_cast<int64_t>(kMarginShare * (act + transient));
  c.peak = req.fixed.static_bytes + c.activations + c.transient;
  c.need = c.peak + c.margin;
  c.host = static_cast<int64_t>(host);
  c.seconds = seconds + outside;
  return true;
}

struct Search {
  std::vector<Candidate> all;
  std::string missing;  // the first key the table lacked
};

Search enumerate(const PlanRequest& req, const CostTable& costs, int64_t rows) {
  const auto& g = req.given;
  const int64_t n = req.blocks;
  Search s;
  std::vector<std::string> attns;
  if (!req.causal) {
    attns = {"full"};
  } else if (g.attn) {
    attns = {causal_kernel_name(*g.attn)};
  } else {
    attns = {"prefix", "mask"};
  }
  std::vector<bool> offloads = g.act_offload       ? std::vector<bool>{*g.act_offload}
                               : req.allow_offload ? std::vector<bool>{false, true}
                                                   : std::vector<bool>{false};
  // (mode, k) pairs
  std::vector<std::pair<Checkpointing, int64_t>> modes;
  const auto ks = [&](int64_t lo) {
    if (g.selective_blocks) {
      const int64_t k = *g.selective_blocks < 0 ? n : std::min(*g.selective_blocks, n);
      modes.emplace_back(Checkpointing::selective, k);
      return;
    }
    for (int64_t k = lo; k <= n; ++k) modes.emplace_back(k == 0 ? Checkpointing::block : Checkpointing::selective, k);
  };
  if (g.checkpointing == Checkpointing::none) {
    modes.emplace_back(Checkpointing::none, 0);
  } else if (g.checkpointing == Checkpointing::block) {
    modes.emplace_back(Checkpointing::block, 0);
  } else if (g.checkpointing == Checkpointing::selective) {
    ks(1);
  } else {
    if (req.allow_none && !g.selective_blocks && !(g.act_offload && *g.act_offload) &&
        !(g.attn_keep && *g.attn_keep > 0))
      modes.emplace_back(Checkpointing::none, 0);
    ks(0);
  }
  for (const auto& attn : attns)
    for (bool offload : offloads)
      for (const auto& [mode, k] : modes) {
        if (mode == Checkpointing::none && offload) continue;
        std::vector<double> keeps{0};
        const bool recomputes = mode != Checkpointing::none && k < n;
        if (g.attn_keep) {
          if (*g.attn_keep > 0 && (!recomputes || attn != "prefix")) continue;
          keeps = {*g.attn_keep};
        } else if (recomputes && attn == "prefix") {
          keeps = costs.keeps({req.training, "block", attn, offload, 0});
          if (keeps.empty()) keeps = {0};
        }
        for (double keep : keeps) {
          Candidate c;
          c.mode = mode, c.k = k, c.offload = offload, c.keep = keep, c.attn = attn;
          std::string missing;
          if (!evaluate(c, req, costs, rows, missing)) {
            if (s.missing.empty()) s.missing = missing;
            continue;
          }
          // An offload that moves nothing to the host (selective keeping every block: its kept tensors stay) costs
          // the same memory; the table's time difference is noise, so the plan does not turn it on for that.
          if (c.offload && c.host == 0 && !g.act_offload) continue;
          s.all.push_back(c);
        }
      }
  return s;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.seconds != b.seconds) return a.seconds < b.seconds;
  return a.peak < b.peak;
}

const Candidate* best_fitting(const std::vector<Candidate>& cs, int64_t budget,
                              const std::function<bool(const Candidate&)>& keep = {}) {
  const Candidate* best = nullptr;
  for (const auto& c : cs)
    if (c.need <= budget && (!keep || keep(c)) && (!best || better(c, *best))) best = &c;
  return best;
}

const Candidate* smallest(const std::vector<Candidate>& cs, const std::function<bool(const Candidate&)>& keep = {}) {
  const Candidate* best = nullptr;
  for (const auto& c : cs)
    if ((!keep || keep(c)) && (!best || c.need < best->need || (c.need == best->need && c.seconds < best->seconds)))
      best = &c;
  return best;
}

void check_given(const PlanRequest& req) {
  const auto& g = req.given;
  VDT_CHECK(req.blocks > 0 && req.rows > 0, "memory plan: blocks and rows must be positive (got ", req.blocks, ", ",
            req.rows, ")");
  VDT_CHECK(req.budget_bytes > 0, "--memory: the budget must be positive (got ", req.budget_bytes, " bytes)");
  VDT_CHECK(
      !(g.checkpointing == Checkpointing::none && !req.allow_none),
      "--checkpointing none: this trainer always checkpoints; expected block or selective, or leave it to the plan");
  VDT_CHECK(!(g.act_offload && *g.act_offload && !req.allow_offload),
            "--act-offload on: this trainer has no activation offload; leave it out");
  VDT_CHECK(!(g.act_offload && *g.act_offload && g.checkpointing == Checkpointing::none),
            "--act-offload on needs checkpointing (the offloaded tensors are a checkpoint's); expected --checkpointing "
            "block or selective");
  if (g.selective_blocks)
    check_selective_blocks(*g.selective_blocks, g.checkpointing.value_or(Checkpointing::selective));
  if (g.attn_keep)
    VDT_CHECK(*g.attn_keep >= 0 && *g.attn_keep <= 1, kAttnKeepFlag, " ", *g.attn_keep, ": expected a share in [0, 1]");
  VDT_CHECK(!(g.attn_keep && *g.attn_keep > 0 && !req.causal), kAttnKeepFlag,
            " applies to block-causal spans (the causal trainer); leave it out");
  VDT_CHECK(!(g.attn_keep && *g.attn_keep > 0 && g.attn == CausalKernel::mask), kAttnKeepFlag,
            " needs --attn prefix; leave one of them to the plan");
}

// The advice when nothing fits the budget.
std::string nothing_fits(const PlanRequest& req, const CostTable& costs, const Search& s) {
  const auto* m = smallest(s.all);
  const int64_t n = req.blocks;
  std::string msg = "--memory: nothing fits in " + gib(static_cast<double>(req.budget_bytes)) + " GiB per GPU";
  if (!req.budget_note.empty()) msg += " (" + req.budget_note + ")";
  msg += "; the smallest plan (" + m->flags(n, req.causal, req.allow_offload) + ") needs " +
         gib(static_cast<double>(m->need)) + " GiB: fixed " + gib(static_cast<double>(req.fixed.static_bytes)) +
         ", activations " + gib(static_cast<double>(m->activations)) + ", transient " +
         gib(static_cast<double>(m->transient)) + ", margin " + gib(static_cast<double>(m->margin)) +
         " (costs: " + costs.source + "). What would fit:";
  const auto& g = req.given;
  if (g.checkpointing || g.selective_blocks || g.act_offload || g.attn_keep || g.attn) {
    PlanRequest free = req;
    free.given = {};
    try {
      const auto p = make_plan(free, costs);
      msg += "\n  - leave the memory flags you gave to the plan: " + p.flags() + " fits at " +
             gib(static_cast<double>(p.peak_bytes + p.margin_bytes)) + " GiB";
    } catch (const Error&) {
    }
  }
  if (req.allow_offload && !m->offload && g.act_offload && !*g.act_offload) msg += "\n  - --act-offload on";
  if (req.fixed.static_bytes >= req.budget_bytes)
    msg += "\n  - the fixed part alone (" + gib(static_cast<double>(req.fixed.static_bytes)) +
           " GiB: weights, optimizer state, gradients) exceeds the budget: more GPUs";
  else
    msg +=
        "\n  - more GPUs (torchrun --nproc-per-node: ZeRO-2 shards the optimizer state and gradients, the causal "
        "trainer shards the frozen blocks; now " +
        std::to_string(req.world) + ")";
  // The most rows the same search fits (a shorter span, fewer frames or a smaller resolution).
  int64_t lo = 0, hi = req.rows;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    const auto t = enumerate(req, costs, mid);
    (best_fitting(t.all, req.budget_bytes) ? lo : hi) = mid;
  }
  if (lo > 0)
    msg += "\n  - a shorter span or smaller frames: up to about " + std::to_string(lo) + " rows per block fit (now " +
           std::to_string(req.rows) + ")";
  msg += "\n  - a larger --memory (at least " + gib(static_cast<double>(m->need)) + " GiB), if the device has it";
  return msg;
}

}  // namespace

FixedMemory fixed_memory(const FixedMemoryInputs& in) {
  VDT_CHECK(in.world >= 1 && in.shard_ranks >= 1 && in.grad_accum >= 1,
            "fixed_memory: world, shard_ranks and "
            "grad_accum must be >= 1");
  FixedMemory f;
  const int64_t tb = in.trainable_bytes > 0 ? in.trainable_bytes : in.compute_bytes;
  const int64_t shards = in.zero2 ? in.world : 1;
  const int64_t frozen_rest = in.frozen_params - in.frozen_block_params;
  int64_t weights = in.trainable_params * tb + frozen_rest * in.compute_bytes;
  if (in.shard_ranks > 1) {
    // each rank keeps its slice; the blocks gathered for the current call and the prefetched next one are whole
    const int64_t per_block = in.blocks > 0 ? in.frozen_block_params / in.blocks : 0;
    weights += (in.frozen_block_params / in.shard_ranks + 2 * per_block) * in.compute_bytes;
  } else {
    weights += in.frozen_block_params * in.compute_bytes;
  }
  f.parts.emplace_back("weights", weights);
  const int64_t master_bytes = in.fp32_masters ? 4 : tb;
  if (in.fp32_masters) f.parts.emplace_back("fp32 masters", in.trainable_params * 4 / shards);
  f.parts.emplace_back("AdamW moments", 2 * in.trainable_params * in.moment_bytes / shards);
  if (in.zero2) {
    // ZeRO-2: each rank's slice of the gradient sums; the full bucket buffers fill through backward, each with the
    // slice its reduce-scatter writes, both held until backward ends
    f.parts.emplace_back("gradient slices", in.trainable_params * master_bytes / shards);
    f.grad_bytes = in.trainable_params * master_bytes + in.trainable_params * master_bytes / shards;
  } else if (in.fp32_masters && in.grad_accum > 1) {
    f.parts.emplace_back("fp32 gradient sums", in.trainable_params * 4);  // kept between micro batches
    f.grad_bytes = in.trainable_params * tb;  // each micro batch's compute gradients, moved into the sums after it
  } else if (in.fp32_masters) {
    // one micro batch: the compute gradients grow through backward, then become fp32 sums (each compute gradient
    // freed at once) that the step frees
    f.grad_bytes = in.trainable_params * tb, f.after_backward_bytes = in.trainable_params * 4;
  } else if (in.grad_accum > 1) {
    f.parts.emplace_back("gradients", in.trainable_params * tb);  // kept between micro batches
  } else {
    f.grad_bytes = in.trainable_params * tb;
  }
  if (in.other_bytes > 0) f.parts.emplace_back("other", in.other_bytes);
  for (const auto& [_, b] : f.parts) f.static_bytes += b;
  return f;
}

int64_t auto_budget_bytes(int64_t total) {
  return total - std::max(kAutoReserve, static_cast<int64_t>(0.03 * static_cast<double>(total)));
}

int64_t parse_memory_budget(const std::string& value, int64_t device_total_bytes, const std::string& flag) {
  if (value == "auto") {
    VDT_CHECK(device_total_bytes > 0, flag,
              " auto: no GPU memory to plan for (a CPU run); give the budget in GiB, "
              "e.g. ",
              flag, " 64");
    return auto_budget_bytes(device_total_bytes);
  }
  double gib_value = 0;
  size_t used = 0;
  try {
    gib_value = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VDT_CHECK(used == value.size() && std::isfinite(gib_value) && gib_value > 0, flag, " '", value,
            "': expected auto or a positive number of GiB per GPU (e.g. ", flag, " 80)");
  return static_cast<int64_t>(gib_value * kGiB);
}

Plan make_plan(const PlanRequest& req, const CostTable& costs) {
  check_given(req);
  const int64_t n = req.blocks;
  const auto s = enumerate(req, costs, req.rows);
  VDT_CHECK(!s.all.empty(), "memory plan: no candidate has costs for the choices given: ", s.missing,
            "; measure them with `bench plan` (docs/planner.md) or fix those choices by their flags");
  const auto* best = best_fitting(s.all, req.budget_bytes);
  if (!best) VDT_FAIL(nothing_fits(req, costs, s));

  Plan p;
  MemoryKnobs& k = p.knobs;
  k = req.knobs;
  k.checkpointing = best->mode == Checkpointing::selective && best->k == 0 ? Checkpointing::block : best->mode;
  k.selective_blocks = k.checkpointing == Checkpointing::selective ? (best->k == n ? -1 : best->k) : -1;
  k.act_offload = best->offload;
  k.attn_keep = best->keep;
  if (req.causal) k.attn = best->attn == "mask" ? CausalKernel::mask : CausalKernel::prefix;
  p.causal = req.causal;
  p.peak_bytes = best->peak, p.budget_bytes = req.budget_bytes, p.host_bytes = best->host;
  p.step_seconds = best->seconds;
  p.fixed_bytes = req.fixed.static_bytes, p.activation_bytes = best->activations;
  p.transient_bytes = best->transient, p.margin_bytes = best->margin;
  p.costs = costs.source, p.extrapolated = best->extrapolated, p.budget_note = req.budget_note;

  // Why each choice: given, or the best fitting alternative that differs in it (or the smallest, when none fits).
  const auto& g = req.given;
  auto reason = [&](bool given, const std::function<bool(const Candidate&)>& differs,
                    const std::function<std::string(const Candidate&)>& show) -> std::string {
    if (given) return "given";
    if (const auto* alt = best_fitting(s.all, req.budget_bytes, differs))
      return "plan: fastest that fits; " + show(*alt) + ": " + secs(alt->seconds) + " s at " +
             gib(static_cast<double>(alt->peak)) + " GiB";
    if (const auto* alt = smallest(s.all, differs))
      return "plan: " + show(*alt) + " does not fit (" + gib(static_cast<double>(alt->need)) + " GiB with its margin)";
    return "plan: the only choice";
  };
  // given: the mode and, for selective, how many keep (--selective-blocks alone implies selective)
  const bool ck_given =
      g.selective_blocks.has_value() || (g.checkpointing.has_value() && g.checkpointing != Checkpointing::selective);
  std::string ck = reason(
      ck_given, [&](const Candidate& c) { return c.mode != best->mode || c.k != best->k; },
      [&](const Candidate& c) { return c.checkpointing_text(n); });
  if (!g.selective_blocks && best->mode != Checkpointing::none && best->k < n) {
    const auto* more = smallest(s.all, [&](const Candidate& c) {
      return c.mode != Checkpointing::none && c.k == best->k + 1 && c.offload == best->offload && c.attn == best->attn;
    });
    if (more && more->need > req.budget_bytes)
      ck += "; " + std::to_string(best->k + 1) + " keeping would need " + gib(static_cast<double>(more->need)) + " GiB";
  }
  p.why.emplace_back("--checkpointing", best->checkpointing_text(n) + "  (" + ck + ")");
  if (req.allow_offload) {
    auto differs = [&](const Candidate& c) { return c.offload != best->offload; };
    auto show = [](const Candidate& c) { return std::string("--act-offload ") + (c.offload ? "on" : "off"); };
    std::string why = reason(g.act_offload.has_value(), differs, show);
    if (best->offload) why += "; " + gib(static_cast<double>(best->host)) + " GiB of pinned host memory";
    p.why.emplace_back("--act-offload", std::string(best->offload ? "on" : "off") + "  (" + why + ")");
  }
  if (req.causal) {
    auto keep_differs = [&](const Candidate& c) { return c.keep != best->keep; };
    auto keep_show = [](const Candidate& c) { return "--attn-keep " + keep_text(c.keep); };
    p.why.emplace_back(kAttnKeepFlag,
                       keep_text(best->keep) + "  (" + reason(g.attn_keep.has_value(), keep_differs, keep_show) + ")");
    auto attn_differs = [&](const Candidate& c) { return c.attn != best->attn; };
    auto attn_show = [](const Candidate& c) { return "--attn " + c.attn; };
    p.why.emplace_back("--attn", best->attn + "  (" + reason(g.attn.has_value(), attn_differs, attn_show) + ")");
  }
  return p;
}

std::vector<std::string> Plan::table_lines() const {
  std::vector<std::string> out;
  out.push_back("memory plan: " + gib(static_cast<double>(budget_bytes)) + " GiB per GPU" +
                (budget_note.empty() ? "" : " (" + budget_note + ")") + ", costs " + costs +
                (extrapolated ? " (extrapolated beyond its measured rows)" : ""));
  for (const auto& [flag, text] : why) {
    std::string line = "  " + flag;
    line.resize(std::max<size_t>(line.size() + 1, 20), ' ');
    out.push_back(line + text);
  }
  out.push_back("  predicted peak    " + gib(static_cast<double>(peak_bytes)) + " GiB = fixed " +
                gib(static_cast<double>(fixed_bytes)) + " + activations " + gib(static_cast<double>(activation_bytes)) +
                " + transient " + gib(static_cast<double>(transient_bytes)) + "; with a margin of " +
                gib(static_cast<double>(margin_bytes)) + " GiB it fits the " + gib(static_cast<double>(budget_bytes)) +
                " GiB budget" +
                (host_bytes > 0 ? " (and " + gib(static_cast<double>(host_bytes)) + " GiB pinned host memory)" : ""));
  out.push_back("  predicted step    " + secs(step_seconds) + " s");
  return out;
}

std::string Plan::flags() const { return knobs.flags(causal); }

}  // namespace vdt
