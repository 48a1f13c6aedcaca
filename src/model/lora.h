// LoRA weights: for a target Linear `<module>` with weight W [out, in], A [r, in] and B [out, r] add
// (alpha / r) * B A to W. Files: `<module>.lora_A.weight`, `<module>.lora_B.weight`, kohya's `<module>.alpha`, with
// `rank`, `alpha` and `base` in the metadata; PEFT's names (`base_model.model.<module>.lora_A.default.weight`, or
// without the prefix) load too.
// Here: attaching LoRA factors to the target Linears of a built model from outside (they become the Linear's children
// `lora_A`, `lora_B`, so their parameter names are the file's key names), the forward that uses them, reading either
// naming, folding a LoRA into base weights (`vdt ckpt merge-lora`) and the unmerged forward it must equal. Several
// named sets on the same Linears (the distillation's student and critic on one frozen base that is also the teacher),
// one of them, or none, active per call.
// Not here: training (the causal trainer freezes the base and optimises what attach_lora returns).
#pragma once
#include <torch/types.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/kept_ops.h"

namespace vdt {

struct LoraConfig {
  int64_t rank = 16;
  double alpha = 16;
  std::vector<std::string> targets = {"q", "k", "v", "o", "ffn.0", "ffn.2"};  // last module-name components
  double scale() const { return alpha / static_cast<double>(rank); }
};

// True when `module` (e.g. "blocks.3.self_attn.q", "blocks.0.ffn.2") ends in one of `targets` as whole components.
bool is_lora_target(const std::string& module, const std::vector<std::string>& targets);

struct LoraPair {
  torch::Tensor a, b;  // A [r, in], B [out, r]
};

struct LoraWeights {
  std::map<std::string, LoraPair> modules;  // by module name, in our naming
  int64_t rank = 0;
  double alpha = 0;
  std::string base;
};

// Reads a LoRA file (ours or PEFT's naming). Rank comes from the tensors; alpha from kohya's per-module
// `<module>.alpha` tensors (vdt writes them; one value for every module) or the metadata (`alpha` or `lora_alpha`; both
// given, they must agree), else `default_alpha` (PEFT files often carry none; 0 means: alpha = rank). A module with
// only A or only B, or with shapes that do not chain, is an error naming the file and the key.
LoraWeights read_lora(const std::string& path, double default_alpha = 0);

// Rank and alpha of a LoRA file from its header alone (no tensor is read), as read_lora finds them: the rank of its
// lora_A factors, alpha from the metadata (`alpha` or `lora_alpha`), else alpha = rank.
struct LoraShape {
  int64_t rank = 0;
  double alpha = 0;
};
LoraShape read_lora_shape(const std::string& path);

// The module name of a LoRA key in either naming ("" when the key is not a LoRA tensor); `which` gets 'A' or 'B'.
std::string lora_module_of(const std::string& key, char* which);

// Base weights with every LoRA module folded in: W + scale * B A, in float32, cast back to W's dtype. A LoRA module
// whose `<module>.weight` is not in the base, or whose shapes do not match it, is an error naming both.
std::vector<std::pair<std::string, torch::Tensor>> merge_lora(const SafetensorsSet& base, const LoraWeights& lora,
                                                              double scale);

// The Linear's output, plus scale * B(A(x)) when a LoRA is attached to it (the model's attention and FFN call this).
// act: the Linear's input is act(x) (model/kept_ops.h), handed to the GEMM as x and act when no LoRA is attached (an
// FP8 base applies it on the way), computed first when one is (A reads it too).
torch::Tensor lora_or_linear(torch::nn::Linear& linear, const torch::Tensor& x, InputAct act = InputAct::none);
// Whether lora_or_linear adds factors to this Linear (a set is active and targets it).
bool lora_active(const torch::nn::Linear& linear);
// lora_or_linear of several Linears on one input x (self-attention's q, k, v), in order. When `fuse_lora_a` and every
// one carries a LoRA, their A factors run as one GEMM of x against [A_1; A_2; ...] whose [..., sum r] result is split
// (one launch and one read of x instead of three); otherwise, and as the reference, one lora_or_linear each.
std::vector<torch::Tensor> lora_or_linear_shared_input(const std::vector<torch::nn::Linear*>& linears,
                                                       const torch::Tensor& x, bool fuse_lora_a = true);

// Attaches LoRA factors to every Linear of `model` whose name is a target: A [r, in] with PyTorch's default Linear
// init drawn from `seed`, B [out, r] zero (so the model's output is unchanged), in the base weight's dtype and
// device. Freezes every other parameter. Returns the LoRA parameters by name (`<module>.lora_A.weight`, ...).
// `set`: the set's name; "" (the default set) makes the children `lora_A` / `lora_B`, another name `lora_A_<set>` /
// `lora_B_<set>` beside them (returned under the default set's names, `<module>.lora_A.weight`, so a named set saves
// and loads as a LoRA file of its own). The first set attached becomes the active one.
std::vector<std::pair<std::string, torch::Tensor>> attach_lora(torch::nn::Module& model, const LoraConfig& cfg,
                                                               uint64_t seed, const std::string& set = "");
// Copies a LoRA file's factors into the attached ones of `set`: every attached module must be in the file with
// matching shapes, and the file may hold no other module (errors name the module); the set's scale becomes alpha /
// rank.
void load_lora(torch::nn::Module& model, const LoraWeights& w, const std::string& where, const std::string& set = "");
// The attached factors of `set` by name (`<module>.lora_A.weight`, ...), for saving.
std::vector<std::pair<std::string, torch::Tensor>> lora_state(torch::nn::Module& model, const std::string& set = "");

// The set a forward adds (lora_or_linear): one per model, shared by all its LoRA Linears, so switching costs nothing
// and holds on every thread (a checkpointed block's recompute in backward adds the set active then: a trainer
// switches back to the set whose graph it differentiates before backward). kNoLora: the base alone (a teacher).
inline const std::string kNoLora = "<none>";
void set_active_lora(torch::nn::Module& model, const std::string& set);  // an unattached set is an error naming it
std::string active_lora(torch::nn::Module& model);
// The sets attached to the model, in the order they were attached.
std::vector<std::string> lora_sets(torch::nn::Module& model);
// Switches to `set` for its lifetime and back to the set active before.
class ActiveLora {
 public:
  ActiveLora(torch::nn::Module& model, const std::string& set) : model_(model), before_(active_lora(model)) {
    set_active_lora(model, set);
  }
  ~ActiveLora() { set_active_lora(model_, before_); }
  ActiveLora(const ActiveLora&) = delete;
  ActiveLora& operator=(const ActiveLora&) = delete;

 private:
  torch::nn::Module& model_;
  std::string before_;
};

// Folds every attached LoRA into its Linear for sampling: W <- W + scale * B A (the product and the sum in float32,
// rounded to W's dtype once, as merge_lora), then removes the factors, so lora_or_linear runs the base GEMM alone
// (and an FP8 base quantizes the merged weight). Not undone: a model that trains its LoRA must not be merged, nor one
// with several sets (an error: the base is shared by all of them). Returns how many Linears were merged. The unmerged
// forward (lora_or_linear with the factors) is the reference.
int64_t merge_attached_lora(torch::nn::Module& model);

// The unmerged LoRA forward: x W^T + b + scale * (x A^T) B^T (the reference a merge must equal).
torch::Tensor lora_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                          const LoraPair& lora, double scale);

}  // namespace vdt
