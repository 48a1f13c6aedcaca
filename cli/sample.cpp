// `vdt sample`: its declared flags (tools/sample_config.h) parsed, new prompts embedded by the Python package
// (`python -m vdt_py embed`: umT5, into a copy of the root's text table under --out), then run (tools/sample_run.h):
// an SFT export's val clips, or a causal LoRA's val windows chunk by chunk (--causal), streamed with a KV cache
// (--stream), through the generation layer (src/generate, docs/generate.md).
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "tools/sample_run.h"

namespace vdt::cli {

namespace {

// Embeds `prompts` with the Python package into <out>/text_table_prompts.safetensors (the root's table plus them).
std::string embed_prompts(const SampleConfig& c, const std::vector<std::string>& prompts) {
  VDT_CHECK(!c.text_encoder.empty(),
            "--prompt / --prompts need --text-encoder DIR: the umT5 encoder the data root was prepared with (e.g. "
            "Wan2.2-TI2V-5B-Diffusers/text_encoder), to embed the new prompts");
  std::filesystem::create_directories(c.out);
  const auto table = (std::filesystem::path(c.data_root) / "text_table.safetensors").string();
  const auto out = (std::filesystem::path(c.out) / "text_table_prompts.safetensors").string();
  std::vector<std::string> args = {"--table",        table,          "--out",    out,
                                   "--text-encoder", c.text_encoder, "--device", c.device};
  for (const auto& p : prompts) args.insert(args.end(), {"--prompt", p});
  const int rc = run_python_tool("embed", args);
  VDT_CHECK(rc == 0, "vdt sample: embedding the prompts with --text-encoder ", c.text_encoder, " failed (exit ", rc,
            "); its messages are above");
  return out;
}

}  // namespace

void add_sample(CLI::App& app, int& exit_code) {
  auto c = std::make_shared<SampleConfig>();
  auto* s = app.add_subcommand("sample",
                               "Sample clips of a data root with an SFT export (Euler, two-branch CFG), or a causal "
                               "LoRA chunk by chunk (--causal), streamed with a KV cache (--stream)");
  bind_fields(s, c, SampleConfig::fields());
  s->callback([c, &exit_code] {
    c->validate();
    const auto prompts = c->new_prompts();
    exit_code = run_sample(*c, prompts.empty() ? std::string() : embed_prompts(*c, prompts));
  });
}

}  // namespace vdt::cli
