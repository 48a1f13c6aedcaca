"""``vdt sample --prompt "..." / --prompts FILE --text-encoder DIR`` (Wan): new prompts through umT5 into a copy of a
root's text table, so ``vdt sample`` can condition on them.

Reads ``--table`` (the root's ``text_table.safetensors``), embeds each prompt that is not in it yet exactly as ``vdt
data prepare`` does (tokenised to the table's token length with the EOS token, encoded with the attention mask, rows past
the real tokens zero), and writes the table with the new rows appended to ``--out``. The encoder must give the table's
width: a table made with another text encoder is an error naming both widths.
"""
from __future__ import annotations

import argparse
import json
import os

import torch
from safetensors import safe_open

from .devices import default_dtype, resolve_device
from .errors import VdtError
from .root_files import atomic_save


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--table", required=True, help="the root's text_table.safetensors to extend")
    ap.add_argument("--out", required=True, help="the extended table to write")
    ap.add_argument("--text-encoder", "--text_encoder", dest="text_encoder", required=True,
                    help="transformers UMT5EncoderModel dir (.../text_encoder, or the pipeline dir)")
    ap.add_argument("--tokenizer", help="tokenizer dir (default: beside the text encoder, or ../tokenizer)")
    ap.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    ap.add_argument("--prompts", help="a text file, one prompt per line (blank lines skipped)")
    ap.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda when visible)")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16")


def read_prompts(args: argparse.Namespace) -> list[str]:
    prompts = list(args.prompt)
    if args.prompts:
        try:
            lines = open(args.prompts, encoding="utf-8").read().splitlines()
        except OSError as e:
            raise VdtError(f"--prompts {args.prompts}: {e.strerror}") from None
        prompts += [l.strip() for l in lines if l.strip()]
    if not prompts:
        raise VdtError("no prompt given: pass --prompt \"...\" (repeatable) or --prompts FILE (one per line)")
    return list(dict.fromkeys(prompts))                                    # each once, in order


def run(args: argparse.Namespace) -> int:
    from .umt5 import Umt5

    prompts = read_prompts(args)
    try:
        with safe_open(args.table, "pt") as f:
            meta = f.metadata() or {}
            have = json.loads(meta.get("prompts", "[]"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (OSError, ValueError) as e:
        raise VdtError(f"{args.table}: cannot read the text table ({e})") from None
    emb, lengths = tensors["embeddings"], tensors["lengths"]
    text_len, dim = int(emb.shape[1]), int(emb.shape[2])
    device = resolve_device(args.device)
    enc = Umt5(args.text_encoder, args.tokenizer, device, default_dtype(device, args.dtype), text_len)
    if enc.dim != dim:
        raise VdtError(f"--text-encoder {args.text_encoder}: gives {enc.dim}-wide rows, the table {args.table} holds "
                       f"{dim}-wide ones; ---> HINT: pass the text encoder the root was prepared with")
    new = [p for p in prompts if p not in have]
    if new:
        e, l = enc.encode(new)
        tensors["embeddings"] = torch.cat([emb, e.to(emb.dtype)]).contiguous()
        tensors["lengths"] = torch.cat([lengths, l.to(lengths.dtype)]).contiguous()
        if "tags" in tensors:                                             # every new token is text
            tensors["tags"] = torch.cat([tensors["tags"], torch.ones(len(new), text_len, dtype=torch.uint8)])
    meta = dict(meta) | {"prompts": json.dumps(have + new, ensure_ascii=False),
                         "sample_text_encoder": os.path.abspath(args.text_encoder)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    atomic_save(tensors, args.out, meta)
    print(f"[embed] {len(new)} new prompt(s) embedded with umT5 ({len(prompts) - len(new)} already in the table) -> "
          f"{args.out}", flush=True)
    return 0
