// `vdt eval` (latent_eval.h): both sets read clip by clip into feature rows, so a large data root is never held whole.
#include "tools/latent_eval.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "data/clip_io.h"
#include "data/data_root.h"
#include "train/eval/clip_features.h"
#include "train/eval/frechet.h"

namespace vdt {
namespace fs = std::filesystem;
namespace {

// The sample files of `path`: the file itself, or every *.safetensors directly in the directory (not the per-chunk
// files of a stream, which sit in <clip>.chunks/), sorted.
std::vector<std::string> sample_files(const std::string& path, const char* flag) {
  std::error_code ec;
  VDT_CHECK(fs::exists(path, ec), flag, " ", path, ": no such file or directory");
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  VDT_CHECK(!out.empty(), flag, " ", path, ": no .safetensors file in it",
            "\n---> HINT: give the --out directory of `vdt sample` (its <clip>.safetensors files)");
  return out;
}

// The first of `keys` the file holds; an error naming the file, what it holds and the flag otherwise.
std::string pick_key(const SafetensorsFile& f, const std::vector<std::string>& keys, const char* flag) {
  for (const auto& k : keys)
    if (f.contains(k)) return k;
  std::string want, have;
  for (const auto& k : keys) want += (want.empty() ? "" : " or ") + k;
  for (const auto& k : f.keys()) have += (have.empty() ? "" : ", ") + k;
  VDT_FAIL(f.path(), ": no tensor ", want, " (it holds ", have, ")\n---> HINT: name the tensor with ", flag);
}

class FeatureRows {
 public:
  FeatureRows(std::string what, int64_t skip) : what_(std::move(what)), skip_(skip) {}
  // One clip [C, F, H, W]; every clip of a set must have the first one's shape.
  void add(const torch::Tensor& clip, const std::string& where) {
    VDT_CHECK(clip.dim() == 4, where, ": expected a latent clip [C, F, H, W], got ", clip.sizes());
    VDT_CHECK(clip.size(1) - skip_ >= 2, where, ": ", clip.size(1), " latent frames; with --skip-frames ", skip_,
              " the motion features need at least ", skip_ + 2);
    const auto x = clip.slice(1, skip_);  // [C, F - skip, H, W]
    if (shape_.empty()) shape_ = x.sizes().vec();
    VDT_CHECK(x.sizes().vec() == shape_, where, ": clip shape ", x.sizes(), " after --skip-frames differs from the ",
              what_, "'s first clip ", c10::IntArrayRef(shape_), "; a set's clips must all have one shape");
    rows_.push_back(clip_features(x.unsqueeze(0)));  // [1, K]
  }
  torch::Tensor features() const { return torch::cat(rows_); }  // [N, K]
  int64_t size() const { return static_cast<int64_t>(rows_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  std::string what_;
  int64_t skip_;
  std::vector<int64_t> shape_;  // [C, F, H, W] after the skip
  std::vector<torch::Tensor> rows_;
};

std::vector<std::string> generated_keys(const std::string& key) {
  return key == "auto" ? std::vector<std::string>{"sample", "conditioned"} : std::vector<std::string>{key};
}

// A data root's latents, each clip cut into windows of `frames` frames (plus the skipped ones) from its start.
void add_root(FeatureRows& rows, const LatentEvalConfig& cfg, int64_t frames) {
  const auto root = DataRoot::open(cfg.reference);
  const int64_t need = frames + cfg.skip_frames;
  int64_t short_clips = 0;
  for (const auto& row : root.rows()) {
    if (row.drop || (cfg.split != "all" && row.split != cfg.split)) continue;
    const auto path = root.latent_path(row.clip_id);
    const int64_t F = latent_stream_frames(path, root.info());
    if (F < need) ++short_clips;
    for (int64_t start = 0; start + need <= F; start += need)
      rows.add(read_latents(path, root.info(), need, start).to(torch::kFloat32),
               path + " frames " + std::to_string(start) + "..");
  }
  VDT_CHECK(rows.size() > 0, "--reference ", cfg.reference, ": no ", cfg.split == "all" ? "" : cfg.split + " ",
            "clip holds ", need, " latent frames (the generated clips' length",
            cfg.skip_frames ? " with --skip-frames" : "", "); ", short_clips, " are shorter");
}

}  // namespace

void LatentEvalConfig::validate() const {
  VDT_CHECK(!generated.empty(), "--generated: give the directory `vdt sample --out` wrote (or one of its files)");
  VDT_CHECK(!reference.empty(), "--reference: give a data root, or a directory of sample files");
  VDT_CHECK(split == "all" || split == "train" || split == "val", "--split ", split, ": expected all, train or val");
  VDT_CHECK(skip_frames >= 0, "--skip-frames ", skip_frames, ": expected 0 or more latent frames");
  VDT_CHECK(!key.empty() && !reference_key.empty(), "--key and --reference-key name a tensor; they cannot be empty");
}

const std::vector<ConfigField<LatentEvalConfig>>& LatentEvalConfig::fields() {
  using C = LatentEvalConfig;
  static const std::vector<ConfigField<C>> f = {
      {"--generated",
       "the generated clips: the --out directory of `vdt sample` (each <clip>.safetensors one clip; "
       "the per-chunk files of a stream are not read) or one such file",
       &C::generated, /*required=*/true},
      {"--key",
       "tensor of a generated file: auto (sample, else conditioned: the causal and the SFT samplers' "
       "outputs) or a name",
       &C::key},
      {"--reference",
       "the data: a data root (its latents, each clip cut into windows of the generated clips' length "
       "from its start), or a directory of sample files, or one",
       &C::reference, /*required=*/true},
      {"--reference-key", "tensor of a reference sample file (not a data root)", &C::reference_key},
      {"--split", "with a data root: all, train or val clips (drop:true clips are never read)", &C::split},
      {"--skip-frames",
       "leading latent frames left out of every clip of both sets (e.g. 1 when every sampler was "
       "given the clip's frame 0)",
       &C::skip_frames},
      {"--out", "also write the result as JSON to this file", &C::out},
  };
  return f;
}

std::string LatentEvalReport::json() const {
  nlohmann::ordered_json j = {{"frechet_distance", distance},
                              {"groups", nlohmann::ordered_json::object()},
                              {"n_generated", n_generated},
                              {"n_reference", n_reference},
                              {"clip_shape", clip_shape},
                              {"features", features},
                              {"key", key}};
  for (const auto& [name, d] : groups) j["groups"][name] = d;
  return j.dump(1) + "\n";
}

LatentEvalReport run_latent_eval(const LatentEvalConfig& cfg) {
  cfg.validate();
  LatentEvalReport rep;
  FeatureRows gen("generated set", cfg.skip_frames), ref("reference set", cfg.skip_frames);
  const auto keys = generated_keys(cfg.key);
  for (const auto& path : sample_files(cfg.generated, "--generated")) {
    const auto f = SafetensorsFile::open(path);
    const auto key = pick_key(*f, keys, "--key");
    VDT_CHECK(rep.key.empty() || rep.key == key, path, ": holds ", key, " where the files before it held ", rep.key,
              "; name the tensor with --key");
    rep.key = key;
    gen.add(f->get(key).to(torch::kFloat32), path + " [" + key + "]");
  }
  const bool root = fs::exists(fs::path(cfg.reference) / "dataset.json");
  if (root) {
    add_root(ref, cfg, gen.shape()[1]);
  } else {
    for (const auto& path : sample_files(cfg.reference, "--reference")) {
      const auto f = SafetensorsFile::open(path);
      ref.add(f->get(pick_key(*f, {cfg.reference_key}, "--reference-key")).to(torch::kFloat32),
              path + " [" + cfg.reference_key + "]");
    }
  }
  VDT_CHECK(ref.shape() == gen.shape(), "--reference ", cfg.reference, ": its clips are ",
            c10::IntArrayRef(ref.shape()), ", the generated ones ", c10::IntArrayRef(gen.shape()),
            " (after --skip-frames); both sets must come from one latent space and geometry");
  const auto fa = gen.features(), fb = ref.features();
  rep.n_generated = gen.size(), rep.n_reference = ref.size(), rep.clip_shape = gen.shape(), rep.features = fa.size(1);
  rep.distance = frechet_distance(fit_gaussian(fa, "--generated " + cfg.generated),
                                  fit_gaussian(fb, "--reference " + cfg.reference));
  for (const auto& g : clip_feature_groups(gen.shape()[0], gen.shape()[1])) {
    const auto cols = torch::tensor(g.columns, torch::kLong);
    rep.groups.emplace_back(g.name, frechet_distance(fa.index_select(1, cols), fb.index_select(1, cols)));
  }
  if (!cfg.out.empty()) write_file_atomic(cfg.out, rep.json());
  return rep;
}

}  // namespace vdt
