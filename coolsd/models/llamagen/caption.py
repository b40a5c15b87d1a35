"""Caption conditioning of LlamaGen T2I: FLAN-T5-XL states, left padding, caption MLP (research/lantern.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coolsd.models.llamagen.clean import clean_caption
from coolsd.models.llamagen.config import LlamaGenConfig


@dataclass(frozen=True)
class CaptionEmbedding:
    """One caption after the left-padding step.

    emb: (C, caption_dim) float T5 encoder states, valid rows last, padded rows zero.
    mask: (C,) bool, True on valid (attended) caption slots; padded slots come first.
    """

    emb: Tensor
    mask: Tensor

    @classmethod
    def from_tensor(cls, emb: Tensor) -> CaptionEmbedding:
        """A precomputed (C, caption_dim) tensor: every slot valid."""
        if emb.dim() != 2:
            raise ValueError(f"caption embedding must be (C, caption_dim), got {tuple(emb.shape)}")
        return cls(emb, torch.ones(emb.shape[0], dtype=torch.bool, device=emb.device))


def left_pad(states: Tensor, mask: Tensor) -> CaptionEmbedding:
    """Move the v valid rows of right-padded `states` (C, E) / `mask` (C,) to the end and zero the rest.

    T5 pads on the right; LlamaGen feeds captions with the padding on the left (lantern.md §2.2 step 3).
    """
    valid = int(mask.sum())
    emb = torch.roll(states, shifts=states.shape[0] - valid, dims=0)
    new_mask = torch.zeros_like(mask, dtype=torch.bool)
    new_mask[states.shape[0] - valid :] = True
    return CaptionEmbedding(emb * new_mask[:, None].to(emb.dtype), new_mask)


class T5CaptionEncoder:
    """FLAN-T5-XL encoder from a local folder (transformers `T5EncoderModel` + its tokenizer files).

    A prompt is cleaned as upstream cleans it (`clean.clean_caption`), tokenised to `max_length`
    (padded, truncated), encoded, then left-padded (`left_pad`).
    """

    def __init__(self, folder: str | Path, device="cpu", dtype=torch.float32, max_length: int = 120):
        from transformers import AutoTokenizer, T5EncoderModel

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = T5EncoderModel.from_pretrained(str(folder), dtype=dtype).to(device).eval()
        self.max_length = max_length

    @torch.no_grad()
    def __call__(self, prompt: str) -> CaptionEmbedding:
        tokens = self.tokenizer(
            [clean_caption(prompt)],
            max_length=self.max_length,
            padding="max_length",
            truncation=True,
            return_tensors="pt",
        ).to(self.model.device)
        states = self.model(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).last_hidden_state
        return left_pad(states[0].float(), tokens.attention_mask[0].bool())  # (C, E), (C,)


class CaptionMLP(nn.Module):
    """caption_dim -> D -> D with tanh-GELU, no biases; holds the learned unconditional caption (C, caption_dim)."""

    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.caption_dim, config.hidden_size, bias=False)
        self.fc2 = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.register_buffer("uncond", torch.zeros(config.cls_token_num, config.caption_dim))

    def forward(self, emb: Tensor) -> Tensor:
        """emb (..., C, caption_dim) -> (..., C, D)."""
        return self.fc2(F.gelu(self.fc1(emb), approximate="tanh"))
