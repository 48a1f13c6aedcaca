"""The README's "your own videos" path end to end on the CPU with tiny random models: generated clips -> `vdt data
prepare` (Wan2.1-layout VAE, 16 channels, which vdt's tiny DiT preset takes; umT5 64 wide) -> `vdt data check` ->
`vdt train sft --model tiny` (a few steps) -> `vdt sample` (val clips, and new prompts embedded through the Python
package) -> `vdt decode` (mp4 + contact sheet) -> `vdt ckpt export`
(diffusers, --drop-adapter) loaded by diffusers' WanTransformer3DModel -> plot.png from the run's logs."""
from __future__ import annotations

import json
import os

import imageio.v3 as iio
from PIL import Image


def test_prepare_check_train_sample_decode(clips, tiny16, tmp_path, vdt):
    root, run, samples = tmp_path / "root", tmp_path / "run", tmp_path / "samples"
    vdt("data", "prepare", "--videos", clips, "--out", root, "--vae", tiny16["vae"], "--text-encoder",
        tiny16["text_encoder"], "--res", "64x64", "--frames", "9", "--device", "cpu", "--val-runs", "runC")
    r = vdt("data", "check", root, "--res", "64x64")
    assert "ok:" in r.stdout and "train 3, val 1" in r.stdout, r.stdout

    vdt("train", "sft", "--random-init", "--data_root", root, "--output", run, "--model", "tiny", "--device", "cpu", "--precision", "fp32",
        "--res", "64x64", "--max_steps", "4", "--batch_size", "1", "--grad_accum", "1", "--num_workers", "1",
        "--warmup_steps", "1", "--val_every", "2", "--val_n", "1", "--save_every", "4", "--log_every", "1",
        "--no-save_state", "--seed", "0")
    ckpt = run / "step-4.safetensors"
    assert ckpt.is_file()

    r = vdt("sample", "--ckpt", ckpt, "--data_root", root, "--out", samples, "--n", "1", "--steps", "3")
    assert "runC_c3.safetensors" in r.stdout, r.stdout

    # New prompts (not in the root): embedded by umT5 through the Python package, then sampled, one file per prompt.
    p0, p1 = "a dog runs along the beach", "the sun sets behind the hills"
    r = vdt("sample", "--ckpt", ckpt, "--data_root", root, "--out", tmp_path / "prompted", "--n", "1", "--steps", "3",
            "--prompt", p0, "--prompt", p1, "--text-encoder", tiny16["text_encoder"])
    assert "2 new prompt(s) embedded" in r.stdout, r.stdout
    from safetensors import safe_open
    from safetensors.torch import load_file
    import torch
    from vdt_py.umt5 import Umt5

    with safe_open(str(tmp_path / "prompted" / "text_table_prompts.safetensors"), "pt") as f:
        prompts = json.loads(f.metadata()["prompts"])
        emb, lengths = f.get_tensor("embeddings"), f.get_tensor("lengths")
    assert prompts[-2:] == [p0, p1]
    want, wl = Umt5(tiny16["text_encoder"], None, torch.device("cpu"), torch.float32, emb.shape[1]).encode([p0, p1])
    torch.testing.assert_close(emb[-2:].float(), want.to(torch.bfloat16).float())
    assert torch.equal(lengths[-2:], wl)
    own = load_file(str(samples / "runC_c3.safetensors"))
    a, b = (load_file(str(tmp_path / "prompted" / f"runC_c3_p{k}.safetensors")) for k in (0, 1))
    with safe_open(str(tmp_path / "prompted" / "runC_c3_p1.safetensors"), "pt") as f:
        assert f.metadata()["prompt"] == p1
    assert torch.equal(a["ground_truth"], own["ground_truth"]) and torch.equal(a["unconditioned"], own["unconditioned"])
    assert not torch.equal(a["conditioned"], b["conditioned"]) and not torch.equal(a["conditioned"], own["conditioned"])
    r = vdt("sample", "--ckpt", ckpt, "--data_root", root, "--out", tmp_path / "x", "--prompt", p0, check=False)
    assert r.returncode != 0 and "--text-encoder" in r.stderr, r.stderr

    r = vdt("decode", samples, "--vae", tiny16["vae"], "--device", "cpu", "--fps", "8")
    for k in ("ground_truth", "conditioned", "unconditioned"):
        video = iio.imread(str(samples / f"runC_c3_{k}.mp4"), plugin="FFMPEG")
        assert video.shape == (9, 64, 64, 3), video.shape
    assert Image.open(samples / "runC_c3.png").size[0] > 0

    # The trained export in diffusers' layout: the adapter must be dropped explicitly; then diffusers loads it.
    r = vdt("ckpt", "export", ckpt, "--format", "diffusers", "--out", tmp_path / "hf", check=False)
    assert r.returncode == 2 and "--drop-adapter" in r.stderr, r.stderr
    vdt("ckpt", "export", ckpt, "--format", "diffusers", "--out", tmp_path / "hf", "--drop-adapter")
    from diffusers import WanTransformer3DModel

    m = WanTransformer3DModel.from_pretrained(str(tmp_path / "hf"))
    assert m.config.in_channels == 16 and m.config.text_dim == 64
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_layers"] == 2

    from vdt_py.plot import plot_run

    png = plot_run(str(run), str(tmp_path / "plot.png"))
    assert Image.open(png).size == (800, 650)
