"""``python -m vdt_py COMMAND ...``; ``vdt data prepare`` and ``vdt decode`` call this."""
from __future__ import annotations

import argparse
import os
import sys

from .errors import VdtError

COMMANDS = {
    "prepare": ("prepare", "videos/frames + captions (+ id maps) -> a vdt data root (Wan: VAE latents, umT5 text table; --model h3: H3 VAE latents, Picture 1, Qwen3-VL rows, silent audio)"),
    "decode": ("decode", "latents from vdt sample -> mp4 + contact-sheet PNG (Wan VAE; MiniMax-H3's VAEs, with the audio track)"),
    "embed": ("embed", "new prompts through umT5 into a copy of a root's text table (vdt sample --prompt)"),
    "plot": ("plot", "a run's train_log.csv / val_log.csv -> plot.png (matplotlib)"),
    "tiny-models": ("tiny_models", "write tiny random AutoencoderKLWan + umT5, or (--family h3) MiniMax-H3's VAEs + Qwen3-VL (tests, CPU walk-through)"),
}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")           # local directories only: never reach for a hub
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")    # no "pip install accelerate" advice on every load
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    prog = os.environ.get("VDT_PY_PROG", "python -m vdt_py")
    ap = argparse.ArgumentParser(prog=prog, description="vdt's Python tools")
    sub = ap.add_subparsers(dest="command", required=True)
    import importlib

    mods = {}
    for name, (mod, help_) in COMMANDS.items():
        m = importlib.import_module(f"vdt_py.{mod}")
        p = sub.add_parser(name, help=help_, description=(m.__doc__ or help_).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           prog=os.environ.get("VDT_PY_PROG") or f"{prog} {name}",
                           epilog=f"(vdt_py {os.path.dirname(os.path.abspath(__file__))}, python {sys.executable})")
        m.add_args(p)
        mods[name] = m
    args = ap.parse_args(argv)
    try:
        return mods[args.command].run(args)
    except VdtError as e:
        print(f"vdt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vdt: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
