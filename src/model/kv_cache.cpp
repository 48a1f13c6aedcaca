// KvCache. Keys are stored after their rotation, so a pass's attention reads them as they are; only a sink that
// the window moves is rotated again (from the raw keys kept for it).
#include "model/kv_cache.h"

#include <torch/torch.h>

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

void KvCache::end() {
  VDT_CHECK(pass_rows_ > 0, "KvCache: end() without a pass");
  if (pass_commit_) {
    segments_.push_back({pass_chunk_, kept_, kept_ + pass_rows_});
    for (size_t b = 0; b < raw_.size(); ++b) raw_[b].push_back(pass_raw_ ? pass_raw_k_[b] : torch::Tensor());
    kept_ += pass_rows_;
  }
  pass_rows_ = 0, pass_commit_ = pass_raw_ = false;
  for (auto& r : pass_raw_k_) r = torch::Tensor();
}

void KvCache::end_without_commit() {
  pass_rows_ = 0, pass_commit_ = pass_raw_ = false;
  for (auto& r : pass_raw_k_) r = torch::Tensor();
}

void KvCache::drop(size_t i) {
  VDT_CHECK(pass_rows_ == 0 && i < segments_.size(), "KvCache: cannot drop segment ", i, " of ", segments_.size(),
            pass_rows_ ? " during a pass" : "");
  const auto s = segments_[i];
  const int64_t len = s.end - s.begin, tail = kept_ - s.end;
  for (size_t b = 0; b < k_.size(); ++b) {
    for (auto* buf : {&k_[b], &v_[b]})  // the rows after it move down (a copy: the ranges may overlap)
      if (tail > 0) buf->narrow(1, s.begin, tail).copy_(buf->narrow(1, s.end, tail).clone());
    raw_[b].erase(raw_[b].begin() + static_cast<std::ptrdiff_t>(i));
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
