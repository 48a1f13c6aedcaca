// The causal run's start (causal_resume.h).
#include "train/causal/causal_resume.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/state_slots.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "train/checkpoint/lora_checkpoint.h"

namespace vdt {
namespace {
namespace fs = std::filesystem;

bool is_lora_file(const std::string& s) { return s.size() > 12 && s.substr(s.size() - 12) == ".safetensors"; }

// Exactly from a state: the float32 factors, the AdamW moments and the sample position.
void resume_exactly(const CausalResumeRun& in, const CausalState& st, CausalResume& res) {
  const std::string differs = st.pos.model_config.empty() ? "" : in.model.architecture_difference(st.pos.model_config);
  VDT_CHECK(differs.empty(), st.dir, ": the state's base is not this run's --model ", in.cfg.model, ": ", differs,
            "\n---> HINT: re-run with the --model the LoRA was trained on, or use another --out");
  for (const auto& [name, p] : in.lora) {
    const auto t = st.full("weight", name);  // an error names the slot when the factor is missing
    VDT_CHECK(t.sizes() == p.sizes(), st.dir, ": factor ", name, " is ", t.sizes(), ", this run's is ", p.sizes(),
              " (--lora-rank ", in.cfg.lora_rank, ")");
  }
  in.sync.load([&](const std::string& kind, const std::string& name) { return st.full(kind, name); },
               st.optimizer_steps(), st.dir);
  res.start_step = st.pos.step;
  res.samples_base = st.pos.samples_seen;
  res.how = "exact resume after step " + std::to_string(st.pos.step) + " from " + st.dir +
            " (float32 LoRA, "
            "AdamW moments, sample position " +
            std::to_string(st.pos.samples_seen) + ")";
  if (st.pos.world != in.world)
    res.how += "; world size " + std::to_string(st.pos.world) + " -> " + std::to_string(in.world) +
               ": the same global sample stream continues";
}

}  // namespace

void resolve_lora_shape(CausalConfig& cfg) {
  std::string source;
  LoraShape file;
  const auto newest = newest_lora_step(cfg.out);
  if (newest.first > 0 || is_lora_file(cfg.resume) || (cfg.resume == "auto" && !cfg.init_lora_file().empty())) {
    source = newest.first > 0 ? newest.second : is_lora_file(cfg.resume) ? cfg.resume : cfg.init_lora_file();
    file = lora_shape_for(cfg.model, source);  // e.g. an H3 LoRA in diffusers' split naming: rank 3r
  } else if (cfg.resume != "auto") {           // another run's state: its flags (config.json) beside its factors
    std::vector<std::string> notes;
    if (auto st = find_causal_state(cfg.resume, -1, &notes)) {
      std::ifstream in(fs::path(st->dir) / "config.json");
      const auto j = nlohmann::json::parse(in, nullptr, false);
      auto num = [&](const char* k) {
        return j.is_object() && j.contains(k) && j[k].is_string() ? std::stod(j[k].get<std::string>()) : 0.0;
      };
      file = {static_cast<int64_t>(num("lora_rank")), num("lora_alpha")};
      if (file.rank > 0 && file.alpha > 0) source = st->dir;
    }
  }
  if (source.empty()) {
    if (cfg.lora_rank < 0) cfg.lora_rank = CausalConfig::kDefaultLoraRank;
    if (cfg.lora_alpha < 0) cfg.lora_alpha = static_cast<double>(CausalConfig::kDefaultLoraRank);
    return;
  }
  VDT_CHECK(cfg.lora_rank < 0 || cfg.lora_rank == file.rank, "--lora-rank ", cfg.lora_rank, " disagrees with ", source,
            ", whose LoRA has rank ", file.rank,
            "\n---> HINT: leave --lora-rank out (the LoRA the run starts "
            "from decides), or give its rank");
  VDT_CHECK(cfg.lora_alpha < 0 || cfg.lora_alpha == file.alpha, "--lora-alpha ", py_float(cfg.lora_alpha),
            " disagrees with ", source, ", whose LoRA has alpha ", py_float(file.alpha),
            "\n---> HINT: leave "
            "--lora-alpha out (the LoRA the run starts from decides), or give its alpha");
  cfg.lora_rank = file.rank, cfg.lora_alpha = file.alpha;
}

bool continues_a_run(const CausalConfig& cfg) {
  return cfg.resume != "auto" || newest_lora_step(cfg.out).first > 0 || !sealed_slots(cfg.out).empty();
}

void check_lora_choice(const CausalConfig& cfg, const std::string& family) {
  if (family != "h3" || !cfg.init_lora.empty() || continues_a_run(cfg)) return;
  VDT_FAIL("--init-lora is needed on a MiniMax-H3 base (--model ", cfg.model,
           "): left out, the Python trainer continues the released CWM LoRA, which vdt does not ship, and a new LoRA "
           "would train in its place at the same learning rate"
           "\n---> HINT: --init-lora PATH (e.g. the released CWM LoRA) to train on from that LoRA, or --init-lora "
           "none to start a new LoRA (B = 0) on purpose");
}

CausalResume resume_causal(const CausalResumeRun& in) {
  CausalResume res;
  res.lora_start = "continued: the LoRA of the run being resumed";
  const auto [step, path] = newest_lora_step(in.cfg.out);
  const std::string& resume = in.cfg.resume;
  const bool from_state = resume != "auto" && !is_lora_file(resume);
  VDT_CHECK(step == 0 || !from_state, "--resume ", resume, ": --out ", in.cfg.out, " already holds ", path,
            "\n---> HINT: re-run without --resume to continue that run, or give a fresh --out");
  if (from_state) {
    std::vector<std::string> notes;
    auto st = find_causal_state(resume, -1, &notes);
    VDT_CHECK(st.has_value(), "--resume ", resume, ": no complete causal state slot",
              notes.empty() ? std::string() : " (" + notes.back() + ")");
    VDT_CHECK(st->pos.step <= in.total_steps, "--resume ", resume, ": its step ", st->pos.step, " is past this run's ",
              in.total_steps, " steps");
    resume_exactly(in, *st, res);
    return res;
  }
  VDT_CHECK(step <= in.total_steps, in.cfg.out, " already holds ", path, " (step ", step, ") past this run's ",
            in.total_steps, " steps; use another --out or more --steps/--epochs");
  std::vector<std::string> notes;
  if (auto st = find_causal_state(in.cfg.out, -1, &notes, in.cfg.ignore_corrupt_state)) {
    VDT_CHECK(st->pos.step <= in.total_steps, in.cfg.out, ": its state ", st->dir, " is at step ", st->pos.step,
              ", past this run's ", in.total_steps, " steps; use another --out or more --steps/--epochs");
    resume_exactly(in, *st, res);
    res.state_slot = st->dir;
    if (step > st->pos.step)
      res.how += "; " + path + " and any LoRA file after step " + std::to_string(st->pos.step) +
                 " have no state: those steps are trained again and their files rewritten";
    const std::string own = lora_step_path(in.cfg.out, st->pos.step);
    if (!fs::exists(own)) {  // killed between sealing the slot and writing its LoRA file: the unit is the slot
      if (in.rank == 0) save_lora_file(own, in.cfg.lora_file_meta(in.model, st->pos.step), in.lora);
      res.how += "; " + own + " was missing (the save was cut after the state) and is written from the state";
    }
    if (in.rank == 0)
      if (const auto old = repair_state_link(in.cfg.out, st->dir))
        res.how += "; the state link pointed at " + (old->empty() ? std::string("nothing") : *old) +
                   " and now points at the newest sealed slot " + fs::path(st->dir).filename().string();
    return res;
  }
  if (step == 0) {
    const std::string init = is_lora_file(resume) ? resume : in.cfg.init_lora_file();
    if (!init.empty()) {
      load_lora(in.model, lora_for_model(in.model, read_lora(init), init), init);
      res.how = "fresh run from the LoRA " + init;
      res.lora_start = init;
    } else {
      res.how = "fresh run, new LoRA (B = 0)";
      res.lora_start = in.cfg.init_lora == CausalConfig::kNoInitLora ? kFreshLoraChosen : kFreshLora;
    }
    return res;
  }
  res.start_step = step;
  load_lora(in.model, read_lora(path), path);
  res.samples_base = step * in.world;
  res.how = "resume after step " + std::to_string(step) + " from " + path +
            " (no state slot for it: " + (notes.empty() ? std::string("none written") : notes.back()) +
            "; optimizer moments start afresh, as the Python trainer)";
  return res;
}

}  // namespace vdt
