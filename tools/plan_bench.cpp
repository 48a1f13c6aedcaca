// The cost table's measurement (tools/plan_bench.h): a two-block model; per size and mode a run with both blocks (its
// per-block growth, its backward peak, its time) and a run whose second block is skipped (returns its input: the
// first block and everything outside the blocks), so one block's time is the difference.
#include "tools/plan_bench.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "core/device_flag.h"
#include "core/error.h"
#include "distributed/activation_checkpoint.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "tools/copy_bench.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define VDT_PLAN_BENCH_CUDA_ALLOC 1
#endif

namespace vdt {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kChunks = 6;  // the causal trainer's span (train/causal/causal_config.h kSpanChunks)

struct DeviceMemory {
  torch::Device device;
  int index() const { return device.index() < 0 ? 0 : device.index(); }
  int64_t allocated() const {
#ifdef VDT_PLAN_BENCH_CUDA_ALLOC
    if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(index()).allocated_bytes[0].current;
#endif
    return 0;
  }
  int64_t peak() const {
#ifdef VDT_PLAN_BENCH_CUDA_ALLOC
    if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(index()).allocated_bytes[0].peak;
#endif
    return 0;
  }
  void reset_peak() const {
#ifdef VDT_PLAN_BENCH_CUDA_ALLOC
    if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(index());
#endif
  }
  void sync() const {
    if (device.is_cuda()) torch::cuda::synchronize(index());
  }
};

// What the measuring runner sees of one run.
struct Probe {
  std::unordered_map<const torch::nn::Module*, int> index;
  bool skip_second = false;
  std::vector<int64_t> kept;  // per block call: the allocator's growth across its forward
  int64_t rows = 0;
};

struct RunResult {
  double seconds = 0;
  int64_t kept = 0, transient = 0, rows = 0;
};

// `text_rows`: distinct captions of the window (Wan), one per latent frame at most; each frame picks one of them.
DenoiserInputs make_inputs(Denoiser& m, const PlanBenchConfig& cfg, int64_t frames, int64_t text_rows,
                           torch::Dtype dtype, const torch::Device& dev) {
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(dev);
  const int64_t chunk = cfg.attention == "causal" ? frames / kChunks : frames;
  DenoiserInputs in;
  in.x = torch::randn({1, m.latent_channels(), frames, cfg.height, cfg.width}, opts.dtype(dtype));  // [B, C, F, H, W]
  in.t = torch::rand({1, frames}, opts) * 1000;                                                     // [B, F]
  if (m.text_in_rows()) {  // the text is rows of the sequence (H3: one prompt a window)
    in.context = torch::randn({1, cfg.text_len, m.text_dim()}, opts.dtype(dtype));  // [B, Lt, text_dim]
  } else {  // a caption row per latent frame, as the trainers feed Wan: R distinct rows, frame f takes row f mod R
    in.context = torch::randn({text_rows, cfg.text_len, m.text_dim()}, opts.dtype(dtype));  // [R, Lt, text_dim]
    in.context_ids = (torch::arange(frames, opts.dtype(torch::kLong)) % text_rows).view({1, frames});  // [B, F]
  }
  if (takes_picture1(cfg.model))
    in.extra["picture1"] = torch::randn({1, m.latent_channels(), 1, cfg.height, cfg.width}, opts.dtype(dtype));
  for (const auto& s : m.side_streams()) {
    auto shape = m.side_stream_step_shape(s);
    const int64_t steps = m.side_stream_chunks(s, frames, chunk).back();
    shape.insert(shape.begin(), 1);
    shape.push_back(steps);
    in.extra[s] = torch::randn(shape, opts.dtype(dtype));
    in.extra[s + ".t"] = torch::rand({1, steps}, opts) * 1000;
  }
  if (cfg.attention == "causal") in.attention = AttentionPattern::block_causal(chunk);
  return in;
}

// One forward + backward; the probe records the blocks' growth.
RunResult run_once(Denoiser& m, const DenoiserInputs& in, Probe& probe, const DeviceMemory& mem,
                   const std::vector<torch::Tensor>& trainable) {
  probe.kept.clear();
  mem.sync();
  mem.reset_peak();
  const auto t0 = std::chrono::steady_clock::now();
  DenoiserAux aux;
  auto out = m.forward(in, &aux);
  auto loss = out.to(torch::kFloat32).square().mean();
  for (auto& [_, s] : aux.streams) loss = loss + s.to(torch::kFloat32).square().mean();
  mem.sync();
  const int64_t after_forward = mem.allocated();
  loss.backward();
  mem.sync();
  const auto t1 = std::chrono::steady_clock::now();
  RunResult r;
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  r.transient = std::max<int64_t>(0, mem.peak() - after_forward);
  r.kept = probe.kept.empty() ? 0 : *std::max_element(probe.kept.begin(), probe.kept.end());
  r.rows = probe.rows;
  for (auto& p : trainable) p.mutable_grad() = torch::Tensor();
  return r;
}

// Median seconds and the last run's memory over warm-up + repeats.
RunResult measure(Denoiser& m, const DenoiserInputs& in, Probe& probe, const DeviceMemory& mem,
                  const std::vector<torch::Tensor>& trainable, const PlanBenchConfig& cfg) {
  std::vector<double> times;
  RunResult last;
  for (int i = 0; i < cfg.warmup + cfg.repeats; ++i) {
    last = run_once(m, in, probe, mem, trainable);
    if (i >= cfg.warmup) times.push_back(last.seconds);
  }
  std::sort(times.begin(), times.end());
  last.seconds = times[times.size() / 2];
  return last;
}

std::vector<CostKey> keys_to_measure(const PlanBenchConfig& cfg) {
  std::vector<CostKey> keys;
  if (cfg.attention == "full") {
    for (const char* ck : {"none", "block", "selective"}) keys.push_back({cfg.training, ck, "full", false, 0});
    return keys;
  }
  for (bool offload : {false, true}) {
    for (double keep : {0.0, 0.5, 1.0}) keys.push_back({cfg.training, "block", "prefix", offload, keep});
    keys.push_back({cfg.training, "selective", "prefix", offload, 0});
  }
  keys.push_back({cfg.training, "block", "mask", false, 0});
  keys.push_back({cfg.training, "selective", "mask", false, 0});
  return keys;
}

std::string gib_text(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", bytes / double(int64_t{1} << 30));
  return b;
}

}  // namespace

std::vector<int64_t> PlanBenchConfig::frame_list() const {
  if (frames.empty()) return attention == "causal" ? std::vector<int64_t>{6, 12, 18} : std::vector<int64_t>{5, 11, 21};
  std::vector<int64_t> out;
  std::stringstream ss(frames);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int64_t f = 0;
    try {
      f = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VDT_CHECK(used > 0 && used == item.size(), "--frames '", frames, "': '", item,
              "' is not an integer (expected a "
              "comma-separated list like 5,11,21)");
    out.push_back(f);
  }
  return out;
}

const std::vector<ConfigField<PlanBenchConfig>>& PlanBenchConfig::fields() {
  using C = PlanBenchConfig;
  static const std::vector<ConfigField<C>> f = {
      model_field(&C::model, denoiser_presets(), "a two-block model of it with random weights is measured"),
      {"--training", "full (every weight trains: the SFT trainer) or lora (a frozen base: the causal trainer)",
       &C::training},
      {"--attention",
       "full (bidirectional: the SFT trainer) or causal (block-causal 6-chunk spans: the causal "
       "trainer; prefix and mask kernels, --attn-keep 0, 0.5, 1, offload off and on)",
       &C::attention},
      {"--frames",
       "latent frames of each measured size, comma-separated (empty: 5,11,21 for full attention, 6,12,18 "
       "for causal, multiples of 6); bracket the runs you plan for",
       &C::frames},
      {"--height", "latent height", &C::height},
      {"--width", "latent width", &C::width},
      {"--text-len", "text tokens", &C::text_len},
      precision_field(&C::precision, {{Precision::bf16, ""}, {Precision::fp32, ""}}),
      device_field(&C::device),
      {"--lora-rank", "with --training lora: rank of the float32 LoRA factors", &C::lora_rank},
      {"--repeats", "timed runs per mode and size (the median)", &C::repeats},
      {"--warmup", "untimed runs per mode and size", &C::warmup},
      {"--plans-dir", "where the table goes: <dir>/<card>/<preset>.json", &C::plans_dir},
      {"--out", "the table file instead (rows merged into it when it exists)", &C::out},
      {"--copy-only",
       "measure only the copy costs of weight streaming (host-to-device rate, overlap, FP8 dequantization; a GPU) "
       "into the table that is there",
       &C::copy_only},
  };
  return f;
}

void PlanBenchConfig::validate() const {
  denoiser_family(model);  // throws listing the presets
  VDT_CHECK(training == "full" || training == "lora", "--training: expected full or lora, got '", training, "'");
  VDT_CHECK(attention == "full" || attention == "causal",
            "--attention: expected full (bidirectional, the SFT "
            "trainer) or causal (block-causal spans, the causal trainer), got '",
            attention, "'");
  VDT_CHECK(precision == "bf16" || precision == "fp32", "--precision: expected bf16 or fp32, got '", precision, "'");
  VDT_CHECK(height > 0 && width > 0 && height % 2 == 0 && width % 2 == 0 && text_len > 0,
            "--height and --width (even, latent) and --text-len must be positive, got ", height, ", ", width, ", ",
            text_len);
  for (int64_t f : frame_list())
    VDT_CHECK(f > 0 && (attention != "causal" || f % kChunks == 0), "--frames ", f, ": expected a positive count",
              attention == "causal" ? " divisible by the span's 6 chunks" : "");
  VDT_CHECK(repeats > 0 && warmup >= 0, "--repeats must be > 0 and --warmup >= 0");
  VDT_CHECK(training != "lora" || lora_rank > 0, "--lora-rank must be positive, got ", lora_rank);
  const auto dev = resolve_device(device);
  VDT_CHECK(!copy_only || dev.is_cuda(),
            "--copy-only: the copy costs are measured on a GPU (--device cuda); the CPU "
            "keeps the defaults");
  VDT_CHECK(!dev.is_cuda() || !card.empty() || !out.empty(),
            "bench plan: the card's name is empty; the table's "
            "place is plans/<card>/<preset>.json (give --out to write elsewhere)");
}

PlanBenchResult run_plan_bench(const PlanBenchConfig& cfg_in, const std::function<void(const std::string&)>& log) {
  cfg_in.validate();
  PlanBenchConfig cfg = cfg_in;
  const auto dev = resolve_device(cfg.device);
  const DeviceMemory mem{dev};
  const auto dtype = cfg.precision == "fp32" ? torch::kFloat32 : torch::kBFloat16;
  const std::string card = dev.is_cuda() ? card_slug(cfg.card) : "cpu";
  const std::string path = cfg.out.empty() ? cost_table_path(cfg.plans_dir, card, cfg.model) : cfg.out;

  auto model = make_denoiser(cfg.model, torch::TensorOptions().device(dev).dtype(dtype), /*layers=*/2);
  model->init_random_base(5);
  std::vector<torch::Tensor> trainable;
  if (cfg.training == "lora") {
    LoraConfig lc;
    lc.rank = cfg.lora_rank, lc.alpha = static_cast<double>(cfg.lora_rank), lc.targets = model->lora_targets();
    for (auto& [_, p] : attach_lora(*model, lc, 3)) {
      p.set_data(p.detach().to(torch::kFloat32));  // float32 beside the base, as the causal trainer
      trainable.push_back(p);
    }
  } else {
    for (auto& p : model->parameters()) trainable.push_back(p);
  }
  auto probe = std::make_shared<Probe>();
  const auto blocks = model->block_modules();
  for (size_t i = 0; i < blocks.size(); ++i) probe->index[blocks[i]] = static_cast<int>(i);

  CostTable measured;
  measured.preset = cfg.model, measured.card = card, measured.device_name = dev.is_cuda() ? cfg.card : "cpu";
  measured.dtype = cfg.precision, measured.memory_measured = dev.is_cuda(), measured.measured = cfg.measured;
  PlanBenchResult result;
  if (dev.is_cuda()) {
    measured.copy = measure_copy_costs(dev);
    result.lines.push_back("plan_bench " + describe_copy_costs(measured.copy));
    if (log) log(result.lines.back());
  }
  if (cfg.copy_only) {
    VDT_CHECK(fs::exists(path), path,
              ": --copy-only adds the copy costs to a table that is there; measure its rows "
              "first (`vdt bench plan` without --copy-only)");
    auto table = load_cost_table(path);
    table.copy = measured.copy;
    save_cost_table(table, path);
    table.source = path;
    result.table = table, result.path = path;
    return result;
  }
  const bool cross = !model->text_in_rows();  // Wan: the text is the cross-attention's keys and values
  for (int64_t frames : cfg.frame_list()) {
    // One caption for the window; on a GPU a second input with a caption a frame measures what each more caption
    // keeps (the CPU measures no bytes).
    const auto in = make_inputs(*model, cfg, frames, 1, dtype, dev);
    const auto in_captions =
        cross && frames > 1 && dev.is_cuda() ? make_inputs(*model, cfg, frames, frames, dtype, dev) : DenoiserInputs{};
    for (const auto& key : keys_to_measure(cfg)) {
      if (key.attn != "full") model->set_causal_kernel(causal_kernel_from_string(key.attn));
      model->set_block_runner({});
      if (key.checkpointing != "none") {
        CheckpointOptions co;
        co.selective = key.checkpointing == "selective";
        co.offload_inputs = key.offload;
        co.attention_keep = key.attn_keep;
        enable_block_checkpointing(*model, co);
      }
      const auto inner = model->block_runner();
      // A block's growth holds its output, the next block's residual input. A recomputing block under offload sends
      // its input to the host, so there the output is not kept on the device (it is the host bytes).
      const bool input_to_host = key.offload && key.checkpointing == "block" && dev.is_cuda();  // CUDA only offloads
      model->set_block_runner([inner, probe, mem, input_to_host](const BlockCall& call) {
        const int i = probe->index.at(&call.block);
        probe->rows = call.inputs[0].numel() / call.inputs[0].size(-1);  // [B, L, D] (Wan) or [R, D] (H3): B*L or R
        if (probe->skip_second && i == 1) return call.inputs[0];
        const int64_t before = mem.allocated();
        auto out = inner ? inner(call) : call.run(call.inputs);
        probe->kept.push_back(mem.allocated() - before - (input_to_host ? static_cast<int64_t>(out.nbytes()) : 0));
        return out;
      });
      probe->skip_second = false;
      const auto both = measure(*model, in, *probe, mem, trainable, cfg);
      probe->skip_second = true;
      const auto first = measure(*model, in, *probe, mem, trainable, cfg);
      CostRow row;
      row.key = key, row.rows = both.rows, row.text_len = cfg.text_len;
      row.chunks = cfg.attention == "causal" ? kChunks : 0;
      if (cross) row.text_rows = 1;
      if (in_captions.x.defined()) {
        probe->skip_second = false;
        const auto captions = run_once(*model, in_captions, *probe, mem, trainable);
        row.text_row_bytes = std::max(0.0, static_cast<double>(captions.kept - both.kept) / (frames - 1));
      }
      row.kept_bytes = static_cast<double>(both.kept), row.transient_bytes = static_cast<double>(both.transient);
      row.seconds = std::max(both.seconds - first.seconds, 1e-7);  // a tiny block on the CPU is within noise
      row.outside_seconds = std::max(first.seconds - row.seconds, 0.0);
      measured.rows.push_back(row);
      char line[256];
      std::snprintf(line, sizeof line,
                    "plan_bench %-34s rows %6lld kept %s GiB transient %s GiB block %.4f s outside %.4f s",
                    key.describe().c_str(), static_cast<long long>(row.rows),
                    dev.is_cuda() ? gib_text(row.kept_bytes).c_str() : "n/a",
                    dev.is_cuda() ? gib_text(row.transient_bytes).c_str() : "n/a", row.seconds, row.outside_seconds);
      result.lines.push_back(line);
      if (log) log(line);
    }
  }
  model->set_block_runner({});
  // Host bytes under offload: what the same mode keeps on the device without it, less what it keeps with it.
  for (auto& r : measured.rows) {
    if (!r.key.offload) continue;
    for (const auto& o : measured.rows)
      if (!o.key.offload && o.key.training == r.key.training && o.key.checkpointing == r.key.checkpointing &&
          o.key.attn == r.key.attn && o.key.attn_keep == r.key.attn_keep && o.rows == r.rows)
        r.host_bytes = std::max(0.0, o.kept_bytes - r.kept_bytes);
  }
  CostTable table = measured;
  if (fs::exists(path)) {
    const auto old = load_cost_table(path);
    VDT_CHECK(old.preset == cfg.model && old.card == card, path, ": holds the table of ", old.preset, " on ", old.card,
              ", not ", cfg.model, " on ", card, "; give --out another file");
    table = merge_cost_tables(old, measured);
  }
  save_cost_table(table, path);
  table.source = path;
  result.table = table, result.path = path;
  return result;
}

}  // namespace vdt
