#include "data/h3_root.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/safetensors.h"

namespace vdt {

std::string picture1_key(const std::string& choice) {
  if (choice == "native") return "picture1";
  if (choice == "2048") return "picture1_2048";
  VDT_FAIL("--picture1 ", choice, ": expected native or 2048");
}

std::string silence_path(const std::string& root) { return root + "/audio_silence.safetensors"; }

std::pair<int64_t, int64_t> short_edge_pixels(int64_t h, int64_t w, int64_t short_edge) {
  const double scale = static_cast<double>(short_edge) / static_cast<double>(std::min(h, w));
  auto side = [&](int64_t n) {  // nearbyint: ties to even, as Python's round
    return std::max<int64_t>(32, static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * scale / 32)) * 32);
  };
  return {side(h), side(w)};
}

std::pair<int64_t, int64_t> picture1_short_edge_size(int64_t h, int64_t w, int64_t short_edge) {
  const auto px = short_edge_pixels(kH3VaeSpatial * h, kH3VaeSpatial * w, short_edge);
  return {px.first / kH3VaeSpatial, px.second / kH3VaeSpatial};
}

std::pair<int64_t, int64_t> check_picture1_header(const std::string& path, const DatasetInfo& info,
                                                  const std::string& key) {
  const auto f = SafetensorsFile::open(path);
  VDT_CHECK(f->contains(key), path, ": no tensor '", key, "' (the clip's Picture 1 latent [", info.latent_channels,
            ", 1, H, W])",
            key == "picture1_2048" ? "\n---> HINT: this root has no 2048 Picture 1; use --picture1 "
                                     "native or re-run `vdt data prepare` with it"
                                   : "");
  const auto& e = f->entry(key);
  VDT_CHECK(e.shape.size() == 4 && e.shape[0] == info.latent_channels && e.shape[1] == 1 && e.shape[2] >= 2 &&
                e.shape[3] >= 2 && e.shape[2] % 2 == 0 && e.shape[3] % 2 == 0,
            path, ": tensor '", key, "' must be [", info.latent_channels, ", 1, H, W] with even H, W >= 2");
  VDT_CHECK(e.dtype == "BF16" || e.dtype == "F16" || e.dtype == "F32", path, ": tensor '", key, "' has dtype ", e.dtype,
            ", expected BF16 (F16 / F32 accepted)");
  if (key == "picture1_2048") {  // its size follows from the native one and the root's short edge
    VDT_CHECK(info.picture1_short_edge > 0, path,
              ": has a 'picture1_2048' latent but dataset.json records no "
              "picture1_short_edge (a root of an older `vdt data prepare`, which resized the long edge to 2048)"
              "\n---> HINT: re-run `vdt data prepare --model h3` into a new --out, or train with --picture1 native");
    const auto n = check_picture1_header(path, info, "picture1");
    // From the source image's size when the file records it (the whole image is resized), else from the native latent.
    const auto& meta = f->metadata();
    std::pair<int64_t, int64_t> want;
    std::string from;
    if (const auto it = meta.find("picture1_source_size"); it != meta.end()) {
      int64_t w = 0, h = 0;
      char x = 0;
      std::istringstream in(it->second);
      VDT_CHECK((in >> w >> x >> h) && x == 'x' && w > 0 && h > 0 && in.peek() == EOF, path,
                ": metadata picture1_source_size '", it->second, "' is not WxH");
      const auto px = short_edge_pixels(h, w, info.picture1_short_edge);
      want = {px.first / kH3VaeSpatial, px.second / kH3VaeSpatial};
      from = "its source image (" + it->second + " pixels)";
    } else {
      want = picture1_short_edge_size(n.first, n.second, info.picture1_short_edge);
      from = "its native Picture 1 (" + std::to_string(n.first) + "x" + std::to_string(n.second) + " latent rows)";
    }
    VDT_CHECK(e.shape[2] == want.first && e.shape[3] == want.second, path, ": 'picture1_2048' is ", e.shape[2], "x",
              e.shape[3], " latent rows, but ", from, " at dataset.json's picture1_short_edge ",
              info.picture1_short_edge, " gives ", want.first, "x", want.second,
              "\n---> HINT: re-run `vdt data prepare --model h3` into a new --out");
  }
  return {e.shape[2], e.shape[3]};
}

torch::Tensor read_picture1(const std::string& path, const DatasetInfo& info, const std::string& key) {
  check_picture1_header(path, info, key);
  auto t = SafetensorsFile::open(path)->get(key).to(torch::kBFloat16).clone();
  VDT_CHECK(torch::isfinite(t).all().item<bool>(), path, ": tensor '", key, "' holds NaN or Inf");
  return t;
}

torch::Tensor read_silence(const std::string& path, const DatasetInfo& info, int64_t steps) {
  const auto f = SafetensorsFile::open(path);
  const int64_t Da = info.audio_channels;
  VDT_CHECK(f->contains("silence"), path, ": no tensor 'silence' (the silent audio latent: [", Da, "] or [2, ", Da,
            ", A])\n---> HINT: `vdt data synth --model h3` writes a plausible one; a real root encodes a zero "
            "waveform with the audio VAE");
  auto s = f->get("silence").to(torch::kFloat32);
  VDT_CHECK((s.dim() == 1 && s.size(0) == Da) || (s.dim() == 3 && s.size(0) == 2 && s.size(1) == Da && s.size(2) >= 1),
            path, ": tensor 'silence' is ", s.sizes(), ", expected [", Da, "] or [2, ", Da, ", A]");
  VDT_CHECK(torch::isfinite(s).all().item<bool>(), path, ": tensor 'silence' holds NaN or Inf");
  if (s.dim() == 1) return s.view({1, Da, 1}).expand({2, Da, steps}).to(torch::kBFloat16).contiguous();
  const int64_t have = s.size(2);
  auto out = s.narrow(2, 0, std::min(have, steps));
  if (have < steps) out = torch::cat({out, s.narrow(2, have - 1, 1).expand({2, Da, steps - have})}, 2);
  return out.to(torch::kBFloat16).contiguous();  // [2, Da, steps]
}

}  // namespace vdt
