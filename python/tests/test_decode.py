"""`vdt decode` (vdt_py.decode): latents -> mp4 with T = 4(F-1)+1 frames at the VAE's resolution, plus a contact
sheet; the decoded frames are the VAE's decode of the de-normalised latents."""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from vdt_py.__main__ import main


def test_decode_writes_mp4_and_contact_sheet(tiny48, tmp_path, capsys):
    import imageio.v3 as iio
    from vdt_py.wan_vae import WanVae

    torch.manual_seed(0)
    z = {"ground_truth": torch.randn(48, 3, 4, 4).to(torch.bfloat16), "conditioned": torch.randn(48, 3, 4, 4)}
    save_file(z, str(tmp_path / "clip7.safetensors"))
    out = tmp_path / "decoded"
    assert main(["decode", str(tmp_path / "clip7.safetensors"), "--vae", tiny48["vae"], "--out", str(out),
                 "--device", "cpu", "--fps", "8", "--columns", "3"]) == 0
    vae = WanVae(tiny48["vae"], torch.device("cpu"), torch.float32)
    sheet = np.asarray(Image.open(out / "clip7.png").convert("RGB"))
    assert sheet.shape == (2 * (64 + 14), 3 * 64, 3)                # rows: conditioned, ground_truth; 3 columns
    for row, k in enumerate(sorted(z)):
        video = iio.imread(str(out / f"clip7_{k}.mp4"), plugin="FFMPEG")
        assert video.shape == (9, 64, 64, 3)                      # 3 latent frames -> 9 frames, 16x spatial
        want = vae.decode(z[k])                                    # de-normalise with the 48 stats, then decode
        for col, frame in enumerate((0, 4, 8)):                    # the lossless sheet holds frames 0, 4, 8 exactly
            y = row * (64 + 14) + 14
            assert np.array_equal(sheet[y:y + 64, col * 64:(col + 1) * 64], want[frame].numpy())
    assert "contact sheet" in capsys.readouterr().out


def test_decode_errors(tiny48, tmp_path, capsys):
    save_file({"latents": torch.randn(16, 2, 4, 4)}, str(tmp_path / "wrong.safetensors"))
    assert main(["decode", str(tmp_path / "wrong.safetensors"), "--vae", tiny48["vae"], "--device", "cpu"]) == 2
    assert "[48, F, h, w]" in capsys.readouterr().err
    assert main(["decode", str(tmp_path / "wrong.safetensors"), "--vae", str(tmp_path), "--device", "cpu"]) == 2
    assert "--vae" in capsys.readouterr().err
    assert main(["decode", str(tmp_path / "wrong.safetensors"), "--keys", "sample", "--vae", tiny48["vae"],
                 "--device", "cpu"]) == 2
    assert "no tensor sample" in capsys.readouterr().err
