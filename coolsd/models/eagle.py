"""Eagle-1 style drafter: fc([token embedding; target feature]) -> one Llama decoder layer -> target's LM head.

`EagleHead` is a transformers `PreTrainedModel` (save_pretrained / from_pretrained folder with a
Llama config of one layer); it owns only fc and the layer. The token embedding and LM head are
the target's, shared at run time by `EagleDrafter`, which implements the engine's Drafter protocol.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from transformers import LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from coolsd.decoding.protocol import ModelStep
from coolsd.models import rowkernel
from coolsd.models.fused import RowsLinear
from coolsd.models.graphs import FUSED
from coolsd.models.llama import LayerStack, set_path


class EagleHead(PreTrainedModel):
    """Predicts the target's next feature from (feature before token j, embedding of token j).

    Shapes: embeds, features (B, T, D) -> predicted features (B, T, D); rope positions j + 1.
    """

    config_class = LlamaConfig
    base_model_prefix = "eagle"
    _no_split_modules = ["LlamaDecoderLayer"]

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__(config)
        d = config.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(config)
        self.post_init()

    def forward(self, embeds: Tensor, features: Tensor) -> Tensor:
        """Training path: full causal attention over T pairs, no cache."""
        x = self.fc(torch.cat([embeds, features], dim=-1))
        positions = torch.arange(1, x.shape[1] + 1, device=x.device)[None].expand(x.shape[0], -1)
        cos_sin = self.rotary(x, positions)
        t = x.shape[1]
        causal = torch.full((t, t), float("-inf"), device=x.device, dtype=x.dtype).triu(1)[None, None]
        return self.layer(x, attention_mask=causal, position_ids=positions, position_embeddings=cos_sin)


class EagleDrafter:
    """Drafter protocol over an EagleHead plus the target's embedding and LM head (codebook rows)."""

    fused_stack = True  # runs the fused CPU path (`coolsd.models.graphs`)

    def __init__(self, head: EagleHead, embed: Tensor, lm_head: Tensor, max_tokens: int) -> None:
        self.head = head.eval()
        self.vocab_size = lm_head.shape[0]
        self.embed = embed.detach()
        self.lm_head = lm_head.detach()
        self.head_t = self.lm_head.T.contiguous()  # (D, V): every product below is `x @ w`
        self.fc_t = head.fc.weight.detach().T.contiguous()  # (2D, D)
        self.fc_b = head.fc.bias.detach()
        self.stack = LayerStack([head.layer], head.config, max_tokens + 64)  # + room for tree nodes
        self.device = self.lm_head.device
        self.rows: tuple[RowsLinear, RowsLinear] | None = None  # (fc, head) on the fused path
        self.fused: rowkernel.EagleKernel | None = None  # the whole step in one C call (fused path)
        # the head mimics the target transformer's logits; a target that divides them by a temperature before its
        # look-alike channel (`coolsd.models.channel`) has its drafter divide by the same (set by the loader)
        self.temperature = 1.0

    @property
    def length(self) -> int:
        return self.stack.length

    def use_path(self, path: str, rows=(2,)) -> None:
        """Execution path of the layer: "eager", "fused" (fc, the layer and the LM head in one C call), "cuda-graphs"
        or "static" (see `coolsd.models.graphs`)."""
        set_path(self.stack, path, rows)
        self.rows = self.fused = None
        if path == FUSED:
            self.rows = fc, head = RowsLinear(self.fc_t, self.fc_b), RowsLinear(self.head_t)
            self.fused = rowkernel.EagleKernel.for_head(self.stack.fused, self.embed, fc.packed, fc.bias, head.packed)

    def fork(self, target=None) -> EagleDrafter:
        """Same weights, own empty cache (`target` unused: the embedding and head are shared weights)."""
        new = copy.copy(self)
        new.stack = self.stack.fork()
        return new

    def start(self, cond, guidance: bool) -> None:
        self.stack.reset(2 if guidance else 1, self.device, self.embed.dtype)

    @torch.no_grad()
    def forward(self, ids: Tensor, hidden: Tensor | None, positions: Tensor, mask: Tensor | None = None) -> ModelStep:
        """ids, positions (n,); hidden (G, n, D) feature before each id (required: Eagle reads features)."""
        if hidden is None:
            raise ValueError("an Eagle drafter needs the feature before every token")
        g, n, d = hidden.shape
        if self.fused is not None and self.fused.stack.runs(g * n, self.stack.k, self.stack.v, mask):
            start, end = self.stack.claim(n)
            out, logits = self.fused(ids, hidden, positions + 1, self.stack.k, self.stack.v, start, mask,
                                     self.temperature)
            self.stack.length = end
            return ModelStep(logits=logits, hidden=out)
        e = self.embed[ids][None].expand(g, -1, -1)
        if self.rows is not None:  # the fused path's call of more rows than the C step takes: fp32 maths
            fc, head = self.rows
            x = fc(torch.cat([e.float(), hidden.float()], dim=-1).view(g * n, 2 * d))
            out = self.stack.forward(x.view(g, n, d), positions + 1, mask)  # (G, n, D) fp32
            return ModelStep(logits=head(out.view(g * n, d)).view(g, n, -1).float() / self.temperature, hidden=out)
        x = torch.addmm(self.fc_b, torch.cat([e, hidden.to(e.dtype)], dim=-1).view(g * n, 2 * d), self.fc_t)
        out = self.stack.forward(x.view(g, n, d), positions + 1, mask)  # (G, n, D) predicted features
        return ModelStep(logits=(out @ self.head_t).float() / self.temperature, hidden=out)  # fp32 on a bf16 path

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        self.stack.crop(length, keep)


def eagle_config(target_config: LlamaConfig) -> LlamaConfig:
    """One-layer Llama config of the target's width."""
    return LlamaConfig(hidden_size=target_config.hidden_size, num_hidden_layers=1,
                       num_attention_heads=target_config.num_attention_heads,
                       num_key_value_heads=target_config.num_key_value_heads,
                       intermediate_size=target_config.intermediate_size, rms_norm_eps=target_config.rms_norm_eps,
                       max_position_embeddings=target_config.max_position_embeddings,
                       vocab_size=target_config.vocab_size)
