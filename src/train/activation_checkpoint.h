// Per-block activation checkpointing for the Wan DiT, applied from outside the model through its block runner:
// forward keeps only the block's inputs, backward recomputes the block with grad enabled and back-propagates
// into its parameters (a reentrant checkpoint; LibTorch has no C++ checkpoint API, pytorch/pytorch#52744).
// Not here: CPU offload of the kept inputs (the causal trainer's --act-offload adds it).
#pragma once
#include "model/wan_dit.h"

namespace vdt {

// Installs the checkpointing runner on every block of `model` (replaces any runner set before).
void enable_block_checkpointing(WanDiTImpl& model);

}  // namespace vdt
