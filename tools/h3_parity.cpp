// H3 parity harness. The DiT part replays the stored call exactly; the loss is FIXTURES.md's: mean squared error of
// the negated, unpacked target rows against fixture.target_*, video plus audio, no timestep weight. The packer part
// rebuilds the layout from the `packing` metadata (builder arguments), packs the unpacked fixture inputs and compares
// every packed tensor and the logits it gives.
#include "tools/h3_parity.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "core/device_flag.h"
#include "core/error.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_packer.h"
#include "model/h3/h3_weights.h"

namespace vdt {
namespace {

struct Rows {
  H3ParityResult& result;
  double tol;
  void add(const std::string& name, const torch::Tensor& a, const torch::Tensor& ref) {
    const double e = rel_l2(a, ref);
    result.rows.push_back({name, e, e <= tol});
  }
  // Integer tensors and layouts: exact or failed.
  void exact(const std::string& name, const torch::Tensor& a, const torch::Tensor& ref) {
    const bool same = a.sizes() == ref.sizes() &&
                      torch::equal(a.to(torch::kCPU, torch::kDouble), ref.to(torch::kCPU, torch::kDouble));
    result.rows.push_back({name, same ? 0.0 : (a.sizes() == ref.sizes() ? rel_l2(a, ref) : 1.0), same});
  }
};

torch::Tensor model_time(const torch::Tensor& timestep) {  // DiffSynth 0..1000 -> t = 1 - timestep/1000 (float64)
  return 1.0 - timestep.to(torch::kCPU, torch::kDouble).reshape({-1}) / 1000.0;
}

std::vector<double> to_vec(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

}  // namespace

H3Inputs h3_fixture_inputs(const SafetensorsSet& files, const torch::Device& device) {
  auto need = [&](const std::string& k) {
    VDT_CHECK(files.contains(k), files.files().front()->path(), ": fixture tensor '", k, "' is missing");
    return files.get(k).clone().to(device);
  };
  H3Inputs in;
  in.x = need("fixture.x");
  in.audio_x = need("fixture.audio_x");
  in.position_ids = need("fixture.img_position_ids");  // float64, cast to float32 inside
  in.token_tags = need("fixture.token_tags");
  in.unique_timesteps = need("fixture.unique_timesteps");
  in.inverse_indices = need("fixture.inverse_indices");
  in.prompt_embeds = need("fixture.prompt_embeds");
  in.img_pos = need("fixture.img_pos_info.position_ids");
  in.audio_pos = need("fixture.audio_pos_info.position_ids");
  in.text_pos = need("fixture.text_pos_info.position_ids");
  if (files.contains("fixture.img_pos_for_infer_output_info.position_ids"))
    in.out_pos = need("fixture.img_pos_for_infer_output_info.position_ids");
  in.cu_seqlens = need("fixture.packed_seq_params.cu_seqlens_q");
  in.refiner_cu_seqlens = need("fixture.refiner_packed_seq_params.cu_seqlens_q");
  return in;
}

std::optional<H3LayoutSpec> h3_fixture_layout(const Metadata& meta, std::vector<std::string>& notes) {
  if (!meta.count("packing")) {
    notes.push_back("packer check skipped: no 'packing' metadata");
    return std::nullopt;
  }
  try {
    const auto j = nlohmann::json::parse(meta.at("packing"));
    const auto& a = j.at("args");
    H3LayoutSpec s;
    s.text_len = a.at("text_len").get<int64_t>();
    s.latent_t = a.at("latent_t").get<int64_t>();
    s.latent_h = a.at("latent_h").get<int64_t>();
    s.latent_w = a.at("latent_w").get<int64_t>();
    s.audio_t = a.at("audio_t").get<int64_t>();
    s.audio_channels = a.value("audio_channel", int64_t{2});
    if (a.contains("keyframe_indices") && !a["keyframe_indices"].is_null())
      s.keyframes = a["keyframe_indices"].get<std::vector<int64_t>>();
    if (a.contains("ref_blocks") && !a["ref_blocks"].is_null()) {
      for (const auto& b : a["ref_blocks"]) {
        H3RefSpec r;
        const auto kind = b.at("kind").get<std::string>();
        r.kind = kind == "image" ? H3RefKind::image : kind == "audio" ? H3RefKind::audio : H3RefKind::video;
        VDT_CHECK(kind == "image" || kind == "audio" || kind == "video" || kind == "video_audio", "reference kind '",
                  kind, "'");
        r.latent_t = b.value("latent_t", int64_t{1});
        r.latent_h = b.value("latent_h", int64_t{0});
        r.latent_w = b.value("latent_w", int64_t{0});
        r.audio_t = b.value("ref_audio_t", b.value("audio_t", int64_t{0}));
        s.references.push_back(r);
      }
    }
    const std::string builder = j.value("builder", std::string());
    VDT_CHECK(builder.find("ref2va") == std::string::npos || a.contains("ref_blocks"), "a ref2va builder without ",
              "ref_blocks geometry in its arguments");
    return s;
  } catch (const std::exception& e) {
    notes.push_back(std::string("packer check skipped: packing metadata not understood (") + e.what() + ")");
    return std::nullopt;
  }
}

bool is_h3_fixture(const Metadata& meta) {
  if (!meta.count("config")) return false;
  try {
    const auto j = nlohmann::json::parse(meta.at("config"));
    return j.contains("token_refiner_num_layers") || j.contains("hidden_size");
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

double h3_parity_tolerance(const ParityConfig& cfg) {
  return cfg.tol >= 0 ? cfg.tol : (cfg.dtype == "float32" ? 1e-5 : 5e-2);
}

H3ParityResult run_h3_parity(const ParityConfig& cfg, const H3ParityOptions& opts) {
  cfg.validate();
  auto files = SafetensorsSet::open({cfg.fixture});
  const auto& meta = files.metadata();
  VDT_CHECK(meta.count("config"), cfg.fixture, ": fixture metadata lacks 'config' (the H3 constructor arguments)");
  const H3Config mc = H3Config::from_json(meta.at("config"), cfg.fixture);
  H3ParityResult result;
  result.timestep_mode = meta.count("timestep_mode") ? meta.at("timestep_mode") : "";
  Rows rows{result, h3_parity_tolerance(cfg)};
  auto need = [&](const std::string& k) {
    VDT_CHECK(files.contains(k), cfg.fixture, ": fixture tensor '", k, "' is missing");
    return files.get(k).clone();  // clone: the mapped bytes are read-only and may be unaligned
  };

  const torch::Device device = resolve_device(cfg.device);
  if (cfg.dtype == "float32") {  // float32 parity means float32 arithmetic (no TF32 on Hopper)
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  H3DiT model(mc);
  load_h3_weights(*model, files);
  model->to(device);
  if (cfg.dtype == "bfloat16") model->to_release_precision();
  model->set_attention_kernel(opts.kernel);

  // 1) the DiT alone: the stored packed call
  const auto in = h3_fixture_inputs(files, device);
  auto out = model->forward(in);
  // A fixture made with update masks (skip_mask_out_condition=False) stores zero rows for the conditioning rows:
  // zero the same rows of ours, and say so.
  auto mask_like = [&](torch::Tensor& ours, const torch::Tensor& ref, const char* what) {
    const auto zero_rows = ref.eq(0).all(1);
    const int64_t n = zero_rows.sum().item<int64_t>();
    if (n == 0) return;
    ours = ours * (~zero_rows).to(device, ours.scalar_type()).unsqueeze(1);
    result.notes.push_back(std::string("the fixture's ") + what + " has " + std::to_string(n) +
                           " all-zero (masked) rows: the same rows of ours are zeroed");
  };
  mask_like(out.video_logits, need("fixture.video_logits"), "video_logits");
  mask_like(out.audio_logits, need("fixture.audio_logits"), "audio_logits");
  rows.add("fixture.video_logits", out.video_logits, need("fixture.video_logits"));
  rows.add("fixture.audio_logits", out.audio_logits, need("fixture.audio_logits"));

  // 2) prediction = -unpack(target rows), loss, gradients
  if (files.contains("fixture.pred_video") && files.contains("fixture.target_video")) {
    const auto ref_pv = need("fixture.pred_video");
    const int64_t T = ref_pv.size(2), H = ref_pv.size(3), W = ref_pv.size(4);
    const int64_t n_target = T * (H / 2) * (W / 2), n_cond = out.video_logits.size(0) - n_target;
    VDT_CHECK(n_cond >= 0, cfg.fixture, ": pred_video ", ref_pv.sizes(), " has more rows than video_logits");
    auto pred_v = -h3_unpatchify_video(out.video_logits.narrow(0, n_cond, n_target).to(torch::kFloat32), T, H, W);
    rows.add("fixture.pred_video", pred_v, ref_pv);
    auto loss_v = (pred_v - need("fixture.target_video").to(device)).pow(2).mean();
    auto loss = loss_v;
    if (files.contains("fixture.loss_video"))
      rows.add("fixture.loss_video", loss_v.reshape({1}), need("fixture.loss_video"));
    if (files.contains("fixture.pred_audio") && files.contains("fixture.target_audio")) {
      const auto ref_pa = need("fixture.pred_audio");
      const int64_t Ch = ref_pa.size(0), A = ref_pa.size(2), n_ref = out.audio_logits.size(0) - Ch * A;
      VDT_CHECK(n_ref >= 0, cfg.fixture, ": pred_audio ", ref_pa.sizes(), " has more rows than audio_logits");
      auto pred_a = -h3_unpack_audio(out.audio_logits.narrow(0, n_ref, Ch * A).to(torch::kFloat32), Ch, A);
      rows.add("fixture.pred_audio", pred_a, ref_pa);
      auto loss_a = (pred_a - need("fixture.target_audio").to(device)).pow(2).mean();
      if (files.contains("fixture.loss_audio"))
        rows.add("fixture.loss_audio", loss_a.reshape({1}), need("fixture.loss_audio"));
      loss = loss + loss_a;
    }
    if (files.contains("fixture.loss")) rows.add("fixture.loss", loss.reshape({1}), need("fixture.loss"));
    loss.backward();
    for (const auto& [k, g] : fixture_gradients(files, *model, cfg.fixture)) rows.add(k, g, need(k));
  } else {
    result.notes.push_back("loss and gradients skipped: no fixture.pred_video / fixture.target_video");
  }
  if (!opts.packer) return result;

  // 3) the packer: unpacked inputs -> packed tensors -> logits
  const auto spec = h3_fixture_layout(meta, result.notes);
  if (!spec) return result;
  for (const char* k : {"fixture.video_latents", "fixture.audio_latents", "fixture.timestep_video"}) {
    if (!files.contains(k)) {
      result.notes.push_back(std::string("packer check skipped: no ") + k);
      return result;
    }
  }
  const auto lay = build_h3_layout(*spec);
  H3Content content;
  content.video_latents = need("fixture.video_latents");
  content.audio_latents = need("fixture.audio_latents");
  content.prompt_embeds = need("fixture.prompt_embeds");
  if (files.contains("fixture.text_token_tags")) content.text_tags = need("fixture.text_token_tags");
  const auto stored_x = need("fixture.x"), stored_ax = need("fixture.audio_x");
  if (lay.cond_rows > 0) {
    if (files.contains("fixture.keyframe_cond_anchor")) {
      content.cond_rows = need("fixture.keyframe_cond_anchor");
    } else {  // the reference's encoded reference rows are not stored apart: take them from the packed x
      content.cond_rows = stored_x[0].index_select(0, lay.img_pos.narrow(0, 0, lay.cond_rows));
      result.notes.push_back("packer: conditioning rows taken from fixture.x (no separate anchor tensor)");
    }
  }
  if (lay.ref_audio_rows > 0) {
    content.ref_audio_rows = stored_ax[0].index_select(0, lay.audio_pos.narrow(0, 0, lay.ref_audio_rows));
    result.notes.push_back("packer: reference audio rows taken from fixture.audio_x");
  }
  H3Times times;
  times.video = to_vec(model_time(need("fixture.timestep_video")));
  times.audio =
      files.contains("fixture.timestep_audio") ? to_vec(model_time(need("fixture.timestep_audio"))) : times.video;
  if (times.video.size() != 1 && files.contains("fixture.timesteps") && spec->text_len > 0)
    times.text = need("fixture.timesteps")[0].item<double>();  // the text rows' time is not stored apart
  const auto p = pack_h3(lay, content, times);
  const auto& pi = p.inputs;
  rows.add("packer.x", pi.x, stored_x);
  rows.add("packer.audio_x", pi.audio_x, stored_ax);
  // float64 positions: exact up to the reference's running-sum ulps (see h3_packer.cpp); the float32 cast the DiT
  // applies must agree exactly.
  const auto ref_pos = need("fixture.img_position_ids");
  rows.add("packer.img_position_ids", pi.position_ids, ref_pos);
  rows.exact("packer.img_position_ids.float32", pi.position_ids.to(torch::kFloat32), ref_pos.to(torch::kFloat32));
  rows.exact("packer.token_tags", pi.token_tags, need("fixture.token_tags"));
  rows.exact("packer.unique_timesteps", pi.unique_timesteps, need("fixture.unique_timesteps"));
  rows.exact("packer.inverse_indices", pi.inverse_indices, need("fixture.inverse_indices"));
  if (files.contains("fixture.timesteps")) rows.exact("packer.timesteps", p.timesteps, need("fixture.timesteps"));
  rows.exact("packer.img_pos", pi.img_pos, need("fixture.img_pos_info.position_ids"));
  rows.exact("packer.audio_pos", pi.audio_pos, need("fixture.audio_pos_info.position_ids"));
  rows.exact("packer.text_pos", pi.text_pos, need("fixture.text_pos_info.position_ids"));
  rows.exact("packer.cu_seqlens", pi.cu_seqlens, need("fixture.packed_seq_params.cu_seqlens_q"));
  rows.exact("packer.refiner_cu_seqlens", pi.refiner_cu_seqlens,
             need("fixture.refiner_packed_seq_params.cu_seqlens_q"));
  if (files.contains("fixture.update_mask"))
    rows.exact("packer.update_mask", p.update_mask, need("fixture.update_mask"));
  torch::NoGradGuard ng;
  H3Inputs pin = pi;
  pin.x = pi.x.to(device), pin.audio_x = pi.audio_x.to(device), pin.prompt_embeds = pi.prompt_embeds.to(device);
  const auto pout = model->forward(pin);
  rows.add("packer.video_logits", pout.video_logits, need("fixture.video_logits"));
  rows.add("packer.audio_logits", pout.audio_logits, need("fixture.audio_logits"));
  return result;
}

}  // namespace vdt
