// A tiny valid data root written programmatically (C=4, F=3, H=W=4, sem_scale 2, 3 cells, text_dim 8, Lt 4), plus
// helpers to mutate it: each fault test rewrites one file.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "data/data_root.h"
#include "data/sft_dataset.h"
#include "test_util.h"

namespace vdt::test {

struct TinyClip {
  std::string clip_id, split, run;
  bool drop = false;
  std::vector<std::string> cells;
};

class TinyRoot {
 public:
  static constexpr int64_t C = 4, F = 3, H = 4, W = 4, S = 2, kCells = 3, kTextDim = 8, kLt = 4;

  TinyRoot() {
    root_ = dir_.path().string() + "/root";
    for (const char* sub : {"index", "latents", "cond", "meta"}) std::filesystem::create_directories(root_ + "/" + sub);
    info_ = {{"format", "vdt-latents/1"},
             {"res", "832x480"},
             {"latent_channels", C},
             {"latent_frames", F},
             {"latent_hw", {H, W}},
             {"cells", kCells},
             {"sem_scale", S},
             {"vocab", "parts"},
             {"collapse_parts", {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9}},
             {"text_dim", kTextDim},
             {"text_len", kLt},
             {"null_prompt", ""}};
    // train: runs rA, rB (t4 dropped); val: runs rC, rD (v2 dropped).
    clips_ = {{"t0", "train", "rA", false, {"a red car", "a red car", "a blue tree"}},
              {"t1", "train", "rA", false, {"a blue tree", "a dog", "a dog"}},
              {"t2", "train", "rB", false, {"a dog", "a red car", "a blue tree"}},
              {"t3", "train", "rB", false, {"a red car", "a red car", "a red car"}},
              {"t4", "train", "rA", true, {"a dog", "a dog", "a dog"}},
              {"v0", "val", "rC", false, {"a red car", "a dog", "a blue tree"}},
              {"v1", "val", "rD", false, {"a blue tree", "a blue tree", "a dog"}},
              {"v2", "val", "rC", true, {"a dog", "a dog", "a red car"}}};
    prompts_ = {"", "a red car", "a blue tree", "a dog"};
    write_dataset_json();
    write_index();
    write_text_table();
    int k = 0;
    for (const auto& c : clips_) {
      write_latents(c.clip_id, latents_for(k));
      write_ids(c.clip_id, ids_for(k));
      ++k;
    }
  }

  const std::string& root() const { return root_; }
  std::string file(const std::string& rel) const { return root_ + "/" + rel; }
  std::string latent(const std::string& clip) const { return root_ + "/latents/" + clip + ".safetensors"; }
  std::string cond(const std::string& clip) const { return root_ + "/cond/" + clip + ".safetensors"; }
  std::string meta(const std::string& clip) const { return root_ + "/meta/" + clip + ".json"; }
  std::string table() const { return root_ + "/text_table.safetensors"; }

  nlohmann::json& info() { return info_; }
  std::vector<TinyClip>& clips() { return clips_; }
  std::vector<std::string>& prompts() { return prompts_; }

  // Deterministic contents: latents ~ k-dependent values, ids cycle through the 20 parts plus some UNKNOWN.
  static torch::Tensor latents_for(int k) {
    return (torch::arange(C * F * H * W, torch::kFloat).reshape({C, F, H, W}) * 0.01 + k).to(torch::kBFloat16);
  }
  static torch::Tensor ids_for(int k) {
    auto t = (torch::arange(F * H * S * W * S, torch::kLong).reshape({F, H * S, W * S}) + k) % 21;
    t = torch::where(t == 20, torch::full_like(t, 255), t);
    return t.to(torch::kByte);
  }

  void write_dataset_json() const { write_text(file("dataset.json"), info_.dump()); }
  void write_index() const {
    std::string s;
    for (const auto& c : clips_) {
      nlohmann::json j = {
          {"clip_id", c.clip_id}, {"split", c.split}, {"run", c.run}, {"drop", c.drop}, {"cells", c.cells}};
      s += j.dump() + "\n";
    }
    write_text(file("index/clips.jsonl"), s);
  }
  void write_text_table() const {
    const int64_t n = static_cast<int64_t>(prompts_.size());
    auto emb = torch::zeros({n, kLt, kTextDim});
    std::vector<int32_t> lens;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t len = 1 + i % kLt;  // rows past `len` stay zero (T5 padding)
      emb[i].narrow(0, 0, len).copy_(torch::full({len, kTextDim}, static_cast<float>(i + 1)));
      lens.push_back(static_cast<int32_t>(len));
    }
    save_safetensors(table(), {{"embeddings", emb.to(torch::kBFloat16)}, {"lengths", torch::tensor(lens, torch::kInt)}},
                     {{"prompts", nlohmann::json(prompts_).dump()}});
  }
  void write_latents(const std::string& clip, const torch::Tensor& t, const std::string& key = "latents") const {
    save_safetensors(latent(clip), {{key, t}});
  }
  void write_ids(const std::string& clip, const torch::Tensor& t) const { save_safetensors(cond(clip), {{"ids", t}}); }
  void write_meta(const std::string& clip, const std::vector<std::array<double, 6>>& per_frame) const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& a : per_frame) list.push_back({{a[0], a[1], a[2]}, {a[3], a[4], a[5]}});
    write_text(meta(clip), nlohmann::json{{"world_to_image", list}}.dump());
  }
  static void write_text(const std::string& path, const std::string& s) {
    std::ofstream out(path, std::ios::binary);
    out << s;
  }

  SftDataConfig config(const std::string& split = "train") const {
    SftDataConfig c;
    c.root = root_;
    c.split = split;
    return c;
  }

 private:
  TempDir dir_;
  std::string root_;
  nlohmann::json info_;
  std::vector<TinyClip> clips_;
  std::vector<std::string> prompts_;
};

}  // namespace vdt::test
