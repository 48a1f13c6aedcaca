"""``vdt decode``: latents written by ``vdt sample`` (or a data root's latents file) -> mp4 videos + a contact sheet.

Each input safetensors file holds one or more normalised latent tensors [C, F, h, w] (``vdt sample`` writes
``ground_truth``, ``conditioned``, ``unconditioned``; ``--causal`` writes ``ground_truth``, ``sample``; ``--stream``
writes the same and a ``<clip>_f<start>.chunks/`` directory of per-chunk files holding ``sample``; a data root's clip
holds ``latents``). Every tensor is decoded to ``<out>/<stem>_<key>.mp4``, and ``<out>/<stem>.png`` shows
``--columns`` frames of each, one row per tensor. The family comes from the channel count (or ``--model``):

* Wan (48 or 16 channels): the Wan VAE (``--vae``), T = 4(F-1)+1 frames, 16 fps unless ``--fps``.
* MiniMax-H3 (24 channels): the H3 video VAE (``--vae``, MiniMax-H3's ``vae/``), 5 latents per 17-frame clip (5N ->
  17N frames, 5n+2 -> 17n+5), 24 fps unless ``--fps``. H3 files also hold audio latents ``audio.<key>`` [2, 32, A]
  (40 per second, each channel decoded as mono): with ``--audio-vae`` (MiniMax-H3's ``audio_vae/``) each ``<key>``
  with ``audio.<key>`` beside it gets that stereo track (32 kHz, AAC) in its mp4; without it the mp4 is silent.
  ``audio.*`` tensors are never decoded as video. Single-frame tensors (Picture 1) are skipped: the video VAE decodes
  3 or more latent frames.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch
from safetensors.torch import load_file

from .devices import default_dtype, resolve_device
from .errors import VdtError
from .video_io import contact_sheet, write_mp4, write_wav

FAMILY_OF_CHANNELS = {24: "h3", 48: "wan", 16: "wan"}
VAE_CLASS = {"wan": "AutoencoderKLWan", "h3": "AutoencoderKLMiniMaxH3"}
VAE_WHAT = {"wan": "the Wan VAE directory (AutoencoderKLWan, e.g. Wan2.2-TI2V-5B-Diffusers/vae)",
            "h3": "MiniMax-H3's vae/ directory (AutoencoderKLMiniMaxH3)"}
FAMILY_NAME = {"wan": "Wan", "h3": "MiniMax-H3"}
DEFAULT_FPS = {"wan": 16.0, "h3": 24.0}
AUDIO_PREFIX = "audio."


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("inputs", nargs="+", help="safetensors files from vdt sample (or directories of them, e.g. a "
                                              "stream's <clip>_f<start>.chunks/)")
    ap.add_argument("--model", choices=("wan", "h3"), default=None,
                    help="latent family (default: from the channel count: 24 -> h3, 48 or 16 -> wan)")
    ap.add_argument("--vae", required=True, help="the video VAE the data was prepared with: a diffusers "
                                                 "AutoencoderKLWan dir (Wan) or AutoencoderKLMiniMaxH3 dir (MiniMax-H3's vae/)")
    ap.add_argument("--audio-vae", "--audio_vae", dest="audio_vae", default="",
                    help="H3 only: AutoencoderKLMiniMaxH3Audio dir (MiniMax-H3's audio_vae/); each key K with audio.K "
                         "beside it gets that audio track in its mp4 (default: silent mp4s)")
    ap.add_argument("--out", default="", help="output directory (default: beside each input)")
    ap.add_argument("--keys", default="", help="comma-separated tensors to decode (default: every 4-D tensor)")
    ap.add_argument("--fps", type=float, default=None,
                    help="frame rate of the mp4 (default: 24 for H3; 16 for Wan, Wan2.2 TI2V-5B: 24)")
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


def latent(t: torch.Tensor) -> torch.Tensor:
    """[C, F, h, w], or [1, C, F, h, w] with its batch dimension dropped."""
    return t[0] if t.dim() == 5 and t.shape[0] == 1 else t


def video_keys(tensors: dict[str, torch.Tensor]) -> list[str]:
    return [k for k, t in tensors.items() if latent(t).dim() == 4 and not k.startswith(AUDIO_PREFIX)]


def detect_family(path: str, tensors: dict[str, torch.Tensor], keys: list[str]) -> str:
    for k in keys or video_keys(tensors):
        if k in tensors and latent(tensors[k]).dim() == 4:
            c = int(latent(tensors[k]).shape[0])
            if c in FAMILY_OF_CHANNELS:
                return FAMILY_OF_CHANNELS[c]
            raise VdtError(f"{path} '{k}': {c} latent channels; vdt decode knows 24 (MiniMax-H3) and 48 or 16 (Wan); "
                           f"---> HINT: pass --model wan or --model h3 to decode it anyway")
    return "wan"                                        # nothing to decode: the per-file check names what is missing


def _config_dir(path: str, sub: str, flag: str, what: str) -> tuple[str, str]:
    """(the directory holding config.json: `path` or `path`/`sub`, the config's _class_name)."""
    if not os.path.isdir(path):
        raise VdtError(f"{flag} {path}: no such directory; ---> HINT: pass {what}")
    for d in (path, os.path.join(path, sub)):
        cfg = os.path.join(d, "config.json")
        if os.path.isfile(cfg):
            try:
                with open(cfg) as f:
                    return d, str(json.load(f).get("_class_name", ""))
            except (OSError, ValueError) as e:
                raise VdtError(f"{flag} {cfg}: cannot read it ({e})") from None
    raise VdtError(f"{flag} {path}: no config.json here or in {path}/{sub}; ---> HINT: pass {what}")


def load_video_vae(family: str, path: str, device: torch.device, dtype: torch.dtype):
    d, cls = _config_dir(path, "vae", "--vae", VAE_WHAT[family])
    if cls and cls != VAE_CLASS[family]:
        other = next((f for f, c in VAE_CLASS.items() if c == cls), None)
        hint = (f"pass {VAE_WHAT[family]}, or --model {other} if these are {FAMILY_NAME[other]} latents" if other
                else f"pass {VAE_WHAT[family]}")
        raise VdtError(f"--vae {d} holds an {cls}; {FAMILY_NAME[family]} latents need an {VAE_CLASS[family]}; "
                       f"---> HINT: {hint}")
    if family == "h3":
        from .h3_models import H3VideoVae

        return H3VideoVae(d, device, dtype)
    from .wan_vae import WanVae

    return WanVae(d, device, dtype)


def load_audio_vae(path: str, device: torch.device):
    from .h3_models import H3AudioVae

    what = "MiniMax-H3's audio_vae/ directory (AutoencoderKLMiniMaxH3Audio)"
    d, cls = _config_dir(path, "audio_vae", "--audio-vae", what)
    if cls and cls != "AutoencoderKLMiniMaxH3Audio":
        raise VdtError(f"--audio-vae {d} holds an {cls}; the audio latents need an AutoencoderKLMiniMaxH3Audio; "
                       f"---> HINT: pass {what}")
    return H3AudioVae(d, device)


def check_fits(path: str, key: str, t: torch.Tensor, family: str, vae) -> None:
    """A latent the VAE cannot decode -> an error naming the file, the key and the flag to change."""
    if t.dim() != 4:
        raise VdtError(f"{path} '{key}': shape {list(t.shape)} is not a latent video [C, F, h, w]; "
                       f"---> HINT: --keys with the video tensors only")
    c = int(t.shape[0])
    other = FAMILY_OF_CHANNELS.get(c)
    if c != vae.z_dim and other and other != family:
        raise VdtError(f"{path} '{key}': {c} channels are {FAMILY_NAME[other]} latents; the {FAMILY_NAME[family]} VAE "
                       f"{vae.path} decodes [{vae.z_dim}, F, h, w]; ---> HINT: --model {other} with --vae "
                       f"{VAE_WHAT[other]}")
    if family == "h3" and c == vae.z_dim and t.shape[1] < 3:
        raise VdtError(f"{path} '{key}': {int(t.shape[1])} latent frame(s); the H3 video VAE decodes 3 or more "
                       f"(5 per 17-frame clip); ---> HINT: --keys without '{key}'")


def run(args: argparse.Namespace) -> int:
    files = expand(args.inputs)
    device = resolve_device(args.device)
    wanted = [k for k in args.keys.split(",") if k]
    audio_keys = [k for k in wanted if k.startswith(AUDIO_PREFIX)]
    if audio_keys:
        k = audio_keys[0]
        raise VdtError(f"--keys {k}: audio latents are not decoded as video; with --audio-vae they are the audio track "
                       f"of '{k[len(AUDIO_PREFIX):]}'; ---> HINT: --keys {k[len(AUDIO_PREFIX):]} --audio-vae DIR")
    first = load_file(files[0])
    family = args.model or detect_family(files[0], first, wanted)
    if args.audio_vae and family != "h3":
        raise VdtError(f"--audio-vae {args.audio_vae}: {FAMILY_NAME[family]} latents have no audio track (audio "
                       f"latents come with MiniMax-H3's, 24 channels); ---> HINT: drop --audio-vae")
    vae = load_video_vae(family, args.vae, device, default_dtype(device, args.dtype))
    audio_vae = load_audio_vae(args.audio_vae, device) if args.audio_vae else None
    fps = args.fps or DEFAULT_FPS[family]
    for path in files:
        tensors = first if path == files[0] else load_file(path)
        keys = wanted or video_keys(tensors)
        missing = [k for k in keys if k not in tensors]
        if missing or not keys:
            raise VdtError(f"{path}: no tensor {', '.join(missing) or '[C, F, h, w]'} (it has {', '.join(tensors)})")
        if not wanted and family == "h3":
            short = [k for k in keys if latent(tensors[k]).shape[0] == vae.z_dim and latent(tensors[k]).shape[1] < 3]
            for k in short:
                print(f"[decode] {path} '{k}' {list(latent(tensors[k]).shape)}: skipped (the H3 video VAE decodes 3 "
                      f"or more latent frames; a single one is Picture 1)", flush=True)
            keys = [k for k in keys if k not in short]
            if not keys:
                raise VdtError(f"{path}: no H3 latent video of 3 or more frames (it has {', '.join(tensors)})")
        for k in keys:
            check_fits(path, k, latent(tensors[k]), family, vae)
            a = tensors.get(AUDIO_PREFIX + k)
            if audio_vae is not None and a is not None:
                audio_vae.check_shape(list(a.shape), f"{path} '{AUDIO_PREFIX}{k}'")
        out = args.out or os.path.dirname(os.path.abspath(path))
        os.makedirs(out, exist_ok=True)
        stem = os.path.splitext(os.path.basename(path))[0]
        rows = []
        for k in keys:
            t = latent(tensors[k])
            frames = vae.decode(t)                                      # [T, H, W, 3] uint8
            rows.append((k, frames))
            if not args.video:
                continue
            mp4 = os.path.join(out, f"{stem}_{k}.mp4")
            what = f"{frames.shape[0]} frames {frames.shape[2]}x{frames.shape[1]} at {fps:g} fps"
            a = tensors.get(AUDIO_PREFIX + k) if family == "h3" else None
            if a is not None and audio_vae is not None:
                wave = audio_vae.decode(a)                              # [2, samples] in [-1, 1]
                with tempfile.TemporaryDirectory() as tmp:
                    wav = os.path.join(tmp, f"{stem}_{k}.wav")
                    write_wav(wav, wave, audio_vae.rate)
                    write_mp4(mp4, frames, fps, audio_path=wav)
                what += (f", audio '{AUDIO_PREFIX}{k}' {list(a.shape)} -> stereo {wave.shape[1] / audio_vae.rate:.2f} s "
                         f"at {audio_vae.rate} Hz")
            else:
                write_mp4(mp4, frames, fps)
                if a is not None:
                    what += f", silent: pass --audio-vae DIR (MiniMax-H3's audio_vae/) for the track '{AUDIO_PREFIX}{k}'"
                elif family == "h3":
                    what += f", silent: no '{AUDIO_PREFIX}{k}' in the file"
            print(f"[decode] {path} '{k}' {list(t.shape)} -> {mp4} ({what})", flush=True)
        png = os.path.join(out, f"{stem}.png")
        contact_sheet(rows, args.columns).save(png)
        print(f"[decode] contact sheet {png} (rows: {', '.join(keys)})", flush=True)
    return 0
