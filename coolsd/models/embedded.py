"""The embedded class-conditional target: a transformers `LlamaForCausalLM` behind the TokenModel protocol.

Sequence layout (set by `target_config`): [class token] + image tokens; ids
0..K-1 are codes, `class_token_offset + c` is class c, `null_class_token` the CFG null class.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor
from transformers import LlamaConfig, LlamaForCausalLM

from coolsd.models.llama import LayerStack, set_path
from coolsd.models.protocol import ModelStep
from coolsd.util import checks

NUM_CLASSES = 10  # the digits 0..9


def vq_config(codebook_size: int = 256) -> dict:
    """One downsample (32 -> 16), 16-dim codes, no attention: 0.64 M parameters."""
    return dict(in_channels=1, out_channels=1, down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), layers_per_block=1,
                latent_channels=16, num_vq_embeddings=codebook_size, norm_num_groups=16, sample_size=32,
                mid_block_add_attention=False)


def target_config(codebook_size: int = 256, hidden: int = 256, layers: int = 8, heads: int = 4,
                  intermediate: int = 672, grid: tuple[int, int] = (16, 16)) -> LlamaConfig:
    """Llama over K codes + 10 classes + 1 null; extra fields describe the token layout."""
    return LlamaConfig(
        vocab_size=codebook_size + NUM_CLASSES + 1, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=intermediate,
        max_position_embeddings=grid[0] * grid[1] + 8, rms_norm_eps=1e-5, tie_word_embeddings=False,
        codebook_size=codebook_size, class_token_offset=codebook_size, num_classes=NUM_CLASSES,
        null_class_token=codebook_size + NUM_CLASSES, image_grid=list(grid),
        class_names=[str(c) for c in range(NUM_CLASSES)],
    )


def _mask_with_prefix(mask: Tensor | None, prefix: int) -> Tensor | None:
    """(n, S) mask over image slots -> (n, prefix + S): the conditioning prefix is always visible."""
    if mask is None:
        return None
    return torch.cat([torch.ones(mask.shape[0], prefix, dtype=torch.bool, device=mask.device), mask], dim=1)


class LlamaClassTarget:
    """TokenModel over a class-conditional `LlamaForCausalLM` (row 0 = class, row 1 = null class under CFG)."""

    prefix_len = 1

    def __init__(self, model: LlamaForCausalLM, max_tokens: int | None = None) -> None:
        cfg = model.config
        self.model = model.eval()
        self.vocab_size = cfg.codebook_size
        self.num_classes = cfg.num_classes
        self.device = model.device
        grid = getattr(cfg, "image_grid", [16, 16])
        slots = self.prefix_len + (max_tokens or grid[0] * grid[1]) + 64  # + room for tree nodes
        self.stack = LayerStack(model.model.layers, cfg, slots)
        self.embed = model.model.embed_tokens.weight.detach()
        self.norm_w = model.model.norm.weight.detach()
        self.head = model.lm_head.weight.detach()[: self.vocab_size]  # codebook logits only
        self.head_t = self.head.T.contiguous()  # (D, V)

    @property
    def length(self) -> int:
        return self.stack.length - self.prefix_len

    def use_path(self, path: str, rows=(2,)) -> None:
        """Execution path of the layers: "eager", "static" or "cuda-graphs" (see `coolsd.models.graphs`)."""
        set_path(self.stack, path, rows)

    def fork(self) -> LlamaClassTarget:
        """Same weights, own empty cache."""
        new = copy.copy(self)
        new.stack = self.stack.fork()
        return new

    def class_ids(self, cond: int, guidance: bool) -> Tensor:
        cfg = self.model.config
        checks.integer("class", cond, 0, self.num_classes - 1)
        ids = [cfg.class_token_offset + cond] + ([cfg.null_class_token] if guidance else [])
        return torch.tensor(ids, device=self.device)

    def _out(self, h: Tensor) -> ModelStep:
        feat = torch.nn.functional.rms_norm(h, (h.shape[-1],), self.norm_w, self.stack.eps)
        return ModelStep(logits=feat @ self.head_t, hidden=feat)

    @torch.no_grad()
    def start(self, cond: int, guidance: bool) -> ModelStep:
        ids = self.class_ids(cond, guidance)
        self.stack.reset(len(ids), self.device, self.embed.dtype)
        x = self.embed[ids][:, None]  # (G, 1, D)
        return self._out(self.stack.forward(x, torch.zeros(1, dtype=torch.long, device=self.device), None))

    @torch.no_grad()
    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        rows = self.stack.k.shape[1]
        x = self.embed[ids][None].expand(rows, -1, -1)
        h = self.stack.forward(x, positions + self.prefix_len, _mask_with_prefix(mask, self.prefix_len))
        return self._out(h)

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        self.stack.crop(length + self.prefix_len, None if keep is None else keep + self.prefix_len)
