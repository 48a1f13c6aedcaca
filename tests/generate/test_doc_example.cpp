// docs/generate.md's example (tests/generate/doc_example.h) compiles, runs on a tiny LoRA file, streams past the span,
// and is the code the page shows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "generate/doc_example.h"
#include "generate/lora_file.h"
#include "model/lora.h"
#include "test_util.h"

namespace vdt {
namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The text between the example's markers, without them.
std::string between_markers(const std::string& text) {
  const std::string open = "// [docs/generate.md example begin]\n", close = "// [docs/generate.md example end]";
  const auto a = text.find(open), b = text.find(close);
  EXPECT_NE(a, std::string::npos);
  EXPECT_NE(b, std::string::npos);
  return a == std::string::npos || b == std::string::npos ? "" : text.substr(a + open.size(), b - a - open.size());
}

TEST(GenerateDocs, TheExampleRunsAndIsThePages) {
  const auto repo = std::filesystem::path(VDT_TEST_ASSETS).parent_path().parent_path();
  const auto code = between_markers(read(repo / "tests/generate/doc_example.h"));
  ASSERT_FALSE(code.empty());
  EXPECT_NE(read(repo / "docs/generate.md").find("```cpp\n" + code + "```\n"), std::string::npos)
      << "docs/generate.md does not show tests/generate/doc_example.h's example as it is; copy it to the page";

  test::TempDir dir;
  auto base = build_base("tiny", "", 7, torch::kCPU, torch::kFloat32);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 4, lc.targets = base->lora_targets();
  const auto factors = attach_lora(*base, lc, 3);
  LoraFileMeta m;
  m.base = m.model = "tiny", m.rank = 4, m.alpha = 4, m.seed = 7, m.chunk_frames = 1, m.span_chunks = 6;
  const auto lora = dir.file("lora_step00001.safetensors");
  save_lora_file(lora, m, factors);
  auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
  gen.set_current_seed(3);
  const auto prompt = torch::randn({1, 8, base->text_dim()}, gen), null_prompt = torch::zeros_like(prompt);
  const auto first = torch::randn({base->latent_channels(), 1, 4, 4}, gen);
  const auto r = stream_from_prompt(lora, prompt, null_prompt, first, 8);
  EXPECT_EQ(r.sample.sizes(), (std::vector<int64_t>{base->latent_channels(), 8, 4, 4}));
  EXPECT_TRUE(torch::equal(r.sample.narrow(1, 0, 1), first));  // frame 0 given clean
  EXPECT_TRUE(torch::isfinite(r.sample).all().item<bool>());
  EXPECT_EQ(r.window, 4);
}

}  // namespace
}  // namespace vdt
