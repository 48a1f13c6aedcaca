// One distillation step (docs/distill.md), Self-Forcing's DMD on one base: the student's rollout with the KV cache
// (per chunk: the student steps before the exit index without gradients, the exit step with them, its clean
// prediction the chunk's output, then the chunk committed to the cache at the context level without gradients); the
// student update (the rollout noised to the DMD timestep, the teacher's and the critic's clean predictions, the DMD
// loss; every --critic-ratio steps) and the critic update (a rollout without gradients, the critic's flow-matching
// loss; every step). Not here: set-up, files, logs (distill_trainer.cpp, distill_state.h).
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "diffusion/euler.h"
#include "train/distill/distill_draws.h"
#include "train/distill/distill_run.h"

namespace vdt {

// One prompt window's conditioning: its text (every frame's row), the null prompt's (the teacher's unconditional
// branch), the family's conditioning (H3: Picture 1 with its noise, the token tags) and the side streams' shapes.
struct DistillWindow {
  std::string id;                                          // clip@start
  torch::Tensor context, context_ids, tags;                // [R, Lt, text_dim], [1, F], [R, Lt] (or undefined)
  torch::Tensor null_context, null_ids, null_tags;         // the null prompt in every frame
  std::map<std::string, torch::Tensor> cond, cond_noise;   // H3: "picture1" [C, 1, Hp, Wp] and its noise
  std::map<std::string, std::vector<int64_t>> side_shape;  // each side stream's [.., A] shape over the frames
};
// The window of global sample `g` (train windows, epoch permutations as the causal trainer), or val window `val`
// when val >= 0; its frames are the rollout's (`frames`).
DistillWindow distill_window(DistillRun& r, int64_t g, int64_t frames, int64_t val = -1);

// What a test reads of a rollout: each chunk's output (in the graph when with_grad) and, after the rollout, every
// committed chunk's keys in every block as the cache holds them.
struct RolloutTrace {
  std::vector<SampleState> chunks;
  std::vector<std::vector<torch::Tensor>> committed_keys;  // [chunk][block] [B, rows, N, Dh]
};
// The student's rollout of d.chunks chunks exiting at d.exit_index. with_grad: the exit steps' forwards keep their
// graph (the output is differentiable in the student's factors); else everything runs without autograd. `role`
// keys its noise (0 student update, 1 critic update, 2 previews). The student's set must be active.
SampleState student_rollout(DistillRun& r, const DistillWindow& w, const DistillDraws& d, bool with_grad, int64_t step,
                            int role, RolloutTrace* trace = nullptr);

// A role's clean prediction of the whole clip x_t at timestep t (the base's bidirectional attention, block-causal
// under --all-causal), from the set `set`, conditioned on the window's text (uncond: the null prompt).
SampleState clean_prediction(DistillRun& r, const std::string& set, const DistillWindow& w, const SampleState& x_t,
                             double t, bool uncond);

struct UpdateStats {
  torch::Tensor loss, grad_norm;  // 0-dim on the device
  torch::Tensor dmd_grad_norm;    // the student update's DMD gradient norm (undefined for the critic)
};
// The student update's loss and backward (the caller reduces, clips and steps): the rollout with gradients, the DMD
// loss on it and on each side stream, summed.
UpdateStats student_loss_backward(DistillRun& r, int64_t step, const DistillDraws& d);
// The critic update's loss and backward.
UpdateStats critic_loss_backward(DistillRun& r, int64_t step, const DistillDraws& d);

}  // namespace vdt
