"""The embedded class-conditional target: a transformers `LlamaForCausalLM` behind the TokenModel protocol.

Sequence layout (set by `target_config`): prefix + image tokens; ids 0..K-1
are codes. The prefix is [class] (MNIST) or [class, style] (emoji): `class_token_offset + c` is
class c, `null_class_token` the CFG null class; with styles `style_token_offset + s` is style s and
`null_style_token` the null style. The engine's condition is one integer: the class, or
class * S + style with S styles (`num_conditions`); the CFG row is the all-null prefix.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor
from transformers import LlamaConfig, LlamaForCausalLM

from coolsd.decoding.protocol import ModelStep
from coolsd.models.fused import FusedHead
from coolsd.models.graphs import FUSED
from coolsd.models.llama import LayerStack, set_path
from coolsd.util.checks import check_int

NUM_CLASSES = 10  # the digits 0..9


def vq_config(codebook_size: int = 256, channels: int = 1, widths: tuple[int, int] = (32, 64),
              latent_channels: int = 16) -> dict:
    """One downsample (32 -> 16), no attention. Default (MNIST): grey, 16-dim codes, 0.64 M parameters."""
    return dict(in_channels=channels, out_channels=channels, down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=tuple(widths), layers_per_block=1,
                latent_channels=latent_channels, num_vq_embeddings=codebook_size, norm_num_groups=16,
                sample_size=32, mid_block_add_attention=False)


def target_config(codebook_size: int = 256, hidden: int = 256, layers: int = 8, heads: int = 4,
                  intermediate: int = 672, grid: tuple[int, int] = (16, 16), class_names: list[str] | None = None,
                  style_names: list[str] | None = None) -> LlamaConfig:
    """Llama over K codes + C classes + 1 null class [+ S styles + 1 null style]; extra fields
    describe the token layout. Default: the 10 MNIST digits, no style token.

    With styles the prefix is [class, style] (ids K + c and K + C + 1 + s; nulls K + C and K + C + 1 + S).
    """
    class_names = class_names or [str(c) for c in range(NUM_CLASSES)]
    c, k = len(class_names), codebook_size
    extra = {}
    if style_names:
        extra = dict(style_token_offset=k + c + 1, num_styles=len(style_names), null_style_token=k + c + 1 +
                     len(style_names), style_names=list(style_names))
    return LlamaConfig(
        vocab_size=k + c + 1 + (len(style_names) + 1 if style_names else 0), hidden_size=hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        intermediate_size=intermediate, max_position_embeddings=grid[0] * grid[1] + 8, rms_norm_eps=1e-5,
        tie_word_embeddings=False, codebook_size=k, class_token_offset=k, num_classes=c, null_class_token=k + c,
        image_grid=list(grid), class_names=list(class_names), **extra,
    )


def prefix_tokens(config, labels: torch.Tensor, styles: torch.Tensor | None = None, null_class=None,
                  null_style=None) -> torch.Tensor:
    """(B,) labels [+ (B,) styles] -> (B, P) conditioning ids; rows where the bool mask `null_class`
    (`null_style`) is set get the null token (P = 1, or 2 when the config has styles)."""
    cls = labels + config.class_token_offset
    if null_class is not None:
        cls = torch.where(null_class, torch.full_like(cls, config.null_class_token), cls)
    if not getattr(config, "num_styles", 0):
        return cls[:, None]
    sty = styles + config.style_token_offset
    if null_style is not None:
        sty = torch.where(null_style, torch.full_like(sty, config.null_style_token), sty)
    return torch.stack([cls, sty], dim=1)


def prefix_len(config) -> int:
    """Conditioning tokens before the image: 1 (class) or 2 (class, style)."""
    return 2 if getattr(config, "num_styles", 0) else 1


def num_conditions(config) -> int:
    """Condition ids the model takes: C classes, or C x S (class, style) pairs."""
    return config.num_classes * max(1, getattr(config, "num_styles", 0))


def condition_prefix(config, cond: torch.Tensor, null: bool = False) -> torch.Tensor:
    """(B,) condition ids -> (B, P) prefix ids; `null`: the unconditional (CFG) row of each.

    A condition id is the class, or class * S + style when the config has S styles."""
    s = getattr(config, "num_styles", 0)
    labels, styles = (cond // s, cond % s) if s else (cond, None)
    mask = torch.full(cond.shape, null, dtype=torch.bool, device=cond.device)
    return prefix_tokens(config, labels, styles, mask, mask)


def _mask_with_prefix(mask: Tensor | None, prefix: int) -> Tensor | None:
    """(n, S) mask over image slots -> (n, prefix + S): the conditioning prefix is always visible."""
    if mask is None:
        return None
    return torch.cat([torch.ones(mask.shape[0], prefix, dtype=torch.bool, device=mask.device), mask], dim=1)


class LlamaClassTarget:
    """TokenModel over a class(-and-style)-conditional `LlamaForCausalLM` (row 0 = the condition's
    prefix, row 1 = the null prefix under CFG). `num_classes` counts condition ids (see module doc)."""

    fused_stack = True  # runs the fused CPU path (`coolsd.models.graphs`)

    def __init__(self, model: LlamaForCausalLM, max_tokens: int | None = None) -> None:
        cfg = model.config
        self.model = model.eval()
        self.vocab_size = cfg.codebook_size
        self.prefix_len = prefix_len(cfg)
        self.num_classes = num_conditions(cfg)
        self.device = model.device
        grid = getattr(cfg, "image_grid", [16, 16])
        slots = self.prefix_len + (max_tokens or grid[0] * grid[1]) + 64  # + room for tree nodes
        self.stack = LayerStack(model.model.layers, cfg, slots)
        self.embed = model.model.embed_tokens.weight.detach()
        self.norm_w = model.model.norm.weight.detach()
        self.head = model.lm_head.weight.detach()[: self.vocab_size]  # codebook logits only
        self.head_t = self.head.T.contiguous()  # (D, V)
        self.fused_head: FusedHead | None = None  # final norm + head on the fused path (None: other paths)

    @property
    def length(self) -> int:
        return self.stack.length - self.prefix_len

    def use_path(self, path: str, rows=(2,)) -> None:
        """Execution path of the layers: "eager", "fused", "cuda-graphs" or "static" (see `coolsd.models.graphs`)."""
        set_path(self.stack, path, rows)
        self.fused_head = FusedHead(self.norm_w, self.head_t, self.stack.eps) if path == FUSED else None

    def fork(self) -> LlamaClassTarget:
        """Same weights, own empty cache."""
        new = copy.copy(self)
        new.stack = self.stack.fork()
        return new

    def class_ids(self, cond: int, guidance: bool) -> Tensor:
        """Prefix ids (G, P): the condition's row [+ the null row under guidance]."""
        cond = check_int("class", cond, 0, self.num_classes - 1)
        c = torch.tensor([cond], device=self.device)
        rows = [condition_prefix(self.model.config, c)]
        if guidance:
            rows.append(condition_prefix(self.model.config, c, null=True))
        return torch.cat(rows)

    def _out(self, h: Tensor) -> ModelStep:
        if self.fused_head is not None:
            logits, feat = self.fused_head(h)
            return ModelStep(logits=logits, hidden=feat)
        feat = torch.nn.functional.rms_norm(h, (h.shape[-1],), self.norm_w, self.stack.eps)
        return ModelStep(logits=(feat @ self.head_t).float(), hidden=feat)  # fp32 logits on a bf16 path

    @torch.no_grad()
    def start(self, cond: int, guidance: bool) -> ModelStep:
        ids = self.class_ids(cond, guidance)  # (G, P)
        self.stack.reset(len(ids), self.device, self.embed.dtype)
        x = self.embed[ids]  # (G, P, D)
        positions = torch.arange(self.prefix_len, device=self.device)
        return self._out(self.stack.forward(x, positions, None)[:, -1:])

    @torch.no_grad()
    def forward(self, ids: Tensor, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        rows = self.stack.k.shape[1]
        x = self.embed[ids][None].expand(rows, -1, -1)
        h = self.stack.forward(x, positions + self.prefix_len, _mask_with_prefix(mask, self.prefix_len))
        return self._out(h)

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        self.stack.crop(length + self.prefix_len, None if keep is None else keep + self.prefix_len)
