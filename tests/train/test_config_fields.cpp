// Config declared once (train/loop/config_fields.h): every field of both trainer configs is listed once, the JSON has
// exactly the listed keys in their order, the start-up line names what differs from the defaults, and the knobs the
// trainers and `vdt bench step` share come from one section each (train/loop/config_sections.h).
#include <nlohmann/json.hpp>

#include <set>

#include "test_util.h"
#include "tools/step_bench.h"
#include "train/causal/causal_config.h"
#include "train/sft/sft_config.h"

namespace vdt {
namespace {

template <class C>
void expect_declared_once(const std::vector<ConfigField<C>>& fields, const std::string& json) {
  std::set<std::string> keys;
  for (const auto& f : fields) EXPECT_TRUE(keys.insert(f.key()).second) << f.flag << " declared twice";
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j.size(), fields.size());
  for (const auto& k : keys) EXPECT_TRUE(j.contains(k)) << k;
}

TEST(ConfigFields, EachFieldOnceInFlagsAndJson) {
  expect_declared_once(SftConfig::fields(), SftConfig{}.to_json());
  expect_declared_once(CausalConfig::fields(), CausalConfig{}.to_json());
  // The Python trainer rtcwm's args.json: every value a string, as Python's str() writes it.
  const auto causal = nlohmann::json::parse(CausalConfig{}.to_json());
  EXPECT_EQ(causal["level_shift"], "3.0");
  EXPECT_EQ(causal["clean_first_frame"], "False");
  EXPECT_EQ(causal["lr"], "2e-05");
  // The SFT config.json: typed values.
  const auto sft = nlohmann::json::parse(SftConfig{}.to_json());
  EXPECT_TRUE(sft["first_frame_cond"].is_boolean());
  EXPECT_DOUBLE_EQ(sft["lr"].get<double>(), 1e-5);
}

// Numbers in args.json and file metadata as Python's str() writes them: "10.0", not "1e+01".
TEST(ConfigFields, FloatsAreWrittenAsPythonsStr) {
  const std::vector<std::pair<double, std::string>> cases = {{10.0, "10.0"},
                                                             {100.0, "100.0"},
                                                             {3.0, "3.0"},
                                                             {-3.0, "-3.0"},
                                                             {0.0, "0.0"},
                                                             {2.22, "2.22"},
                                                             {2e-5, "2e-05"},
                                                             {1e-4, "0.0001"},
                                                             {1.5e-7, "1.5e-07"},
                                                             {123.456, "123.456"},
                                                             {0.1, "0.1"},
                                                             {1e15, "1000000000000000.0"},
                                                             {1e16, "1e+16"},
                                                             {1.2345678901234568e+17, "1.2345678901234568e+17"},
                                                             {1e22, "1e+22"},
                                                             {1e-300, "1e-300"},
                                                             {0.30000000000000004, "0.30000000000000004"},
                                                             {2048.0, "2048.0"}};
  for (const auto& [v, want] : cases) EXPECT_EQ(py_float(v), want) << v;
  CausalConfig c;
  c.epochs = 10, c.lora_alpha = 100;
  const auto j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["epochs"], "10.0");
  EXPECT_EQ(j["lora_alpha"], "100.0");
}

TEST(ConfigFields, StartupLineNamesWhatDiffersFromTheDefaults) {
  SftConfig c;
  EXPECT_EQ(changed_fields(c, SftConfig::fields()), "(all defaults)");
  c.lr = 5e-4, c.gradient_checkpointing = false, c.model = "tiny";
  EXPECT_EQ(changed_fields(c, SftConfig::fields()), "--model tiny --gradient_checkpointing False --lr 0.0005");
}

// args.json and config.json keep their key order, whichever section a field comes from.
TEST(ConfigFields, JsonKeysKeepTheirOrder) {
  auto keys = [](const std::string& json) {
    std::vector<std::string> out;
    const auto j = nlohmann::ordered_json::parse(json);
    for (const auto& [k, v] : j.items()) out.push_back(k);
    return out;
  };
  EXPECT_EQ(keys(SftConfig{}.to_json()), (std::vector<std::string>{"data_root",
                                                                   "text_table",
                                                                   "vocab",
                                                                   "cond_type",
                                                                   "cond_key",
                                                                   "res",
                                                                   "text_dropout",
                                                                   "cond_dropout",
                                                                   "mask_p",
                                                                   "include_dropped",
                                                                   "first_frame_cond",
                                                                   "limit",
                                                                   "num_workers",
                                                                   "model",
                                                                   "model_dir",
                                                                   "random_init",
                                                                   "precision",
                                                                   "device",
                                                                   "gradient_checkpointing",
                                                                   "fused_kernels",
                                                                   "fp8",
                                                                   "checkpointing",
                                                                   "selective_blocks",
                                                                   "memory",
                                                                   "sem_hidden",
                                                                   "lr",
                                                                   "cond_lr",
                                                                   "weight_decay",
                                                                   "grad_clip",
                                                                   "warmup_steps",
                                                                   "max_steps",
                                                                   "batch_size",
                                                                   "grad_accum",
                                                                   "save_every",
                                                                   "save_state",
                                                                   "val_every",
                                                                   "val_n",
                                                                   "val_timesteps",
                                                                   "val_uncond",
                                                                   "log_every",
                                                                   "preview_steps",
                                                                   "output",
                                                                   "resume",
                                                                   "ignore_corrupt_state",
                                                                   "seed"}));
  EXPECT_EQ(keys(CausalConfig{}.to_json()), (std::vector<std::string>{"out",
                                                                      "objective",
                                                                      "init_lora",
                                                                      "resume",
                                                                      "ignore_corrupt_state",
                                                                      "steps",
                                                                      "epochs",
                                                                      "lr",
                                                                      "lr_min",
                                                                      "warmup",
                                                                      "save_every",
                                                                      "val_clips",
                                                                      "max_samples",
                                                                      "seed",
                                                                      "picture1",
                                                                      "attn",
                                                                      "level_shift",
                                                                      "act_offload",
                                                                      "checkpointing",
                                                                      "selective_blocks",
                                                                      "attn_keep",
                                                                      "memory",
                                                                      "stream_blocks",
                                                                      "stream_prefetch",
                                                                      "base_dtype",
                                                                      "data_root",
                                                                      "text_table",
                                                                      "model",
                                                                      "weights",
                                                                      "random_init",
                                                                      "device",
                                                                      "precision",
                                                                      "chunk_frames",
                                                                      "lora_rank",
                                                                      "lora_alpha",
                                                                      "clean_first_frame",
                                                                      "shard_base",
                                                                      "fused_kernels",
                                                                      "fp8",
                                                                      "val_every",
                                                                      "preview_steps",
                                                                      "val_sample_every"}));
}

template <class C>
std::set<std::string> flags_of(const std::vector<ConfigField<C>>& fields) {
  std::set<std::string> out;
  for (const auto& f : fields) out.insert(f.flag);
  return out;
}

// Each section a command holds comes into its flags whole (a field left out would be a knob nobody can set), with one
// help text wherever it appears, and what a lifted field writes is the section member's value.
TEST(ConfigFields, SectionsAreLiftedWhole) {
  const auto compute = flags_of(ComputeSection::fields({}));
  const auto memory = flags_of(MemorySection::fields({}));
  const auto causal_memory = flags_of(CausalMemorySection::fields());
  const auto attention = flags_of(AttentionSection::fields());
  const auto random = flags_of(RandomSection::fields());
  auto expect_holds = [](const std::set<std::string>& have, const std::set<std::string>& section, const char* what) {
    for (const auto& flag : section) EXPECT_TRUE(have.count(flag)) << what << " lacks " << flag;
  };
  const auto sft = flags_of(SftConfig::fields()), causal = flags_of(CausalConfig::fields());
  const auto bench = flags_of(StepBenchConfig::fields());
  for (const auto* section : {&compute, &memory, &random}) expect_holds(sft, *section, "vdt train sft");
  for (const auto* section : {&compute, &memory, &causal_memory, &attention, &random})
    expect_holds(causal, *section, "vdt train causal");
  for (const auto* section : {&compute, &memory, &causal_memory, &attention})
    expect_holds(bench, *section, "vdt bench step");
  EXPECT_EQ(bench.count("--seed"), 0u);  // the benchmark's runs take the default seed
  auto help_of = [](const auto& fields, const std::string& flag) {
    for (const auto& f : fields)
      if (f.flag == flag) return f.help;
    return std::string("(none)");
  };
  for (const char* flag : {"--fp8", "--fused-kernels", "--device", "--selective-blocks"}) {
    EXPECT_EQ(help_of(SftConfig::fields(), flag), help_of(CausalConfig::fields(), flag)) << flag;
    EXPECT_EQ(help_of(SftConfig::fields(), flag), help_of(StepBenchConfig::fields(), flag)) << flag;
  }
  EXPECT_EQ(help_of(CausalConfig::fields(), "--attn-keep"), help_of(StepBenchConfig::fields(), "--attn-keep"));
  SftConfig s;
  s.compute.fp8 = "fast", s.memory.selective_blocks = 3, s.random.seed = 9;
  const auto j = nlohmann::json::parse(s.to_json());
  EXPECT_EQ(j["fp8"], "fast");
  EXPECT_EQ(j["selective_blocks"], 3);
  EXPECT_EQ(j["seed"], 9);
  EXPECT_EQ(changed_fields(s, SftConfig::fields()), "--fp8 fast --selective-blocks 3 --seed 9");
  CausalConfig c;
  c.attention.attn = "mask", c.causal_memory.attn_keep = 0.25, c.compute.precision = "fp32";
  const auto k = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(k["attn"], "mask");
  EXPECT_EQ(k["attn_keep"], "0.25");
  EXPECT_EQ(k["precision"], "fp32");
}

// Where the trainers differ the section takes the difference as a parameter, and each trainer checks its own: SFT's
// mixed precision and --checkpointing none are refused by the causal trainer, and each trainer's --help lists its own.
TEST(ConfigFields, TrainerDifferencesStayExplicit) {
  SftConfig s;
  CausalConfig c;
  EXPECT_EQ(s.compute.precision, "mixed");
  EXPECT_EQ(c.compute.precision, "bf16");
  s.memory.checkpointing = "none";
  EXPECT_EQ(s.checkpointing_mode(), Checkpointing::none);
  c.memory.checkpointing = "none";
  test::expect_error([&] { c.checkpointing_mode(); }, {"--checkpointing", "'none'"});
  auto help_of = [](const auto& fields, const std::string& flag) {
    for (const auto& f : fields)
      if (f.flag == flag) return f.help;
    return std::string();
  };
  EXPECT_NE(help_of(SftConfig::fields(), "--precision").find("mixed"), std::string::npos);
  EXPECT_EQ(help_of(CausalConfig::fields(), "--precision").find("mixed"), std::string::npos);
  EXPECT_NE(help_of(SftConfig::fields(), "--checkpointing").find("none"), std::string::npos);
  EXPECT_EQ(help_of(CausalConfig::fields(), "--checkpointing").find("none"), std::string::npos);
}

// Enum-like flags become enums once validated; an unknown value names the flag.
TEST(ConfigFields, EnumLikeFlagsAreEnums) {
  SftConfig s;
  EXPECT_EQ(s.precision_mode(), Precision::mixed);
  s.compute.precision = "half";
  test::expect_error([&] { s.precision_mode(); }, {"--precision", "half"});
  CausalConfig c;
  c.attention.attn = "fa3", c.objective = "tf", c.shard_base = "off", c.causal_memory.act_offload = "on";
  EXPECT_EQ(c.attention.kernel(), CausalKernel::prefix);  // the Python trainer's names
  c.attention.attn = "flex";
  EXPECT_EQ(c.attention.kernel(), CausalKernel::mask);
  EXPECT_EQ(c.objective_mode(), CausalConfig::Objective::tf);
  EXPECT_EQ(c.shard_mode(), CausalConfig::ShardBase::off);
  EXPECT_TRUE(c.causal_memory.act_offload_on());
  EXPECT_EQ(c.precision_mode(), Precision::bf16);
  c.compute.precision = "mixed";  // SFT only
  test::expect_error([&] { c.precision_mode(); }, {"--precision", "mixed"});
}

// The memory knobs are parsed once into typed values (train/plan/memory_knobs.h) with the ones the command line fixed:
// what the memory plan starts from and the trainers apply. A config built in code fixes what differs from a default.
TEST(ConfigFields, MemoryKnobsAreTypedOnce) {
  CausalConfig c;
  auto f = c.memory_flags();
  EXPECT_EQ(f.knobs.precision, Precision::bf16);
  EXPECT_EQ(f.knobs.checkpointing, Checkpointing::block);
  EXPECT_EQ(f.knobs.attn, CausalKernel::prefix);
  EXPECT_FALSE(f.knobs.act_offload);
  EXPECT_FALSE(f.given.checkpointing || f.given.selective_blocks || f.given.act_offload || f.given.attn_keep ||
               f.given.attn);
  EXPECT_FALSE(f.allow_none);
  EXPECT_TRUE(f.allow_offload);
  EXPECT_FALSE(f.memory_given);
  c.attention.attn = "flex", c.causal_memory.act_offload = "on", c.memory.checkpointing = "selective";
  c.memory.selective_blocks = 2, c.causal_memory.attn_keep = 0.5, c.compute.fp8 = "emulate", c.memory.memory = "40";
  f = c.memory_flags();
  EXPECT_EQ(f.knobs.attn, CausalKernel::mask);
  EXPECT_TRUE(f.knobs.act_offload);
  EXPECT_EQ(f.knobs.fp8, Fp8Mode::emulate);
  ASSERT_TRUE(f.given.checkpointing && f.given.selective_blocks && f.given.act_offload && f.given.attn_keep &&
              f.given.attn);
  EXPECT_EQ(*f.given.checkpointing, Checkpointing::selective);
  EXPECT_EQ(*f.given.selective_blocks, 2);
  EXPECT_DOUBLE_EQ(*f.given.attn_keep, 0.5);
  EXPECT_TRUE(f.memory_given);
  EXPECT_EQ(f.knobs.flags(true),
            "--checkpointing selective --selective-blocks 2 --act-offload on --attn-keep 0.5 --attn mask");
  const auto co = f.knobs.checkpoint_options();
  EXPECT_TRUE(co.selective && co.offload_inputs);
  EXPECT_EQ(co.selective_blocks, 2);
  EXPECT_DOUBLE_EQ(co.attention_keep, 0.5);
  // A flag given at its default value is fixed too (only the binding knows: MemorySection::given).
  CausalConfig g;
  g.memory.given = {"--attn", "--checkpointing"};
  f = g.memory_flags();
  ASSERT_TRUE(f.given.attn && f.given.checkpointing);
  EXPECT_EQ(*f.given.attn, CausalKernel::prefix);
  EXPECT_FALSE(f.given.act_offload);
  // SFT: --no-gradient_checkpointing is checkpointing none, fixed; mixed precision is its default.
  SftConfig s;
  f = s.memory_flags();
  EXPECT_EQ(f.knobs.precision, Precision::mixed);
  EXPECT_TRUE(f.allow_none);
  EXPECT_FALSE(f.allow_offload);
  EXPECT_FALSE(f.given.checkpointing);
  s.gradient_checkpointing = false;
  f = s.memory_flags();
  EXPECT_EQ(f.knobs.checkpointing, Checkpointing::none);
  ASSERT_TRUE(f.given.checkpointing);
  EXPECT_EQ(*f.given.checkpointing, Checkpointing::none);
  // The record of what ran: the knobs written back into the flags once, for config.json.
  MemoryKnobs k;
  k.precision = Precision::fp32, k.checkpointing = Checkpointing::selective, k.selective_blocks = 4;
  record_knobs(k, s.compute, s.memory);
  EXPECT_EQ(s.compute.precision, "fp32");
  EXPECT_EQ(s.memory.checkpointing, "selective");
  EXPECT_EQ(s.memory.selective_blocks, 4);
}

}  // namespace
}  // namespace vdt
