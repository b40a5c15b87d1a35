"""Stage 3: the Eagle-1 head, trained on the target's own features (self-distillation).

Data: the target's own samples at the app's sampling settings (`selfdistill.SampleShards`, CFG 3;
the pool grows while training), mixed with real training sequences (fraction 1 - self_frac). Every
sequence is fed as a (class, null-class) row pair, the two rows CFG mixes at run time; the target's
features come with the samples (real ones are computed once), so a step runs only the head.

Loss per step (`drafter_losses`), averaged over the 255 predicted positions:
- reg: smooth-L1 regression of the target's next feature (Eagle-1);
- ce_raw: cross-entropy of each row's head logits against the target's next-token distribution of
  that row (Eagle-1's classification term, weight `w_cls`);
- ce_cfg: cross-entropy of the CFG-mixed head distribution q against the CFG-mixed target
  distribution p (what an exact rule compares when it accepts; weight `w_cfg`);
- the same three terms one step unrolled (weight `w_unroll`): the head reads its own predicted
  feature instead of the target's, as it does from depth 2 of a draft on.
Metrics: `accept` = mean sum_v min(p, q) (depth-1 acceptance probability of an exact rule),
`accept2` the same one step unrolled, `top1_cfg` = argmax agreement of p and q, `top1_raw` =
argmax agreement of the class row's raw logits (the model card's "top-1 agreement").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from coolsd.models.bundle import EMBEDDED_SAMPLING
from coolsd.models.channel import stored_channel
from coolsd.models.eagle import EagleHead, eagle_config
from coolsd.models.embedded import condition_prefix, prefix_len
from coolsd.train.loop import run_budgeted, update
from coolsd.train.selfdistill import SampleShards
from coolsd.train.target import token_dataset
from coolsd.train.vq import encode_tokens

W_CLS = 0.1  # Eagle-1's weight of the classification loss


def pair_ids(codes: torch.Tensor, labels: torch.Tensor, config, rows: int = 2) -> torch.Tensor:
    """(B, T) codes + (B,) condition ids -> (rows * B, P+T) ids: B conditioned rows, then (rows = 2) the
    same B codes after the null prefix (the CFG pair; P = 1 class token, or 2 with a style token)."""
    pre = torch.cat([condition_prefix(config, labels), condition_prefix(config, labels, null=True)][:rows])
    return torch.cat([pre, codes.repeat(rows, 1)], dim=1)



@torch.no_grad()
def target_features(target, ids: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """ids (R, P+T) -> post-norm features (R, T, D) after input positions P-1..P+T-2: the feature
    before each image token (the one after the last code is unused). Runs where the target sits; the features
    are returned on the CPU."""
    p, device = prefix_len(target.config), target.lm_head.weight.device
    return torch.cat([target.model(input_ids=ids[i : i + chunk, :-1].to(device)).last_hidden_state[:, p - 1 :].cpu()
                      for i in range(0, len(ids), chunk)])


def _terms(pred, feats_next, t_logits, lm_head, sampling, b):
    """reg, ce_raw, ce_cfg and metrics for predicted features pred (G*B, n, D) against the target's."""
    q_logits = pred @ lm_head.T
    reg = F.smooth_l1_loss(pred, feats_next)
    ce_raw = -(t_logits.softmax(-1) * q_logits.log_softmax(-1)).sum(-1).mean()
    g = sampling.rows
    zp = sampling.mix(t_logits.view(g, b, *t_logits.shape[1:])) / sampling.temperature
    zq = sampling.mix(q_logits.view(g, b, *q_logits.shape[1:])) / sampling.temperature
    p, logq = zp.softmax(-1), zq.log_softmax(-1)
    ce_cfg = -(p * logq).sum(-1).mean()
    with torch.no_grad():
        metrics = {"accept": torch.minimum(p, logq.exp()).sum(-1).mean().item(),
                   "top1_cfg": (zp.argmax(-1) == zq.argmax(-1)).float().mean().item(),
                   "top1_raw": (t_logits[:b].argmax(-1) == q_logits[:b].argmax(-1)).float().mean().item()}
    return reg, ce_raw, ce_cfg, metrics


def drafter_losses(head, target, ids: torch.Tensor, feats: torch.Tensor, sampling, w_cls: float = W_CLS,
                   w_cfg: float = 0.0, w_unroll: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """ids (G*B, P+T) from `pair_ids` (G = `sampling.rows`), feats (G*B, T, D) from `target_features`
    -> (scalar loss, logs)."""
    k = target.config.codebook_size
    ids = ids[:, prefix_len(target.config) - 1 :]  # (G*B, T+1): the last prefix token, then the codes
    lm_head, embed = target.lm_head.weight[:k], target.model.embed_tokens.weight
    b = ids.shape[0] // sampling.rows
    feats = feats.float()
    t_logits = feats[:, 1:] @ lm_head.T  # (2B, T-1, K): next-token logits at F[1..T-1]
    # pairs (F[j-1], x_j) -> F[j], j = 1..T-1; F[j]'s logits predict token j + 1
    pred = head(embed[ids[:, 1:-1]], feats[:, :-1])
    reg, ce_raw, ce_cfg, m = _terms(pred, feats[:, 1:], t_logits, lm_head, sampling, b)
    loss = reg + w_cls * ce_raw + w_cfg * ce_cfg
    logs = {"reg": reg.item(), "ce_raw": ce_raw.item(), "ce_cfg": ce_cfg.item(), **m}
    if w_unroll > 0:  # depth 2: the head's own feature in place of the target's
        pred2 = head(embed[ids[:, 2:-1]], pred[:, :-1])
        reg2, raw2, cfg2, m2 = _terms(pred2, feats[:, 2:], t_logits[:, 1:], lm_head, sampling, b)
        loss = loss + w_unroll * (reg2 + w_cls * raw2 + w_cfg * cfg2)
        logs |= {"accept2": m2["accept"]}
    return loss, logs


def load_head(config, init: Path | None) -> EagleHead:
    """A fresh head, or one warm-started from a save_pretrained folder (upcast to fp32)."""
    if init is None:
        return EagleHead(eagle_config(config))
    print(f"[drafter] warm start from {init}")
    return EagleHead.from_pretrained(init, dtype=torch.float32)


def mnist_tokens(vq, data: dict, n_val: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The MNIST drafter's real sequences: training codes at every padding offset, held-out codes."""
    raw, labels = data["train_raw"]
    val_x, val_y = data["val"]
    return {"train": token_dataset(vq, raw, labels),
            "val": (encode_tokens(vq, val_x[:n_val]).flatten(1), val_y[:n_val])}


def _real_pool(target, codes, conds, n: int, path: Path, gen) -> tuple[torch.Tensor, torch.Tensor]:
    """n real training sequences as pair ids (2n, P+T) and fp16 features (2n, T, D); cached at `path`."""
    if path.exists():
        saved = torch.load(path)
        if len(saved["ids"]) == 2 * n:
            return saved["ids"], saved["feats"]
    rows = torch.randperm(len(codes), generator=gen)[:n]
    ids = pair_ids(codes[rows], conds[rows], target.config)
    feats = target_features(target, ids).half()
    torch.save({"ids": ids, "feats": feats}, path)
    return ids, feats


def _mixed_batches(pool: SampleShards, real_ids: torch.Tensor, real_feats: torch.Tensor, n_real: int, batch: int,
                   n_gen: int, config, gen: torch.Generator,
                   g: int = 2) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """A batch maker: (ids (g batch, T), target features (g batch, T, D)), n_gen self-samples and
    batch - n_gen real sequences, class rows first then (g = 2) their null (CFG) rows. The real pool
    holds pairs (`_real_pool`); the self-samples hold the g rows they were sampled with."""

    def batch_data() -> tuple[torch.Tensor, torch.Tensor]:
        r = torch.randint(n_real, (batch - n_gen,), generator=gen)
        codes, ys, feats = pool.draw(n_gen, gen)
        ids = pair_ids(codes, ys, config, g)
        f = feats.transpose(0, 1).reshape(-1, *feats.shape[2:])  # (g n_gen, T, D): class rows, then null rows
        rr = torch.cat([r + j * n_real for j in range(g)])
        ids = torch.cat([ids.view(g, n_gen, -1), real_ids[rr].view(g, -1, ids.shape[1])], 1).flatten(0, 1)
        f = torch.cat([f.view(g, n_gen, *f.shape[1:]), real_feats[rr].view(g, -1, *f.shape[1:])], 1).flatten(0, 1)
        return ids, f

    return batch_data


def _validation(head: EagleHead, target, real: tuple[torch.Tensor, torch.Tensor], val: SampleShards,
                sampling) -> Callable[[], dict[str, float]]:
    """The held-out metrics: acceptance on self-samples (one step unrolled too), top-1 on real sequences
    `real` = (codes (N, T), condition ids (N,))."""
    config = target.config
    real_val = pair_ids(*real, config, sampling.rows)
    real_val_feats = target_features(target, real_val)
    vc, vy, vf = val.tensors()
    self_val, self_val_feats = pair_ids(vc, vy, config, vf.shape[1]), vf.transpose(0, 1).flatten(0, 1)

    device = target.lm_head.weight.device
    self_val, self_val_feats = self_val.to(device), self_val_feats.to(device)
    real_val, real_val_feats = real_val.to(device), real_val_feats.to(device)

    def evaluate() -> dict[str, float]:
        _, logs = drafter_losses(head, target, self_val, self_val_feats, sampling, w_unroll=1.0)
        _, real_logs = drafter_losses(head, target, real_val, real_val_feats, sampling)
        return {"val_accept": logs["accept"], "val_accept2": logs["accept2"], "val_top1_cfg": logs["top1_cfg"],
                "val_top1_raw": logs["top1_raw"], "val_real_top1_raw": real_logs["top1_raw"]}

    return evaluate


def train_drafter(vq, target, data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 16,
                  lr: float = 1e-3, n_self: int = 500, self_frac: float = 0.5, w_cls: float = W_CLS,
                  w_cfg: float = 0.0, w_unroll: float = 0.0, init: Path | None = None, n_val: int = 64,
                  n_real: int = 512, grow_every: int = 30, eval_every: int = 50, shard: int = 50,
                  tokens: dict | None = None, sampling=None, n_start: int = 500, bf16: bool = False,
                  device: str = "cpu") -> EagleHead:
    """Train (or continue) the head for `budget_s` seconds; `batch` sequences (2 x batch rows) per step.

    The self-sample pool starts at min(n_self, n_start) and grows by one shard of `shard` samples every
    `grow_every` steps up to n_self (the sampling time counts in the budget). Defaults keep the first
    recipe's loss (Eagle-1: reg + 0.1 x ce_raw); see assets/embedded/README.md for the shipped one.
    `tokens` = {"train"/"val": (codes (N, T), condition ids (N,))} (default: MNIST's, from `data`);
    `sampling`: the sampling the self-samples use (default the embedded MNIST one); `bf16`: the losses under
    bf16 autocast (the head's weights and optimiser stay fp32). A target config with a look-alike channel
    (`coolsd.models.channel`) draws its self-samples through it, as the engine's target does. `device`: where
    target and head run (batches, samples and their draws are made on the CPU under the seeded generators).
    """
    sampling = sampling or EMBEDDED_SAMPLING
    torch.manual_seed(seed)
    config = target.config
    for p in target.parameters():
        p.requires_grad_(False)
    target.to(device)
    autocast = torch.device(device).type
    gen = torch.Generator().manual_seed(seed)
    tokens = tokens or mnist_tokens(vq, data, n_val)
    real_ids, real_feats = _real_pool(target, *tokens["train"], n_real, out / "real_pool.pt", gen)
    kernel, heat = stored_channel(config, vq.quantize.embedding.weight) or (None, 1.0)
    pool = SampleShards(target, out / "self_samples", seed, shard, sampling, kernel, heat)
    pool.fill(min(n_self, n_start))
    val = SampleShards(target, out / "self_samples_val", seed + 1, n_val, sampling, kernel, heat)
    val.fill(n_val)
    head = load_head(config, init).to(device)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    batch_data = _mixed_batches(pool, real_ids, real_feats, n_real, batch, round(batch * self_frac), config, gen,
                                sampling.rows)

    def step(i: int) -> dict[str, float]:
        if i % grow_every == grow_every - 1 and len(pool) < n_self:
            pool.grow()
        ids, feats = batch_data()
        with torch.autocast(autocast, dtype=torch.bfloat16, enabled=bf16):
            loss, logs = drafter_losses(head, target, ids.to(device), feats.to(device).float(), sampling, w_cls,
                                        w_cfg, w_unroll)
        update(head, opt, loss)
        return {"pool": float(len(pool))} | {k: logs[k] for k in ("reg", "ce_cfg", "accept")}

    evaluate = _validation(head, target, tokens["val"], val, sampling)
    state = run_budgeted("drafter", head, opt, step, out / "drafter.ckpt", budget_s, lr, evaluate,
                         eval_every=eval_every)
    head.save_pretrained(out / "drafter")
    torch.save(state, out / "drafter_state.pt")
    return head
