"""Tiny random Wan models for tests and a CPU walk-through: the real diffusers/transformers classes and loading code,
small configs, random weights, nothing downloaded.

* ``vae/``: ``AutoencoderKLWan``. ``--z-dim 48``: the Wan2.2 layout (2x2 patchify, residual, 16x spatial, the 48
  real ``latents_mean``/``latents_std``); ``--z-dim 16``: the Wan2.1 layout (8x spatial, its 16 real values), which
  fits vdt's ``tiny`` DiT preset (16 latent channels).
* ``text_encoder/``: ``UMT5EncoderModel`` (d_model ``--text-dim``, 64 fits the ``tiny`` preset) with a small
  Unigram tokenizer trained on the fly (pad 0, EOS 1 appended, unk 2, like umT5's).

``--family h3`` writes MiniMax-H3's three instead (hidden 48 fits vdt's ``h3-tiny`` preset):

* ``vae/``: ``AutoencoderKLMiniMaxH3`` with the real geometry (24 channels, 16x spatial, 4x temporal, 17-frame clips,
  3 latents dropped) and narrow layers; its per-channel ``latents_mean`` / ``latents_std`` are seeded stand-ins, not
  the released values (the normalisation code is what the tests check);
* ``audio_vae/``: ``AutoencoderKLMiniMaxH3Audio`` (32 kHz, hop 800, 32 channels) with narrow layers;
* ``text_encoder/``: ``Qwen3VLModel`` (3 decoder layers, hidden ``--text-dim``, a 2-block vision tower with patch 16
  and 2x2 merge) with a byte-level BPE tokenizer holding Qwen's vision tokens and the ``Qwen2VLImageProcessor`` config.
"""
from __future__ import annotations

import argparse
import os

import torch

# Wan2.2-VAE per-channel statistics (z = (mu - mean) / std), as in the Wan2.2 VAE's config.json.
WAN22_MEAN = [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
              0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
              -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
              -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667]
WAN22_STD = [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
             0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
             0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
             0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744]

CORPUS = ["a red car turns left at the crossing", "a dog runs along the beach", "the camera pans right over a city",
          "two people walk through a park in autumn", "a robot arm picks up a blue cube", "waves roll onto the shore",
          "a cyclist rides down a mountain road", "the sun sets behind the hills", "rain falls on a quiet street"]


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out", help="directory to write vae/ and text_encoder/ into")
    ap.add_argument("--z-dim", "--z_dim", dest="z_dim", type=int, choices=(16, 48), default=48)
    ap.add_argument("--text-dim", "--text_dim", dest="text_dim", type=int, default=None,
                    help="text width (default: 64 for wan, fits vdt's tiny preset; 48 for h3, fits h3-tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", choices=("wan", "h3"), default="wan", help="wan (default) or h3 (MiniMax-H3's encoders)")


def tiny_vae(z_dim: int):
    from diffusers import AutoencoderKLWan

    if z_dim == 48:
        return AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=48, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                                temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                                out_channels=12, patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4,
                                latents_mean=WAN22_MEAN, latents_std=WAN22_STD)
    return AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                            temperal_downsample=[False, True, True])


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(CORPUS * 4, trainers.UnigramTrainer(vocab_size=160, special_tokens=["<pad>", "</s>", "<unk>"],
                                                                unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def tiny_umt5(vocab_size: int, text_dim: int):
    from transformers import UMT5Config, UMT5EncoderModel

    cfg = UMT5Config(vocab_size=vocab_size, d_model=text_dim, d_kv=16, d_ff=2 * text_dim, num_layers=2, num_heads=4,
                     relative_attention_num_buckets=8, relative_attention_max_distance=16,
                     feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    return UMT5EncoderModel(cfg)


def make(out: str, z_dim: int = 48, text_dim: int = 64, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    vae_dir, te_dir = os.path.join(out, "vae"), os.path.join(out, "text_encoder")
    tiny_vae(z_dim).save_pretrained(vae_dir)
    tok = tiny_tokenizer()
    tok.save_pretrained(te_dir)
    tiny_umt5(len(tok), text_dim).save_pretrained(te_dir)
    return {"vae": vae_dir, "text_encoder": te_dir}


QWEN_SPECIAL = ["<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def tiny_qwen_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS * 4 + ["<Picture 1>: "] * 4, trainers.BpeTrainer(
        vocab_size=400, special_tokens=QWEN_SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|endoftext|>")


def tiny_h3(out: str, text_dim: int = 48, seed: int = 0) -> dict:
    from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio
    from transformers import Qwen3VLConfig, Qwen3VLModel
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    dirs = {k: os.path.join(out, k) for k in ("vae", "audio_vae", "text_encoder")}
    AutoencoderKLMiniMaxH3(
        block_out_channels=(8, 8, 8, 16, 16, 16), layers_per_block=1, norm_num_groups=4, decoder_num_layers=1,
        decoder_num_attention_heads=2, decoder_attention_head_dim=8, decoder_num_register_tokens=1,
        latents_mean=(torch.randn(24, generator=g) * 0.2).tolist(),
        latents_std=(0.5 + torch.rand(24, generator=g)).tolist()).save_pretrained(dirs["vae"])
    AutoencoderKLMiniMaxH3Audio(
        encoder_dim=4, latent_dim=64, latent_channels=32, num_attention_heads=2, decoder_dim=128,
        resblock_kernel_sizes=(3,), resblock_dilation_sizes=((1,),),
        latents_mean=(torch.randn(32, generator=g) * 0.1).tolist(),
        latents_std=(0.5 + torch.rand(32, generator=g)).tolist()).save_pretrained(dirs["audio_vae"])
    tok = tiny_qwen_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL}
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=text_dim, intermediate_size=2 * text_dim, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=24,
                         rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 4, 4],
                                          "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text_dim,
                           num_position_embeddings=64, deepstack_visual_indexes=[0]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    Qwen3VLModel(cfg).save_pretrained(dirs["text_encoder"])
    tok.save_pretrained(dirs["text_encoder"])
    # Few vision tokens: 32x32 px per merged token, at most 16 of them.
    Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32,
                             max_pixels=16 * 32 * 32).save_pretrained(dirs["text_encoder"])
    return dirs


def run(args: argparse.Namespace) -> int:
    if args.family == "h3":
        text_dim = args.text_dim or 48
        dirs = tiny_h3(args.out, text_dim, args.seed)
        print(f"[tiny-models] random AutoencoderKLMiniMaxH3 -> {dirs['vae']}; AutoencoderKLMiniMaxH3Audio -> "
              f"{dirs['audio_vae']}; Qwen3VLModel (hidden {text_dim}) + tokenizer + image processor -> "
              f"{dirs['text_encoder']}")
        return 0
    text_dim = args.text_dim or 64
    dirs = make(args.out, args.z_dim, text_dim, args.seed)
    print(f"[tiny-models] random AutoencoderKLWan (z_dim {args.z_dim}) -> {dirs['vae']}; random UMT5EncoderModel "
          f"(d_model {text_dim}) + tokenizer -> {dirs['text_encoder']}")
    return 0
