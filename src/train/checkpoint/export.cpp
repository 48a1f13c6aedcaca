// Export and re-open check. The check is the Python trainer's check_gc_ckpt: key count, every tensor BF16, vocab in
// metadata.
#include "train/checkpoint/export.h"

#include <torch/torch.h>

#include "core/error.h"
#include "model/denoiser_registry.h"
#include "model/weights_io.h"

namespace vdt {

void export_checkpoint(const torch::nn::Module& model, const std::string& path, const Metadata& metadata) {
  auto tensors = export_weights(model, torch::kBFloat16);
  save_safetensors(path, tensors, metadata);
  auto f = SafetensorsFile::open(path);
  VDT_CHECK(f->keys().size() == tensors.size(), path, ": re-opened export has ", f->keys().size(), " tensors, wrote ",
            tensors.size());
  for (const auto& k : f->keys())
    VDT_CHECK(f->entry(k).dtype == "BF16", path, ": tensor '", k, "' is ", f->entry(k).dtype, ", expected BF16");
  if (metadata.count("vocab"))
    VDT_CHECK(f->metadata().count("vocab") && f->metadata().at("vocab") == metadata.at("vocab"), path,
              ": metadata vocab does not read back as '", metadata.at("vocab"), "'");
}

SemCondConfig sem_cond_config_of(const SafetensorsSet& files) {
  const std::string where = files.files().front()->path();
  const auto& meta = files.metadata();
  SemCondConfig c;
  VDT_CHECK(meta.count("vocab"), where, ": has gc_sem_cond weights but no 'vocab' metadata");
  c.vocab = meta.at("vocab");
  c.vocab_size = sem_vocab_size(c.vocab);
  VDT_CHECK(meta.count("sem_scale"), where, ": has gc_sem_cond weights but no 'sem_scale' metadata");
  c.scale = metadata_int(meta, "sem_scale", where, 0);
  const auto& w = files.entry("gc_sem_cond.patch.weight").shape;  // [hidden, K, 1, 2s, 2s]
  VDT_CHECK(w.size() == 5 && w[1] == c.vocab_size, where,
            ": gc_sem_cond.patch.weight has shape incompatible with vocab '", c.vocab, "'");
  c.hidden = w[0];
  return c;
}

std::shared_ptr<Denoiser> load_checkpoint_model(const std::vector<std::string>& paths, torch::Device device,
                                                torch::ScalarType dtype) {
  auto files = SafetensorsSet::open(paths);
  auto model = denoiser_for_weights(files, torch::TensorOptions().device(device).dtype(dtype));
  if (files.contains("gc_sem_cond.patch.weight")) model->install_sem_cond(sem_cond_config_of(files));
  load_weights(*model, files);
  return model;
}

}  // namespace vdt
