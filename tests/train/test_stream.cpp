// Streaming generation with a KV cache (model/kv_stream.h, generate/rollout.h, generate/window.h)
// on the CPU in float32: with the window holding the whole stream it equals the recompute sampler
// (sample_causal_window) on tiny and h3-tiny, with and without a LoRA, guidance on and off; a chunk does not change
// when later chunks are made; past the span the window keeps the cache's size and the rolling offset gives a chunk
// what the trained positions give; bad flags name themselves; `vdt sample --causal --stream` writes each chunk and
// `vdt bench sample` runs on the CPU.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <filesystem>

#include "core/rng.h"
#include "core/safetensors.h"
#include "model/kv_stream.h"
#include "model/lora.h"
#include "model/pass_graph.h"
#include "model/wan_dit.h"
#include "test_util.h"
#include "tools/sample_bench.h"
#include "tools/synth.h"
#include "generate/generation_model.h"
#include "train/causal/causal_trainer.h"
#include "train/checkpoint/lora_checkpoint.h"
#include "generate/clip_sampling.h"
#include "generate/window.h"
#include "generate/model_inputs.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

class StreamTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    SynthConfig sc;
    sc.out = dir_->file("wan"), sc.latent_frames = 14, sc.train_runs = 2, sc.train_clips_per_run = 2;
    synth_root(sc);
    SynthConfig h3;  // 32 latents at 4x4: one 30-latent window per clip, Picture 1, the silent audio
    h3.out = dir_->file("h3"), h3.model = "h3", h3.latent_channels = 24, h3.text_dim = 48, h3.latent_frames = 32;
    h3.latent_h = 4, h3.latent_w = 4, h3.train_runs = 2, h3.train_clips_per_run = 2, h3.val_runs = 1;
    synth_root(h3);
  }
  static void TearDownTestSuite() { delete dir_; }

  struct Setup {
    std::shared_ptr<Denoiser> model;
    std::unique_ptr<CausalDataset> ds;
  };
  // A random base with (rank > 0) a LoRA whose B is not zero, so it changes the output.
  static Setup setup(const std::string& preset, const std::string& root, int64_t chunk_frames, int64_t rank) {
    Setup s;
    s.model = build_base(preset, "", 7, torch::kCPU, torch::kFloat32);
    if (rank > 0) {
      LoraConfig lc;
      lc.rank = rank, lc.alpha = static_cast<double>(rank), lc.targets = s.model->lora_targets();
      attach_lora(*s.model, lc, 3);
      torch::NoGradGuard ng;
      auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
      gen.set_current_seed(11);
      for (auto& p : s.model->named_parameters())
        if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.05, gen);
    }
    CausalDataConfig dc;
    dc.root = dir_->file(root), dc.span_frames = 6 * chunk_frames, dc.seed = 7, dc.val_clips = 2;
    s.ds = std::make_unique<CausalDataset>(dc);
    fit_side_streams(*s.model, *s.ds, dc.span_frames, chunk_frames);
    return s;
  }
  static double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
    EXPECT_EQ(a.sizes(), b.sizes());
    return (a - b).abs().max().item<double>();
  }
  static test::TempDir* dir_;
};
test::TempDir* StreamTest::dir_ = nullptr;

// The acceptance test: streaming equals recomputing within 1e-5 when the window holds the whole stream.
void expect_stream_equals_recompute(StreamTest::Setup& s, int64_t cf, bool clean_first) {
  for (double cfg : {1.0, 3.0}) {
    EulerConfig ec;
    ec.steps = 3, ec.cfg_scale = cfg;
    const auto ref = sample_causal_window(*s.model, *s.ds, 0, cf, ec, 5, clean_first);
    const auto got = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, clean_first, {});
    ASSERT_EQ(got.sample.sizes(), ref.sample.sizes());
    const double d = (got.sample - ref.sample).abs().max().item<double>();
    EXPECT_LE(d, 1e-5) << "cfg " << cfg << " video";
    EXPECT_GT(ref.sample.abs().max().item<double>(), 0.1);
    ASSERT_EQ(got.side_sample.size(), ref.side_sample.size());
    for (const auto& [name, t] : ref.side_sample) {
      ASSERT_EQ(got.side_sample.at(name).sizes(), t.sizes()) << name;
      EXPECT_LE((got.side_sample.at(name) - t).abs().max().item<double>(), 1e-5) << "cfg " << cfg << " " << name;
    }
    EXPECT_GT(got.cache_bytes, 0);
  }
}

TEST_F(StreamTest, WanStreamEqualsTheRecomputeSampler) {
  for (int64_t rank : {0, 4}) {
    SCOPED_TRACE("lora rank " + std::to_string(rank));
    auto s = setup("tiny", "wan", 1, rank);
    expect_stream_equals_recompute(s, 1, false);
  }
  auto s = setup("tiny", "wan", 2, 4);  // chunks of two frames, the first frame given clean
  expect_stream_equals_recompute(s, 2, true);
}

TEST_F(StreamTest, H3StreamEqualsTheRecomputeSampler) {
  for (int64_t rank : {0, 4}) {
    SCOPED_TRACE("lora rank " + std::to_string(rank));
    auto s = setup("h3-tiny", "h3", 5, rank);
    expect_stream_equals_recompute(s, 5, false);
  }
}

// --merge-lora on (the default of `vdt sample --stream` and `vdt bench sample`): the LoRA folded into the base weights
// streams what the factors beside the base stream (float32: within 1e-5), on both families, guidance on and off,
// past the span with a window; off keeps the factors; a bad value names the flag.
TEST_F(StreamTest, AMergedLoraStreamsAsTheUnmergedOne) {
  for (const auto& [preset, root, cf] : {std::tuple<std::string, std::string, int64_t>{"tiny", "wan", 1},
                                         std::tuple<std::string, std::string, int64_t>{"h3-tiny", "h3", 5}}) {
    SCOPED_TRACE(preset);
    auto s = setup(preset, root, cf, 4);
    StreamOptions so;
    so.chunks = 8, so.window = 2;  // past the 6-chunk span: the window moves, the sink is rotated again
    StreamSpeed off;
    off.merge_lora = "off";
    apply_stream_speed(*s.model, off);
    EXPECT_FALSE(lora_state(*s.model).empty());
    for (double cfg : {1.0, 3.0}) {
      EulerConfig ec;
      ec.steps = 2, ec.cfg_scale = cfg;
      auto r = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, so);
      auto m = setup(preset, root, cf, 4);
      apply_stream_speed(*m.model, StreamSpeed{});  // --merge-lora on
      EXPECT_TRUE(lora_state(*m.model).empty());
      auto got = stream_causal_window(*m.model, *m.ds, 0, cf, ec, 5, false, so);
      EXPECT_LE(max_diff(got.sample, r.sample), 1e-5) << "cfg " << cfg;
      for (const auto& [name, t] : r.side_sample) EXPECT_LE(max_diff(got.side_sample.at(name), t), 1e-5) << name;
      auto plain = setup(preset, root, cf, 0);  // the LoRA changes the stream: the comparison can fail
      const auto without = stream_causal_window(*plain.model, *plain.ds, 0, cf, ec, 5, false, so);
      EXPECT_GT(max_diff(without.sample, r.sample), 1e-4);
    }
  }
  auto s = setup("tiny", "wan", 1, 4);
  StreamSpeed bad;
  bad.merge_lora = "yes";
  test::expect_error([&] { apply_stream_speed(*s.model, bad); }, {"--merge-lora 'yes'", "on", "off"});
}

// --stream-blocks: the blocks' frozen weights kept apart and copied in for each pass (weight streaming; on the CPU
// a copy apart from the stored one) stream exactly what the resident base streams, both families, past the span.
TEST_F(StreamTest, StreamedBlocksStreamAsTheResidentBase) {
  for (const auto& [preset, root, cf] : {std::tuple<std::string, std::string, int64_t>{"tiny", "wan", 1},
                                         std::tuple<std::string, std::string, int64_t>{"h3-tiny", "h3", 5}}) {
    SCOPED_TRACE(preset);
    StreamOptions so;
    so.chunks = 8, so.window = 2;
    EulerConfig ec;
    ec.steps = 2, ec.cfg_scale = 3.0;
    auto r = setup(preset, root, cf, 4);
    apply_stream_speed(*r.model, StreamSpeed{});
    const auto resident = stream_causal_window(*r.model, *r.ds, 0, cf, ec, 5, false, so);
    auto s = setup(preset, root, cf, 4);
    StreamSpeed streamed;
    streamed.stream_blocks = static_cast<int64_t>(s.model->block_modules().size());
    apply_stream_speed(*s.model, streamed);
    for (auto* b : s.model->block_modules())  // between passes the streamed weights are not there
      for (const auto& p : b->parameters()) EXPECT_EQ(p.numel(), 0);
    const auto got = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, so);
    EXPECT_TRUE(torch::equal(got.sample, resident.sample));
    for (const auto& [name, t] : resident.side_sample) EXPECT_TRUE(torch::equal(got.side_sample.at(name), t)) << name;
  }
  auto s = setup("tiny", "wan", 1, 4);
  StreamSpeed bad;
  bad.stream_blocks = 3;
  test::expect_error([&] { apply_stream_speed(*s.model, bad); }, {"--stream-blocks 3", "0 to the base's 2 blocks"});
}

// H3's AdaLN projections cached per model time (StreamSpec::modulation_slots) stream what computing them in every
// pass streams: with room for every timestep, with one or two slots (a new time evicts the least recently used; a
// pass with the clean first frame beside the noisy ones has more times than one slot and computes its own), with
// guidance, past the span.
TEST_F(StreamTest, CachedModulationStreamsAsComputingItEveryPass) {
  auto s = setup("h3-tiny", "h3", 5, 4);
  for (const auto& [clean_first, cfg] : {std::pair<bool, double>{false, 3.0}, std::pair<bool, double>{true, 1.0}}) {
    EulerConfig ec;
    ec.steps = 2, ec.cfg_scale = cfg;
    StreamOptions so;
    so.chunks = 7, so.window = 2, so.modulation_slots = 0;
    const auto ref = stream_causal_window(*s.model, *s.ds, 0, 5, ec, 5, clean_first, so);
    for (int64_t slots : {1, 2, 32}) {
      so.modulation_slots = slots;
      const auto got = stream_causal_window(*s.model, *s.ds, 0, 5, ec, 5, clean_first, so);
      const std::string what =
          "slots " + std::to_string(slots) + " cfg " + std::to_string(cfg) + (clean_first ? " clean first frame" : "");
      EXPECT_LE(max_diff(got.sample, ref.sample), 1e-5) << what;
      EXPECT_LE(max_diff(got.side_sample.at("audio"), ref.side_sample.at("audio")), 1e-5) << what;
    }
  }
}

// A new prompt: the conditioned branch takes it in every frame, as the recompute sampler does with it.
TEST_F(StreamTest, ANewPromptStreamsAsTheRecomputeSamplerSamplesIt) {
  auto s = setup("tiny", "wan", 1, 4);
  const auto& prompts = s.ds->text_table()->prompts();
  const std::string prompt = prompts.back() == s.ds->info().null_prompt ? prompts.front() : prompts.back();
  EulerConfig ec;
  ec.steps = 2, ec.cfg_scale = 3.0;
  const auto ref = sample_causal_window(*s.model, *s.ds, 0, 1, ec, 5, false, &prompt);
  const auto got = stream_causal_window(*s.model, *s.ds, 0, 1, ec, 5, false, {}, {}, &prompt);
  const auto own = stream_causal_window(*s.model, *s.ds, 0, 1, ec, 5, false, {});
  EXPECT_LE(max_diff(got.sample, ref.sample), 1e-5);
  EXPECT_GT(max_diff(got.sample, own.sample), 1e-4);  // the prompt is not the window's own text
}

// Graphs off (a CPU, or --cuda-graphs off) run the body every time; asking for them where they cannot run names the
// flag. On a CUDA device (the GPU suite) a stream replayed from graphs gives the eager stream's numbers.
TEST_F(StreamTest, CudaGraphsAreOffOnTheCpuAndGiveTheEagerNumbersOnAGpu) {
  PassGraphs off(false);
  int calls = 0;
  const auto x = torch::ones({2, 3});
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::equal(off.run(0, {x},
                                     [&](const std::vector<torch::Tensor>& v) {
                                       ++calls;
                                       return v[0] * 2;
                                     }),
                             x * 2));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(off.replays(), 0);
  EXPECT_FALSE(graphs_wanted(GraphMode::automatic, torch::kCPU, "--cuda-graphs"));
  EXPECT_FALSE(graphs_wanted(GraphMode::off, torch::kCPU, "--cuda-graphs"));
  test::expect_error([] { graphs_wanted(GraphMode::on, torch::kCPU, "--cuda-graphs"); },
                     {"--cuda-graphs on", "CUDA device", "--cuda-graphs off or auto"});
  test::expect_error([] { parse_graph_mode("yes", "--cuda-graphs"); }, {"--cuda-graphs 'yes'", "auto", "on", "off"});
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the replayed stream is checked on a GPU";
  for (const auto& preset : {"tiny", "h3-tiny"}) {
    SampleBenchConfig c;
    c.model = preset, c.height = 4, c.width = 4, c.chunks = 6, c.window = 2, c.steps = 3, c.cfg = 2.0;
    c.text_len = 8, c.lora_rank = 4, c.device = "cuda", c.precision = "fp32", c.warmup_chunks = 0;
    std::vector<torch::Tensor> chunks[2];
    for (int graphs = 0; graphs < 2; ++graphs) {
      c.speed.cuda_graphs = graphs ? "on" : "off";
      c.on_chunk = [&](int64_t, const torch::Tensor& video) { chunks[graphs].push_back(video.cpu()); };
      const auto r = run_sample_bench(c);
      EXPECT_EQ(r.graph_replays > 0, graphs == 1) << preset;
    }
    ASSERT_EQ(chunks[0].size(), chunks[1].size());
    for (size_t n = 0; n < chunks[0].size(); ++n)
      EXPECT_LE(max_diff(chunks[0][n], chunks[1][n]), 1e-5) << preset << " chunk " << n;
  }
}

// A chunk is final when it is handed out: making more chunks after it (or fewer) does not change it, and what the
// callback got is what the stream returns.
TEST_F(StreamTest, AChunkDoesNotChangeWhenLaterChunksAreMade) {
  for (const auto& [preset, root, cf] :
       std::vector<std::tuple<std::string, std::string, int64_t>>{{"tiny", "wan", 1}, {"h3-tiny", "h3", 5}}) {
    SCOPED_TRACE(preset);
    auto s = setup(preset, root, cf, 4);
    EulerConfig ec;
    ec.steps = 2, ec.cfg_scale = 2.0;
    StreamOptions three;
    three.chunks = 3;
    std::vector<torch::Tensor> handed;
    const auto short_run = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, three,
                                                [&](const StreamChunk& c) { handed.push_back(c.video.clone()); });
    const auto full = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, {});
    ASSERT_EQ(handed.size(), 3u);
    EXPECT_TRUE(torch::equal(torch::cat(handed, 1), short_run.sample));
    EXPECT_TRUE(torch::equal(short_run.sample, full.sample.narrow(1, 0, 3 * cf)));
    for (const auto& [name, t] : short_run.side_sample)
      EXPECT_TRUE(torch::equal(t, full.side_sample.at(name).narrow(-1, 0, t.size(-1)))) << name;
  }
}

// Past the span with a window: the cache is sized by the window (not the stream), chunks made before anything left
// the cache equal the full cache's, and the rest are finite.
TEST_F(StreamTest, PastTheSpanTheWindowBoundsTheCache) {
  for (const auto& [preset, root, cf, window] : std::vector<std::tuple<std::string, std::string, int64_t, int64_t>>{
           {"tiny", "wan", 1, 2}, {"h3-tiny", "h3", 5, 2}}) {
    SCOPED_TRACE(preset);
    auto s = setup(preset, root, cf, 4);
    EulerConfig ec;
    ec.steps = 2, ec.cfg_scale = 1.0;
    StreamOptions o;
    o.window = window, o.chunks = 9;
    const auto r9 = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, o);
    o.chunks = 12;
    const auto r12 = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, o);
    EXPECT_EQ(r9.cache_bytes, r12.cache_bytes);
    EXPECT_EQ(r12.sample.size(1), 12 * cf);
    EXPECT_TRUE(torch::isfinite(r12.sample).all().item<bool>());
    EXPECT_TRUE(torch::equal(r9.sample, r12.sample.narrow(1, 0, 9 * cf)));
    const auto all = stream_causal_window(*s.model, *s.ds, 0, cf, ec, 5, false, {});  // the span, nothing dropped
    const int64_t same = r9.sink_chunks + window + 1;  // chunks that saw every chunk before them
    EXPECT_LE(max_diff(r9.sample.narrow(1, 0, same * cf), all.sample.narrow(1, 0, same * cf)), 1e-6);
    EXPECT_GT(max_diff(r9.sample.narrow(1, same * cf, cf), all.sample.narrow(1, same * cf, cf)), 1e-4);
  }
}

// The rolling offset: on Wan (sink = chunk 0, window 2) each dropped chunk moves the sink's keys one chunk later on
// the time axis only (checked against the cached keys before the move turned by the angle difference), while the
// window's keys stay as they were; with nothing dropped nothing is rotated again.
TEST_F(StreamTest, RollingOffsetMovesOnlyTheSinkAlongTime) {
  auto s = setup("tiny", "wan", 1, 4);
  auto& model = *s.model;
  torch::NoGradGuard ng;
  model.eval();
  const int64_t C = model.latent_channels(), H = 8, W = 8;
  auto gen = make_generator(torch::kCPU, 5);
  const auto context = torch::randn({1, 16, model.text_dim()}, gen);
  StreamSpec spec;
  spec.chunk_frames = 1, spec.height = H, spec.width = W, spec.chunks = 10, spec.window = 2, spec.sink_chunks = 1;
  spec.context = context;
  auto stream = model.open_stream(spec);
  auto commit = [&] {
    stream->commit(model_inputs(model, torch::randn({1, C, 1, H, W}, gen), torch::zeros({1, 1}), context, {}));
  };
  for (int i = 0; i < 3; ++i) commit();  // chunks 0, 1, 2: nothing dropped yet
  const int64_t blocks = stream->cache().blocks();
  std::vector<torch::Tensor> sink0, last0;
  for (int64_t b = 0; b < blocks; ++b) {
    sink0.push_back(stream->cache().keys(b, 0).clone());  // chunk 0 at frame 0
    last0.push_back(stream->cache().keys(b, 2).clone());  // chunk 2
  }
  commit();  // chunk 3: chunk 1 is dropped, the sink moves one frame
  ASSERT_EQ(stream->cache().segments().size(), 3u);
  EXPECT_EQ(stream->cache().segments()[1].chunk, 2);
  const int64_t head_dim = static_cast<const WanDiTImpl&>(model).config().head_dim();
  const auto at0 = rope_table(head_dim, {1, H / 2, W / 2}, torch::kCPU, 0);
  const auto at1 = rope_table(head_dim, {1, H / 2, W / 2}, torch::kCPU, 1);
  // cos(a1 - a0) and sin(a1 - a0): the turn from frame 0 to frame 1 (zero on the height and width pairs)
  const RopeTable turn{at1.cos * at0.cos + at1.sin * at0.sin, at1.sin * at0.cos - at1.cos * at0.sin};
  for (int64_t b = 0; b < blocks; ++b) {
    EXPECT_LE(max_diff(stream->cache().keys(b, 0), apply_rope(sink0[b], turn)), 1e-5) << "block " << b;
    EXPECT_GT(max_diff(stream->cache().keys(b, 0), sink0[b]), 1e-3) << "block " << b;
    EXPECT_TRUE(torch::equal(stream->cache().keys(b, 1), last0[b])) << "block " << b;
  }
  const auto out = stream->forward(
      model_inputs(model, torch::randn({1, C, 1, H, W}, gen), torch::full({1, 1}, 700.0f), context, {}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

TEST_F(StreamTest, BadStreamFlagsNameTheFlagAndTheFix) {
  auto s = setup("tiny", "wan", 1, 0);
  EulerConfig ec;
  ec.steps = 1;
  auto run = [&](int64_t chunks, int64_t window, int64_t sink) {
    StreamOptions o;
    o.chunks = chunks, o.window = window, o.sink_chunks = sink;
    stream_causal_window(*s.model, *s.ds, 0, 1, ec, 5, false, o);
  };
  test::expect_error([&] { run(3, 0, -1); }, {"--window 0", "--window 1 or more"});
  test::expect_error([&] { run(9, -1, -1); }, {"--chunks 9", "past the 6 chunks", "--window K"});
  test::expect_error([&] { run(9, 5, -1); }, {"--window 5", "--sink-chunks 1", "use --window 4 or less"});
  test::expect_error([&] { run(3, 2, -2); }, {"--sink-chunks -2"});
}

// `vdt sample --causal --stream`: each chunk in its own file as it is done, the stream and its preview; the stream
// flags without --stream, and --window 0, are refused naming the flag.
TEST_F(StreamTest, SampleStreamWritesEveryChunk) {
  CausalConfig c;
  c.data_root = dir_->file("wan"), c.out = dir_->file("run"), c.model = "tiny", c.random_init = true;
  c.compute.device = "cpu", c.compute.precision = "fp32", c.chunk_frames = 1, c.lora_rank = 4, c.lora_alpha = 4;
  c.steps = 2;
  c.save_every = 2, c.val_clips = 2, c.warmup = 1;
  train_causal(c);
  const auto out = dir_->file("stream_out");
  const std::string lora = lora_step_path(c.out, 2);
  ASSERT_EQ(test::spawn_vdt({"sample", "--causal", "--stream", "--lora", lora, "--data_root", c.data_root, "--out", out,
                             "--n", "1", "--steps", "2", "--chunks", "8", "--window", "3"},
                            {}),
            0);
  fs::path stream_file;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".safetensors") stream_file = e.path();
  ASSERT_FALSE(stream_file.empty());
  const auto f = SafetensorsFile::open(stream_file.string());
  const auto sample = f->get("sample");
  EXPECT_EQ(sample.sizes(), (std::vector<int64_t>{16, 8, 8, 8}));
  EXPECT_EQ(f->metadata().at("window"), "3");
  const auto chunks = fs::path(stream_file).replace_extension(".chunks");
  for (int64_t k = 0; k < 8; ++k) {
    char name[32];
    std::snprintf(name, sizeof(name), "chunk_%05lld.safetensors", static_cast<long long>(k));
    const auto part = SafetensorsFile::open((chunks / name).string())->get("sample");
    EXPECT_TRUE(torch::equal(part, sample.narrow(1, k, 1))) << k;
  }
  EXPECT_TRUE(fs::exists(fs::path(stream_file).replace_extension(".png")));
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--window 2", "belong to --stream"},
           {"--stream --window 0", "--window 0"},
           {"--stream --chunks 9", "--window K"},
           {"--fp8 on", "belong to --stream"},
           {"--stream --fp8 on", "compute capability"},
           {"--stream --fp8 emulate", "--fp8 off, on or fast"},
           {"--stream --cuda-graphs on", "--cuda-graphs on: CUDA graphs need a CUDA device"}}) {
    const auto r = test::run_vdt("sample --causal --lora '" + lora + "' --data_root '" + c.data_root + "' --out '" +
                                 dir_->file("bad") + "' --steps 1 " + args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
  }
}

// `vdt train causal --val-sample-every N`: the stream's frames and seconds per chunk in TensorBoard every N steps;
// training numbers are those of a run without it.
TEST_F(StreamTest, TrainerStreamsTheFirstValWindow) {
  auto config = [&](const std::string& name) {
    CausalConfig c;
    c.data_root = dir_->file("wan"), c.out = dir_->file(name), c.model = "tiny", c.random_init = true;
    c.compute.device = "cpu", c.compute.precision = "fp32", c.chunk_frames = 1, c.lora_rank = 4, c.lora_alpha = 4;
    c.steps = 4;
    c.save_every = 4, c.val_clips = 2, c.warmup = 1, c.preview_steps = 2;
    return c;
  };
  auto on = config("val_stream");
  on.val_sample_every = 2;
  const auto with = train_causal(on);
  const auto without = train_causal(config("val_no_stream"));
  EXPECT_EQ(with.losses, without.losses);
  auto bad = config("val_stream_bad");
  bad.val_sample_every = -1;
  test::expect_error([&] { bad.validate(); }, {"--val-sample-every -1"});
  const auto tb = test::read_tensorboard(on.out + "/tensorboard");
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  ASSERT_EQ(tb.scalars.count("val/stream_chunk_s"), 1u);
  EXPECT_EQ(tb.scalars.at("val/stream_chunk_s").size(), 2u);  // steps 2 and 4
  ASSERT_EQ(tb.images.size(), 1u);
  EXPECT_EQ(tb.images.begin()->first.rfind("stream/", 0), 0u);
  EXPECT_EQ(tb.images.begin()->second.size(), 2u);
}

TEST_F(StreamTest, SampleBenchRunsOnTheCpu) {
  for (const auto& preset : {"tiny", "h3-tiny"}) {
    SampleBenchConfig c;
    c.model = preset, c.height = 4, c.width = 4, c.chunks = 4, c.window = 2, c.steps = 2, c.cfg = 2.0;
    c.text_len = 8, c.lora_rank = 4, c.device = "cpu", c.precision = "fp32";
    const auto r = run_sample_bench(c);
    ASSERT_EQ(r.chunk_s.size(), 4u) << preset;
    EXPECT_GT(r.frames_per_s, 0) << preset;
    EXPECT_GT(r.cache_gib, 0) << preset;
    EXPECT_EQ(r.commit_s.back(), 0) << preset;  // the last chunk needs no commit
    EXPECT_GT(r.commit_s.front(), 0) << preset;
    EXPECT_FALSE(r.graphs) << preset;
  }
  // VDT_TRACE: chunk 2's steps and commit in a chrome trace.
  const auto trace = dir_->file("bench_sample_trace.json");
  const test::EnvVar path("VDT_TRACE", trace), step("VDT_TRACE_STEP", "2");
  SampleBenchConfig c;
  c.model = "tiny", c.height = 4, c.width = 4, c.chunks = 3, c.steps = 2, c.text_len = 8, c.lora_rank = 4;
  c.device = "cpu", c.precision = "fp32";
  run_sample_bench(c);
  EXPECT_GT(fs::file_size(trace), 1000u);
}

}  // namespace
}  // namespace vdt
