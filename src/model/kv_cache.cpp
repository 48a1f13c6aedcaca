// KvCache. Keys are stored after their rotation, so a pass's attention reads them as they are; only a sink that
// the window moves is rotated again (from the raw keys kept for it). KvHistory: the rows a pass with autograd reads.
#include "model/kv_cache.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/error.h"
#include "model/attention.h"

namespace vdt {

KvCache::KvCache(int64_t blocks, int64_t batch, int64_t capacity, int64_t heads, int64_t head_dim,
                 torch::TensorOptions options)
    : capacity_(capacity) {
  VDT_CHECK(blocks >= 1 && batch >= 1 && capacity >= 1 && heads >= 1 && head_dim >= 1, "KvCache: ", blocks,
            " blocks, batch ", batch, ", ", capacity, " rows, ", heads, " x ", head_dim, ": expected >= 1 each");
  for (int64_t b = 0; b < blocks; ++b) {
    k_.push_back(torch::zeros({batch, capacity, heads, head_dim}, options));
    v_.push_back(torch::zeros({batch, capacity, heads, head_dim}, options));
  }
  raw_.resize(static_cast<size_t>(blocks));
  pass_raw_k_.resize(static_cast<size_t>(blocks));
  graph_k_.resize(static_cast<size_t>(blocks)), graph_v_.resize(static_cast<size_t>(blocks));
  pass_graph_k_.resize(static_cast<size_t>(blocks)), pass_graph_v_.resize(static_cast<size_t>(blocks));
  text_k_.resize(static_cast<size_t>(blocks));
  text_v_.resize(static_cast<size_t>(blocks));
}

void KvCache::begin(int64_t rows, int64_t chunk, bool commit, bool keep_raw) {
  VDT_CHECK(pass_rows_ == 0, "KvCache: a pass began before the last one ended");
  VDT_CHECK(rows >= 1 && kept_ + rows <= capacity_, "KvCache: ", rows, " new rows after ", kept_, " kept do not fit ",
            "the ", capacity_, " rows the cache was sized for");
  pass_rows_ = rows, pass_chunk_ = chunk, pass_commit_ = commit, pass_raw_ = commit && keep_raw;
  for (auto& r : pass_raw_k_) r = torch::Tensor();
}

torch::Tensor KvCache::attend(int64_t block, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              AttentionKernel kernel, const torch::Tensor& raw_k) {
  VDT_CHECK(pass_rows_ > 0, "KvCache: attend outside a pass (begin() first)");
  const auto& kb = k_.at(static_cast<size_t>(block));
  TORCH_CHECK(q.dim() == 4 && q.sizes() == k.sizes() && k.sizes() == v.sizes() && q.size(0) == kb.size(0) &&
                  q.size(1) == pass_rows_ && q.size(2) == kb.size(2) && q.size(3) == kb.size(3),
              "KvCache: expected q, k, v [", kb.size(0), ", ", pass_rows_, ", ", kb.size(2), ", ", kb.size(3),
              "], got ", q.sizes(), k.sizes(), v.sizes());
  const int64_t total = kept_ + pass_rows_;
  auto [k_rows, v_rows] = pass_rows(block);                      // [B, L, N, Dh] after the kept rows
  auto put = [](torch::Tensor& dst, const torch::Tensor& src) {  // nothing to copy when src is dst (pass_rows)
    if (src.data_ptr() != dst.data_ptr() || src.strides() != dst.strides()) dst.copy_(src);
  };
  put(k_rows, k);
  put(v_rows, v);
  if (pass_raw_) {
    TORCH_CHECK(raw_k.defined() && raw_k.sizes() == k.sizes(), "KvCache: this pass keeps the raw keys; got none");
    pass_raw_k_[static_cast<size_t>(block)] = raw_k.clone();
  }
  // [B, total, N, Dh] -> [B, N, total, Dh] (strided views: the rows' stride is N*Dh, as the projections' layout)
  const auto keys = kb.narrow(1, 0, total).transpose(1, 2);
  const auto values = v_[static_cast<size_t>(block)].narrow(1, 0, total).transpose(1, 2);
  return attention(q.transpose(1, 2), keys, values, kernel);  // [B, N, L, Dh]
}

std::pair<torch::Tensor, torch::Tensor> KvCache::pass_rows(int64_t block) {
  VDT_CHECK(pass_rows_ > 0, "KvCache: pass_rows outside a pass (begin() first)");
  const auto b = static_cast<size_t>(block);
  return {k_.at(b).narrow(1, kept_, pass_rows_), v_.at(b).narrow(1, kept_, pass_rows_)};
}

torch::Tensor KvHistory::attend(int64_t block, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                AttentionKernel kernel) const {
  const auto b = static_cast<size_t>(block);
  const auto &hk = this->k.at(b), &hv = this->v.at(b);
  TORCH_CHECK(q.dim() == 4 && q.sizes() == k.sizes() && k.sizes() == v.sizes() && q.size(0) == hk.size(0) &&
                  q.size(2) == hk.size(2) && q.size(3) == hk.size(3),
              "KvHistory: expected q, k, v [", hk.size(0), ", L, ", hk.size(2), ", ", hk.size(3), "], got ", q.sizes(),
              k.sizes(), v.sizes());
  if (commit_to) commit_to->keep_graph(block, k, v);
  // [B, kept + L, N, Dh] -> [B, N, kept + L, Dh]: new tensors, so autograd keeps these, not views of the buffers
  const auto keys = hk.size(1) > 0 ? torch::cat({hk, k}, 1) : k;
  const auto values = hv.size(1) > 0 ? torch::cat({hv, v}, 1) : v;
  return attention(q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), kernel);  // [B, N, L, Dh]
}

std::shared_ptr<const KvHistory> KvCache::history(bool copy) {
  VDT_CHECK(pass_rows_ > 0, "KvCache: history outside a pass (begin() first)");
  VDT_CHECK(!pass_raw_,
            "KvCache: a pass with autograd does not keep a sink's raw keys (no window moves a stream "
            "whose history keeps its graph)");
  auto h = std::make_shared<KvHistory>();
  h->commit_to = pass_commit_ ? this : nullptr;
  // The kept rows of a buffer: one view, or per segment the graph tensor kept for it or the buffer's rows.
  auto rows = [&](const torch::Tensor& buf, const std::vector<torch::Tensor>& graph) {
    const bool any_graph = std::any_of(graph.begin(), graph.end(), [](const auto& t) { return t.defined(); });
    if (!any_graph) return copy ? buf.narrow(1, 0, kept_).clone() : buf.narrow(1, 0, kept_);
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < segments_.size(); ++i) {
      const auto& s = segments_[i];
      const auto own = buf.narrow(1, s.begin, s.end - s.begin);
      parts.push_back(graph[i].defined() ? graph[i] : (copy ? own.clone() : own));
    }
    return torch::cat(parts, 1);  // [B, kept, N, Dh]
  };
  for (size_t b = 0; b < k_.size(); ++b) {
    h->k.push_back(rows(k_[b], graph_k_[b]));
    h->v.push_back(rows(v_[b], graph_v_[b]));
  }
  return h;
}

void KvCache::keep_graph(int64_t block, const torch::Tensor& k, const torch::Tensor& v) {
  VDT_CHECK(pass_rows_ > 0 && pass_commit_, "KvCache: keep_graph outside a committing pass");
  VDT_CHECK(torch::GradMode::is_enabled(),
            "a commit that keeps its keys and values in the graph ran without autograd: block checkpointing runs a "
            "block's forward without it and recomputes the block later, which a commit cannot be; stream with a "
            "detached history, or without block checkpointing");
  auto [k_rows, v_rows] = pass_rows(block);
  {
    torch::NoGradGuard ng;  // the buffers hold values for the passes without autograd, never a graph
    k_rows.copy_(k);
    v_rows.copy_(v);
  }
  pass_graph_k_.at(static_cast<size_t>(block)) = k;
  pass_graph_v_.at(static_cast<size_t>(block)) = v;
}

bool KvCache::keeps_graph() const {
  for (const auto& per_block : graph_k_)
    for (const auto& t : per_block)
      if (t.defined()) return true;
  return false;
}

void KvCache::end() {
  VDT_CHECK(pass_rows_ > 0, "KvCache: end() without a pass");
  if (pass_commit_) {
    segments_.push_back({pass_chunk_, kept_, kept_ + pass_rows_});
    for (size_t b = 0; b < raw_.size(); ++b) {
      raw_[b].push_back(pass_raw_ ? pass_raw_k_[b] : torch::Tensor());
      graph_k_[b].push_back(pass_graph_k_[b]);
      graph_v_[b].push_back(pass_graph_v_[b]);
    }
    kept_ += pass_rows_;
  }
  end_without_commit();
}

void KvCache::end_without_commit() {
  pass_rows_ = 0, pass_commit_ = pass_raw_ = false;
  for (auto& r : pass_raw_k_) r = torch::Tensor();
  for (auto& r : pass_graph_k_) r = torch::Tensor();
  for (auto& r : pass_graph_v_) r = torch::Tensor();
}

void KvCache::drop(size_t i) {
  VDT_CHECK(pass_rows_ == 0 && i < segments_.size(), "KvCache: cannot drop segment ", i, " of ", segments_.size(),
            pass_rows_ ? " during a pass" : "");
  for (const auto& g : graph_k_)
    VDT_CHECK(!g[i].defined(),
              "KvCache: a segment whose keys and values are kept in the graph cannot leave the cache "
              "(a history with gradients keeps every chunk: no window)");
  const auto s = segments_[i];
  const int64_t len = s.end - s.begin, tail = kept_ - s.end;
  for (size_t b = 0; b < k_.size(); ++b) {
    for (auto* buf : {&k_[b], &v_[b]})  // the rows after it move down (a copy: the ranges may overlap)
      if (tail > 0) buf->narrow(1, s.begin, tail).copy_(buf->narrow(1, s.end, tail).clone());
    raw_[b].erase(raw_[b].begin() + static_cast<std::ptrdiff_t>(i));
    graph_k_[b].erase(graph_k_[b].begin() + static_cast<std::ptrdiff_t>(i));
    graph_v_[b].erase(graph_v_[b].begin() + static_cast<std::ptrdiff_t>(i));
  }
  segments_.erase(segments_.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t j = i; j < segments_.size(); ++j) segments_[j].begin -= len, segments_[j].end -= len;
  kept_ -= len;
}

torch::Tensor KvCache::keys(int64_t block, size_t i) {
  const auto& s = segments_.at(i);
  return k_.at(static_cast<size_t>(block)).narrow(1, s.begin, s.end - s.begin);
}

const torch::Tensor& KvCache::raw_keys(int64_t block, size_t i) const {
  return raw_.at(static_cast<size_t>(block)).at(i);
}

void KvCache::set_text(int64_t block, torch::Tensor k, torch::Tensor v) {
  text_k_.at(static_cast<size_t>(block)) = std::move(k);
  text_v_.at(static_cast<size_t>(block)) = std::move(v);
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) n += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (size_t b = 0; b < k_.size(); ++b) {
    add(k_[b]), add(v_[b]), add(text_k_[b]), add(text_v_[b]);
    for (const auto& r : raw_[b]) add(r);
  }
  return n;
}

}  // namespace vdt
