"""Shared fixtures: tiny random Wan models (nothing downloaded), generated clips, and the vdt binary.

The vdt binary comes from $VDT_BINARY (ctest sets it), else <repo>/build/vdt; tests that need it skip without it.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def vdt_binary() -> str | None:
    b = os.environ.get("VDT_BINARY") or os.path.join(REPO, "build", "vdt")
    return b if os.path.isfile(b) and os.access(b, os.X_OK) else None


@pytest.fixture
def vdt():
    b = vdt_binary()
    if not b:
        pytest.skip("no vdt binary (set VDT_BINARY or build into build/)")

    def run(*args, check=True, env=None):
        e = dict(os.environ)
        e["VDT_PYTHON"] = e.get("VDT_PYTHON") or __import__("sys").executable   # the python running the tests
        e.update(env or {})
        r = subprocess.run([b, *map(str, args)], capture_output=True, text=True, env=e)
        if check and r.returncode != 0:
            raise AssertionError(f"vdt {' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    return run


@pytest.fixture(scope="session")
def tiny48(tmp_path_factory):
    from vdt_py import tiny_models

    return tiny_models.make(str(tmp_path_factory.mktemp("tiny48")), z_dim=48, text_dim=64)


@pytest.fixture(scope="session")
def tiny16(tmp_path_factory):
    from vdt_py import tiny_models

    return tiny_models.make(str(tmp_path_factory.mktemp("tiny16")), z_dim=16, text_dim=64)


def moving_square(t: int, h: int, w: int, seed: int) -> np.ndarray:
    """[t, h, w, 3] uint8: a coloured square moving right over a grey background (a clip with motion)."""
    r = np.random.default_rng(seed)
    colour = r.integers(60, 255, 3)
    y0, x0, s = int(r.integers(0, h // 2)), int(r.integers(0, w // 2)), max(4, min(h, w) // 4)
    out = np.full((t, h, w, 3), 40, np.uint8)
    for i in range(t):
        x = (x0 + 3 * i) % (w - s)
        out[i, y0:y0 + s, x:x + s] = colour
    return out


def write_mp4(path: str, frames: np.ndarray, fps: int = 8) -> None:
    import imageio.v3 as iio

    iio.imwrite(path, frames, plugin="FFMPEG", fps=fps, macro_block_size=1)


def write_frames(folder: str, frames: np.ndarray) -> None:
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    for i, f in enumerate(frames):
        Image.fromarray(f).save(os.path.join(folder, f"{i:04d}.png"))


@pytest.fixture
def clips(tmp_path):
    """videos/runA/{c0.mp4, c1.mp4}, videos/runB/c2/ (PNG frames, with an id map), videos/runC/c3.mp4; captions beside."""
    v = tmp_path / "videos"
    (v / "runA").mkdir(parents=True)
    (v / "runC").mkdir()
    write_mp4(str(v / "runA" / "c0.mp4"), moving_square(12, 72, 100, 0))          # not square: crop to fit
    write_mp4(str(v / "runA" / "c1.mp4"), moving_square(9, 64, 64, 1))
    write_frames(str(v / "runB" / "c2"), moving_square(9, 64, 64, 2))
    write_mp4(str(v / "runC" / "c3.mp4"), moving_square(10, 64, 64, 3))
    (v / "runA" / "c0.txt").write_text("a red car turns left\n")
    (v / "runA" / "c1.txt").write_text("a dog runs\nthe camera pans right\nwaves roll in\n")   # one per latent frame
    (v / "runB" / "c2.txt").write_text("a red car turns left\n")                              # the same prompt as c0
    (v / "runC" / "c3.txt").write_text("rain falls on a quiet street\n")
    ids = np.random.default_rng(5).integers(0, 20, (9, 16, 16)).astype(np.uint8)             # one map per pixel frame
    ids[:, :2, :2] = 255
    np.savez_compressed(str(v / "runB" / "c2.ids.npz"), ids=ids)
    return v
