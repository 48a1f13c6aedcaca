"""Writing a data root's files for ``vdt data prepare`` (both the Wan and the MiniMax-H3 path): saves that appear
whole or not at all, and ``prepare.json``, the settings the latents depend on, so that a resume with other flags is an
error instead of a root of mixed latents (docs/data_format.md)."""
from __future__ import annotations

import json
import os

from safetensors.torch import save_file

from .errors import VdtError


def atomic_save(tensors: dict, path: str, metadata: dict | None = None) -> None:
    tmp = path + ".partial"
    save_file(tensors, tmp, metadata=metadata)
    os.replace(tmp, path)


def atomic_text(path: str, text: str) -> None:
    tmp = path + ".partial"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def check_settings(out: str, settings: dict) -> None:
    """Records ``settings`` in ``out/prepare.json`` before the first clip, or checks them against the recorded ones
    (a resume): any difference is an error naming each setting, its recorded and its new value."""
    settings_path = os.path.join(out, "prepare.json")
    if os.path.isfile(settings_path):
        old = json.load(open(settings_path, encoding="utf-8"))
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            raise VdtError(f"{settings_path}: this root was prepared with other settings ("
                           + ", ".join(f"{d}: {old.get(d)!r}, now {settings[d]!r}" for d in diff)
                           + "); ---> HINT: use a new --out, or the same flags as before to resume")
    else:
        atomic_text(settings_path, json.dumps(settings, indent=1) + "\n")
