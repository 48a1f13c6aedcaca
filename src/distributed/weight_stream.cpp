// Per block, the frozen parameters are grouped into stores: one per dtype for the plain ones, and for an FP8 base one
// of E4M3 codes with float32 scales for the 2-D weights. A resident store is one flat device buffer; a streamed one
// keeps each parameter's values in host memory (HostArena) and is copied into one flat device buffer for a use. The
// copies to the device run on a side stream with an event the compute stream waits on at gather; the device buffers
// are made on the side stream and record_stream-ed onto the compute stream that uses them. Stream-generic c10 calls
// (c10::Event, c10::StreamGuard, as distributed/activation_checkpoint.cpp), so this file builds on a CPU-only LibTorch;
// on the CPU the copies are plain and synchronous.
#include "distributed/weight_stream.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/error.h"

namespace vdt {

// One buffer of a block's frozen parameters and the parameters it holds.
struct WeightStream::Store {
  bool fp8 = false;
  torch::Tensor data;                           // resident: flat on the device, the parameters' dtype or the E4M3 codes
  torch::Tensor scale;                          // resident fp8: the scales of every row, flat float32
  std::vector<torch::Tensor> host, host_scale;  // streamed: each parameter's values (codes; scales) in host memory
  torch::ScalarType dtype = torch::kFloat32;    // the parameters' dtype (fp8: what they are dequantized to)
  std::vector<torch::Tensor> params;
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0, rows = 0;
};

struct WeightStream::Entry {
  const torch::nn::Module* block = nullptr;
  int64_t index = 0;
  bool streamed = false, gathered = false;
  bool forward_use = false;   // gathered on the way up (the last block then stays for the recompute)
  std::vector<Store> stores;  // empty: a block left alone
};

// A streamed block's copies on their way to the device.
struct WeightStream::InFlight {
  explicit InFlight(c10::DeviceType t) : done(t) {}
  std::vector<torch::Tensor> data, scale;  // per store
  c10::Event done;
};

namespace {

constexpr int64_t kAlign = 512;  // bytes, each piece's start in host memory
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Host memory for the streamed pieces. The host allocator rounds each allocation up to a power of two, so the pieces
// go first fit into chunks of one power-of-two size (at least the largest piece and 256 MiB), each chunk allocated at
// its content's size: the rounding wastes part of one chunk's worth at most per chunk, not a whole arena's.
class HostArena {
 public:
  HostArena(const std::vector<int64_t>& pieces, bool pinned) {
    int64_t cap = int64_t{256} << 20;
    for (const auto b : pieces) cap = std::max(cap, pow2_ceil(aligned(b)));
    std::vector<int64_t> used;
    for (const auto b : pieces) {
      size_t c = 0;
      while (c < used.size() && used[c] + aligned(b) > cap) ++c;
      if (c == used.size()) used.push_back(0);
      where_.emplace_back(c, used[c]);
      used[c] += aligned(b);
    }
    for (const auto u : used) {
      chunks_.push_back(torch::empty({u}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned)));
      pinned_ += pinned ? pow2_ceil(u) : u;
    }
  }
  // The next piece (in the constructor's order) as a 1-D tensor of `elements` of `dtype`.
  torch::Tensor next(int64_t elements, torch::ScalarType dtype) {
    VDT_CHECK(next_ < where_.size(), "weight streaming: more host pieces taken than planned");
    const auto [c, off] = where_[next_++];
    const int64_t bytes = elements * static_cast<int64_t>(c10::elementSize(dtype));
    return chunks_[c].narrow(0, off, bytes).view(dtype);  // [elements]
  }
  int64_t pinned_bytes() const { return pinned_; }  // what the allocator holds for them

 private:
  std::vector<torch::Tensor> chunks_;
  std::vector<std::pair<size_t, int64_t>> where_;  // per piece: chunk, offset
  size_t next_ = 0;
  int64_t pinned_ = 0;
};

std::optional<c10::Stream> g_side;  // the side stream of the copies (one per process: one device per process)
c10::Stream copy_stream(const torch::Device& d) {
  if (!g_side || g_side->device() != d)
    g_side = c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d, /*isHighPriority=*/false);
  return *g_side;
}

std::string stream_gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", bytes / double(int64_t{1} << 30));
  return b;
}

}  // namespace

std::vector<int64_t> streamed_block_indices(int64_t blocks, int64_t n) {
  VDT_CHECK(n >= 0 && n <= blocks, "streamed blocks: ", n, " of ", blocks, " blocks; expected 0 to ", blocks);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < blocks; ++i)  // block i is streamed when the running count n * (i + 1) / blocks steps up
    if ((i + 1) * n / blocks > i * n / blocks) out.push_back(i);
  return out;
}

WeightStream::WeightStream(Denoiser& model, const torch::Device& device, WeightStreamOptions opts)
    : device_(device), opts_(std::move(opts)) {
  VDT_CHECK(opts_.prefetch >= 1, "weight streaming: prefetch ", opts_.prefetch, ": expected at least 1 block");
  const auto blocks = model.block_modules();
  const int64_t n = static_cast<int64_t>(blocks.size());
  for (const auto i : opts_.streamed)
    VDT_CHECK(i >= 0 && i < n, "weight streaming: block ", i, " is not one of the model's ", n, " blocks");
  std::map<const c10::TensorImpl*, std::string> names;  // which weights are FP8 targets, and codes made earlier
  for (const auto& kv : model.named_parameters()) names[kv.value().unsafeGetTensorImpl()] = kv.key();
  const auto targets = model.lora_targets();
  torch::NoGradGuard ng;
  const bool gpu = device_.is_cuda();

  // 1. the stores of every managed block (shapes and sizes), and the host pieces of the streamed ones
  std::vector<int64_t> pieces;  // bytes, in the order step 2 takes them
  for (int64_t i = 0; i < n; ++i) {
    auto e = std::make_unique<Entry>();
    e->block = blocks[static_cast<size_t>(i)], e->index = i;
    e->streamed = std::find(opts_.streamed.begin(), opts_.streamed.end(), i) != opts_.streamed.end();
    if (e->streamed || opts_.fp8_base) {
      std::map<torch::ScalarType, Store> plain;
      Store fp8;
      fp8.fp8 = true;
      for (auto& p : blocks[static_cast<size_t>(i)]->parameters()) {
        if (p.requires_grad()) continue;  // trains: stays
        VDT_CHECK(p.numel() > 0, "weight streaming: a frozen parameter of block ", i,
                  " is empty (a base sharded or streamed already); streaming takes whole weights");
        const bool as_fp8 = opts_.fp8_base && stored_as_fp8(names.at(p.unsafeGetTensorImpl()), p, targets);
        Store& s = as_fp8 ? fp8 : plain[p.scalar_type()];
        if (s.fp8 && !s.params.empty())
          VDT_CHECK(p.scalar_type() == s.dtype, "weight streaming: block ", i, " mixes frozen weight dtypes");
        s.dtype = p.scalar_type();
        s.params.push_back(p), s.shapes.push_back(p.sizes().vec());
        s.numel += p.numel(), s.rows += s.fp8 ? p.size(0) : 0;
      }
      if (!fp8.params.empty()) e->stores.push_back(std::move(fp8));
      for (auto& [dtype, s] : plain) e->stores.push_back(std::move(s));
      if (e->streamed)
        for (const auto& s : e->stores)
          for (const auto& p : s.params) {
            pieces.push_back(s.fp8 ? p.numel() : p.numel() * static_cast<int64_t>(p.element_size()));
            if (s.fp8) pieces.push_back(p.size(0) * 4);
          }
    }
    entries_[e->block] = e.get();
    if (e->streamed) streamed_.push_back(i), ++streamed_count_;
    order_.push_back(std::move(e));
  }
  HostArena arena(pieces, gpu);
  host_bytes_ = arena.pinned_bytes();

  // 2. fill the stores (host pieces, or device buffers) and empty the parameters
  for (auto& e : order_)
    for (auto& s : e->stores) {
      if (!e->streamed) {
        s.data = torch::empty({s.numel}, torch::dtype(s.fp8 ? torch::kFloat8_e4m3fn : s.dtype).device(device_));
        if (s.fp8) s.scale = torch::empty({s.rows}, torch::dtype(torch::kFloat32).device(device_));
      }
      int64_t off = 0, row = 0;
      for (auto& p : s.params) {
        if (s.fp8) {
          Fp8Weight q;
          const auto it = names.find(p.unsafeGetTensorImpl());
          if (it != names.end() && opts_.fp8_codes.count(it->second)) {
            q = opts_.fp8_codes.at(it->second);
          } else {  // quantized on the device (the GPU kernel), whatever device the weight was built on
            q = quantize_weight(p.to(device_));
          }
          if (e->streamed) {
            s.host.push_back(arena.next(p.numel(), torch::kFloat8_e4m3fn).copy_(q.q.reshape(-1)));
            s.host_scale.push_back(arena.next(p.size(0), torch::kFloat32).copy_(q.scale));
          } else {
            s.data.narrow(0, off, p.numel()).view(p.sizes()).copy_(q.q);
            s.scale.narrow(0, row, p.size(0)).copy_(q.scale);
          }
          row += p.size(0), ++n_fp8_;
        } else if (e->streamed) {
          s.host.push_back(arena.next(p.numel(), p.scalar_type()).copy_(p.reshape(-1)));
        } else {
          s.data.narrow(0, off, p.numel()).view(p.sizes()).copy_(p);
        }
        off += p.numel();
        p.set_data(torch::empty({0}, p.options()));
      }
      if (!e->streamed) device_bytes_ += s.data.nbytes() + (s.fp8 ? s.scale.nbytes() : 0);
    }
}

WeightStream::~WeightStream() {
  if (!device_.is_cuda() || in_flight_.empty()) return;
  for (auto& [i, f] : in_flight_) f->done.synchronize();  // the host memory goes after every copy from it ended
}

WeightStream::Entry* WeightStream::entry(const torch::nn::Module& m) {
  const auto it = entries_.find(&m);
  return it == entries_.end() ? nullptr : it->second;
}

void WeightStream::start_copy(int64_t index) {
  auto& e = *order_[static_cast<size_t>(index)];
  auto f = std::make_unique<InFlight>(device_.type());
  // one device buffer a store, its pieces copied in (on the side stream on a GPU; on the CPU a plain copy apart from
  // the stored one, as the device's would be)
  auto copy_in = [&](const std::vector<torch::Tensor>& pieces, int64_t numel, torch::ScalarType dtype) {
    auto dev = torch::empty({numel}, torch::dtype(dtype).device(device_));  // [numel]
    int64_t off = 0;
    for (const auto& h : pieces) {
      dev.narrow(0, off, h.numel()).copy_(h, /*non_blocking=*/true);
      off += h.numel();
    }
    return dev;
  };
  std::optional<c10::StreamGuard> on_side;
  if (device_.is_cuda()) on_side.emplace(copy_stream(device_));
  for (const auto& s : e.stores) {
    f->data.push_back(copy_in(s.host, s.numel, s.fp8 ? torch::kFloat8_e4m3fn : s.dtype));
    f->scale.push_back(s.fp8 ? copy_in(s.host_scale, s.rows, torch::kFloat32) : torch::Tensor());
  }
  if (device_.is_cuda()) f->done.record(copy_stream(device_));
  ++copies_;
  in_flight_[index] = std::move(f);
}

std::vector<int64_t> WeightStream::upcoming(int64_t i) const {
  const int64_t n = static_cast<int64_t>(order_.size());
  std::vector<int64_t> out;
  if (up_) {
    for (int64_t j = i + 1; j < n; ++j) out.push_back(j);
    if (opts_.wraps)
      for (int64_t j = 0; j < i; ++j) out.push_back(j);
    else
      for (int64_t j = n - 1; j >= 0; --j) out.push_back(j);  // the recompute turns back at the last block
  } else {
    for (int64_t j = i - 1; j >= 0; --j) out.push_back(j);
    for (int64_t j = 0; j < n; ++j) out.push_back(j);  // the next step's forward
  }
  return out;
}

void WeightStream::prefetch_from(int64_t i) {
  const int64_t n = static_cast<int64_t>(order_.size());
  if (opts_.wraps || i == 0) {
    up_ = true;
  } else if (i == n - 1) {
    up_ = false;
  } else if (last_ >= 0 && last_ != i) {
    up_ = last_ < i;
  }
  last_ = i;
  if (streamed_.empty()) return;
  std::vector<int64_t> wanted;
  for (const auto j : upcoming(i)) {
    if (static_cast<int64_t>(wanted.size()) >= opts_.prefetch) break;
    const auto& e = *order_[static_cast<size_t>(j)];
    if (e.streamed && !e.gathered && j != i && std::find(wanted.begin(), wanted.end(), j) == wanted.end())
      wanted.push_back(j);
  }
  // copies no longer wanted go (made on the side stream: freed there, after their copy)
  for (auto it = in_flight_.begin(); it != in_flight_.end();)
    it = std::find(wanted.begin(), wanted.end(), it->first) == wanted.end() ? in_flight_.erase(it) : std::next(it);
  for (const auto j : wanted)
    if (!in_flight_.count(j)) start_copy(j);
}

void WeightStream::gather(const torch::nn::Module& m) {
  auto* e = entry(m);
  if (!e || e->gathered) {
    if (e) prefetch_from(e->index);
    return;
  }
  torch::NoGradGuard ng;
  e->forward_use = last_ < e->index;
  std::vector<torch::Tensor> data, scale;
  if (e->streamed) {
    if (!in_flight_.count(e->index)) start_copy(e->index);  // not prefetched: copied now
    auto f = std::move(in_flight_.at(e->index));
    in_flight_.erase(e->index);
    if (device_.is_cuda()) {
      const auto cur = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
      f->done.block(cur);
      for (auto& t : f->data) t.record_stream(cur);  // made on the side stream, used on this one
      for (auto& t : f->scale)
        if (t.defined()) t.record_stream(cur);
    }
    data = std::move(f->data), scale = std::move(f->scale);
  } else {
    for (const auto& s : e->stores) data.push_back(s.data), scale.push_back(s.scale);
  }
  for (size_t k = 0; k < e->stores.size(); ++k) {
    auto& s = e->stores[k];
    torch::Tensor flat = data[k];                                                      // plain: the parameters' values
    if (s.fp8) flat = torch::empty({s.numel}, torch::dtype(s.dtype).device(device_));  // [numel]
    int64_t off = 0, row = 0;
    for (size_t j = 0; j < s.params.size(); ++j) {
      const auto& shape = s.shapes[j];
      const int64_t numel = c10::multiply_integers(shape);
      auto view = flat.narrow(0, off, numel).view(shape);
      if (s.fp8) {
        dequantize_weight_into(data[k].narrow(0, off, numel).view(shape), scale[k].narrow(0, row, shape[0]), view);
        row += shape[0];
      }
      s.params[j].set_data(view);
      off += numel;
    }
  }
  e->gathered = true;
  prefetch_from(e->index);
}

void WeightStream::release(const torch::nn::Module& m) {
  auto* e = entry(m);
  if (!e || !e->gathered) return;
  // the last block going up is used again first by the recompute: it stays across the turn
  if (!opts_.wraps && e->forward_use && e->index == static_cast<int64_t>(order_.size()) - 1 && e->streamed) {
    e->forward_use = false;
    return;
  }
  for (auto& s : e->stores)
    for (auto& p : s.params) p.set_data(torch::empty({0}, p.options()));
  e->gathered = false;
}

std::string WeightStream::describe() const {
  std::string s;
  if (streamed_count_ > 0)
    s = std::to_string(streamed_count_) + " of " + std::to_string(order_.size()) +
        " blocks' frozen weights streamed from " + stream_gib(static_cast<double>(host_bytes_)) + " GiB of " +
        (device_.is_cuda() ? "pinned " : "") + "host memory, " + std::to_string(opts_.prefetch) + " ahead";
  if (opts_.fp8_base)
    s += (s.empty() ? "" : "; ") + std::string("FP8 base: ") + std::to_string(n_fp8_) +
         " frozen block linears stored as E4M3 with a scale per output channel (" +
         stream_gib(static_cast<double>(device_bytes_)) + " GiB on the device), dequantized for each use";
  return s.empty() ? "off" : s;
}

void wrap_block_runner(Denoiser& model, std::shared_ptr<WeightStream> stream) {
  BlockRunner inner = model.block_runner();
  model.set_block_runner([inner, stream](const BlockCall& call) {
    stream->gather(call.block);
    auto y = inner ? inner(call) : call.run(call.inputs);
    stream->release(call.block);
    return y;
  });
}

}  // namespace vdt
