// FP8 linears on a built model, applied from outside (`--fp8` of both trainers and `vdt bench step`): the base-weight
// GEMMs of the selected blocks (model/kept_ops.h kept_linear: Wan's self- and cross-attention q, k, v, o and FFN,
// H3's qkv, out and MLP) run through the FP8 linear of model/kernels/fp8_linear.h. It wraps the model's block runner:
// each run of a selected block, its forward and a checkpoint's recompute alike, installs the FP8 LinearImpl on its
// thread, so it composes with --checkpointing none, block and selective and with a LoRA (its factors stay in the
// compute dtype; a frozen base weight gets no weight gradient). Not selected, so in the compute dtype: the first and
// the last block, and everything outside the blocks (patch, text and time embeddings, time MLP, modulation, heads, the
// semantic-map adapter). Not here: the FP8 numerics.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/denoiser.h"

namespace vdt {

// off; on: FP8 GEMMs (a CUDA GPU of compute capability 8.9+); fast: on, with fast accumulation in every FP8 GEMM
// (the forward's and dgrad's reduce over a layer's width, the wgrad's over the tokens); emulate: on's numerics in fp32
// ops on any device (the reference: checks, CPU tests; slow).
enum class Fp8Mode { off, on, fast, emulate };
// Throws naming `flag` and the choices.
Fp8Mode parse_fp8(const std::string& value, const std::string& flag);
// Throws naming `flag` when `mode` is on and `device` cannot run FP8 GEMMs, saying what to do instead.
void check_fp8_device(Fp8Mode mode, const torch::Device& device, const std::string& flag);

// The blocks that take FP8 by default, by index in forward order: all but the first and the last. A model of fewer
// than three blocks (the tiny test presets) has no middle: all of its blocks take FP8, so the path is exercised.
std::vector<int64_t> fp8_block_indices(int64_t n_blocks);

// Routes the selected blocks' linears through FP8 (`mode` off: nothing). Wraps the block runner set so far: call it
// after enable_block_checkpointing (which replaces the runner). hold_frozen: the selected blocks' frozen 2-D weights (a
// LoRA's base) are held as their two FP8 quantizations from their first forward on, their own data released
// (Fp8OperandMemo::hold_frozen: the same bytes as quantizing them each time, at the memory of one bf16 copy); not with
// a base sharded over ranks, whose weights come gathered for each call. Returns the description printed at start-up.
std::string enable_fp8_linears(Denoiser& model, Fp8Mode mode, const std::vector<int64_t>& blocks, bool hold_frozen);

}  // namespace vdt
