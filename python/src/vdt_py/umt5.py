"""Wan's text encoder, umT5 (transformers ``UMT5EncoderModel`` + its tokenizer), as the Wan pipelines call it.

Each prompt is tokenised to at most ``text_len`` tokens (padding to text_len, truncation, the EOS token added), encoded
with the attention mask, and the rows past the real tokens are set to zero, which is how Wan pads its context
(docs/data_format.md, text table).
"""
from __future__ import annotations

import os

import torch

from .errors import VdtError


def encoder_dirs(path: str, tokenizer: str | None) -> tuple[str, str]:
    """(model dir, tokenizer dir) from --text-encoder (a UMT5 dir, or a diffusers pipeline dir with text_encoder/
    and tokenizer/) and --tokenizer."""
    model = path
    if not os.path.isfile(os.path.join(path, "config.json")):
        if os.path.isfile(os.path.join(path, "text_encoder", "config.json")):
            model = os.path.join(path, "text_encoder")
        else:
            raise VdtError(f"--text-encoder {path}: no config.json here or in {path}/text_encoder; expected a "
                           f"transformers UMT5EncoderModel directory (e.g. Wan2.2-TI2V-5B-Diffusers/text_encoder)")
    if tokenizer:
        return model, tokenizer
    for cand in (model, os.path.join(os.path.dirname(model.rstrip("/")), "tokenizer")):
        if any(os.path.isfile(os.path.join(cand, f)) for f in ("tokenizer.json", "spiece.model", "tokenizer_config.json")):
            return model, cand
    raise VdtError(f"--text-encoder {path}: no tokenizer beside the model (tokenizer.json or spiece.model in {model} "
                   f"or ../tokenizer); ---> HINT: pass --tokenizer DIR (e.g. the google/umt5-xxl tokenizer)")


class Umt5:
    def __init__(self, path: str, tokenizer: str | None, device: torch.device, dtype: torch.dtype, text_len: int):
        from transformers import AutoTokenizer, UMT5EncoderModel

        mdir, tdir = encoder_dirs(path, tokenizer)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tdir)
        except (OSError, ValueError) as e:
            raise VdtError(f"--tokenizer {tdir}: cannot load a tokenizer: {e}") from None
        try:
            self.model = UMT5EncoderModel.from_pretrained(mdir, dtype=dtype).to(device).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise VdtError(f"--text-encoder {mdir}: cannot load a UMT5EncoderModel: {e}") from None
        self.dim = int(self.model.config.d_model)
        self.text_len, self.device = text_len, device

    @torch.no_grad()
    def encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """prompts -> (embeddings [N, text_len, dim] float32 with zero rows past each length, lengths [N] int32)."""
        b = self.tokenizer(prompts, padding="max_length", max_length=self.text_len, truncation=True,
                           add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        ids, mask = b.input_ids.to(self.device), b.attention_mask.to(self.device)
        lengths = mask.gt(0).sum(dim=1)
        h = self.model(ids, mask).last_hidden_state.float()                 # [N, text_len, dim]
        keep = torch.arange(self.text_len, device=h.device)[None, :] < lengths[:, None]
        h = h * keep[..., None]
        return h.cpu(), lengths.to(torch.int32).cpu()
