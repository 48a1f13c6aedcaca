"""The Wan VAE (diffusers ``AutoencoderKLWan``) as vdt uses it: pixel frames <-> normalised latents.

Wan2.2 (TI2V-5B) VAE: 48 latent channels, 16x spatial (a 2x2 patchify + 8x convolutions), 4x temporal and causal in
time: T = 4n+1 frames give F = n+1 latent frames (frame 0 alone gives latent 0, each later group of 4 frames one more).
The DiT sees latents normalised per channel, ``z = (mu - mean[c]) / std[c]``, with the 48 ``latents_mean`` /
``latents_std`` values of the VAE's config.json (docs/data_format.md lists them); the encode takes the posterior's
mode (mean), as the Wan pipelines do. A Wan2.1 VAE (16 channels, 8x spatial) works the same way with its own 16 values.
"""
from __future__ import annotations

import os

import torch

from .errors import VdtError


def vae_dir(path: str) -> str:
    """A VAE directory: one with config.json, or a diffusers pipeline directory holding vae/."""
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    if os.path.isfile(os.path.join(path, "vae", "config.json")):
        return os.path.join(path, "vae")
    raise VdtError(f"--vae {path}: no config.json here or in {path}/vae; expected a diffusers AutoencoderKLWan "
                   f"directory (e.g. Wan2.2-TI2V-5B-Diffusers/vae)")


class WanVae:
    def __init__(self, path: str, device: torch.device, dtype: torch.dtype):
        from diffusers import AutoencoderKLWan

        d = vae_dir(path)
        try:
            self.vae = AutoencoderKLWan.from_pretrained(d, torch_dtype=dtype).to(device).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise VdtError(f"--vae {d}: cannot load an AutoencoderKLWan: {e}") from None
        cfg = self.vae.config
        self.z_dim = int(cfg.z_dim)
        for key in ("latents_mean", "latents_std"):
            vals = getattr(cfg, key, None)
            if vals is None or len(vals) != self.z_dim:
                raise VdtError(f"{d}/config.json: '{key}' must list {self.z_dim} values (one per latent channel, "
                               f"z_dim {self.z_dim}); found {None if vals is None else len(vals)}")
        self.mean = torch.tensor(cfg.latents_mean, dtype=torch.float32).view(-1, 1, 1, 1)
        self.std = torch.tensor(cfg.latents_std, dtype=torch.float32).view(-1, 1, 1, 1)
        self.spatial = int(getattr(cfg, "scale_factor_spatial", None) or 8)
        self.temporal = int(getattr(cfg, "scale_factor_temporal", None) or 4)
        self.device, self.dtype, self.path = device, dtype, d

    def latent_frames(self, frames: int) -> int:
        """T = 4n+1 pixel frames -> n+1 latent frames (temporal factor 4); other T is an error."""
        if frames < 1 or (frames - 1) % self.temporal:
            raise VdtError(f"--frames {frames}: the Wan VAE needs {self.temporal}n+1 frames (e.g. 81 -> 21 latent frames)")
        return (frames - 1) // self.temporal + 1

    @torch.no_grad()
    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [T, H, W, 3] uint8 -> normalised latents [C, F, H/s, W/s] float32 (F = (T-1)/4 + 1)."""
        x = frames.permute(3, 0, 1, 2).unsqueeze(0)                    # [1, 3, T, H, W]
        x = x.to(self.device, torch.float32).div(127.5).sub(1.0).to(self.dtype)
        mu = self.vae.encode(x).latent_dist.mode()[0].float().cpu()    # [C, F, h, w]
        return (mu - self.mean) / self.std

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """normalised latents [C, F, h, w] -> frames [T, H, W, 3] uint8 (T = 4(F-1)+1)."""
        if latents.dim() != 4 or latents.shape[0] != self.z_dim:
            raise VdtError(f"latents of shape {list(latents.shape)} do not fit the VAE {self.path} "
                           f"(expected [{self.z_dim}, F, h, w])")
        z = latents.float() * self.std + self.mean
        x = self.vae.decode(z.unsqueeze(0).to(self.device, self.dtype)).sample[0]  # [3, T, H, W] in [-1, 1]
        x = x.float().clamp(-1, 1).add(1).mul(127.5).round().to(torch.uint8)
        return x.permute(1, 2, 3, 0).cpu()                                         # [T, H, W, 3]
