// A causal LoRA file's metadata (docs/design.md §5, docs/generate.md): one struct, written by the trainers and read by
// `vdt sample` and the generation layer through the same code, so a key is spelled and parsed in one place. The keys
// are the Python trainer's (base, step, objective, span_chunks, level_shift) plus vdt's (rank, alpha, chunk_frames,
// seed, val_clips, clean_first_frame, picture1, ...), and for a few-step student its steps and their timesteps. Not
// here: the factors' names and shapes (model/lora.h read_lora), the trainers' resume state.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace vdt {

struct LoraFileMeta {
  std::string base;           // the base as its own trainers name it (Denoiser::lora_base_info)
  std::string model;          // the preset vdt builds (wan2.2-ti2v-5b, minimax-h3, tiny, ...)
  std::string text_handling;  // how the base takes its text (Denoiser::lora_base_info)
  std::string weights;        // the base weights the LoRA was trained on (empty: a random base)
  int64_t step = 0;
  std::string objective = "df";  // the trainer's --objective
  int64_t span_chunks = 6;       // chunks of the trained span
  double level_shift = 0;        // the context level's shift in training (the Python trainer's)
  int64_t chunk_frames = 3;      // latent frames per chunk
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> targets;  // last module-name components the factors attach to (empty: the base's default)
  uint64_t seed = 0;                 // the run's seed (its validation windows)
  int64_t val_clips = 12;            // the run's --val-clips
  bool clean_first_frame = false;
  std::string picture1;  // H3: native | 2048 (empty: none)
  // A few-step student (`vdt train distill`): its sampling steps and their timesteps (0..1000, decreasing) and the
  // guidance it was distilled with; steps 0: not a student (sample with --steps / --cfg).
  int64_t student_steps = 0;
  std::vector<double> student_timesteps;
  double student_cfg = 1.0;
  // The student's sampler: "renoise" (Self-Forcing's: each step's clean prediction noised afresh to the next level) or
  // empty (Euler steps).
  std::string student_sampler;
  double ema = 0;  // an EMA of a student's factors (its `_ema` file): the decay; 0: the factors themselves

  // The metadata the file carries (every value a string, as safetensors holds them).
  Metadata to_metadata() const;
  // Parsed from a file's metadata; `file` names it in errors (a key that does not parse, a student's schedule whose
  // length is not its steps). A key the file lacks keeps its default (files of older runs).
  static LoraFileMeta from_metadata(const Metadata& m, const std::string& file);
};

// The LoRA file's metadata read from its header alone.
LoraFileMeta read_lora_meta(const std::string& path);
// `factors` (<module>.lora_A.weight / lora_B.weight, any dtype) written to `path` in bf16 with `meta`, and a float32
// `<module>.alpha` beside each module's factors (kohya's convention: a loader that reads no metadata applies alpha /
// rank as vdt does).
void save_lora_file(const std::string& path, const LoraFileMeta& meta, const NamedTensors& factors);

}  // namespace vdt
