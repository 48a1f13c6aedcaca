"""Reading clips (a video file, or a folder of frame images) and writing mp4 (with an audio track from a WAV file) /
WAV / PNG, with imageio (ffmpeg), the stdlib ``wave`` module and Pillow.

Frames are uint8 tensors [T, H, W, 3]. ``fit`` brings them to the training resolution: scale so the frame covers
W x H (aspect kept), then crop the centre (``crop``), or scale to exactly W x H (``stretch``).
"""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F

from .errors import VdtError

VIDEO_EXTS = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".gif")
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def is_video(path: str) -> bool:
    return os.path.isfile(path) and path.lower().endswith(VIDEO_EXTS)


def frame_files(path: str) -> list[str]:
    """The image files of a frame folder, sorted by name ([] when `path` holds none)."""
    if not os.path.isdir(path):
        return []
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.lower().endswith(IMAGE_EXTS))


def read_frames(path: str, count: int, stride: int = 1) -> torch.Tensor:
    """The first `count` frames (every `stride`-th) of a video file or frame folder -> [count, H, W, 3] uint8."""
    frames = []
    if os.path.isdir(path):
        from PIL import Image

        files = frame_files(path)[::stride]
        if len(files) < count:
            raise VdtError(f"{path}: {len(files)} frame image(s) (stride {stride}), the clip needs {count} (--frames)")
        for f in files[:count]:
            with Image.open(f) as im:
                frames.append(np.asarray(im.convert("RGB")))
    else:
        import imageio.v3 as iio

        try:
            for i, fr in enumerate(iio.imiter(path, plugin="FFMPEG" if not path.lower().endswith(".gif") else None)):
                if i % stride == 0:
                    frames.append(np.asarray(fr)[..., :3])
                    if len(frames) == count:
                        break
        except (OSError, RuntimeError, ValueError) as e:
            raise VdtError(f"{path}: cannot read the video ({e})") from None
        if len(frames) < count:
            raise VdtError(f"{path}: {len(frames)} frame(s) (stride {stride}), the clip needs {count} (--frames); "
                           f"---> HINT: lower --frames (4n+1) or --stride, or drop this clip")
    shapes = {f.shape for f in frames}
    if len(shapes) != 1:
        raise VdtError(f"{path}: frames of different sizes {sorted(shapes)}")
    return torch.from_numpy(np.stack(frames))


def fit(frames: torch.Tensor, width: int, height: int, mode: str = "crop") -> torch.Tensor:
    """[T, H0, W0, 3] uint8 -> [T, height, width, 3] uint8 (bilinear with antialiasing)."""
    t, h0, w0, _ = frames.shape
    if (h0, w0) == (height, width):
        return frames
    x = frames.permute(0, 3, 1, 2).float()                       # [T, 3, H0, W0]
    if mode == "stretch":
        size = (height, width)
    elif mode == "crop":
        s = max(width / w0, height / h0)
        size = (max(height, round(h0 * s)), max(width, round(w0 * s)))
    else:
        raise VdtError(f"--resize {mode!r}: expected crop or stretch")
    x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    top, left = (size[0] - height) // 2, (size[1] - width) // 2
    x = x[:, :, top:top + height, left:left + width]
    return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def write_mp4(path: str, frames: torch.Tensor, fps: float, audio_path: str | None = None) -> None:
    """[T, H, W, 3] uint8 -> an H.264 mp4 (yuv420p, plays everywhere); with `audio_path` (a WAV file) its sound is
    muxed in as an AAC track."""
    import imageio.v3 as iio

    audio = {"audio_path": audio_path, "audio_codec": "aac", "ffmpeg_log_level": "error"} if audio_path else {}
    iio.imwrite(path, frames.numpy(), plugin="FFMPEG", fps=fps, codec="libx264", macro_block_size=1,
                pixelformat="yuv420p", **audio)


def write_wav(path: str, wave: torch.Tensor, rate: int) -> None:
    """[channels, samples] float in [-1, 1] -> a 16-bit PCM WAV file at `rate` Hz."""
    import wave as wav

    pcm = wave.float().clamp(-1, 1).mul(32767).round().to(torch.int16).t().contiguous()   # [samples, channels]
    with wav.open(path, "wb") as f:
        f.setnchannels(int(wave.shape[0]))
        f.setsampwidth(2)
        f.setframerate(int(rate))
        f.writeframes(pcm.numpy().astype("<i2").tobytes())


def contact_sheet(rows: list[tuple[str, torch.Tensor]], columns: int) -> "Image.Image":
    """One row per (label, frames [T, H, W, 3]), `columns` frames picked evenly over T, the label above each row."""
    from PIL import Image, ImageDraw

    label_h = 14
    h, w = rows[0][1].shape[1:3]
    sheet = Image.new("RGB", (columns * w, len(rows) * (h + label_h)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for r, (label, frames) in enumerate(rows):
        t = frames.shape[0]
        idx = np.linspace(0, t - 1, num=min(columns, t)).round().astype(int)
        y = r * (h + label_h)
        draw.text((2, y + 1), f"{label} (frames {', '.join(map(str, idx))})", fill=(0, 0, 0))
        for c, i in enumerate(idx):
            sheet.paste(Image.fromarray(frames[i].numpy()), (c * w, y + label_h))
    return sheet
