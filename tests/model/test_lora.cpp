// LoRA files and merging: both namings read to the same modules, bad pairs are named errors, the merge equals the
// unmerged forward (x W^T + s (x A^T) B^T) on every merged Linear, and `vdt ckpt merge-lora` writes it.
#include <torch/torch.h>

#include "core/rng.h"
#include "core/safetensors.h"
#include "model/attention.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(Lora, TargetsAndNames) {
  const LoraConfig c;
  EXPECT_TRUE(is_lora_target("blocks.3.self_attn.q", c.targets));
  EXPECT_TRUE(is_lora_target("blocks.3.cross_attn.o", c.targets));
  EXPECT_TRUE(is_lora_target("blocks.0.ffn.2", c.targets));
  EXPECT_FALSE(is_lora_target("blocks.0.ffn.1", c.targets));
  EXPECT_FALSE(is_lora_target("blocks.0.self_attn.norm_q", c.targets));
  char w = 0;
  EXPECT_EQ(lora_module_of("blocks.1.self_attn.q.lora_A.weight", &w), "blocks.1.self_attn.q");
  EXPECT_EQ(w, 'A');
  EXPECT_EQ(lora_module_of("base_model.model.blocks.1.self_attn.q.lora_B.default.weight", &w), "blocks.1.self_attn.q");
  EXPECT_EQ(w, 'B');
  EXPECT_EQ(lora_module_of("blocks.1.self_attn.q.weight", &w), "");
}

TEST(Lora, MergeEqualsTheUnmergedForwardAndTheCliWritesIt) {
  test::TempDir d;
  torch::manual_seed(0);
  const auto w = torch::randn({12, 8}), bias = torch::randn({12}), other = torch::randn({3});
  const LoraPair p{torch::randn({4, 8}), torch::randn({12, 4})};
  save_safetensors(d.file("base.safetensors"),
                   {{"blocks.0.self_attn.q.weight", w}, {"blocks.0.self_attn.q.bias", bias}, {"head.norm", other}});
  // PEFT naming, alpha in the metadata.
  save_safetensors(d.file("peft.safetensors"),
                   {{"base_model.model.blocks.0.self_attn.q.lora_A.default.weight", p.a},
                    {"base_model.model.blocks.0.self_attn.q.lora_B.default.weight", p.b}},
                   {{"lora_alpha", "8"}});
  const auto lora = read_lora(d.file("peft.safetensors"));
  EXPECT_EQ(lora.rank, 4);
  EXPECT_EQ(lora.alpha, 8);
  const double scale = lora.alpha / lora.rank;
  const auto merged = merge_lora(SafetensorsSet::open({d.file("base.safetensors")}), lora, scale);
  torch::Tensor wm;
  for (const auto& [k, t] : merged)
    if (k == "blocks.0.self_attn.q.weight") wm = t;
  const auto x = torch::randn({5, 8});
  const auto want = lora_linear(x, w, bias, p, scale);
  EXPECT_TRUE(torch::allclose(torch::nn::functional::linear(x, wm, bias), want, 1e-5, 1e-5));

  const auto r = test::run_vdt("ckpt merge-lora --base " + d.file("base.safetensors") + " --lora " +
                               d.file("peft.safetensors") + " --out " + d.file("merged.safetensors"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto f = SafetensorsFile::open(d.file("merged.safetensors"));
  EXPECT_TRUE(
      torch::allclose(torch::nn::functional::linear(x, f->get("blocks.0.self_attn.q.weight"), bias), want, 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(f->get("head.norm"), other));
  EXPECT_EQ(f->metadata().at("lora_rank"), "4");

  // Bad inputs: a lone factor, and a LoRA that does not fit the base.
  save_safetensors(d.file("lone.safetensors"), {{"blocks.0.self_attn.q.lora_A.weight", p.a}});
  test::expect_error([&] { read_lora(d.file("lone.safetensors")); },
                     {"lone.safetensors", "blocks.0.self_attn.q", "only lora_A"});
  save_safetensors(d.file("wide.safetensors"), {{"blocks.0.self_attn.q.lora_A.weight", torch::randn({4, 9})},
                                                {"blocks.0.self_attn.q.lora_B.weight", p.b}});
  test::expect_error(
      [&] { merge_lora(SafetensorsSet::open({d.file("base.safetensors")}), read_lora(d.file("wide.safetensors")), 1); },
      {"blocks.0.self_attn.q.weight", "[12, 9]"});
}

TEST(CkptCli, InspectCheckAndDiffATinyExport) {
  test::TempDir d;
  // A tiny-preset checkpoint from the parity fixture's weights is not at hand here; build one from the model.
  const auto r1 = test::run_vdt("ckpt inspect " + test::fixture("wan_tiny_a.safetensors"));
  ASSERT_EQ(r1.code, 0) << r1.output;
  EXPECT_NE(r1.output.find("tensors"), std::string::npos);
  const auto r2 = test::run_vdt("ckpt diff " + test::fixture("wan_tiny_a.safetensors") + " " +
                                test::fixture("wan_tiny_a.safetensors"));
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("0 differ in presence or shape, worst relative L2 0.000e+00"), std::string::npos)
      << r2.output;
  // A checkpoint with a NaN and a missing key fails the check, naming both.
  save_safetensors(d.file("bad.safetensors"), {{"patch_embedding.weight", torch::full({2, 2}, NAN)}});
  const auto r3 = test::run_vdt("ckpt check " + d.file("bad.safetensors") + " --model tiny");
  EXPECT_EQ(r3.code, 1) << r3.output;
  EXPECT_NE(r3.output.find("non-finite"), std::string::npos) << r3.output;
  EXPECT_NE(r3.output.find("head.head.weight: missing (preset tiny)"), std::string::npos) << r3.output;
}

// The model with a LoRA attached (B made non-zero) equals the base model with that LoRA merged into its weights, on
// a forward; at attach time (B = 0) it equals the base; only the LoRA factors get gradients; a saved LoRA reloads.
TEST(Lora, AttachedModelEqualsTheMergedModelOnAForward) {
  test::TempDir d;
  torch::manual_seed(0);
  const auto x = torch::randn({1, 16, 3, 4, 6}), ctx = torch::randn({1, 7, 64}), t = torch::full({1}, 600.0);
  auto make = [] {
    WanDiT m(preset_config("tiny"));
    m->init_weights(1);
    torch::NoGradGuard ng;
    m->head->head->weight.normal_(0, 0.05, make_generator(torch::kCPU, 5));  // the same head every time
    return m;
  };
  WanDiT model = make();
  const auto base_out = model->forward({x, t, ctx}).detach();
  const auto lora_params = attach_lora(*model, LoraConfig{4, 8}, 7);
  EXPECT_EQ(lora_params.size(), 2u * 10 * 2);  // 2 blocks x (q, k, v, o of both attentions, ffn.0, ffn.2) x (A, B)
  EXPECT_EQ(lora_params.front().first, "blocks.0.self_attn.q.lora_A.weight");
  EXPECT_TRUE(torch::equal(model->forward({x, t, ctx}), base_out));  // B = 0
  {
    torch::NoGradGuard ng;
    for (auto& [n, p] : lora_params) p.normal_(0, 0.1);
  }
  auto out = model->forward({x, t, ctx});
  EXPECT_GT((out - base_out).abs().max().item<double>(), 1e-3);
  out.square().sum().backward();
  for (const auto& kv : model->named_parameters())
    EXPECT_EQ(kv.value().grad().defined(), kv.key().find(".lora_") != std::string::npos) << kv.key();
  // Save (our naming), merge into the base weights, load the merged weights into a plain model.
  save_safetensors(d.file("lora.safetensors"), lora_state(*model), {{"rank", "4"}, {"alpha", "8"}, {"base", "tiny"}});
  std::vector<std::pair<std::string, torch::Tensor>> base_w;
  for (const auto& kv : make()->named_parameters()) base_w.emplace_back(kv.key(), kv.value());
  save_safetensors(d.file("base.safetensors"), base_w);
  const auto lora = read_lora(d.file("lora.safetensors"));
  const auto merged = merge_lora(SafetensorsSet::open({d.file("base.safetensors")}), lora, lora.alpha / lora.rank);
  WanDiT plain = make();
  {
    torch::NoGradGuard ng;
    std::map<std::string, torch::Tensor> m(merged.begin(), merged.end());
    for (auto& kv : plain->named_parameters()) kv.value().copy_(m.at(kv.key()));
  }
  EXPECT_LT((plain->forward({x, t, ctx}) - out.detach()).abs().max().item<double>(), 1e-5);
  // The saved LoRA loads into a freshly attached model and gives the same output.
  WanDiT again = make();
  attach_lora(*again, LoraConfig{4, 8}, 99);
  load_lora(*again, lora, d.file("lora.safetensors"));
  EXPECT_LT((again->forward({x, t, ctx}) - out.detach()).abs().max().item<double>(), 1e-6);
  LoraWeights partial = lora;
  partial.modules.erase("blocks.1.ffn.2");
  test::expect_error([&] { load_lora(*again, partial, "partial.safetensors"); },
                     {"partial.safetensors", "blocks.1.ffn.2"});
}

// merge_attached_lora (streaming's --merge-lora): the attached factors folded into the model's own weights give the
// unmerged forward, the factors are gone (no LoRA parameter, lora_or_linear runs the base GEMM alone), and the
// weights equal the file merge's (merge_lora) bit for bit where both sum in float32.
TEST(Lora, MergingTheAttachedFactorsKeepsTheForwardAndRemovesThem) {
  torch::manual_seed(0);
  const auto x = torch::randn({1, 16, 3, 4, 6}), ctx = torch::randn({1, 7, 64}), t = torch::full({1}, 600.0);
  WanDiT model(preset_config("tiny"));
  model->init_weights(1);
  {
    torch::NoGradGuard ng;
    model->head->head->weight.normal_(0, 0.05, make_generator(torch::kCPU, 5));
  }
  const auto lora_params = attach_lora(*model, LoraConfig{4, 8}, 7);
  {
    torch::NoGradGuard ng;
    for (auto& [n, p] : lora_params) p.normal_(0, 0.1, make_generator(torch::kCPU, 9));
  }
  torch::NoGradGuard ng;
  const auto unmerged = model->forward({x, t, ctx});
  const auto base_q = model->blocks[0]->as<WanBlockImpl>()->self_attn->q->weight.clone();
  EXPECT_EQ(merge_attached_lora(*model), 2 * 10);  // 2 blocks x (q, k, v, o of both attentions, ffn.0, ffn.2)
  EXPECT_TRUE(lora_state(*model).empty());
  for (const auto& kv : model->named_modules("", false))
    EXPECT_EQ(kv.key().find(".lora_"), std::string::npos) << kv.key();
  const auto merged = model->forward({x, t, ctx});
  EXPECT_GT((unmerged - merged).abs().max().item<double>(), 0);     // the sums are rounded in another order ...
  EXPECT_LT((unmerged - merged).abs().max().item<double>(), 1e-5);  // ... to the same numbers
  std::map<std::string, torch::Tensor> f(lora_params.begin(), lora_params.end());
  const auto expect_q = base_q + 2.0 * torch::matmul(f.at("blocks.0.self_attn.q.lora_B.weight"),
                                                     f.at("blocks.0.self_attn.q.lora_A.weight"));
  EXPECT_LT((model->blocks[0]->as<WanBlockImpl>()->self_attn->q->weight - expect_q).abs().max().item<double>(), 1e-6);
  EXPECT_EQ(merge_attached_lora(*model), 0);  // nothing left to merge
}

// Named sets on one base (the distillation's student, critic and teacher): the three roles are calls on the same base
// tensors (the same storage before and after, no parameter but the two sets' factors added), each role gives its own
// output (the teacher the plain base's bit for bit, a set the output of a model holding that set alone), switching is
// per model and scoped, and a backward under one set reaches only that set's factors.
TEST(Lora, SetsShareOneBaseAndEachRoleGivesItsOwnOutput) {
  torch::manual_seed(0);
  const auto x = torch::randn({1, 16, 3, 4, 6}), ctx = torch::randn({1, 7, 64}), t = torch::full({1}, 600.0);
  auto make = [] {
    WanDiT m(preset_config("tiny"));
    m->init_random_base(3);
    return m;
  };
  WanDiT model = make();
  std::map<std::string, const void*> base_ptrs;
  int64_t base_numel = 0;
  for (const auto& kv : model->named_parameters())
    base_ptrs[kv.key()] = kv.value().data_ptr(), base_numel += kv.value().numel();
  const auto teacher_ref = model->forward({x, t, ctx}).detach();
  auto student = attach_lora(*model, LoraConfig{4, 8}, 7);
  auto critic = attach_lora(*model, LoraConfig{2, 2}, 8, "critic");
  EXPECT_EQ(lora_sets(*model), (std::vector<std::string>{"", "critic"}));
  EXPECT_EQ(active_lora(*model), "");                      // the first set attached
  EXPECT_EQ(student.front().first, critic.front().first);  // each set under the file's names
  {
    torch::NoGradGuard ng;
    for (auto& [n, p] : student) p.normal_(0, 0.1, make_generator(torch::kCPU, 1));
    for (auto& [n, p] : critic) p.normal_(0, 0.2, make_generator(torch::kCPU, 2));
  }
  for (auto* set : {&student, &critic})
    for (auto& [n, p] : *set) EXPECT_TRUE(p.requires_grad()) << n;  // the second attach left the first trainable
  auto run = [&](const std::string& set) {
    ActiveLora role(*model, set);
    return model->forward({x, t, ctx});
  };
  const auto teacher = run(kNoLora).detach(), s_out = run("").detach(), c_out = run("critic").detach();
  EXPECT_EQ(active_lora(*model), "");  // the guard switched back
  EXPECT_TRUE(torch::equal(teacher, teacher_ref));
  EXPECT_GT((s_out - teacher).abs().max().item<double>(), 1e-3);
  EXPECT_GT((c_out - s_out).abs().max().item<double>(), 1e-3);
  // One base: every base tensor is where it was, and the model holds nothing but the base and the two sets' factors.
  int64_t numel = 0, lora_numel = 0;
  for (const auto& kv : model->named_parameters()) {
    numel += kv.value().numel();
    if (base_ptrs.count(kv.key())) EXPECT_EQ(kv.value().data_ptr(), base_ptrs.at(kv.key())) << kv.key();
  }
  for (auto* set : {&student, &critic})
    for (auto& [n, p] : *set) lora_numel += p.numel();
  EXPECT_EQ(numel, base_numel + lora_numel);
  // Each set equals a model holding that set alone, saved and loaded under the file's names.
  for (const std::string set : {"", "critic"}) {
    WanDiT alone = make();
    const auto state = lora_state(*model, set);
    LoraWeights w;
    for (const auto& [n, p] : state) {
      char which = 0;
      auto& pair = w.modules[lora_module_of(n, &which)];
      (which == 'A' ? pair.a : pair.b) = p.detach();
    }
    w.rank = set.empty() ? 4 : 2, w.alpha = set.empty() ? 8 : 2;
    attach_lora(*alone, LoraConfig{w.rank, w.alpha}, 99);
    load_lora(*alone, w, "set " + set);
    torch::NoGradGuard ng;
    EXPECT_TRUE(torch::allclose(alone->forward({x, t, ctx}), set.empty() ? s_out : c_out, 1e-6, 1e-6)) << set;
  }
  // A backward under the critic reaches the critic's factors only.
  run("critic").square().sum().backward();
  for (auto& [n, p] : critic) EXPECT_TRUE(p.grad().defined()) << n;
  for (auto& [n, p] : student) EXPECT_FALSE(p.grad().defined()) << n;
  test::expect_error([&] { set_active_lora(*model, "teacher"); }, {"teacher", "not attached"});
  test::expect_error([&] { merge_attached_lora(*model); }, {"2 LoRA sets"});
}

// Self-attention's q, k, v LoRA A factors as one GEMM against [A_q; A_k; A_v]: the same outputs and the same
// gradients (factors and input) as three lora_or_linear calls, on the whole model (bidirectional and block-causal) and
// on one shared-input group.
TEST(Lora, FusedQkvAGemmEqualsThreeCalls) {
  auto run = [](bool fused, int64_t causal) {
    torch::manual_seed(0);
    WanDiT m(preset_config("tiny"));
    m->init_random_base(5);
    LoraConfig lc;
    lc.rank = 3;
    auto lora = attach_lora(*m, lc, 7);
    {
      torch::NoGradGuard ng;
      for (auto& [n, p] : lora) p.normal_(0, 0.1);
    }
    m->set_fused_lora_qkv(fused);
    auto x = torch::randn({1, 16, 2, 4, 4}).requires_grad_(true);
    DenoiserInputs in{x, torch::tensor({{300.0, 700.0}}), torch::randn({1, 5, 64})};
    if (causal) in.attention = AttentionPattern::block_causal(causal);
    auto out = m->forward(in);
    (out * torch::linspace(-1, 1, out.numel()).view_as(out)).sum().backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& [n, p] : lora) g[n] = p.grad().clone();
    g["x"] = x.grad().clone();
    g["out"] = out.detach();
    return g;
  };
  for (int64_t causal : {0, 1}) {
    auto ref = run(false, causal), fused = run(true, causal);
    for (auto& [k, v] : ref) {
      EXPECT_GT(v.abs().max().item<double>(), 0.0) << k;
      EXPECT_LT((v - fused[k]).abs().max().item<double>(), 1e-6 * (1 + v.abs().max().item<double>())) << k;
    }
  }
  // One group: the stacked A is one GEMM of x; without LoRA on every member the group is the plain calls.
  torch::manual_seed(1);
  SelfAttention a(8, 2, 1e-6);
  LoraConfig lc;
  lc.rank = 2, lc.targets = {"q", "k", "v"};
  auto f = attach_lora(*a, lc, 3);
  {
    torch::NoGradGuard ng;
    for (auto& [n, p] : f) p.normal_(0, 0.3);
  }
  auto x = torch::randn({2, 5, 8});
  const auto fused = lora_or_linear_shared_input({&a->q, &a->k, &a->v}, x, true);
  const auto plain = lora_or_linear_shared_input({&a->q, &a->k, &a->v}, x, false);
  ASSERT_EQ(fused.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_LT((fused[i] - plain[i]).abs().max().item<double>(), 1e-6 * (1 + plain[i].abs().max().item<double>())) << i;
  EXPECT_TRUE(torch::equal(plain[0], lora_or_linear(a->q, x)));
  EXPECT_TRUE(torch::equal(lora_or_linear_shared_input({&a->o, &a->q}, x, true)[0], lora_or_linear(a->o, x)));
}

}  // namespace
}  // namespace vdt
