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
def sample_batch(target_model, labels: torch.Tensor, sampling, gen: torch.Generator) -> torch.Tensor:
    """Vanilla AR samples of a whole batch at once: labels (B,) -> codes (B, T).

    Same maths as the engine's vanilla decoding (`SamplingConfig.probs` on the (cond, uncond) rows),
    but B images share each forward, which makes self-distillation data cheap on a CPU.
    """
    from coolsd.models.llama import LayerStack

    cfg = target_model.config
    k, (h, w) = cfg.codebook_size, cfg.image_grid
    b = len(labels)
    stack = LayerStack(target_model.model.layers, cfg, h * w + 1)
    embed = target_model.model.embed_tokens.weight
    rows = torch.cat([labels + cfg.class_token_offset, torch.full_like(labels, cfg.null_class_token)])
    rows = rows if sampling.guidance else rows[:b]
    stack.reset(len(rows), embed.device, embed.dtype)
    x = embed[rows][:, None]
    codes = []
    for t in range(h * w):
        out = stack.forward(x, torch.tensor([t]), None)
        feat = torch.nn.functional.rms_norm(out, (out.shape[-1],), target_model.model.norm.weight, stack.eps)
        logits = (feat[:, -1] @ target_model.lm_head.weight[:k].T).double().view(-1, b, k)  # (G, B, K)
        ids = torch.multinomial(sampling.probs(logits), 1, generator=gen)[:, 0]  # (B,)
        codes.append(ids)
        x = embed[ids.repeat(len(rows) // b)][:, None]
    return torch.stack(codes, dim=1)


def self_samples(target_model, n: int, path: Path, seed: int = 0, batch: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """n target samples (codes (n, T), labels (n,)) with the embedded default sampling; cached at `path`."""
    from coolsd.models.bundle import EMBEDDED_SAMPLING

    if path.exists():
        saved = torch.load(path)
        if len(saved["codes"]) >= n:
            return saved["codes"][:n], saved["labels"][:n]
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % target_model.config.num_classes
    codes = torch.cat([sample_batch(target_model, labels[i : i + batch], EMBEDDED_SAMPLING, gen)
                       for i in tqdm(range(0, n, batch), desc="self-distillation samples")])
    torch.save({"codes": codes, "labels": labels}, path)
    return codes, labels


def train_drafter(vq, target, data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 16,
                  lr: float = 1e-3, n_self: int = 500, drop_p: float = 0.1) -> EagleHead:
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
