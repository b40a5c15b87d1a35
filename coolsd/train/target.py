"""Stage 2: the class-conditional AR target, a transformers `LlamaForCausalLM` over VQ tokens.

Sequence layout: [class token] + 256 image tokens (row-major). Ids 0..K-1 are codes, K + c is
class c, K + 10 is the null class used for classifier-free guidance (dropped with p = 0.1).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from coolsd.models.embedded import prefix_len, prefix_tokens, target_config
from coolsd.train.data import to_tensor
from coolsd.train.loop import run_budgeted, update
from coolsd.train.vq import encode_tokens

AUG_OFFSETS = [(t, lft) for t in (1, 2, 3) for lft in (1, 2, 3)]  # pixel padding offsets (top, left)


def token_dataset(vq, raw_images, labels, offsets=AUG_OFFSETS) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode every image at every padding offset: (N*len(offsets), 256) codes, (N*len,) labels."""
    codes, ys = [], []
    for off in offsets:
        codes.append(encode_tokens(vq, to_tensor(raw_images, off)).flatten(1))
        ys.append(torch.as_tensor(labels))
    return torch.cat(codes), torch.cat(ys)


def sequences(codes: torch.Tensor, labels: torch.Tensor, config, drop_p: float, gen,
              styles: torch.Tensor | None = None, single_p: float = 0.0) -> torch.Tensor:
    """(B, 256) codes + (B,) labels [+ styles] -> (B, P + 256) ids, conditioning first.

    CFG dropout: with prob drop_p every condition is null (the unconditional row of CFG); with
    styles, additionally with prob `single_p` each only the class or only the style is null."""
    u = torch.rand(len(labels), generator=gen)
    both = u < drop_p
    if styles is None:
        return torch.cat([prefix_tokens(config, labels, null_class=both), codes], dim=1)
    only_class = (u >= drop_p) & (u < drop_p + single_p)
    only_style = (u >= drop_p + single_p) & (u < drop_p + 2 * single_p)
    pre = prefix_tokens(config, labels, styles, both | only_class, both | only_style)
    return torch.cat([pre, codes], dim=1)


def code_nll(model, ids: torch.Tensor, inputs: torch.Tensor | None = None) -> torch.Tensor:
    """Mean NLL (nats/token) of the image tokens of `ids` (B, P+T), logits restricted to the codebook;
    `inputs` (same shape): what the model reads instead of `ids` (e.g. `substitute_neighbours`)."""
    k, p = model.config.codebook_size, prefix_len(model.config)
    inputs = ids if inputs is None else inputs
    logits = model(input_ids=inputs[:, :-1]).logits[:, p - 1 :, :k]
    return F.cross_entropy(logits.reshape(-1, k).float(), ids[:, p:].reshape(-1))


def soft_code_nll(model, inputs: torch.Tensor, cand_ids: torch.Tensor, cand_probs: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats/token) of the model's next-code distribution against a soft label at every image
    position: inputs (B, P+T) ids the model reads; cand_ids, cand_probs (B, T, k) each position's candidate
    codes and their probabilities (rows sum to 1). Equals `code_nll` when every row is one-hot on the read code."""
    k, p = model.config.codebook_size, prefix_len(model.config)
    logp = model(input_ids=inputs[:, :-1]).logits[:, p - 1 :, :k].float().log_softmax(-1)  # (B, T, K)
    return -(cand_probs * logp.gather(-1, cand_ids)).sum(-1).mean()


def substitute_neighbours(ids: torch.Tensor, neighbours: torch.Tensor, prob: float, start: int,
                          gen: torch.Generator) -> torch.Tensor:
    """A copy of ids (B, L) whose codes from column `start` on are each, with probability `prob`, replaced by
    one of their latent neighbours (`neighbours` (K, k): row c = the k codes nearest c), picked uniformly."""
    out = ids.clone()
    codes = out[:, start:]
    hit = torch.rand(codes.shape, generator=gen) < prob
    pick = torch.randint(neighbours.shape[1], codes.shape, generator=gen)
    codes[hit] = neighbours[codes[hit], pick[hit]]
    return out


def train_target(vq, data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 32, lr: float = 1e-3,
                 drop_p: float = 0.1, **size) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = target_config(vq.config.num_vq_embeddings, **size)
    model = LlamaForCausalLM(config)
    print(f"[target] {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")
    raw, labels = data["train_raw"]
    codes, ys = token_dataset(vq, raw, labels)
    val_x, val_y = data["val"]
    val_codes = encode_tokens(vq, val_x).flatten(1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.05)
    gen = torch.Generator().manual_seed(seed)

    def step(i: int) -> dict[str, float]:
        rows = torch.randint(len(codes), (batch,), generator=gen)
        loss = code_nll(model, sequences(codes[rows], ys[rows], config, drop_p, gen))
        return {"loss": update(model, opt, loss)}

    def evaluate() -> dict[str, float]:
        ids = sequences(val_codes[:200], val_y[:200], config, 0.0, gen)
        return {"val_nll": code_nll(model, ids).item()}

    state = run_budgeted("target", model, opt, step, out / "target.ckpt", budget_s, lr, evaluate, eval_every=100)
    model.save_pretrained(out / "target")
    torch.save(state, out / "target_state.pt")
    return model
