"""MiniMax-H3's encoders as ``vdt data prepare --model h3`` uses them: the video VAE, the audio VAE (for the silent audio
latent) and the Qwen3-VL text encoder, all from local directories.

* Video VAE: diffusers ``AutoencoderKLMiniMaxH3`` (H3-VisualVAE: 24 channels, 16x spatial, 4x temporal, each 17-frame
  clip encoded on its own, so ``17n + 5`` pixel frames give ``5n + 2`` latent frames). Pixels in [0, 1] normalised with
  the ImageNet mean/std go in; the posterior mean comes out and is normalised per channel with the config's
  ``latents_mean`` / ``latents_std``: ``z = (mu - mean[c]) / std[c]``. A single image (Picture 1) is encoded as one
  frame (one latent frame). ``decode`` (``vdt decode``) undoes both: ``mu = z * std[c] + mean[c]``, the VAE's decode
  (7-latent windows, a 5-frame cross-fade between clips), then ``pixel * imagenet_std + imagenet_mean`` clamped to
  [0, 1]. Latent frame k covers pixel frames from ``h3_first_pixel_frame(k)`` on (each clip's 5 latents cover 1, 4, 4,
  4, 4 frames), so F latent frames decode to ``h3_first_pixel_frame(F)`` frames: 5N -> 17N, 5n + 2 -> 17n + 5.
* Audio VAE: diffusers ``AutoencoderKLMiniMaxH3Audio`` (H3-AudioVAE, 32 kHz mono, hop 800 -> 40 latents/s, 32
  channels). The silent audio latent is the encoding of a zero stereo waveform (each channel as mono), normalised with
  the config's statistics when it has them: it is not the zero latent. ``decode`` turns normalised latents
  [2, 32, A] back into a stereo waveform of A * 800 samples (each channel decoded as mono).
* Text: transformers ``Qwen3VLModel`` with its tokenizer and image processor (``preprocessor_config.json``). The prompt
  is ``"<Picture 1>: "`` + ``<|vision_start|>`` + one ``<|image_pad|>`` per merged vision patch of Picture 1 +
  ``<|vision_end|>`` + the caption, with no chat template and no other special tokens; the conditioning is the hidden
  state after decoder layer ``text_layer`` (50 of Qwen3-VL-32B's 64: un-normalised). Tags: 0 for the vision block
  (``<|vision_start|>``, the image tokens, ``<|vision_end|>``: they take the DiT's video AdaLN), 1 for text.
"""
from __future__ import annotations

import os

import torch

from .errors import VdtError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"


def _model_dir(path: str, sub: str, flag: str, what: str) -> str:
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    if os.path.isfile(os.path.join(path, sub, "config.json")):
        return os.path.join(path, sub)
    raise VdtError(f"{flag} {path}: no config.json here or in {path}/{sub}; expected {what}")


def h3_frames_ok(frames: int) -> bool:
    return frames >= 5 and (frames - 5) % 17 == 0


def h3_first_pixel_frame(k: int, clip_length: int = 17, temporal: int = 4) -> int:
    """The first pixel frame of latent frame k: a clip of 17 frames gives 5 latents covering 1, 4, 4, 4, 4 frames (the
    VAE pads 3 frames before each clip), as ``h3_first_pixel_frame`` in src/model/h3/h3_packer.h. F latent frames
    decode to ``h3_first_pixel_frame(F)`` pixel frames."""
    per_clip = -(-clip_length // temporal)                                  # 5 latents per clip
    pre_pad = per_clip * temporal - clip_length                            # 3 padded frames before each clip
    c, m = divmod(k, per_clip)
    return clip_length * c + (0 if m == 0 else temporal * m - pre_pad)


class H3VideoVae:
    def __init__(self, path: str, device: torch.device, dtype: torch.dtype):
        from diffusers import AutoencoderKLMiniMaxH3

        d = _model_dir(path, "vae", "--vae", "a diffusers AutoencoderKLMiniMaxH3 directory (MiniMax-H3's vae/)")
        try:
            self.vae = AutoencoderKLMiniMaxH3.from_pretrained(d, torch_dtype=dtype).to(device).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise VdtError(f"--vae {d}: cannot load an AutoencoderKLMiniMaxH3: {e}") from None
        cfg = self.vae.config
        self.z_dim = int(cfg.latent_channels)
        for key in ("latents_mean", "latents_std"):
            vals = getattr(cfg, key, None)
            if vals is None or len(vals) != self.z_dim:
                raise VdtError(f"{d}/config.json: '{key}' must list {self.z_dim} values (one per latent channel); "
                               f"found {None if vals is None else len(vals)}")
        self.mean = torch.tensor(cfg.latents_mean, dtype=torch.float32).view(-1, 1, 1, 1)
        self.std = torch.tensor(cfg.latents_std, dtype=torch.float32).view(-1, 1, 1, 1)
        self.spatial = int(self.vae.spatial_compression_ratio)
        self.clip_length, self.token_drop = int(cfg.clip_length), int(cfg.token_drop)
        self.device, self.dtype, self.path = device, dtype, d

    def latent_frames(self, frames: int) -> int:
        """17n + 5 pixel frames -> 5n + 2 latent frames; other counts are an error naming --frames."""
        if not h3_frames_ok(frames):
            raise VdtError(f"--frames {frames}: the H3 video VAE needs 17n+5 frames (22, 39, ..., 124 -> 37 latent "
                           f"frames); it encodes 17-frame clips and drops {self.token_drop} latents of the padded last one")
        n = (frames - 5) // 17
        return 5 * n + 2

    @torch.no_grad()
    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [T, H, W, 3] uint8 -> normalised latents [24, F, H/16, W/16] float32 (T = 1: one latent frame)."""
        x = frames.permute(3, 0, 1, 2).unsqueeze(0).to(self.device, torch.float32).div(255.0)  # [1, 3, T, H, W] in [0, 1]
        m = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1, 1)
        s = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1, 1)
        mu = self.vae.encode(((x - m) / s).to(self.dtype)).latent_dist.mode()[0].float().cpu()  # [C, F, h, w]
        return (mu - self.mean) / self.std

    def pixel_frames(self, latent_frames: int) -> int:
        """F latent frames -> the pixel frames the decode gives (5N -> 17N, 5n + 2 -> 17n + 5)."""
        return h3_first_pixel_frame(latent_frames, self.clip_length, int(self.vae.temporal_compression_ratio))

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """normalised latents [24, F, h, w] (F >= 3) -> frames [T, 16h, 16w, 3] uint8, T = ``pixel_frames(F)``."""
        if latents.dim() != 4 or latents.shape[0] != self.z_dim:
            raise VdtError(f"latents of shape {list(latents.shape)} do not fit the H3 video VAE {self.path} "
                           f"(expected [{self.z_dim}, F, h, w])")
        if latents.shape[1] < 3:
            raise VdtError(f"latents of {latents.shape[1]} frame(s): the H3 video VAE decodes 3 or more latent frames "
                           f"(it decodes 7-latent windows; a 17-frame clip is 5 latents)")
        z = latents.float() * self.std + self.mean
        x = self.vae.decode(z.unsqueeze(0).to(self.device, self.dtype)).sample[0].float()  # [3, T, H, W], ImageNet space
        m = torch.tensor(IMAGENET_MEAN, device=x.device).view(3, 1, 1, 1)
        s = torch.tensor(IMAGENET_STD, device=x.device).view(3, 1, 1, 1)
        x = (x * s + m).clamp(0, 1).mul(255).round().to(torch.uint8)
        return x.permute(1, 2, 3, 0).cpu()                                                # [T, H, W, 3]


class H3AudioVae:
    def __init__(self, path: str, device: torch.device):
        from diffusers import AutoencoderKLMiniMaxH3Audio

        d = _model_dir(path, "audio_vae", "--audio-vae",
                       "a diffusers AutoencoderKLMiniMaxH3Audio directory (MiniMax-H3's audio_vae/)")
        try:
            self.vae = AutoencoderKLMiniMaxH3Audio.from_pretrained(d).to(device).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise VdtError(f"--audio-vae {d}: cannot load an AutoencoderKLMiniMaxH3Audio: {e}") from None
        cfg = self.vae.config
        self.channels, self.hop, self.rate = int(cfg.latent_channels), int(self.vae.hop_length), int(cfg.sampling_rate)
        mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
        for key, vals in (("latents_mean", mean), ("latents_std", std)):
            if vals is not None and len(vals) != self.channels:
                raise VdtError(f"{d}/config.json: '{key}' lists {len(vals)} values; expected {self.channels}")
        self.mean = torch.tensor(mean if mean is not None else [0.0] * self.channels).view(1, -1, 1)
        self.std = torch.tensor(std if std is not None else [1.0] * self.channels).view(1, -1, 1)
        self.device, self.path = device, d

    def steps_for(self, frames: int, fps: float = 24.0) -> int:
        """Audio latents of a clip of `frames` video frames at `fps`: round(frames / fps * 40) at 32 kHz / hop 800."""
        return int(round(frames / fps * self.rate / self.hop))

    @torch.no_grad()
    def silence(self, steps: int) -> torch.Tensor:
        """The normalised latent of `steps` * hop samples of a zero stereo waveform: [2, channels, steps] float32."""
        wave = torch.zeros(2, 1, steps * self.hop, device=self.device)
        mu = self.vae.encode(wave).latent_dist.mode().float().cpu()            # [2, channels, steps]
        return (mu - self.mean) / self.std

    def check_shape(self, shape: list[int], what: str) -> None:
        if len(shape) != 3 or shape[0] != 2 or shape[1] != self.channels or shape[2] < 1:
            raise VdtError(f"{what} has shape {shape}; the audio VAE {self.path} decodes [2, {self.channels}, steps] "
                           f"(two channels of normalised H3 audio latents, {self.rate / self.hop:g} steps per second)")

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """normalised latents [2, channels, A] -> a stereo waveform [2, A * hop] float32 in [-1, 1] at ``rate`` Hz
        (each channel decoded as mono, as it was encoded)."""
        self.check_shape(list(latents.shape), "audio latents")
        z = latents.float() * self.std + self.mean
        wave = self.vae.decode(z.to(self.device)).sample                       # [2, 1, A * hop]
        return wave[:, 0].float().clamp(-1, 1).cpu()


class Qwen3VLText:
    def __init__(self, path: str, device: torch.device, dtype: torch.dtype, text_len: int, layer: int):
        from transformers import AutoTokenizer, Qwen3VLModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()                                 # no "Loading weights" bar in the log
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        d = path
        if not os.path.isfile(os.path.join(d, "config.json")) and os.path.isfile(os.path.join(d, "text_encoder", "config.json")):
            d = os.path.join(d, "text_encoder")
        if not os.path.isfile(os.path.join(d, "config.json")):
            raise VdtError(f"--text-encoder {path}: no config.json; expected a transformers Qwen3-VL directory with its "
                           f"tokenizer and preprocessor_config.json (MiniMax-H3's text_encoder/)")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(d)
            self.images = Qwen2VLImageProcessorPil.from_pretrained(d)
        except (OSError, ValueError) as e:
            raise VdtError(f"--text-encoder {d}: cannot load the Qwen3-VL tokenizer / image processor: {e}") from None
        try:
            self.model = Qwen3VLModel.from_pretrained(d, dtype=dtype).to(device).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise VdtError(f"--text-encoder {d}: cannot load a Qwen3VLModel: {e}") from None
        n_layers = int(self.model.config.text_config.num_hidden_layers)
        if not 1 <= layer < n_layers:
            raise VdtError(f"--text-layer {layer}: the encoder in {d} has {n_layers} decoder layers; expected 1.."
                           f"{n_layers - 1} (the un-normalised hidden state after that layer; MiniMax-H3 takes 50 of 64)")
        ids = {t: self.tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, IMAGE_PAD, VISION_END)}
        unk = getattr(self.tokenizer, "unk_token_id", None)
        missing = [t for t, i in ids.items() if i is None or i == unk]
        if missing:
            raise VdtError(f"--text-encoder {d}: the tokenizer lacks {', '.join(missing)}; expected a Qwen3-VL tokenizer")
        self.vision_ids = torch.tensor(sorted(ids.values()))
        self.image_pad = ids[IMAGE_PAD]
        self.dim = int(self.model.config.text_config.hidden_size)
        self.text_len, self.layer, self.device, self.path = text_len, layer, device, d

    @torch.no_grad()
    def encode(self, caption: str, picture1=None, where: str = "") -> tuple[torch.Tensor, int, torch.Tensor]:
        """(rows [text_len, dim] float32 with zero rows past the length, length, tags [text_len] uint8) for
        "<Picture 1>: " + Picture 1's vision block + caption, or the caption alone without a picture."""
        kw = {}
        text = caption
        if picture1 is not None:
            from PIL import Image

            img = Image.fromarray(picture1.numpy()) if isinstance(picture1, torch.Tensor) else picture1
            pi = self.images(images=[img], return_tensors="pt")
            n = int(pi["image_grid_thw"][0].prod()) // int(self.images.merge_size) ** 2
            text = "<Picture 1>: " + VISION_START + IMAGE_PAD * n + VISION_END + caption
            kw = {"pixel_values": pi["pixel_values"].to(self.device, self.model.dtype),
                  "image_grid_thw": pi["image_grid_thw"].to(self.device)}
        ids = self.tokenizer([text], add_special_tokens=False, return_tensors="pt").input_ids  # [1, L]
        length = int(ids.shape[1])
        if length > self.text_len:
            raise VdtError(f"{where}: the prompt is {length} tokens (Picture 1's vision tokens included); --text-len is "
                           f"{self.text_len}; ---> HINT: raise --text-len, or shorten the caption")
        tags = torch.ones(self.text_len, dtype=torch.uint8)
        tags[:length] = (~torch.isin(ids[0], self.vision_ids)).to(torch.uint8)
        rows = torch.zeros(self.text_len, self.dim)
        if length > 0:
            ids = ids.to(self.device)
            mm = (ids == self.image_pad).to(torch.int32)                       # 1: image token (M-RoPE positions)
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=mm,
                             output_hidden_states=True, **kw)
            rows[:length] = out.hidden_states[self.layer][0].float().cpu()  # [L, dim], after decoder layer `layer`
        return rows, length, tags
