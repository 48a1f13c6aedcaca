// Config declared once (train/loop/config_fields.h): every field of both trainer configs is listed once, the JSON has
// exactly the listed keys, and the start-up line names what differs from the defaults.
#include <nlohmann/json.hpp>

#include <set>

#include "test_util.h"
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
  const std::vector<std::pair<double, std::string>> cases = {
      {10.0, "10.0"}, {100.0, "100.0"}, {3.0, "3.0"}, {-3.0, "-3.0"}, {0.0, "0.0"}, {2.22, "2.22"},
      {2e-5, "2e-05"}, {1e-4, "0.0001"}, {1.5e-7, "1.5e-07"}, {123.456, "123.456"}, {0.1, "0.1"},
      {1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {1.2345678901234568e+17, "1.2345678901234568e+17"},
      {1e22, "1e+22"}, {1e-300, "1e-300"}, {0.30000000000000004, "0.30000000000000004"}, {2048.0, "2048.0"}};
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

// Enum-like flags become enums once validated; an unknown value names the flag.
TEST(ConfigFields, EnumLikeFlagsAreEnums) {
  SftConfig s;
  EXPECT_EQ(s.precision_mode(), Precision::mixed);
  s.precision = "half";
  test::expect_error([&] { s.precision_mode(); }, {"--precision", "half"});
  CausalConfig c;
  c.attn = "fa3", c.objective = "tf", c.shard_base = "off", c.act_offload = "on";
  EXPECT_EQ(c.attn_kernel(), CausalKernel::prefix);  // the Python trainer's names
  c.attn = "flex";
  EXPECT_EQ(c.attn_kernel(), CausalKernel::mask);
  EXPECT_EQ(c.objective_mode(), CausalConfig::Objective::tf);
  EXPECT_EQ(c.shard_mode(), CausalConfig::ShardBase::off);
  EXPECT_TRUE(c.act_offload_on());
  EXPECT_EQ(c.precision_mode(), Precision::bf16);
  c.precision = "mixed";  // SFT only
  test::expect_error([&] { c.precision_mode(); }, {"--precision", "mixed"});
}

}  // namespace
}  // namespace vdt
