"""``vdt data prepare``: videos or frame folders + captions (+ semantic-id maps) -> a vdt data root (vdt-latents/1).

Input (``--videos DIR``): every video file (mp4, mov, mkv, webm, avi) or folder of frame images directly in DIR is a
clip of its own run; every sub-folder of DIR that holds clips is one run (the recording session: its clips stay on
one side of the train/val split). Beside each clip ``NAME`` (``NAME.mp4`` or the folder ``NAME/``):

* ``NAME.txt`` the caption: one line for the whole clip, or exactly ``--cells`` lines (one per latent frame);
* ``NAME.ids.npz`` / ``NAME.ids.safetensors`` (optional) semantic ids under the key ``ids``, uint8 [F, h, w] (one
  map per latent frame) or [T, h, w] (one per pixel frame: frame 4k is taken for latent frame k), resized to the
  id grid with nearest neighbour. Without a map every id is 255 (UNKNOWN).

Or ``--manifest FILE.jsonl``: one object per clip, ``{"video": path, "caption": str | "captions": [...], "run": str,
"ids": path, "clip_id": str}`` (paths relative to the manifest; only video and a caption are required).

Output: docs/data_format.md. Each clip's latents and ids are written to a temporary name and renamed, so a run that
was stopped is resumed by running the same command again: clips whose files exist are skipped, prompts already in
the text table are not embedded again, and each distinct prompt is embedded once.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from .devices import default_dtype, resolve_device
from .errors import VdtError
from .root_files import atomic_save, atomic_text, check_settings
from .video_io import frame_files, is_video, read_frames, fit

UNKNOWN = 255
COLLAPSE_PARTS = [i // 2 for i in range(20)]
VOCAB_K = {"parts": 20, "ids": 10}


def add_args(ap: argparse.ArgumentParser) -> None:
    src = ap.add_argument_group("input")
    src.add_argument("--videos", help="folder of clips (videos or frame folders; sub-folders are runs)")
    src.add_argument("--manifest", help="JSONL file, one clip per line (instead of --videos)")
    src.add_argument("--out", required=True, help="data root to write (created; an existing one is resumed)")
    mdl = ap.add_argument_group("models (local directories; nothing is downloaded)")
    mdl.add_argument("--model", choices=("wan", "h3"), default="wan",
                     help="wan (default): a Wan root; h3: a MiniMax-H3 root for `vdt train causal` (vdt_py/prepare_h3.py)")
    mdl.add_argument("--vae", required=True, help="diffusers AutoencoderKLWan dir (Wan2.2-TI2V-5B-Diffusers/vae, or its "
                                                  "parent); with --model h3 an AutoencoderKLMiniMaxH3 dir")
    mdl.add_argument("--text-encoder", "--text_encoder", dest="text_encoder", required=True,
                     help="transformers UMT5EncoderModel dir (.../text_encoder, or the pipeline dir); with --model h3 a "
                          "Qwen3-VL dir (Qwen3VLModel, tokenizer, preprocessor_config.json)")
    mdl.add_argument("--audio-vae", "--audio_vae", dest="audio_vae",
                     help="--model h3: diffusers AutoencoderKLMiniMaxH3Audio dir (the silent audio latent)")
    mdl.add_argument("--text-layer", "--text_layer", dest="text_layer", type=int, default=50,
                     help="--model h3: the Qwen3-VL decoder layer whose (un-normalised) output is the text rows "
                          "(default 50, MiniMax-H3's)")
    mdl.add_argument("--picture1-short-edge", "--picture1_short_edge", dest="picture1_short_edge", type=int,
                     default=2048, help="--model h3: short edge of the picture1_2048 latent in pixels, as DiffSynth's "
                     "ref_image_short_edge (default 2048; 0: none)")
    mdl.add_argument("--tokenizer", help="tokenizer dir (default: beside the text encoder, or ../tokenizer)")
    geo = ap.add_argument_group("geometry")
    geo.add_argument("--res", default="832x480", help="WIDTHxHEIGHT to encode at (default 832x480; the trainer's --res)")
    geo.add_argument("--frames", type=int, default=0, help="pixel frames per clip: Wan 4n+1 (default 81 -> 21 latent "
                                                           "frames); H3 17n+5 (default 124 -> 37)")
    geo.add_argument("--stride", type=int, default=1, help="take every N-th frame of the source (default 1)")
    geo.add_argument("--resize", choices=("crop", "stretch"), default="crop",
                     help="crop: cover WxH keeping the aspect, crop the centre (default); stretch: scale to WxH")
    geo.add_argument("--cells", type=int, default=0, help="prompts per clip (default: one per latent frame)")
    geo.add_argument("--sem-scale", "--sem_scale", dest="sem_scale", type=int, default=2,
                     help="id maps are [F, h*s, w*s] for latents [C, F, h, w] (default 2)")
    geo.add_argument("--vocab", choices=("parts", "ids"), default="parts", help="vocabulary of the stored ids (default parts)")
    txt = ap.add_argument_group("text")
    txt.add_argument("--text-len", "--text_len", dest="text_len", type=int, default=512, help="padded token length (Wan: 512)")
    txt.add_argument("--null-prompt", "--null_prompt", dest="null_prompt", default="", help="prompt of text dropout (default '')")
    txt.add_argument("--text-batch", "--text_batch", dest="text_batch", type=int, default=8, help="prompts per encoder call")
    spl = ap.add_argument_group("split")
    spl.add_argument("--val-fraction", "--val_fraction", dest="val_fraction", type=float, default=0.1,
                     help="share of runs held out for validation (at least one run when there are two or more)")
    spl.add_argument("--val-runs", "--val_runs", dest="val_runs", default="", help="comma-separated runs for val (overrides --val-fraction)")
    spl.add_argument("--seed", type=int, default=0, help="seed of the split")
    run = ap.add_argument_group("run")
    run.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")
    run.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16")
    run.add_argument("--limit", type=int, default=0, help="only the first N clips (smoke tests)")
    run.add_argument("--no-progress", "--no_progress", dest="progress", action="store_false", help="no progress bar")


# ---------------------------------------------------------------------------------------------------------------------
# Clip discovery


def sanitize(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "clip"


def sidecar(stem_path: str, suffixes: tuple[str, ...]) -> str | None:
    for s in suffixes:
        if os.path.isfile(stem_path + s):
            return stem_path + s
    return None


def _clip_of(path: str, run: str | None, where: str) -> dict:
    stem_path = os.path.splitext(path)[0] if os.path.isfile(path) else path.rstrip("/")
    name = os.path.basename(stem_path)
    return {"source": path, "run": run or sanitize(name), "clip_id": sanitize(f"{run}_{name}" if run else name),
            "caption_file": sidecar(stem_path, (".txt",)),
            "ids": sidecar(stem_path, (".ids.safetensors", ".ids.npz")), "where": where}


def _is_clip(path: str) -> bool:
    """A video file, or a folder of frame images (Picture 1 files of `--model h3`, NAME.picture1.png, are not frames:
    a run folder holding them stays a run)."""
    return is_video(path) or any(".picture1." not in os.path.basename(f) for f in frame_files(path))


def scan_videos(root: str) -> list[dict]:
    if not os.path.isdir(root):
        raise VdtError(f"--videos {root}: not a directory")
    clips = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if _is_clip(p):
            clips.append(_clip_of(p, None, p))
        elif os.path.isdir(p):
            for sub in sorted(os.listdir(p)):
                q = os.path.join(p, sub)
                if _is_clip(q):
                    clips.append(_clip_of(q, sanitize(name), q))
    if not clips:
        raise VdtError(f"--videos {root}: no clips found (video files or folders of frame images, directly in it or "
                       f"one level down, one sub-folder per run)")
    return clips


def input_clips(args) -> list[dict]:
    """The clips of --videos or --manifest (at most --limit), each clip id once."""
    clips = scan_videos(args.videos) if args.videos else read_manifest(args.manifest)
    if args.limit > 0:
        clips = clips[:args.limit]
    seen = {}
    for c in clips:
        if c["clip_id"] in seen:
            raise VdtError(f"{c['where']}: clip id '{c['clip_id']}' again (also {seen[c['clip_id']]}); clip names must be "
                           f"unique within a run")
        seen[c["clip_id"]] = c["where"]
    return clips


def read_manifest(path: str) -> list[dict]:
    base = os.path.dirname(os.path.abspath(path))
    clips = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise VdtError(f"--manifest {path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            j = json.loads(line)
        except json.JSONDecodeError as e:
            raise VdtError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(j, dict) or "video" not in j:
            raise VdtError(f"{where}: expected an object with at least 'video' (and 'caption' or 'captions')")
        src = os.path.join(base, j["video"])
        c = _clip_of(src, sanitize(str(j["run"])) if "run" in j else None, where)
        if "clip_id" in j:
            c["clip_id"] = sanitize(str(j["clip_id"]))
        if "caption" in j:
            c["captions"] = [str(j["caption"])]
        elif "captions" in j:
            c["captions"] = [str(x) for x in j["captions"]]
        if "ids" in j:
            c["ids"] = os.path.join(base, j["ids"])
        if "picture1" in j:
            c["picture1"] = os.path.join(base, j["picture1"])
        clips.append(c)
    if not clips:
        raise VdtError(f"--manifest {path}: no clips listed")
    return clips


def cell_prompts(clip: dict, cells: int) -> list[str]:
    if "captions" not in clip:
        if not clip["caption_file"]:
            raise VdtError(f"{clip['where']}: no caption; ---> HINT: write {os.path.splitext(clip['source'])[0]}.txt "
                           + ("(one line)" if cells == 1 else f"(one line, or {cells} lines: one per latent frame)"))
        clip["captions"] = [l.strip() for l in open(clip["caption_file"], encoding="utf-8").read().splitlines() if l.strip()]
        clip["where"] = clip["caption_file"]
    caps = clip["captions"]
    if len(caps) == 1:
        return caps * cells
    if len(caps) != cells:
        raise VdtError(f"{clip['where']}: {len(caps)} captions; expected 1 (the whole clip) or {cells} "
                       f"(one per latent frame, --cells)")
    return caps


def split_runs(runs: list[str], fraction: float, named: str, seed: int) -> set[str]:
    """The runs held out for validation: --val-runs, else a seeded choice of round(fraction * runs) (>= 1 of >= 2)."""
    if named:
        val = {sanitize(r) for r in named.split(",") if r.strip()}
        unknown = sorted(val - set(runs))
        if unknown:
            raise VdtError(f"--val-runs: {', '.join(unknown)} not among the runs ({', '.join(sorted(runs)[:10])}...)")
        return val
    if len(runs) < 2 or fraction <= 0:
        return set()
    n = min(len(runs) - 1, max(1, round(fraction * len(runs))))
    key = lambda r: hashlib.sha256(f"{seed}:{r}".encode()).hexdigest()
    return set(sorted(runs, key=key)[:n])


def load_ids(path: str, latent_frames: int, frames: int, hs: int, ws: int, k: int) -> torch.Tensor:
    """An id map file -> [latent_frames, hs, ws] uint8 (see the module doc)."""
    try:
        if path.endswith(".npz"):
            with np.load(path) as z:
                if "ids" not in z:
                    raise VdtError(f"{path}: no array 'ids' (found {', '.join(z.files)})")
                ids = torch.from_numpy(np.ascontiguousarray(z["ids"]))
        else:
            t = load_file(path)
            if "ids" not in t:
                raise VdtError(f"{path}: no tensor 'ids' (found {', '.join(t)})")
            ids = t["ids"]
    except (OSError, ValueError) as e:
        raise VdtError(f"{path}: cannot read ({e})") from None
    if ids.dim() != 3 or ids.dtype != torch.uint8:
        raise VdtError(f"{path}: 'ids' is {ids.dtype} {list(ids.shape)}; expected uint8 [F, h, w] or [T, h, w]")
    if ids.shape[0] == latent_frames:
        pass
    elif ids.shape[0] >= frames:
        ids = ids[torch.arange(latent_frames) * 4]                     # pixel frame 4k -> latent frame k
    else:
        raise VdtError(f"{path}: {ids.shape[0]} maps; expected {latent_frames} (one per latent frame) or at least "
                       f"{frames} (one per pixel frame)")
    bad = ids[(ids >= k) & (ids != UNKNOWN)]
    if bad.numel():
        raise VdtError(f"{path}: id {int(bad[0])} is outside 0..{k - 1} and not 255 (UNKNOWN) for --vocab")
    if tuple(ids.shape[1:]) != (hs, ws):
        ids = torch.nn.functional.interpolate(ids[None].float(), size=(hs, ws), mode="nearest")[0].to(torch.uint8)
    return ids.contiguous()


# ---------------------------------------------------------------------------------------------------------------------
# Writing


def parse_res(res: str, factor: int) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)", res)
    if not m:
        raise VdtError(f"--res {res!r}: expected WIDTHxHEIGHT, e.g. 832x480")
    w, h = int(m.group(1)), int(m.group(2))
    if w % factor or h % factor or w == 0 or h == 0:
        raise VdtError(f"--res {res}: width and height must be multiples of {factor} (the VAE's spatial factor x the "
                       f"DiT's 2x2 patch)")
    return w, h


def read_table(path: str, text_len: int, dim: int) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    if not os.path.isfile(path):
        return [], torch.zeros(0, text_len, dim, dtype=torch.bfloat16), torch.zeros(0, dtype=torch.int32)
    with safe_open(path, "pt") as f:
        prompts = json.loads((f.metadata() or {}).get("prompts", "[]"))
        emb, lengths = f.get_tensor("embeddings"), f.get_tensor("lengths")
    if tuple(emb.shape[1:]) != (text_len, dim):
        raise VdtError(f"{path}: embeddings [N, {emb.shape[1]}, {emb.shape[2]}] from an earlier run do not match this "
                       f"text encoder ([N, {text_len}, {dim}]); ---> HINT: delete it or use another --out")
    return prompts, emb, lengths


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .umt5 import Umt5
    from .wan_vae import WanVae

    if args.model == "h3":
        from . import prepare_h3

        return prepare_h3.run(args)
    args.frames = args.frames or 81
    if bool(args.videos) == bool(args.manifest):
        raise VdtError("give exactly one of --videos DIR and --manifest FILE.jsonl")
    if args.frames < 1 or (args.frames - 1) % 4:
        raise VdtError(f"--frames {args.frames}: the Wan VAE needs 4n+1 frames (e.g. 81 -> 21 latent frames)")
    clips = input_clips(args)
    device = resolve_device(args.device)
    dtype = default_dtype(device, args.dtype)

    vae = WanVae(args.vae, device, dtype)
    width, height = parse_res(args.res, vae.spatial * 2)
    latent_frames = vae.latent_frames(args.frames)
    cells = args.cells or latent_frames
    lh, lw = height // vae.spatial, width // vae.spatial
    hs, ws = lh * args.sem_scale, lw * args.sem_scale
    k = VOCAB_K[args.vocab]
    prompts_of = {c["clip_id"]: cell_prompts(c, cells) for c in clips}   # every caption checked before any encode
    runs = sorted({c["run"] for c in clips})
    val_runs = split_runs(runs, args.val_fraction, args.val_runs, args.seed)

    out = args.out
    for d in ("index", "latents", "cond"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    info = {"format": "vdt-latents/1", "res": f"{width}x{height}", "latent_channels": vae.z_dim,
            "latent_frames": latent_frames, "latent_hw": [lh, lw], "cells": cells, "sem_scale": args.sem_scale,
            "vocab": args.vocab, "text_dim": None, "text_len": args.text_len, "null_prompt": args.null_prompt}
    if args.vocab == "parts":
        info["collapse_parts"] = COLLAPSE_PARTS
    ds_path = os.path.join(out, "dataset.json")
    # The settings the latents depend on, recorded before the first clip: a resume with other flags is an error.
    check_settings(out, {k_: v for k_, v in info.items() if k_ != "text_dim"} | {"stride": args.stride,
                                                                                 "resize": args.resize})

    # 1) latents and ids, clip by clip; clips whose files exist are done (resume)
    todo = [c for c in clips if not (os.path.isfile(os.path.join(out, "latents", c["clip_id"] + ".safetensors"))
                                     and os.path.isfile(os.path.join(out, "cond", c["clip_id"] + ".safetensors")))]
    print(f"[prepare] {len(clips)} clips in {len(runs)} runs ({len(val_runs)} for val); {len(clips) - len(todo)} already "
          f"written; encoding {len(todo)} at {width}x{height}, {args.frames} frames -> latents "
          f"[{vae.z_dim}, {latent_frames}, {lh}, {lw}] on {device}", flush=True)
    for c in tqdm(todo, desc="VAE", unit="clip", disable=not args.progress, file=sys.stdout):
        frames = fit(read_frames(c["source"], args.frames, args.stride), width, height, args.resize)
        z = vae.encode(frames)                                           # [C, F, lh, lw] float32, normalised
        if not torch.isfinite(z).all():
            raise VdtError(f"{c['source']}: the VAE produced non-finite latents")
        ids = (load_ids(c["ids"], latent_frames, args.frames, hs, ws, k) if c["ids"]
               else torch.full((latent_frames, hs, ws), UNKNOWN, dtype=torch.uint8))
        meta = {"source": os.path.abspath(c["source"]), "vae": vae.path, "frames": str(args.frames)}
        atomic_save({"ids": ids}, os.path.join(out, "cond", c["clip_id"] + ".safetensors"), meta)
        atomic_save({"latents": z.to(torch.bfloat16).contiguous()},
                    os.path.join(out, "latents", c["clip_id"] + ".safetensors"), meta)
    del vae
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # 2) text table: every distinct prompt once; rows of an earlier run are kept
    enc = Umt5(args.text_encoder, args.tokenizer, device, dtype, args.text_len)
    table_path = os.path.join(out, "text_table.safetensors")
    prompts, emb, lengths = read_table(table_path, args.text_len, enc.dim)
    have = set(prompts)
    wanted = []
    for p in [args.null_prompt] + [p for c in clips for p in prompts_of[c["clip_id"]]]:
        if p not in have:
            have.add(p)
            wanted.append(p)
    print(f"[prepare] text table: {len(prompts)} prompts kept, embedding {len(wanted)} new with umT5 "
          f"(dim {enc.dim}, {args.text_len} tokens)", flush=True)
    new_e, new_l = [emb], [lengths]
    bar = tqdm(total=len(wanted), desc="umT5", unit="prompt", disable=not args.progress, file=sys.stdout)
    for i in range(0, len(wanted), args.text_batch):
        e, l = enc.encode(wanted[i:i + args.text_batch])
        new_e.append(e.to(torch.bfloat16))
        new_l.append(l)
        bar.update(len(e))
    bar.close()
    if wanted:
        atomic_save({"embeddings": torch.cat(new_e).contiguous(), "lengths": torch.cat(new_l).contiguous()},
                    table_path, {"prompts": json.dumps(prompts + wanted, ensure_ascii=False),
                                 "text_encoder": os.path.abspath(args.text_encoder)})

    # 3) dataset.json and the index, last: a root is complete once they are written
    info["text_dim"] = enc.dim
    rows = [json.dumps({"clip_id": c["clip_id"], "split": "val" if c["run"] in val_runs else "train", "run": c["run"],
                        "cells": prompts_of[c["clip_id"]]}, ensure_ascii=False) for c in clips]
    atomic_text(os.path.join(out, "index", "clips.jsonl"), "\n".join(rows) + "\n")
    atomic_text(ds_path, json.dumps(info) + "\n")
    n_val = sum(c["run"] in val_runs for c in clips)
    print(f"[prepare] wrote {out}: {len(clips) - n_val} train / {n_val} val clips, {len(prompts) + len(wanted)} prompts. "
          f"Next: vdt data check {out}", flush=True)
    return 0
