"""``vdt data prepare --model h3``: videos + captions -> a MiniMax-H3 data root (docs/data_format.md, "H3 roots").

The same input as the Wan path (``--videos DIR`` with sub-folders as runs, or ``--manifest``), one caption per clip
(``NAME.txt``: one line), and optionally Picture 1 beside the clip (``NAME.picture1.png`` / ``.jpg``; manifest key
``"picture1"``); without it Picture 1 is the clip's first frame at ``--res``. Per clip it writes
``latents/<clip_id>.safetensors`` with

* ``latents`` [24, F, H/16, W/16]: the H3 video VAE's normalised latents of the first ``--frames`` (17n+5) frames;
* ``picture1`` [24, 1, Hp/16, Wp/16]: Picture 1 at its native size (centre-cropped down to multiples of 32);
* ``picture1_2048`` [24, 1, ...]: the whole (uncropped) Picture 1 resized with Lanczos to ``--picture1-short-edge``
  (2048) on its short edge, both sides rounded to the nearest multiple of 32, as DiffSynth's H3 pipeline sizes and
  resamples a reference image (``ref_image_short_edge``); dataset.json records the edge as ``picture1_short_edge``
  (``--picture1-short-edge 0`` leaves it out) and the file's metadata the source size as ``picture1_source_size``
  (``WxH``: what ``vdt data check`` holds the latent's size to);

then the text table (``"<Picture 1>: "`` + Picture 1's vision tokens + the caption through Qwen3-VL, the hidden state
after ``--text-layer``, tags 0 on the vision block, 1 elsewhere; one row per clip, since the vision tokens are the
clip's own, keyed ``"<Picture 1 of CLIP_ID>: CAPTION"`` in ``clips.jsonl``; the null prompt as plain text),
``audio_silence.safetensors`` (the audio VAE's encoding of a zero stereo waveform as long as a clip's audio,
``round(frames / 24 * 40)`` steps), ``index/clips.jsonl`` and ``dataset.json`` last. Resumable as the Wan path:
clips whose latents exist are skipped, prompts already in the table are kept.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors import safe_open

from .devices import default_dtype, resolve_device
from .errors import VdtError
from .prepare import cell_prompts, input_clips, parse_res, sidecar, split_runs
from .root_files import atomic_save, atomic_text, check_settings
from .video_io import fit, read_frames

PICTURE1_SUFFIXES = (".picture1.png", ".picture1.jpg", ".picture1.jpeg", ".picture1.webp")


def table_key(clip_id: str, caption: str) -> str:
    return f"<Picture 1 of {clip_id}>: {caption}"


def picture1_source(clip: dict) -> str | None:
    if clip.get("picture1"):
        return clip["picture1"]
    src = clip["source"]
    stem = os.path.splitext(src)[0] if os.path.isfile(src) else src.rstrip("/")
    return sidecar(stem, PICTURE1_SUFFIXES)


def load_picture1(clip: dict, first_frame: torch.Tensor) -> torch.Tensor:
    """Picture 1 [H, W, 3] uint8: the sidecar image, else the clip's first frame (already at --res)."""
    path = picture1_source(clip)
    if not path:
        return first_frame
    from PIL import Image

    try:
        with Image.open(path) as im:
            return torch.from_numpy(np.asarray(im.convert("RGB")).copy())
    except OSError as e:
        raise VdtError(f"{path}: cannot read Picture 1 ({e})") from None


def native_grid(img: torch.Tensor, where: str) -> torch.Tensor:
    """Centre-crop [H, W, 3] down to multiples of 32 (the VAE's 16x and the DiT's 2x2 patch)."""
    h, w = (img.shape[0] // 32) * 32, (img.shape[1] // 32) * 32
    if h == 0 or w == 0:
        raise VdtError(f"{where}: Picture 1 is {img.shape[1]}x{img.shape[0]}; it needs at least 32x32 pixels")
    y, x = (img.shape[0] - h) // 2, (img.shape[1] - w) // 2
    return img[y:y + h, x:x + w].contiguous()


def short_edge_size(h: int, w: int, edge: int) -> tuple[int, int]:
    """(H, W) of an H x W image scaled so its short edge is `edge`, each side the nearest multiple of 32 (at least 32),
    as DiffSynth's H3 pipeline sizes its reference image: scale = ref_image_short_edge / min(H, W), each side
    _nearest_multiple(side * scale, 32) with Python's round (docs/h3_model.md, "Ref2VA"). 1920x1080 -> 3648x2048."""
    s = edge * 1.0 / min(h, w)
    return max(32, int(round(h * s / 32)) * 32), max(32, int(round(w * s / 32)) * 32)


def short_edge(img: torch.Tensor, edge: int) -> torch.Tensor:
    """Resize the whole [H, W, 3] uint8 image (no crop first) to short_edge_size with PIL's Lanczos filter, as DiffSynth
    resizes a reference image."""
    from PIL import Image

    nh, nw = short_edge_size(img.shape[0], img.shape[1], edge)
    out = Image.fromarray(img.numpy()).resize((nw, nh), Image.LANCZOS)
    return torch.from_numpy(np.asarray(out).copy())


def read_table(path: str, text_len: int, dim: int):
    if not os.path.isfile(path):
        return [], torch.zeros(0, text_len, dim, dtype=torch.bfloat16), torch.zeros(0, dtype=torch.int32), \
            torch.zeros(0, text_len, dtype=torch.uint8)
    with safe_open(path, "pt") as f:
        prompts = json.loads((f.metadata() or {}).get("prompts", "[]"))
        emb, lengths = f.get_tensor("embeddings"), f.get_tensor("lengths")
        tags = f.get_tensor("tags") if "tags" in f.keys() else torch.ones(len(prompts), text_len, dtype=torch.uint8)
    if tuple(emb.shape[1:]) != (text_len, dim):
        raise VdtError(f"{path}: embeddings [N, {emb.shape[1]}, {emb.shape[2]}] from an earlier run do not match this "
                       f"text encoder ([N, {text_len}, {dim}]); ---> HINT: delete it or use another --out")
    return prompts, emb, lengths, tags


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .h3_models import H3AudioVae, H3VideoVae, Qwen3VLText

    if bool(args.videos) == bool(args.manifest):
        raise VdtError("give exactly one of --videos DIR and --manifest FILE.jsonl")
    if not args.audio_vae:
        raise VdtError("--model h3 needs --audio-vae DIR (MiniMax-H3's audio_vae/): the silent audio latent is its "
                       "encoding of a zero waveform")
    frames = args.frames or 124
    clips = input_clips(args)
    device = resolve_device(args.device)
    dtype = default_dtype(device, args.dtype)

    vae = H3VideoVae(args.vae, device, dtype)
    latent_frames = vae.latent_frames(frames)
    width, height = parse_res(args.res, vae.spatial * 2)
    lh, lw = height // vae.spatial, width // vae.spatial
    captions = {c["clip_id"]: cell_prompts(c, 1)[0] for c in clips}   # every caption checked before any encode
    runs = sorted({c["run"] for c in clips})
    val_runs = split_runs(runs, args.val_fraction, args.val_runs, args.seed)
    edge = args.picture1_short_edge
    if edge < 0 or (edge and edge % 32):
        raise VdtError(f"--picture1-short-edge {edge}: expected a multiple of 32 (2048 as MiniMax-H3), or 0 for none")

    out = args.out
    for d in ("index", "latents"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    info = {"format": "vdt-latents/1", "model_family": "h3", "res": f"{width}x{height}", "latent_channels": vae.z_dim,
            "latent_frames": latent_frames, "latent_hw": [lh, lw], "cells": 1, "audio_channels": None,
            "text_dim": None, "text_len": args.text_len, "null_prompt": args.null_prompt}
    if edge:
        info["picture1_short_edge"] = edge                           # what `vdt data check` holds picture1_2048 to
    check_settings(out, {k: v for k, v in info.items() if k not in ("text_dim", "audio_channels")} | {
        "stride": args.stride, "resize": args.resize, "picture1_short_edge": edge, "text_layer": args.text_layer})

    def first_frames(c):
        return fit(read_frames(c["source"], frames, args.stride), width, height, args.resize)  # [T, H, W, 3]

    # 1) video latents and Picture 1 (native, short edge), clip by clip; clips whose file exists are done (resume)
    lat_path = lambda c: os.path.join(out, "latents", c["clip_id"] + ".safetensors")
    todo = [c for c in clips if not os.path.isfile(lat_path(c))]
    print(f"[prepare h3] {len(clips)} clips in {len(runs)} runs ({len(val_runs)} for val); {len(clips) - len(todo)} "
          f"already written; encoding {len(todo)} at {width}x{height}, {frames} frames -> latents "
          f"[{vae.z_dim}, {latent_frames}, {lh}, {lw}] + Picture 1 on {device}", flush=True)
    for c in tqdm(todo, desc="H3 VAE", unit="clip", disable=not args.progress, file=sys.stdout):
        fr = first_frames(c)
        z = vae.encode(fr)                                                  # [24, F, lh, lw]
        raw = load_picture1(c, fr[0])                                       # [H, W, 3] as given
        pic = native_grid(raw, picture1_source(c) or c["source"])
        tensors = {"latents": z, "picture1": vae.encode(pic[None])}        # picture1 [24, 1, Hp, Wp]
        if edge:
            tensors["picture1_2048"] = vae.encode(short_edge(raw, edge)[None])
        for k, t in tensors.items():
            if not torch.isfinite(t).all():
                raise VdtError(f"{c['source']}: the VAE produced non-finite values for '{k}'")
        meta = {"source": os.path.abspath(c["source"]), "vae": vae.path, "frames": str(frames),
                "picture1": os.path.abspath(picture1_source(c)) if picture1_source(c) else "first frame"}
        if edge:
            meta["picture1_source_size"] = f"{raw.shape[1]}x{raw.shape[0]}"   # W x H, before any crop or resize
        atomic_save({k: t.to(torch.bfloat16).contiguous() for k, t in tensors.items()}, lat_path(c), meta)
    del vae

    # 2) the silent audio latent, once per root (as long as a clip's audio)
    audio = H3AudioVae(args.audio_vae, device)
    steps = audio.steps_for(frames)
    silence = audio.silence(steps)
    atomic_save({"silence": silence.to(torch.bfloat16).contiguous()}, os.path.join(out, "audio_silence.safetensors"),
                {"audio_vae": audio.path, "steps": str(steps), "what": "normalised encoding of a zero stereo waveform"})
    info["audio_channels"] = audio.channels
    print(f"[prepare h3] silent audio: [2, {audio.channels}, {steps}] from a zero waveform of {frames} frames at 24 fps",
          flush=True)
    del audio

    # 3) text table: per clip "<Picture 1>: " + its vision tokens + caption; the null prompt; earlier rows kept
    enc = Qwen3VLText(args.text_encoder, device, dtype, args.text_len, args.text_layer)
    table_path = os.path.join(out, "text_table.safetensors")
    prompts, emb, lengths, tags = read_table(table_path, args.text_len, enc.dim)
    have = set(prompts)
    wanted = [(None, args.null_prompt, args.null_prompt)] if args.null_prompt not in have else []
    for c in clips:
        key = table_key(c["clip_id"], captions[c["clip_id"]])
        if key not in have:
            have.add(key)
            wanted.append((c, key, captions[c["clip_id"]]))
    print(f"[prepare h3] text table: {len(prompts)} rows kept, embedding {len(wanted)} with Qwen3-VL "
          f"(dim {enc.dim}, layer {args.text_layer}, {args.text_len} tokens)", flush=True)
    new_e, new_l, new_t = [emb], [lengths], [tags]
    for c, key, caption in tqdm(wanted, desc="Qwen3-VL", unit="prompt", disable=not args.progress, file=sys.stdout):
        pic = None if c is None else native_grid(load_picture1(c, first_frames(c)[0]), c["source"])
        rows, n, tg = enc.encode(caption, pic, where=c["where"] if c else "--null-prompt")
        if not torch.isfinite(rows).all():
            raise VdtError(f"{c['where'] if c else '--null-prompt'}: the text encoder produced non-finite values")
        new_e.append(rows[None].to(torch.bfloat16))
        new_l.append(torch.tensor([n], dtype=torch.int32))
        new_t.append(tg[None])
    if wanted:
        atomic_save({"embeddings": torch.cat(new_e).contiguous(), "lengths": torch.cat(new_l).contiguous(),
                     "tags": torch.cat(new_t).contiguous()},
                    table_path, {"prompts": json.dumps(prompts + [w[1] for w in wanted], ensure_ascii=False),
                                 "text_encoder": os.path.abspath(args.text_encoder), "text_layer": str(args.text_layer)})

    # 4) dataset.json and the index, last
    info["text_dim"] = enc.dim
    rows = [json.dumps({"clip_id": c["clip_id"], "split": "val" if c["run"] in val_runs else "train", "run": c["run"],
                        "cells": [table_key(c["clip_id"], captions[c["clip_id"]])]}, ensure_ascii=False) for c in clips]
    atomic_text(os.path.join(out, "index", "clips.jsonl"), "\n".join(rows) + "\n")
    atomic_text(os.path.join(out, "dataset.json"), json.dumps(info) + "\n")
    n_val = sum(c["run"] in val_runs for c in clips)
    print(f"[prepare h3] wrote {out}: {len(clips) - n_val} train / {n_val} val clips, {len(prompts) + len(wanted)} "
          f"text rows. Next: vdt data check {out}", flush=True)
    return 0
