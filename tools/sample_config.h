// `vdt sample`'s flags, declared once (train/loop/config_fields.h): an SFT export's val clips, a causal LoRA's val
// windows chunk by chunk (recompute), or streamed with a KV cache (--stream). Defaults a LoRA file knows (chunk frames,
// span, its run's seed and val clips, a few-step student's steps and guidance) come from its metadata
// (generate/lora_file.h), not from here. Not here: running it (tools/sample_run.h).
#pragma once
#include <string>
#include <vector>

#include "tools/stream_speed.h"
#include "train/loop/config_fields.h"

namespace vdt {

struct SampleConfig {
  std::string ckpt;            // an SFT export (without --causal)
  bool causal = false;         // a causal LoRA's val windows
  bool stream = false;         // with --causal: a KV cache
  int64_t chunks = 0;          // with --stream: 0 = the LoRA's span
  int64_t window = -1;         // with --stream: chunks kept after the sink
  int64_t sink_chunks = -1;    // with --stream: -1 = the base's
  StreamSpeed speed;           // with --stream: --fp8, --cuda-graphs, --merge-lora, --stream-blocks
  std::string lora, weights;   // with --causal
  std::string data_root, out;  // required
  std::string split = "val";
  int64_t n = 2;
  int64_t steps = 0;  // 0: a few-step student's steps (its LoRA file), else 30
  double cfg = -1;    // < 0: a few-step student's guidance (its LoRA file), else 5
  double shift = 0;   // 0: the base's
  std::string device = "cpu";
  std::string res;
  uint64_t seed = 0;
  std::vector<std::string> prompt;  // repeatable
  std::string prompts, text_encoder;

  static const std::vector<ConfigField<SampleConfig>>& fields();
  // Throws naming the flag: stream flags without --stream, --stream without --causal, a bad count.
  void validate() const;
  // --prompt values then the lines of --prompts (blank lines skipped), each once, in order.
  std::vector<std::string> new_prompts() const;
};

}  // namespace vdt
