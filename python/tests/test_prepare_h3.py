"""``vdt data prepare --model h3`` with tiny random MiniMax-H3 encoders (AutoencoderKLMiniMaxH3, its audio VAE,
Qwen3-VL): the root passes ``vdt data check``, every tensor is what the real classes compute (video latents normalised
per channel, Picture 1 native and, uncropped with Lanczos, at DiffSynth's short-edge size, Qwen3-VL rows after the
chosen layer with the vision block tagged 0, the silence of a zero waveform), resume skips what exists, and
``vdt train causal --model h3-tiny`` trains on it."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from conftest import moving_square, write_mp4

FRAMES = 22            # 17n + 5 -> 7 latent frames
RES = "64x64"


@pytest.fixture(scope="session")
def tiny_h3(tmp_path_factory):
    from vdt_py import tiny_models

    return tiny_models.tiny_h3(str(tmp_path_factory.mktemp("tiny_h3")), text_dim=48)


@pytest.fixture
def h3_clips(tmp_path):
    """videos/runA/{c0.mp4 (not square), c1.mp4}, videos/runB/c2.mp4 with its own Picture 1; one caption each."""
    from PIL import Image

    v = tmp_path / "videos"
    (v / "runA").mkdir(parents=True)
    (v / "runB").mkdir()
    write_mp4(str(v / "runA" / "c0.mp4"), moving_square(24, 72, 100, 0))
    write_mp4(str(v / "runA" / "c1.mp4"), moving_square(FRAMES, 64, 64, 1))
    write_mp4(str(v / "runB" / "c2.mp4"), moving_square(FRAMES, 64, 64, 2))
    (v / "runA" / "c0.txt").write_text("a red car turns left\n")
    (v / "runA" / "c1.txt").write_text("a dog runs along the beach\n")
    (v / "runB" / "c2.txt").write_text("a red car turns left\n")
    Image.fromarray(moving_square(1, 70, 120, 9)[0]).save(str(v / "runB" / "c2.picture1.png"))
    return v


def prepare(vdt, videos, out, models, *extra, check=True):
    return vdt("data", "prepare", "--model", "h3", "--videos", videos, "--out", out, "--vae", models["vae"],
               "--audio-vae", models["audio_vae"], "--text-encoder", models["text_encoder"], "--res", RES,
               "--frames", FRAMES, "--text-len", 64, "--text-layer", 2, "--picture1-short-edge", 128,
               "--val-runs", "runB", "--no-progress", *extra, check=check)


def test_prepare_h3_root_checks_and_matches_the_encoders(vdt, tiny_h3, h3_clips, tmp_path):
    from vdt_py.h3_models import H3AudioVae, H3VideoVae, Qwen3VLText
    from vdt_py.prepare_h3 import native_grid, table_key
    from vdt_py.video_io import fit, read_frames

    out = tmp_path / "root"
    r = prepare(vdt, h3_clips, out, tiny_h3)
    assert "Next: vdt data check" in r.stdout
    check = vdt("data", "check", out)
    assert "ok" in check.stdout, check.stdout

    info = json.loads((out / "dataset.json").read_text())
    assert info["model_family"] == "h3" and info["cells"] == 1 and info["latent_channels"] == 24
    assert info["latent_frames"] == 7 and info["latent_hw"] == [4, 4] and info["audio_channels"] == 32
    assert info["text_dim"] == 48 and info["text_len"] == 64
    assert info["picture1_short_edge"] == 128                                 # what `vdt data check` holds it to
    rows = [json.loads(l) for l in (out / "index" / "clips.jsonl").read_text().splitlines()]
    assert {r_["clip_id"]: r_["split"] for r_ in rows} == {"runA_c0": "train", "runA_c1": "train", "runB_c2": "val"}

    # video latents: (mode - mean) / std of the real class on the fitted frames
    vae = H3VideoVae(tiny_h3["vae"], torch.device("cpu"), torch.float32)
    frames = fit(read_frames(str(h3_clips / "runA" / "c0.mp4"), FRAMES), 64, 64, "crop")
    t = load_file(str(out / "latents" / "runA_c0.safetensors"))
    want = vae.encode(frames)
    assert t["latents"].shape == (24, 7, 4, 4) and t["latents"].dtype == torch.bfloat16
    torch.testing.assert_close(t["latents"].float(), want.to(torch.bfloat16).float())
    assert not torch.allclose(vae.mean, torch.zeros_like(vae.mean))            # the normalisation is not a no-op
    # Picture 1: the first frame (no sidecar) at native size, and at the short edge
    torch.testing.assert_close(t["picture1"].float(), vae.encode(frames[:1]).to(torch.bfloat16).float())
    assert t["picture1_2048"].shape == (24, 1, 8, 8)                          # 128 px short edge / 16
    # c2 brings its own Picture 1: 120x70 -> native 96x64 (multiples of 32) -> latent 4x6
    t2 = load_file(str(out / "latents" / "runB_c2.safetensors"))
    from PIL import Image

    pic = torch.from_numpy(np.asarray(Image.open(h3_clips / "runB" / "c2.picture1.png").convert("RGB")).copy())
    assert t2["picture1"].shape == (24, 1, 4, 6)
    torch.testing.assert_close(t2["picture1"].float(), vae.encode(native_grid(pic, "x")[None]).to(torch.bfloat16).float())
    # at the short edge: the whole 120x70 image (no crop) to 128 px high, 120 * 128/70 = 219.4 -> 224 wide, Lanczos,
    # as DiffSynth's reference image (cropping first would give 192 wide)
    assert t2["picture1_2048"].shape == (24, 1, 8, 14)
    lanczos = torch.from_numpy(np.asarray(Image.fromarray(pic.numpy()).resize((224, 128), Image.LANCZOS)).copy())
    torch.testing.assert_close(t2["picture1_2048"].float(), vae.encode(lanczos[None]).to(torch.bfloat16).float())
    with safe_open(str(out / "latents" / "runB_c2.safetensors"), "pt") as f:
        assert f.metadata()["picture1_source_size"] == "120x70"

    # text rows: Qwen3-VL after layer 2 on "<Picture 1>: " + vision block + caption; vision block tagged 0
    with safe_open(str(out / "text_table.safetensors"), "pt") as f:
        prompts = json.loads(f.metadata()["prompts"])
        emb, lengths, tags = f.get_tensor("embeddings"), f.get_tensor("lengths"), f.get_tensor("tags")
    assert prompts[0] == "" and lengths[0] == 0 and emb[0].abs().sum() == 0
    key = table_key("runA_c0", "a red car turns left")
    assert key in prompts and table_key("runB_c2", "a red car turns left") in prompts   # one row per clip
    i = prompts.index(key)
    enc = Qwen3VLText(tiny_h3["text_encoder"], torch.device("cpu"), torch.float32, 64, 2)
    rows, n, tg = enc.encode("a red car turns left", frames[0])
    assert int(lengths[i]) == n and n > 0
    torch.testing.assert_close(emb[i].float(), rows.to(torch.bfloat16).float())
    assert torch.equal(tags[i], tg)
    vision = int((tg[:n] == 0).sum())
    assert vision >= 3                                           # vision_start + at least one image token + vision_end
    assert tags[i][n:].eq(1).all() and emb[i][n:].abs().sum() == 0
    # the silent audio latent: the audio VAE's normalised encoding of a zero waveform, round(22 / 24 * 40) steps
    sil = load_file(str(out / "audio_silence.safetensors"))["silence"]
    audio = H3AudioVae(tiny_h3["audio_vae"], torch.device("cpu"))
    assert sil.shape == (2, 32, 37)
    torch.testing.assert_close(sil.float(), audio.silence(37).to(torch.bfloat16).float())
    assert sil.float().abs().sum() > 0                                       # not the zero latent

    # resume: nothing re-encoded, the same bytes
    before = (out / "latents" / "runA_c0.safetensors").stat().st_mtime_ns
    r2 = prepare(vdt, h3_clips, out, tiny_h3)
    assert "3 already written; encoding 0" in r2.stdout and "embedding 0" in r2.stdout
    assert (out / "latents" / "runA_c0.safetensors").stat().st_mtime_ns == before
    # another --frames on the same root is refused, naming what changed
    bad = prepare(vdt, h3_clips, out, tiny_h3, "--frames", 39, check=False)
    assert bad.returncode != 0 and "latent_frames" in bad.stderr


def test_prepare_h3_errors_name_the_flag(vdt, tiny_h3, h3_clips, tmp_path):
    r = prepare(vdt, h3_clips, tmp_path / "a", tiny_h3, "--frames", 24, check=False)
    assert r.returncode != 0 and "--frames 24" in r.stderr and "17n+5" in r.stderr
    r = prepare(vdt, h3_clips, tmp_path / "b", tiny_h3, "--text-layer", 3, check=False)
    assert r.returncode != 0 and "--text-layer 3" in r.stderr
    r = vdt("data", "prepare", "--model", "h3", "--videos", h3_clips, "--out", tmp_path / "c", "--vae", tiny_h3["vae"],
            "--text-encoder", tiny_h3["text_encoder"], check=False)
    assert r.returncode != 0 and "--audio-vae" in r.stderr
    r = prepare(vdt, h3_clips, tmp_path / "d", tiny_h3, "--text-len", 4, check=False)
    assert r.returncode != 0 and "--text-len" in r.stderr


def test_prepare_h3_then_train_causal(vdt, tiny_h3, h3_clips, tmp_path):
    out = tmp_path / "root"
    prepare(vdt, h3_clips, out, tiny_h3)
    run = tmp_path / "run"
    r = vdt("train", "causal", "--model", "h3-tiny", "--init-lora", "none", "--random-init", "--data-root", out, "--out", run,
            "--device", "cpu", "--precision", "fp32", "--chunk-frames", 1, "--steps", 3, "--val-clips", 1,
            "--lora-rank", 4, "--save-every", 3, "--val-every", 3, "--picture1", "2048")
    log = [json.loads(l) for l in (run / "train_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in log] == [1, 2, 3] and all(np.isfinite(x["loss_v"]) for x in log)
    assert (run / "lora_step00003.safetensors").is_file()
    assert "Picture 1 (2048)" in r.stdout


def test_picture1_short_edge_is_diffsynths_shape():
    """DiffSynth's H3 reference image: the short edge to 2048, each side the nearest multiple of 32, on the whole image."""
    from vdt_py.prepare_h3 import short_edge, short_edge_size

    assert short_edge_size(1080, 1920, 2048) == (2048, 3648)       # 1920x1080 (W x H)
    assert short_edge_size(1920, 1080, 2048) == (3648, 2048)       # 1080x1920
    img = torch.from_numpy(np.random.default_rng(0).integers(0, 255, (70, 120, 3), dtype=np.uint8))
    assert tuple(short_edge(img, 128).shape) == (128, 224, 3)
