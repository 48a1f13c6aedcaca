// SampleConfig's declarations and checks (the help texts are docs/cli.md's `vdt sample` table).
#include "tools/sample_config.h"

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "generate/lora_file.h"
#include "model/denoiser_registry.h"
#include "train/loop/config_sections.h"

namespace vdt {

const std::vector<ConfigField<SampleConfig>>& SampleConfig::fields() {
  using C = SampleConfig;
  static const std::vector<ConfigField<C>> f = [] {
    std::vector<ConfigField<C>> v = {
        {"--ckpt", "step-N.safetensors from `vdt train sft` (without --causal)", &C::ckpt},
        {"--causal", "sample a causal LoRA's val windows chunk by chunk, the prefix as clean context", &C::causal},
        {"--stream",
         "with --causal: generate with a KV cache (each finished chunk's keys and values kept, not recomputed), each "
         "chunk written as it is done",
         &C::stream},
        {"--chunks", "with --stream: chunks to generate (0: the LoRA's span); past the span needs --window",
         &C::chunks},
        {"--window",
         "with --stream: finished chunks kept in the cache after the sink (-1: all); sink + window + 1 must fit in "
         "the trained span",
         &C::window},
        {"--sink-chunks",
         "with --stream: first chunks kept as the attention sink (-1: the base's default: Wan 1, H3 0, its text and "
         "Picture 1 being the sink)",
         &C::sink_chunks},
    };
    for (auto& s : lift(&C::speed, StreamSpeed::fields())) {
      s.help = "with --stream: " + s.help;
      v.push_back(std::move(s));
    }
    std::vector<ConfigField<C>> rest = {
        {"--lora", "with --causal: lora_stepNNNNN.safetensors from `vdt train causal`", &C::lora},
        {"--weights", "with --causal: the base weights (default: the LoRA's metadata 'weights')", &C::weights},
        {"--data_root", "data root giving ids, text and frame 0", &C::data_root, /*required=*/true},
        {"--out", "output directory", &C::out, /*required=*/true},
        {"--split", "split to sample from", &C::split},
        {"--n", "number of clips (>= 1)", &C::n},
        {"--steps", "Euler steps; 0 = a few-step student's (its LoRA file's step list), else 30", &C::steps},
        {"--cfg", "guidance scale; below 0 = a few-step student's (its LoRA file's), else 5", &C::cfg},
        {"--shift", "sigma shift of the inference grid; 0 = the base's (Wan 5, MiniMax-H3 12, its video schedule)",
         &C::shift},
        device_field(&C::device),
        {"--res", "resolution (default: the checkpoint's)", &C::res},
        seed_field(&C::seed),
        {"--prompt",
         "a new prompt (repeatable; SFT exports and Wan causal LoRAs, with or without --stream): each val clip / "
         "window is sampled with it in every cell; needs --text-encoder",
         &C::prompt},
        {"--prompts", "a file of new prompts, one per line (as --prompt)", &C::prompts},
        {"--text-encoder",
         "umT5 directory that embeds --prompt / --prompts (the encoder the data root was prepared with)",
         &C::text_encoder},
    };
    v.insert(v.end(), rest.begin(), rest.end());
    return v;
  }();
  return f;
}

void SampleConfig::validate() const {
  VDT_CHECK(stream || (chunks == 0 && window == -1 && sink_chunks == -1),
            "--chunks, --window and --sink-chunks belong to --stream (vdt sample --causal --stream ...)");
  VDT_CHECK(!stream || causal, "--stream streams a causal LoRA: give --causal --lora FILE");
  VDT_CHECK(stream || (speed.fp8 == "off" && speed.cuda_graphs == "auto" && speed.stream_blocks == 0),
            "--fp8, --cuda-graphs and --stream-blocks belong to --stream (vdt sample --causal --stream ...)");
  VDT_CHECK(chunks >= 0, "--chunks ", chunks, ": expected 0 (the LoRA's span) or more chunks");
  VDT_CHECK(n >= 1, "--n ", n, ": expected at least one clip");
  VDT_CHECK(steps >= 0, "--steps ", steps, ": expected 0 (a student's, else 30) or more Euler steps");
  VDT_CHECK(!causal || !lora.empty(), "--causal samples a causal LoRA: give --lora lora_stepNNNNN.safetensors");
  VDT_CHECK(causal || !ckpt.empty(), "give --ckpt step-N.safetensors (an SFT export), or --causal --lora FILE");
  for (const auto* file : {&ckpt, &lora, &prompts})
    VDT_CHECK(file->empty() || std::ifstream(*file).good(), *file, ": cannot open (--ckpt, --lora, --prompts name a ",
              "file)");
  if (causal && (!prompt.empty() || !prompts.empty())) {
    const auto family = denoiser_family(read_lora_meta(lora).model);
    VDT_CHECK(family == "wan", "--prompt / --prompts: new prompts are embedded with umT5 for Wan bases; this LoRA's ",
              "base is ", family, " (its text rows are Qwen3-VL states tagged around Picture 1). Sample its val ",
              "windows without --prompt, or prepare a root with the new captions (vdt data prepare --model h3)");
  }
}

std::vector<std::string> SampleConfig::new_prompts() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const auto& p : prompt) add(p);
  if (!prompts.empty()) {
    std::ifstream f(prompts);
    VDT_CHECK(f.good(), "--prompts ", prompts, ": cannot open (expected a text file, one prompt per line)");
    for (std::string line; std::getline(f, line);) {
      const auto a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
      if (a != std::string::npos) add(line.substr(a, b - a + 1));
    }
    VDT_CHECK(!out.empty(), "--prompts ", prompts, ": no prompt in the file (one per line)");
  }
  return out;
}

}  // namespace vdt
