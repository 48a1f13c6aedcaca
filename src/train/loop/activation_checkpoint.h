// Per-block activation checkpointing for any denoiser (model/denoiser.h), applied from outside through its block
// runner: forward keeps only the block's inputs, backward recomputes the block with grad enabled and back-propagates
// into its parameters (a reentrant checkpoint; LibTorch has no C++ checkpoint API, pytorch/pytorch#52744).
// Options: the kept residual input in pinned host memory (the causal trainer's --act-offload), and hooks around every
// run of a block, forward and recompute (the causal trainer gathers sharded frozen weights there,
// distributed/block_shards.h). A block whose inputs need no gradient but whose parameters do (a LoRA on a frozen base:
// block 0's inputs come from frozen embeddings) still gets its gradients: its input is then made a leaf that
// requires grad.
#pragma once
#include <functional>

#include "model/denoiser.h"

namespace vdt {

struct CheckpointOptions {
  bool offload_inputs = false;  // keep each block's residual input [B, L, D] on the host (pinned when CUDA is present)
  std::function<void(torch::nn::Module&)> before, after;  // around each forward and each recompute of a block
};

// Installs the checkpointing runner on every block of `model` (replaces any runner set before).
void enable_block_checkpointing(Denoiser& model, CheckpointOptions opts = {});

}  // namespace vdt
