// The memory planner's cost model (docs/planner.md): per block of one preset on one card, what a block keeps on the
// device from its forward to its backward, what it keeps on the host instead (--act-offload on), the working set of
// its backward above that (its recompute included) and its forward + backward time, for each checkpointing mode at a
// few row counts. Read from a measured table (plans/<card>/<preset>.json, written by `bench plan`, tools/plan_bench.h)
// and interpolated in rows; or, for a card without a table, made by a conservative analytic estimate from the model's
// dimensions. Not here: choosing a plan (train/plan/memory_plan.h), measuring (tools/plan_bench.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/denoiser.h"

namespace vdt {

// Which costs a row holds: the training kind and what the block does with its activations.
struct CostKey {
  std::string training = "full";               // full (every weight trains) | lora (a frozen base)
  std::string checkpointing = "block";         // none | block | selective
  std::string attn = "full";                   // full (bidirectional) | prefix | mask (the block-causal kernels)
  bool offload = false;                        // --act-offload on
  double attn_keep = 0;                        // --attn-keep (blocks that recompute whole, prefix kernel)
  bool same_but_keep(const CostKey& o) const;  // equal but for attn_keep
  std::string describe() const;                // "lora block prefix keep 0.5 offload", for messages
};

// One measured (or estimated) point: per block at `rows` rows of its residual stream [B, L, D].
struct CostRow {
  CostKey key;
  int64_t rows = 0;
  double kept_bytes = 0;       // device bytes one block keeps from its forward to its backward
  double host_bytes = 0;       // pinned host bytes it keeps instead (--act-offload on)
  double transient_bytes = 0;  // device bytes its backward needs above what is kept (the recompute's graph, gradients)
  double seconds = 0;          // forward + backward of one block (recompute included)
  double outside_seconds = 0;  // the rest of a step at these rows (embeddings, head, loss), once per step
  int64_t text_len = 0, chunks = 0;  // the geometry besides the rows it was measured at (chunks 0: bidirectional)
  // Cross-attention (Wan): the distinct captions the window was measured with (0: no cross-attention, text in the
  // rows), and the device bytes one block keeps for each distinct caption more (its text keys and values)
  int64_t text_rows = 0;
  double text_row_bytes = 0;
};

// A row's values at some row count, from CostTable::at.
struct BlockCost {
  double kept_bytes = 0, host_bytes = 0, transient_bytes = 0, seconds = 0, outside_seconds = 0;
  bool extrapolated = false;  // outside the table's measured rows (docs/planner.md: how)
  int64_t text_rows = 0;      // as CostRow
  double text_row_bytes = 0;
  // kept_bytes for a window of `text_rows` distinct captions (more than measured: their keys and values added)
  double kept_for_text(int64_t rows) const;
};

// Weight streaming and the FP8 base (docs/planner.md, "Streaming and the FP8 base"): the rate of a copy from pinned
// host memory to the device, the share of it that runs beside compute without slowing it, and the rate at which an FP8
// weight is dequantized (bytes of the compute-dtype result). Measured by `bench plan` on a GPU; a table without them
// (or the CPU) takes the defaults, below what current cards measure.
struct CopyCosts {
  static constexpr double kDefaultH2d = 10e9, kDefaultOverlap = 0.5, kDefaultDequant = 200e9;
  double h2d_bytes_per_second = kDefaultH2d;
  double overlap = kDefaultOverlap;  // 0: a copy adds its whole time to the step; 1: it hides entirely under compute
  double dequant_bytes_per_second = kDefaultDequant;
  bool measured = false;
};

struct CostTable {
  static constexpr const char* kFormat = "vdt-plan-costs/1";
  std::string preset, card;  // card: card_slug() of the device name ("nvidia-h200", "cpu")
  std::string device_name;   // as the device reports it
  std::string dtype = "bf16";
  bool memory_measured = true;  // false on the CPU: the bytes are 0 and the planner estimates them (times measured)
  std::string measured;         // commit and date of the measurement
  std::string source;           // the file read, or "analytic estimate ..." (not written)
  std::vector<CostRow> rows;
  CopyCosts copy;  // key "copy" (optional)

  bool has(const CostKey& key) const;  // rows for key (attn_keep between two measured keeps counts)
  // Rows of a run's kind: `training` with block-causal kernels (causal) or full attention; else a trainer plans from
  // analytic_cost_table.
  bool has_kind(const std::string& training, bool causal) const;
  // The distinct attn_keep values of the rows that match key but for its attn_keep, ascending.
  std::vector<double> keeps(const CostKey& key) const;
  // key's costs at `rows`: linear between the two measured row counts around it; below the smallest, the kept and
  // host bytes in proportion to the rows (per-row tensors) and the rest that row's values; above the largest, the
  // larger of the last segment's linear extension and the last row scaled in proportion to rows (activations grow at
  // least linearly). An attn_keep between measured keeps is linear between them. Throws naming the table's source and
  // the key when it has no rows for key.
  BlockCost at(const CostKey& key, int64_t rows) const;
};

// Reads a table; errors name the file and the key at fault ("rows[3].kept_bytes: expected a number").
CostTable load_cost_table(const std::string& path);
// Writes a table as JSON (crash-safe), rows sorted by key and rows.
void save_cost_table(const CostTable& table, const std::string& path);
// Rows of `add` replace the rows of `base` with the same key and row count; the rest are kept.
CostTable merge_cost_tables(const CostTable& base, const CostTable& add);

// A table measured without memory (memory_measured false: the CPU) with its bytes taken from `memory` (the analytic
// estimate) at each row's key and rows; rows of keys `memory` has none of are left out; source names both.
CostTable with_memory_from(const CostTable& times, const CostTable& memory);

// "NVIDIA H200" -> "nvidia-h200": lower case, runs of other characters as one '-'.
std::string card_slug(const std::string& device_name);
// Where a table for `preset` on `card` lives under a plans directory: <dir>/<card>/<preset>.json.
std::string cost_table_path(const std::string& plans_dir, const std::string& card, const std::string& preset);
// The plans directories searched, in order: $VDT_PLANS, then beside the running program <its dir>/../share/vdt/plans
// (an installed prefix) and <its dir>/../plans (build/vdt in a checkout) (docs/planner.md).
std::vector<std::string> plans_dirs();
// The first existing table for preset and card in `dirs`; empty when none.
std::string find_cost_table(const std::vector<std::string>& dirs, const std::string& card, const std::string& preset);

// What the analytic estimate needs of a model, per block.
struct ModelDims {
  int64_t width = 0;       // D
  int64_t ffn_hidden = 0;  // outputs of the first FFN GEMM (Wan ffn.0: F; a SwiGLU fc1: 2F)
  int64_t ffn_inner = 0;   // inputs of the second FFN GEMM (F)
  int64_t block_params = 0;
  int64_t text_len = 0;  // cross-attention keys (0: no cross-attention; text in the sequence is in the rows)
  int64_t dtype_bytes = 2;
};
// From a built model: the width, block 0's parameters and its FFN's weight shapes, the compute dtype; `text_len` as
// the trainer feeds it (used only by a family with cross-attention: Wan).
ModelDims model_dims(Denoiser& model, int64_t text_len);

// A conservative table at `rows` for every key a trainer could pick (training kind; full attention, or the
// block-causal kernels over `chunks` chunks), from the model's dimensions: memory from the tensors each mode keeps
// (docs/planner.md), time from the FLOPs at `tflops` (a sustained rate, not the card's peak).
CostTable analytic_cost_table(const ModelDims& dims, const std::string& training, int64_t chunks,
                              const std::vector<int64_t>& rows, double tflops);

}  // namespace vdt
