"""`vdt ckpt export` read by diffusers: the fixture's Wan DiT (whose vdt forward the parity suite pins to the reference
within 1e-5) exported with --format diffusers loads in diffusers' WanTransformer3DModel and gives vdt's output, both
ways: diffusers' output vs the fixture, and `vdt parity` of vdt's forward against diffusers' output. LoRA files keep
their alpha: diffusers (lora_adapter_metadata) and its ComfyUI-format converter (<module>.alpha) give the output of
the LoRA merged by `vdt ckpt merge-lora`."""
from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

FIXTURES = os.environ.get("VDT_FIXTURES") or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tests", "fixtures")
FIXTURE = os.path.join(FIXTURES, "wan_tiny_a.safetensors")


def rel_l2(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def load_fixture():
    if not os.path.isfile(FIXTURE):
        pytest.skip(f"no fixture {FIXTURE} (set VDT_FIXTURES)")
    with safe_open(FIXTURE, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def diffusers_forward(model_dir: str, fx: dict, lora: dict | None = None) -> torch.Tensor:
    from diffusers import WanTransformer3DModel

    m = WanTransformer3DModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    if lora is not None:
        m.load_lora_adapter(lora["state_dict"], prefix="transformer", metadata=lora.get("metadata"))
    x, ctx = fx["fixture.x"], fx["fixture.context"]
    b, _, f, h, w = x.shape
    per_frame = h * w // 4                                           # tokens of one latent frame (2x2 patches)
    t = torch.full((b, f * per_frame), float(fx["fixture.timestep"][0]))
    t[:, :per_frame] = 0                                             # TI2V: frame 0 is clean (per-token timesteps)
    with torch.no_grad():
        return m(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)[0]


def test_diffusers_loads_the_export_and_matches_vdt(vdt, tmp_path):
    fx, meta = load_fixture()
    out = tmp_path / "transformer"
    r = vdt("ckpt", "export", FIXTURE, "--format", "diffusers", "--out", out)
    assert "exported DiT" in r.stdout
    y = diffusers_forward(str(out), fx)
    assert rel_l2(y, fx["fixture.out"]) < 1e-4
    # vdt's forward of the same weights against diffusers' output: a parity fixture whose reference is diffusers.
    model = {k: v for k, v in fx.items() if not k.startswith("fixture.")}
    inputs = {k: fx[k] for k in ("fixture.x", "fixture.context", "fixture.timestep")}
    save_file(model | inputs | {"fixture.out": y.contiguous()}, str(tmp_path / "vs_diffusers.safetensors"),
              metadata={"config": meta["config"], "timestep_mode": meta["timestep_mode"]})
    r = vdt("parity", tmp_path / "vs_diffusers.safetensors", "--tol", "1e-4")
    assert "PASS" in r.stdout, r.stdout
    # ... and vdt reads the diffusers directory back (--weights / --model_dir accept diffusers' names).
    r = vdt("ckpt", "export", out / "diffusion_pytorch_model.safetensors", "--format", "comfy", "--out", tmp_path / "c.safetensors")
    with safe_open(str(tmp_path / "c.safetensors"), "pt") as f:
        for k in model:
            torch.testing.assert_close(f.get_tensor("model.diffusion_model." + k), model[k], rtol=0, atol=0)


def test_lora_alpha_survives_export(vdt, tmp_path):
    from diffusers import WanPipeline

    fx, _ = load_fixture()
    torch.manual_seed(0)
    lora, rank, alpha = {}, 4, 8.0                                  # scale alpha / rank = 2: a lost alpha shows
    for blk in range(2):
        for mod, (o, i) in {"self_attn.q": (96, 96), "cross_attn.v": (96, 96), "ffn.0": (256, 96), "ffn.2": (96, 256)}.items():
            lora[f"blocks.{blk}.{mod}.lora_A.weight"] = torch.randn(rank, i) * 0.1
            lora[f"blocks.{blk}.{mod}.lora_B.weight"] = torch.randn(o, rank) * 0.1
    save_file(lora, str(tmp_path / "lora.safetensors"), metadata={"rank": str(rank), "alpha": str(alpha)})
    vdt("ckpt", "merge-lora", "--base", FIXTURE, "--lora", tmp_path / "lora.safetensors", "--out", tmp_path / "merged.safetensors")
    vdt("ckpt", "export", tmp_path / "merged.safetensors", "--format", "diffusers", "--out", tmp_path / "merged")
    vdt("ckpt", "export", FIXTURE, "--format", "diffusers", "--out", tmp_path / "base")
    want = diffusers_forward(str(tmp_path / "merged"), fx)
    assert rel_l2(want, diffusers_forward(str(tmp_path / "base"), fx)) > 1e-2   # the LoRA changes the output

    vdt("ckpt", "export", tmp_path / "lora.safetensors", "--format", "diffusers", "--out", tmp_path / "lora_d.safetensors")
    sd, md = WanPipeline.lora_state_dict(str(tmp_path / "lora_d.safetensors"), return_lora_metadata=True)
    got = diffusers_forward(str(tmp_path / "base"), fx, {"state_dict": sd, "metadata": md})
    assert rel_l2(got, want) < 1e-4

    vdt("ckpt", "export", tmp_path / "lora.safetensors", "--format", "comfy", "--out", tmp_path / "lora_c.safetensors")
    sd = WanPipeline.lora_state_dict(str(tmp_path / "lora_c.safetensors"))   # diffusers' ComfyUI-format converter
    got = diffusers_forward(str(tmp_path / "base"), fx, {"state_dict": sd})
    assert rel_l2(got, want) < 1e-4
