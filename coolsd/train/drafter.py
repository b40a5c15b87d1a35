"""Stage 3: the Eagle-1 head, trained on the target's own features (self-distillation).

Data: real training sequences (all augmentation offsets) mixed 50/50 with sequences the target
generated itself with the embedded default sampling (vanilla AR through the engine). Loss, as in
Eagle-1: smooth-L1 regression of the next target feature + 0.1 x cross-entropy of the LM head's
prediction against the target's next-token distribution.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from coolsd.models.eagle import EagleHead, eagle_config
from coolsd.train.loop import run_budgeted
from coolsd.train.target import sequences, token_dataset

W_CLS = 0.1  # Eagle-1's weight of the classification loss


@torch.no_grad()
def self_samples(target_model, n: int, path: Path, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """n target samples (codes (n, 256), labels (n,)) via the engine's vanilla AR; cached at `path`."""
    from coolsd.engine import run
    from coolsd.models.bundle import EMBEDDED_SAMPLING
    from coolsd.models.embedded import LlamaClassTarget

    if path.exists():
        saved = torch.load(path)
        if len(saved["codes"]) >= n:
            return saved["codes"][:n], saved["labels"][:n]
    target = LlamaClassTarget(target_model)
    grid = target_model.config.image_grid
    codes, labels = [], []
    for i in tqdm(range(n), desc="self-distillation samples"):
        label = i % target.num_classes
        res = run(target, None, None, label, grid[0] * grid[1], EMBEDDED_SAMPLING, seed=seed * 100_000 + i)
        codes.append(res.tokens)
        labels.append(label)
    out = {"codes": torch.stack(codes), "labels": torch.tensor(labels)}
    torch.save(out, path)
    return out["codes"], out["labels"]


def train_drafter(vq, target, data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 16,
                  lr: float = 1e-3, n_self: int = 300, drop_p: float = 0.1) -> EagleHead:
    torch.manual_seed(seed)
    config = target.config
    k = config.codebook_size
    for p in target.parameters():
        p.requires_grad_(False)
    raw, labels = data["train_raw"]
    real_codes, real_y = token_dataset(vq, raw, labels)
    gen_codes, gen_y = self_samples(target, n_self, out / "self_samples.pt", seed)
    head = EagleHead(eagle_config(config))
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    embed = target.model.embed_tokens.weight
    lm_head = target.lm_head.weight[:k]

    def batch_ids() -> torch.Tensor:
        half = batch // 2
        r = torch.randint(len(real_codes), (batch - half,), generator=gen)
        s = torch.randint(len(gen_codes), (half,), generator=gen)
        codes = torch.cat([real_codes[r], gen_codes[s]])
        ys = torch.cat([real_y[r], gen_y[s]])
        return sequences(codes, ys, config, drop_p, gen)

    def losses(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            feats = target.model(input_ids=ids).last_hidden_state  # (B, 257, D), post final norm
            teacher = (feats[:, 1:-1] @ lm_head.T).softmax(-1)  # next-token distributions at F[0..254]
        pred = head(embed[ids[:, 1:-1]], feats[:, :-2])  # pairs (F[j-1], x_j), j = 0..254
        reg = F.smooth_l1_loss(pred, feats[:, 1:-1])
        logp = (pred @ lm_head.T).log_softmax(-1)
        cls = -(teacher * logp).sum(-1).mean()
        agree = (logp.argmax(-1) == teacher.argmax(-1)).float().mean()
        return reg, cls, agree

    def step(i: int) -> dict[str, float]:
        reg, cls, _ = losses(batch_ids())
        loss = reg + W_CLS * cls
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        return {"reg": reg.item(), "cls": cls.item()}

    val_x, val_y = data["val"]
    from coolsd.train.vq import encode_tokens

    val_ids = sequences(encode_tokens(vq, val_x[:64]).flatten(1), val_y[:64], config, 0.0, gen)

    def evaluate() -> dict[str, float]:
        reg, cls, agree = losses(val_ids)
        return {"val_reg": reg.item(), "val_cls": cls.item(), "val_top1_agree": agree.item()}

    state = run_budgeted("drafter", head, opt, step, out / "drafter.ckpt", budget_s, lr, evaluate, eval_every=50)
    head.save_pretrained(out / "drafter")
    torch.save(state, out / "drafter_state.pt")
    return head
