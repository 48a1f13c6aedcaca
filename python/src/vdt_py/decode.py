"""``vdt decode``: latents written by ``vdt sample`` (or a data root's latents file) -> mp4 videos + a contact sheet.

Each input safetensors file holds one or more normalised latent tensors [C, F, h, w] (``vdt sample`` writes
``ground_truth``, ``conditioned``, ``unconditioned``; ``--causal`` writes ``ground_truth``, ``sample``; a data root's
clip holds ``latents``). Every tensor is decoded with the Wan VAE to ``<out>/<stem>_<key>.mp4`` (T = 4(F-1)+1 frames),
and ``<out>/<stem>.png`` shows ``--columns`` frames of each, one row per tensor.
"""
from __future__ import annotations

import argparse
import os
import sys

from safetensors.torch import load_file

from .devices import default_dtype, resolve_device
from .errors import VdtError
from .video_io import contact_sheet, write_mp4


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("inputs", nargs="+", help="safetensors files from vdt sample (or directories of them)")
    ap.add_argument("--vae", required=True, help="diffusers AutoencoderKLWan dir (the one the data was prepared with)")
    ap.add_argument("--out", default="", help="output directory (default: beside each input)")
    ap.add_argument("--keys", default="", help="comma-separated tensors to decode (default: every 4-D tensor)")
    ap.add_argument("--fps", type=float, default=16.0, help="frame rate of the mp4 (Wan2.2 TI2V-5B: 24; default 16)")
    ap.add_argument("--columns", type=int, default=6, help="frames per contact-sheet row (default 6)")
    ap.add_argument("--no-video", "--no_video", dest="video", action="store_false", help="only the contact sheet")
    ap.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16")


def expand(inputs: list[str]) -> list[str]:
    files = []
    for p in inputs:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".safetensors"))
            if not found:
                raise VdtError(f"{p}: no .safetensors files in this directory")
            files += found
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise VdtError(f"{p}: no such file or directory")
    return files


def run(args: argparse.Namespace) -> int:
    from .wan_vae import WanVae

    files = expand(args.inputs)
    device = resolve_device(args.device)
    vae = WanVae(args.vae, device, default_dtype(device, args.dtype))
    wanted = [k for k in args.keys.split(",") if k]
    for path in files:
        tensors = load_file(path)
        keys = wanted or [k for k, t in tensors.items() if t.dim() == 4]
        missing = [k for k in keys if k not in tensors]
        if missing or not keys:
            raise VdtError(f"{path}: no tensor {', '.join(missing) or '[C, F, h, w]'} (it has {', '.join(tensors)})")
        out = args.out or os.path.dirname(os.path.abspath(path))
        os.makedirs(out, exist_ok=True)
        stem = os.path.splitext(os.path.basename(path))[0]
        rows = []
        for k in keys:
            t = tensors[k]
            if t.dim() == 5 and t.shape[0] == 1:
                t = t[0]
            frames = vae.decode(t)                                      # [T, H, W, 3] uint8
            rows.append((k, frames))
            if args.video:
                mp4 = os.path.join(out, f"{stem}_{k}.mp4")
                write_mp4(mp4, frames, args.fps)
                print(f"[decode] {path} '{k}' {list(t.shape)} -> {mp4} ({frames.shape[0]} frames "
                      f"{frames.shape[2]}x{frames.shape[1]})", flush=True)
        png = os.path.join(out, f"{stem}.png")
        contact_sheet(rows, args.columns).save(png)
        print(f"[decode] contact sheet {png} (rows: {', '.join(keys)})", flush=True)
    return 0
