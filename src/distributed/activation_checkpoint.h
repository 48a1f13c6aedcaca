// Per-block activation checkpointing for any denoiser (model/denoiser.h), applied from outside through its block
// runner: forward keeps only the block's inputs, backward recomputes the block with grad enabled and back-propagates
// into its parameters (a reentrant checkpoint; LibTorch has no C++ checkpoint API, pytorch/pytorch#52744).
// Options: the kept residual input in pinned host memory (the causal trainer's --act-offload), and hooks around every
// run of a block, forward and recompute (the causal trainer gathers sharded frozen weights there,
// distributed/block_shards.h). A block whose inputs need no gradient but whose parameters do (a LoRA on a frozen base:
// block 0's inputs come from frozen embeddings) still gets its gradients: its input is then made a leaf that
// requires grad. Selective checkpointing (docs/architecture.md) is the same runner keeping more: the block's GEMM and
// attention outputs, so that only the elementwise chains are recomputed.
#pragma once
#include <functional>
#include <memory>
#include <unordered_set>
#include <string>
#include <vector>

#include "model/denoiser.h"

namespace vdt {

// `--checkpointing` of both trainers and `vdt bench step`: none (every activation kept), block (each block's inputs
// kept, the whole block recomputed in backward), selective (each block's inputs and its GEMM and attention outputs
// kept, only the elementwise work between them recomputed).
enum class Checkpointing { none, block, selective };
// Throws naming `flag` and the choices (`allowed`: the modes that flag takes).
Checkpointing parse_checkpointing(const std::string& value, const std::string& flag,
                                  const std::vector<Checkpointing>& allowed = {
                                      Checkpointing::none, Checkpointing::block, Checkpointing::selective});
// The flag's spelling of a mode: "none", "block" or "selective".
const char* checkpointing_name(Checkpointing m);

// `--selective-blocks N` of both trainers and `vdt bench step` (declared in train/loop/config_sections.h
// MemorySection): the flag its errors name, and its check against the checkpointing mode.
inline constexpr const char* kSelectiveBlocksFlag = "--selective-blocks";
// Throws naming the flag unless n is -1 (all) or a count >= 0 given with selective checkpointing.
void check_selective_blocks(int64_t n, Checkpointing mode);

// `--attn-keep F` of the causal trainer and `vdt bench step` (config_sections.h CausalMemorySection;
// CheckpointOptions::attention_keep): the flag its errors name, and its check.
inline constexpr const char* kAttnKeepFlag = "--attn-keep";
// Throws naming the flag unless share is in [0, 1] and, when above 0, the attention is the prefix kernel and some block
// recomputes whole (not every block selective).
void check_attention_keep(double share, bool prefix_attention, Checkpointing mode, int64_t selective_blocks);

struct CheckpointOptions {
  // keep each block's residual input [B, L, D] and the attention outputs attention_keep keeps on the host (pinned,
  // copied on a side stream)
  bool offload_inputs = false;
  std::function<void(torch::nn::Module&)> before, after;  // around each forward and each recompute of a block
  // Selective: the forward also keeps the outputs of the block's kept_linear / kept_attention calls
  // (model/kept_ops.h); the recompute takes them from there instead of running the GEMMs and attention again, and
  // their backward (dgrad, wgrad where the weight needs one, the attention's own backward) uses them.
  bool selective = false;
  // With selective: only the first N blocks in forward order keep those outputs (-1: all); the others recompute
  // whole, as block. The memory of one block's kept outputs times N is the knob (33B H3: ~2.3 GB per block).
  int64_t selective_blocks = -1;
  // Set by enable_block_checkpointing from selective_blocks: the blocks that keep (null: all).
  std::shared_ptr<const std::unordered_set<const torch::nn::Module*>> selective_set;
  bool keeps(const torch::nn::Module& block) const { return !selective_set || selective_set->count(&block) > 0; }
  // A block that recomputes whole (block, or selective beyond selective_blocks) keeps this share of its ranged
  // attention calls' query rows' results from forward to recompute (model/ranged_attention.h RangedAttentionKeep):
  // the recompute skips those blocks' attention forward. 0: none.
  double attention_keep = 0;
};

// Installs the checkpointing runner on every block of `model` (replaces any runner set before).
void enable_block_checkpointing(Denoiser& model, CheckpointOptions opts = {});

}  // namespace vdt
