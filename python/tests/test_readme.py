"""README.md's CPU walk-throughs run as written: every shell block without a marker (md_commands.py), in order, as one
bash script with -e, in a temporary directory that holds the checkout's build/ (the vdt under test), scripts/ and
python/, after the inputs the blocks say the user brings (their `# scratch/...: ...` comment lines) are made there."""
from __future__ import annotations

import os
import re
import subprocess

import pytest
from PIL import Image

from conftest import moving_square, vdt_binary, write_mp4
from md_commands import REPO, blocks

README = os.path.join(REPO, "README.md")


def test_readme_docs_index_lists_every_doc():
    """The README's "Docs" section names every file in docs/, and only files that exist."""
    text = open(README, encoding="utf-8").read()
    section = text.split("\n## Docs\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `docs/([^`]+)`", section, re.M)
    present = sorted(f for f in os.listdir(os.path.join(REPO, "docs")) if not f.startswith("."))
    assert sorted(set(listed)) == present, f"missing from the README: {sorted(set(present) - set(listed))}; " \
                                           f"listed but absent: {sorted(set(listed) - set(present))}"


def make_videos(folder: str) -> None:
    """Three 22-frame 64x64 clips with one-line captions in two run folders: at least 9 frames (the SFT walk-through)
    and 17n + 5 frames (the MiniMax-H3 one)."""
    for run, name, seed, caption in (("runA", "c0", 0, "a red car turns left"), ("runA", "c1", 1, "a dog runs"),
                                     ("runB", "c2", 2, "waves roll onto the shore")):
        os.makedirs(os.path.join(folder, run), exist_ok=True)
        write_mp4(os.path.join(folder, run, name + ".mp4"), moving_square(22, 64, 64, seed))
        with open(os.path.join(folder, run, name + ".txt"), "w") as f:
            f.write(caption + "\n")


# What a walk-through may say the user brings, and how this test makes it.
INPUTS = {"scratch/videos": make_videos}


def test_readme_cpu_blocks_run_as_written(tmp_path):
    binary = vdt_binary()
    if not binary:
        pytest.skip("no vdt binary (set VDT_BINARY or build into build/)")
    runnable = [b for b in blocks(README) if b.runs]
    assert len(runnable) >= 3, [b.where() for b in runnable]
    # The checkout as the walk-throughs see it: build/vdt is the binary under test.
    os.symlink(os.path.dirname(os.path.abspath(binary)), tmp_path / "build")
    for d in ("scripts", "python"):
        os.symlink(os.path.join(REPO, d), tmp_path / d)
    for b in runnable:
        for path in re.findall(r"^# (scratch/[\w/.-]+): ", b.text, re.M):
            assert path in INPUTS, f"{b.where()}: the block says the user brings {path}; teach test_readme.py to make it"
            if not os.path.exists(tmp_path / path):
                INPUTS[path](str(tmp_path / path))
    script = "set -euxo pipefail\n" + "\n".join(f"# {b.where()}\n{b.text}" for b in runnable)
    (tmp_path / "readme.sh").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("VDT_PYTHON", "PYTHONPATH")}   # as a user's shell
    r = subprocess.run(["bash", "readme.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    log = f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr (the commands, then their messages)\n" \
          f"{r.stderr[-8000:]}"
    assert r.returncode == 0, log

    # What the blocks say they make.
    assert re.search(r"random UMT5EncoderModel \(d_model 64\)", r.stdout) and "None" not in r.stdout, log
    s = tmp_path / "scratch"
    assert (s / "run" / "step-20.safetensors").is_file(), log
    assert Image.open(s / "run" / "plot.png").size[0] > 0
    assert any(p.suffix == ".mp4" for p in (s / "samples").iterdir()), sorted(os.listdir(s / "samples"))
    assert list((s / "h3run").glob("lora_step*.safetensors")), sorted(os.listdir(s / "h3run"))
    assert list((s / "causal_run").glob("lora_step*.safetensors")), sorted(os.listdir(s / "causal_run"))
