// Per-clip readers: latents, semantic ids (safetensors or npz), meta affines. Every check names the file and
// states what dataset.json expects; returned tensors own their memory (the mapping is released on return).
#include "data/clip_io.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/safetensors.h"

namespace vdt {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_latent_entry(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
                        const DatasetInfo& info) {
  VDT_CHECK(dtype == "BF16" || dtype == "F16" || dtype == "F32", path, ": tensor 'latents' has dtype ", dtype,
            ", expected BF16 (F16 and F32 are accepted and converted)");
  const bool ok = shape.size() == 4 && shape[0] == info.latent_channels && shape[1] >= info.latent_frames &&
                  shape[2] == info.latent_h && shape[3] == info.latent_w;
  VDT_CHECK(ok, path, ": tensor 'latents' has shape ", shape_str(shape), ", expected [C, F, H, W] = [",
            info.latent_channels, ", >=", info.latent_frames, ", ", info.latent_h, ", ", info.latent_w,
            "] (dataset.json latent_channels, latent_frames, latent_hw)");
}

void check_ids_shape(const std::string& path, const std::vector<int64_t>& shape, const DatasetInfo& info) {
  const int64_t hs = info.latent_h * info.sem_scale, ws = info.latent_w * info.sem_scale;
  const bool ok = shape.size() == 3 && shape[0] >= info.latent_frames && shape[1] == hs && shape[2] == ws;
  VDT_CHECK(ok, path, ": tensor 'ids' has shape ", shape_str(shape), ", expected [F, Hs, Ws] = [>=", info.latent_frames,
            ", ", hs, ", ", ws, "] (latent_hw x sem_scale ", info.sem_scale, ")");
}

std::shared_ptr<SafetensorsFile> open_existing(const std::string& path, const char* what, const std::string& also) {
  VDT_CHECK(std::filesystem::exists(path), path, ": missing ", what, " file", also,
            "\n---> HINT: every clip of index/clips.jsonl needs latents/<clip_id>.safetensors and "
            "cond/<clip_id>.safetensors (or .npz)");
  return SafetensorsFile::open(path);
}

std::string npz_sibling(const std::string& path) {
  return ends_with(path, ".safetensors") ? path.substr(0, path.size() - 12) + ".npz" : std::string();
}

}  // namespace

void check_latents_header(const std::string& path, const DatasetInfo& info) {
  auto f = open_existing(path, "latent", "");
  VDT_CHECK(f->contains("latents"), path, ": no tensor 'latents' (keys: ", f->keys().size(), ")");
  const auto& e = f->entry("latents");
  check_latent_entry(path, e.dtype, e.shape, info);
}

int64_t latent_stream_frames(const std::string& path, const DatasetInfo& info) {
  check_latents_header(path, info);
  return open_existing(path, "latent", "")->entry("latents").shape[1];
}

torch::Tensor read_latents(const std::string& path, const DatasetInfo& info, int64_t frames, int64_t start) {
  auto f = open_existing(path, "latent", "");
  VDT_CHECK(f->contains("latents"), path, ": no tensor 'latents'");
  const auto& e = f->entry("latents");
  check_latent_entry(path, e.dtype, e.shape, info);
  auto t = f->get("latents");  // [C, F, H, W] over the mapping
  VDT_CHECK(start >= 0 && start + std::max<int64_t>(frames, 0) <= t.size(1), path, ": frames [", start, ", ",
            start + frames, ") requested, the stream holds ", t.size(1));
  if (frames > 0 || start > 0) t = t.narrow(1, start, frames > 0 ? frames : t.size(1) - start);
  t = t.scalar_type() == torch::kBFloat16 ? t.clone(at::MemoryFormat::Contiguous) : t.to(torch::kBFloat16).contiguous();
  const auto bad = torch::logical_not(torch::isfinite(t));
  const int64_t n_bad = bad.sum().item<int64_t>();
  if (n_bad > 0) {
    const auto first = bad.nonzero()[0];
    VDT_FAIL(path, ": latents hold ", n_bad, " NaN/Inf value(s) (first at channel ", first[0].item<int64_t>(),
             ", frame ", first[1].item<int64_t>(), ")", e.dtype != "BF16" ? " after conversion to bf16" : "",
             "\n---> HINT: re-encode this clip; latents must be finite");
  }
  return t;
}

void check_ids_header(const std::string& path, const DatasetInfo& info) {
  auto f = open_existing(path, "cond", npz_sibling(path).empty() ? "" : " (nor " + npz_sibling(path) + ")");
  VDT_CHECK(f->contains("ids"), path, ": no tensor 'ids'");
  const auto& e = f->entry("ids");
  VDT_CHECK(e.dtype == "U8", path, ": tensor 'ids' has dtype ", e.dtype, ", expected U8 (uint8)");
  check_ids_shape(path, e.shape, info);
}

torch::Tensor read_ids(const std::string& path, const DatasetInfo& info, int64_t num_parts, int64_t frames) {
  torch::Tensor t;
  if (ends_with(path, ".npz")) {
    t = read_npz(path, "ids");
    VDT_CHECK(t.scalar_type() == torch::kByte, path, ": array 'ids' has dtype ", c10::toString(t.scalar_type()),
              ", expected uint8");
  } else {
    check_ids_header(path, info);
    t = SafetensorsFile::open(path)->get("ids");
  }
  check_ids_shape(path, t.sizes().vec(), info);
  if (frames > 0) t = t.narrow(0, 0, frames);
  t = t.clone(at::MemoryFormat::Contiguous);  // [F, Hs, Ws] uint8, owning
  const int64_t nf = t.size(0), hw = t.size(1) * t.size(2);
  const uint8_t* p = t.data_ptr<uint8_t>();
  for (int64_t f = 0; f < nf; ++f)
    for (int64_t i = 0; i < hw; ++i) {
      const uint8_t v = p[f * hw + i];
      if (v < num_parts || v == kCondUnknown) continue;
      VDT_FAIL(path, ": frame ", f, " has id ", int(v), " at row ", i / t.size(2), ", column ", i % t.size(2),
               ", expected 0..", num_parts - 1, " or 255 (UNKNOWN) for stored vocab '", info.vocab, "'");
    }
  return t;
}

std::vector<Affine2D> read_meta(const std::string& path, int64_t frames) {
  if (!std::filesystem::exists(path)) return std::vector<Affine2D>(std::max<int64_t>(frames, 1), kIdentityAffine);
  std::ifstream in(path, std::ios::binary);
  VDT_CHECK(in.good(), path, ": cannot open meta file");
  std::ostringstream os;
  os << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(os.str());
  } catch (const nlohmann::json::exception& e) {
    VDT_FAIL(path, ": malformed JSON (", e.what(), ")");
  }
  VDT_CHECK(j.is_object() && j.contains("world_to_image") && j["world_to_image"].is_array(), path,
            ": expected {\"world_to_image\": [[[a, b, c], [d, e, f]] per frame]}");
  const auto& list = j["world_to_image"];
  VDT_CHECK(static_cast<int64_t>(list.size()) >= frames, path, ": world_to_image has ", list.size(),
            " frames, expected at least ", frames);
  std::vector<Affine2D> out;
  for (size_t f = 0; f < list.size(); ++f) {
    const auto& m = list[f];
    bool ok = m.is_array() && m.size() == 2;
    for (size_t r = 0; ok && r < 2; ++r) {
      ok = m[r].is_array() && m[r].size() == 3;
      for (size_t c = 0; ok && c < 3; ++c) ok = m[r][c].is_number();
    }
    VDT_CHECK(ok, path, ": world_to_image frame ", f, " must be [[a, b, c], [d, e, f]] (numbers), found ", m.dump());
    Affine2D a{};
    for (int k = 0; k < 6; ++k) a[k] = m[k / 3][k % 3].get<double>();
    const double det = a[0] * a[4] - a[1] * a[3];
    VDT_CHECK(std::isfinite(det) && std::abs(det) > 1e-12, path, ": world_to_image frame ", f,
              " is not invertible (determinant ", det, ")");
    out.push_back(a);
  }
  return out;
}

}  // namespace vdt
