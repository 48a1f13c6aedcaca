"""`vdt decode` (vdt_py.decode): latents -> mp4 with T = 4(F-1)+1 frames at the VAE's resolution, plus a contact
sheet; the decoded frames are the VAE's decode of the de-normalised latents."""
from __future__ import annotations

import numpy as np
import pytest
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


# MiniMax-H3: a stream as `vdt sample --causal --stream` writes it (<clip>_f<start>.safetensors with `sample`, the
# window's `ground_truth` and their `audio.*`, and the per-chunk files of <clip>_f<start>.chunks/), decoded with tiny
# random H3 VAEs: 5 latents per 17-frame clip, the audio latents muxed in as a stereo track.

@pytest.fixture(scope="module")
def tiny_h3(tmp_path_factory):
    from vdt_py import tiny_models

    return tiny_models.tiny_h3(str(tmp_path_factory.mktemp("tiny_h3")), text_dim=48)


def ffmpeg_info(path) -> str:
    """ffmpeg's description of a media file (its streams: 'Video: ...', 'Audio: ...')."""
    import subprocess

    import imageio_ffmpeg

    return subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path)], capture_output=True,
                          text=True).stderr


def h3_stream(root, chunks: int = 2):
    """root/clip_f0.safetensors (sample [24, 5*chunks, 4, 4], ground_truth, audio.*) and root/clip_f0.chunks/."""
    g = torch.Generator().manual_seed(0)
    steps = [29, 28, 28][:chunks]                                   # audio steps per 17-frame chunk at 24 fps
    video = [torch.randn(24, 5, 4, 4, generator=g) for _ in range(chunks)]
    audio = [torch.randn(2, 32, s, generator=g) for s in steps]
    stream = {"sample": torch.cat(video, 1).to(torch.bfloat16), "audio.sample": torch.cat(audio, 2),
              "ground_truth": torch.randn(24, 5 * chunks, 4, 4, generator=g),
              "audio.ground_truth": torch.randn(2, 32, sum(steps), generator=g)}
    save_file(stream, str(root / "clip_f0.safetensors"))
    (root / "clip_f0.chunks").mkdir()
    for i in range(chunks):
        save_file({"sample": video[i], "audio.sample": audio[i]}, str(root / "clip_f0.chunks" / f"chunk_{i:05d}.safetensors"))
    return stream


def test_h3_decode_undoes_the_normalisation(tiny_h3):
    from vdt_py.h3_models import IMAGENET_MEAN, IMAGENET_STD, H3AudioVae, H3VideoVae, h3_first_pixel_frame

    assert [h3_first_pixel_frame(k) for k in (0, 1, 4, 5, 6, 10, 37)] == [0, 1, 13, 17, 18, 34, 124]
    vae = H3VideoVae(tiny_h3["vae"], torch.device("cpu"), torch.float32)
    z = torch.randn(24, 7, 4, 4)
    frames = vae.decode(z)
    assert frames.shape == (22, 64, 64, 3) and vae.pixel_frames(7) == 22   # 5n + 2 latents -> 17n + 5 frames
    x = vae.vae.decode((z * vae.std + vae.mean)[None]).sample[0]           # ImageNet-normalised pixels
    x = x * torch.tensor(IMAGENET_STD).view(3, 1, 1, 1) + torch.tensor(IMAGENET_MEAN).view(3, 1, 1, 1)
    want = x.clamp(0, 1).mul(255).round().to(torch.uint8).permute(1, 2, 3, 0)
    assert torch.equal(frames, want)
    audio = H3AudioVae(tiny_h3["audio_vae"], torch.device("cpu"))
    a = torch.randn(2, 32, 6)
    wave = audio.decode(a)
    assert wave.shape == (2, 6 * 800) and audio.rate == 32000
    torch.testing.assert_close(wave, audio.vae.decode(a * audio.std + audio.mean).sample[:, 0].clamp(-1, 1))


def test_decode_h3_stream_with_audio(tiny_h3, tmp_path, capsys):
    import imageio.v3 as iio
    from vdt_py.h3_models import H3VideoVae

    stream = h3_stream(tmp_path)
    out = tmp_path / "decoded"
    assert main(["decode", str(tmp_path / "clip_f0.safetensors"), str(tmp_path / "clip_f0.chunks"), "--vae",
                 tiny_h3["vae"], "--audio-vae", tiny_h3["audio_vae"], "--out", str(out), "--device", "cpu",
                 "--columns", "3"]) == 0
    log = capsys.readouterr().out
    for name, frames, seconds in (("clip_f0_sample", 34, 57 / 40), ("clip_f0_ground_truth", 34, 57 / 40),
                                  ("chunk_00000_sample", 17, 29 / 40), ("chunk_00001_sample", 17, 28 / 40)):
        mp4 = out / f"{name}.mp4"
        assert iio.imread(str(mp4), plugin="FFMPEG").shape == (frames, 64, 64, 3), name   # 2 clips of 17 frames
        info = ffmpeg_info(mp4)
        assert "Audio:" in info and "32000 Hz" in info and "stereo" in info, info
        assert "24 fps" in info                                    # H3's default frame rate
    assert sorted(p.name for p in out.glob("*.mp4")) == ["chunk_00000_sample.mp4", "chunk_00001_sample.mp4",
                                                         "clip_f0_ground_truth.mp4", "clip_f0_sample.mp4"]
    assert "audio 'audio.sample' [2, 32, 57] -> stereo 1.43 s at 32000 Hz" in log
    # the contact sheet (lossless) holds the VAE's decode of each row: ground_truth, sample
    vae = H3VideoVae(tiny_h3["vae"], torch.device("cpu"), torch.float32)
    sheet = np.asarray(Image.open(out / "clip_f0.png").convert("RGB"))
    assert sheet.shape == (2 * (64 + 14), 3 * 64, 3)
    for row, k in enumerate(("ground_truth", "sample")):
        want = vae.decode(stream[k])
        for col, frame in enumerate(np.linspace(0, 33, num=3).round().astype(int)):
            y = row * (64 + 14) + 14
            assert np.array_equal(sheet[y:y + 64, col * 64:(col + 1) * 64], want[frame].numpy())


def test_decode_h3_without_audio_vae_is_silent(tiny_h3, tmp_path, capsys):
    import imageio.v3 as iio

    h3_stream(tmp_path)
    assert main(["decode", str(tmp_path / "clip_f0.safetensors"), "--keys", "sample", "--vae", tiny_h3["vae"],
                 "--device", "cpu", "--fps", "12"]) == 0
    mp4 = tmp_path / "clip_f0_sample.mp4"
    assert iio.imread(str(mp4), plugin="FFMPEG").shape == (34, 64, 64, 3)
    info = ffmpeg_info(mp4)
    assert "Video:" in info and "Audio:" not in info and "12 fps" in info
    assert "silent: pass --audio-vae" in capsys.readouterr().out


def test_decode_h3_errors(tiny_h3, tiny48, tmp_path, capsys):
    h3_stream(tmp_path)
    f = str(tmp_path / "clip_f0.safetensors")

    def err(*argv: str) -> str:
        assert main(["decode", *argv, "--device", "cpu"]) == 2
        return capsys.readouterr().err

    e = err(f, "--vae", tiny48["vae"])                              # 24 channels: H3; a Wan VAE does not decode them
    assert "--vae" in e and "AutoencoderKLWan" in e and "MiniMax-H3's vae/" in e
    e = err(f, "--model", "wan", "--vae", tiny48["vae"])
    assert "24 channels are MiniMax-H3 latents" in e and "--model h3" in e
    e = err(f, "--vae", str(tmp_path / "no_such_vae"))
    assert "--vae" in e and "no such directory" in e and "MiniMax-H3's vae/" in e
    e = err(f, "--vae", tiny_h3["vae"], "--audio-vae", tiny_h3["vae"])
    assert "--audio-vae" in e and "AutoencoderKLMiniMaxH3Audio" in e
    e = err(f, "--keys", "audio.sample", "--vae", tiny_h3["vae"])
    assert "--keys audio.sample" in e and "not decoded as video" in e
    save_file({"sample": torch.randn(24, 5, 4, 4), "audio.sample": torch.randn(2, 16, 20)},
              str(tmp_path / "bad_audio.safetensors"))
    e = err(str(tmp_path / "bad_audio.safetensors"), "--vae", tiny_h3["vae"], "--audio-vae", tiny_h3["audio_vae"])
    assert "'audio.sample' has shape [2, 16, 20]" in e and "[2, 32, steps]" in e
    save_file({"picture1": torch.randn(24, 1, 4, 4)}, str(tmp_path / "picture.safetensors"))
    e = err(str(tmp_path / "picture.safetensors"), "--keys", "picture1", "--vae", tiny_h3["vae"])
    assert "'picture1'" in e and "3 or more" in e
    save_file({"latents": torch.randn(48, 2, 4, 4)}, str(tmp_path / "wan.safetensors"))
    e = err(str(tmp_path / "wan.safetensors"), "--vae", tiny48["vae"], "--audio-vae", tiny_h3["audio_vae"])
    assert "--audio-vae" in e and "no audio track" in e
