"""--device handling shared by the commands: cpu, cuda, cuda:N (CUDA_VISIBLE_DEVICES picks the physical GPUs)."""
import torch

from .errors import VdtError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise VdtError(f"--device {name!r}: expected cpu, cuda or cuda:N ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise VdtError(f"--device {name}: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise VdtError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif dev.type != "cpu":
        raise VdtError(f"--device {name!r}: expected cpu, cuda or cuda:N")
    return dev


def default_dtype(dev: torch.device, name: str = "auto") -> torch.dtype:
    """bf16 on CUDA (how the Wan pipelines run the VAE and umT5), fp32 on the CPU, unless named."""
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16}
    if name == "auto":
        return torch.bfloat16 if dev.type == "cuda" else torch.float32
    if name not in table:
        raise VdtError(f"--dtype {name!r}: expected auto, fp32, bf16 or fp16")
    return table[name]
