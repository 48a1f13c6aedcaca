"""`vdt data prepare` (vdt_py.prepare) with a tiny random Wan2.2-layout VAE (48 channels, the real per-channel
statistics) and a tiny umT5: the root passes `vdt data check`, latents are the VAE's normalised posterior means,
prompts are embedded once each, ids are UNKNOWN without maps and follow the map when given, runs never straddle the
split, a second run resumes, and bad input gets an error naming the file or flag."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from vdt_py.__main__ import main


def prepare(clips, models, out, *extra):
    args = ["prepare", "--videos", str(clips), "--out", str(out), "--vae", models["vae"], "--text-encoder",
            models["text_encoder"], "--res", "64x64", "--frames", "9", "--device", "cpu", "--no-progress", *extra]
    return main(args)


def test_root_passes_check_and_holds_normalised_latents(clips, tiny48, tmp_path, vdt, capsys):
    from diffusers import AutoencoderKLWan
    from vdt_py.tiny_models import WAN22_MEAN, WAN22_STD
    from vdt_py.video_io import fit, read_frames

    out = tmp_path / "root"
    assert prepare(clips, tiny48, out) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert info["format"] == "vdt-latents/1" and info["res"] == "64x64"
    assert info["latent_channels"] == 48 and info["latent_frames"] == 3     # 9 = 4*2+1 frames -> 2+1 latents
    assert info["latent_hw"] == [4, 4] and info["cells"] == 3                  # 16x spatial
    assert info["text_dim"] == 64 and info["text_len"] == 512

    # The latents are (mode - mean) / std with the 48 Wan2.2 values of the VAE's config.
    vae = AutoencoderKLWan.from_pretrained(tiny48["vae"]).eval()
    frames = fit(read_frames(str(clips / "runA" / "c0.mp4"), 9), 64, 64)
    with torch.no_grad():
        mu = vae.encode(frames.permute(3, 0, 1, 2)[None].float() / 127.5 - 1).latent_dist.mode()[0]
    want = (mu - torch.tensor(WAN22_MEAN).view(-1, 1, 1, 1)) / torch.tensor(WAN22_STD).view(-1, 1, 1, 1)
    got = load_file(str(out / "latents" / "runA_c0.safetensors"))["latents"]
    assert got.dtype == torch.bfloat16 and list(got.shape) == [48, 3, 4, 4]
    torch.testing.assert_close(got.float(), want.to(torch.bfloat16).float())

    # ids: UNKNOWN without a map; the map's frames 0, 4, 8 (nearest-resized 16x16 -> 8x8) with one.
    assert (load_file(str(out / "cond" / "runA_c0.safetensors"))["ids"] == 255).all()
    ids = load_file(str(out / "cond" / "runB_c2.safetensors"))["ids"]
    src = torch.from_numpy(np.load(str(clips / "runB" / "c2.ids.npz"))["ids"])[[0, 4, 8]]
    assert ids.dtype == torch.uint8 and list(ids.shape) == [3, 8, 8]
    assert torch.equal(ids, src[:, ::2, ::2])

    # The text table: every distinct prompt once (the shared caption too), the null prompt, zero rows past lengths.
    with safe_open(str(out / "text_table.safetensors"), "pt") as f:
        prompts = json.loads(f.metadata()["prompts"])
        emb, lengths = f.get_tensor("embeddings"), f.get_tensor("lengths")
    assert sorted(prompts) == sorted({"", "a red car turns left", "a dog runs", "the camera pans right",
                                      "waves roll in", "rain falls on a quiet street"})
    assert emb.dtype == torch.bfloat16 and list(emb.shape) == [6, 512, 64] and lengths.dtype == torch.int32
    for i, n in enumerate(lengths.tolist()):
        assert 1 <= n < 512 and emb[i, :n].abs().sum() > 0 and (emb[i, n:] == 0).all()

    rows = [json.loads(l) for l in (out / "index" / "clips.jsonl").read_text().splitlines()]
    assert {r["clip_id"] for r in rows} == {"runA_c0", "runA_c1", "runB_c2", "runC_c3"}
    assert next(r for r in rows if r["clip_id"] == "runA_c1")["cells"] == ["a dog runs", "the camera pans right", "waves roll in"]
    splits = {}
    for r in rows:
        splits.setdefault(r["run"], set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values()) and {"val"} in splits.values() and {"train"} in splits.values()

    r = vdt("data", "check", out, "--res", "64x64")
    assert "ok:" in r.stdout, r.stdout


def test_second_run_resumes(clips, tiny48, tmp_path, capsys):
    out = tmp_path / "root"
    assert prepare(clips, tiny48, out) == 0
    kept = out / "latents" / "runA_c0.safetensors"
    stamp = kept.stat().st_mtime_ns
    os.remove(out / "latents" / "runC_c3.safetensors")           # as if stopped before this clip
    capsys.readouterr()
    assert prepare(clips, tiny48, out) == 0
    log = capsys.readouterr().out
    assert "3 already written; encoding 1" in log, log
    assert "6 prompts kept, embedding 0 new" in log, log
    assert kept.stat().st_mtime_ns == stamp
    assert (out / "latents" / "runC_c3.safetensors").is_file()
    # Other settings on the same root are refused, naming what changed.
    assert prepare(clips, tiny48, out, "--sem-scale", "1") == 2
    err = capsys.readouterr().err
    assert "prepare.json" in err and "sem_scale" in err


def test_val_runs_and_manifest(clips, tiny48, tmp_path):
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text("\n".join(json.dumps(j) for j in [
        {"video": "videos/runA/c0.mp4", "caption": "one", "run": "s1"},
        {"video": "videos/runA/c1.mp4", "captions": ["a", "b", "c"], "run": "s1", "clip_id": "second"},
        {"video": "videos/runC/c3.mp4", "caption": "three", "run": "s2"}]) + "\n")
    out = tmp_path / "root"
    assert main(["prepare", "--manifest", str(manifest), "--out", str(out), "--vae", tiny48["vae"], "--text-encoder",
                 tiny48["text_encoder"], "--res", "64x64", "--frames", "5", "--val-runs", "s2", "--device", "cpu",
                 "--no-progress", "--cells", "3"]) == 0
    rows = {j["clip_id"]: j for j in map(json.loads, (out / "index" / "clips.jsonl").read_text().splitlines())}
    assert set(rows) == {"s1_c0", "second", "s2_c3"}
    assert rows["s2_c3"]["split"] == "val" and rows["second"]["split"] == "train"
    assert rows["second"]["cells"] == ["a", "b", "c"]
    assert json.loads((out / "dataset.json").read_text())["latent_frames"] == 2


@pytest.mark.parametrize("case", ["frames", "captions", "res", "device", "ids"])
def test_errors_name_the_flag_or_file(case, clips, tiny48, tmp_path, capsys):
    extra, want = [], []
    if case == "frames":
        extra, want = ["--frames", "8"], ["--frames 8", "4n+1"]
    elif case == "captions":
        (clips / "runC" / "c3.txt").write_text("one\ntwo\n")
        want = ["c3.txt", "2 captions", "expected 1"]
    elif case == "res":
        extra, want = ["--res", "80x64"], ["--res 80x64", "multiples of 32"]
    elif case == "device":
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is visible")
        extra, want = ["--device", "cuda:1"], ["--device cuda:1", "no CUDA device"]
    elif case == "ids":
        np.savez(str(clips / "runB" / "c2.ids.npz"), ids=np.full((9, 8, 8), 30, np.uint8))
        want = ["c2.ids.npz", "id 30", "0..19"]
    assert prepare(clips, tiny48, tmp_path / "root", *extra) == 2
    err = capsys.readouterr().err
    for w in want:
        assert w in err, err


def test_cli_forwards_to_python(vdt, tmp_path):
    r = vdt("data", "prepare", "--help")
    assert "--text-encoder" in r.stdout and "vdt data prepare" in r.stdout
    # Without VDT_PYTHON the binary finds the venv through scripts/py_env.sh, and errors come back with exit code 2.
    env = {k: v for k, v in os.environ.items() if k != "VDT_PYTHON"}
    r = vdt("data", "prepare", "--videos", tmp_path / "none", "--out", tmp_path / "r", "--vae", tmp_path,
            "--text-encoder", tmp_path, check=False, env={"VDT_PYTHON": ""})
    assert r.returncode == 2 and "--videos" in r.stderr and "not a directory" in r.stderr, r.stderr
