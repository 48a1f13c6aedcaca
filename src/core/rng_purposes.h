// Every purpose of a random stream (core/rng.h), registered in one place so two owners can never share one by
// accident: a stream is (seed, purpose), and a draw's counters carry its meaning (epoch, sample, chunk...). The values
// are part of the pinned numerics (golden curves, resume): never renumber one. tests/core/test_rng.cpp checks that
// they are distinct. Not here: how the draws are used (their owners).
#pragma once
#include <array>
#include <cstdint>
#include <utility>

namespace vdt::rng_purpose {

// data/: dropout and mask draws per (epoch, sample), epoch permutations, causal windows and the val-clip choice
inline constexpr uint32_t kTextDropout = 0xDA7A0001u;
inline constexpr uint32_t kCondDropout = 0xDA7A0002u;
inline constexpr uint32_t kMask = 0xDA7A0003u;
inline constexpr uint32_t kPermutation = 0xDA7A0010u;
inline constexpr uint32_t kWindowStart = 0xDA7A0020u;
inline constexpr uint32_t kValClips = 0xDA7A0021u;
// train sft: the timestep index and the noise of a micro batch (key: global micro-batch index)
inline constexpr uint32_t kSftTimestep = 0x74696d65u;  // "time"
inline constexpr uint32_t kSftNoise = 0x6e6f6973u;     // "nois"
// validation and sampling noise (key: clip id hash, timestep)
inline constexpr uint32_t kValNoise = 0x76616c6eu;      // "valn"
inline constexpr uint32_t kSample = 0x73616d70u;        // "samp"
inline constexpr uint32_t kCausalSample = 0x63736d70u;  // "csmp"
// train causal: per-chunk levels and window noise (key: global sample index); validation levels and noise
inline constexpr uint32_t kCausalLevels = 0x63617573u;     // "caus"
inline constexpr uint32_t kCausalNoise = 0x636e6f69u;      // "cnoi"
inline constexpr uint32_t kCausalValLevels = 0x6376616cu;  // "cval"
inline constexpr uint32_t kCausalValNoise = 0x6376616du;   // "cvam" (was "cval" + 1)
// train causal on a base with side streams / conditioning latents (H3): the audio stream's noise and Picture 1's
// conditioning noise, train (key: global sample index) and validation (key: window index)
inline constexpr uint32_t kCausalSideNoise = 0x63736964u;     // "csid"
inline constexpr uint32_t kCausalValSideNoise = 0x63767364u;  // "cvsd"
inline constexpr uint32_t kCausalCondNoise = 0x63636e64u;     // "ccnd"
inline constexpr uint32_t kCausalValCondNoise = 0x6376636eu;  // "cvcn"
// train/distill: the rollout's exit index and chunk count (keyed by step: equal on every rank), the DMD and critic
// timesteps (step, rank), the rollout's noise, the student's and the critic's noise (step, rank)
inline constexpr uint32_t kDistillRollout = 0x64726f6cu;      // "drol"
inline constexpr uint32_t kDistillTimestep = 0x6474696du;     // "dtim"
inline constexpr uint32_t kDistillNoise = 0x646e6f69u;        // "dnoi"
inline constexpr uint32_t kDistillDmdNoise = 0x64646d64u;     // "ddmd"
inline constexpr uint32_t kDistillCriticNoise = 0x64637269u;  // "dcri"
// model/: the random head of a random frozen base (tests, benchmarks)
inline constexpr uint32_t kRandomBaseHead = 0x72686561u;  // "rhea"
// tools/synth: the synthetic root (runs, clips, flagged rows, token vectors, the linear VAE)
inline constexpr uint32_t kSynthVae = 0x5E7A0001u;
inline constexpr uint32_t kSynthRun = 0x5E7A0010u;
inline constexpr uint32_t kSynthClip = 0x5E7A0011u;
inline constexpr uint32_t kSynthDrop = 0x5E7A0012u;
inline constexpr uint32_t kSynthToken = 0x5E7A0013u;
inline constexpr uint32_t kSynthSilence = 0x5E7A0014u;

// Every purpose above, by name (the distinctness test walks it).
inline constexpr std::array<std::pair<const char*, uint32_t>, 31> kAll = {
    {{"kTextDropout", kTextDropout},
     {"kCondDropout", kCondDropout},
     {"kMask", kMask},
     {"kPermutation", kPermutation},
     {"kWindowStart", kWindowStart},
     {"kValClips", kValClips},
     {"kSftTimestep", kSftTimestep},
     {"kSftNoise", kSftNoise},
     {"kValNoise", kValNoise},
     {"kSample", kSample},
     {"kCausalSample", kCausalSample},
     {"kCausalLevels", kCausalLevels},
     {"kCausalNoise", kCausalNoise},
     {"kCausalValLevels", kCausalValLevels},
     {"kCausalValNoise", kCausalValNoise},
     {"kRandomBaseHead", kRandomBaseHead},
     {"kSynthVae", kSynthVae},
     {"kSynthRun", kSynthRun},
     {"kSynthClip", kSynthClip},
     {"kSynthDrop", kSynthDrop},
     {"kSynthToken", kSynthToken},
     {"kSynthSilence", kSynthSilence},
     {"kCausalSideNoise", kCausalSideNoise},
     {"kCausalValSideNoise", kCausalValSideNoise},
     {"kCausalCondNoise", kCausalCondNoise},
     {"kCausalValCondNoise", kCausalValCondNoise},
     {"kDistillRollout", kDistillRollout},
     {"kDistillTimestep", kDistillTimestep},
     {"kDistillNoise", kDistillNoise},
     {"kDistillDmdNoise", kDistillDmdNoise},
     {"kDistillCriticNoise", kDistillCriticNoise}}};

}  // namespace vdt::rng_purpose
