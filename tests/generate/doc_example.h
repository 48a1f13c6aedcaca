// The example of docs/generate.md, compiled and run by tests/generate/test_doc_example.cpp, which also checks that the
// page shows this very code. Keep the two in step: edit here, then copy the block between the markers to the page.
#pragma once
// [docs/generate.md example begin]
#include <cstdio>

#include "generate/generation_model.h"
#include "generate/request.h"

// Streams `chunks` chunks from a LoRA file and the program's own conditions: a prompt's text rows [1, Lt, text_dim],
// the null prompt's (guidance against it), and a first frame [C, 1, H, W] on the latent grid.
inline vdt::StreamResult stream_from_prompt(const std::string& lora, const torch::Tensor& prompt,
                                            const torch::Tensor& null_prompt, const torch::Tensor& first_frame,
                                            int64_t chunks) {
  // The base the LoRA names (its metadata 'model' and 'weights'; a random base without weights), the LoRA loaded.
  auto g = vdt::load_generation_model(lora, /*weights=*/"", torch::kCPU, torch::kFloat32);
  vdt::GenerationRequest q;
  q.conditions.text = torch::cat({prompt, null_prompt});  // [2, Lt, text_dim]: row 0 conditions every frame
  q.conditions.null_row = 1;
  q.conditions.first_frame = first_frame;
  q.height = first_frame.size(2), q.width = first_frame.size(3);
  q.chunk_frames = g.meta.chunk_frames, q.span_chunks = g.meta.span_chunks;  // as the LoRA was trained
  q.chunks = chunks;
  q.window = g.meta.span_chunks - 2;  // past the span: keep the sink and this many finished chunks
  q.euler.steps = 4, q.euler.cfg_scale = 5;
  vdt::StreamHooks hooks;
  hooks.on_chunk = [](const vdt::StreamChunk& c) {  // [C, cf, H, W] on the host, as soon as it is made
    std::printf("chunk %lld: %.3f s\n", static_cast<long long>(c.index), c.seconds);
  };
  return vdt::generate_stream(*g.model, q, hooks);  // .sample [C, chunks * cf, H, W]
}
// [docs/generate.md example end]
