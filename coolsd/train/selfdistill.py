"""Self-distillation data for the drafter: the target's own samples at the app's sampling settings.

Exact speculative decoding emits the target's distribution, so the prefixes a drafter meets at run
time are the target's samples under `EMBEDDED_SAMPLING` (CFG 3): those are the training prefixes.
Sampling runs B images per forward and keeps the target's post-norm features of both CFG rows, so
training needs no target forward at all. Shards (one file per batch) make it resumable.
"""

from __future__ import annotations

from pathlib import Path

import torch

from coolsd.models.bundle import EMBEDDED_SAMPLING
from coolsd.models.channel import emit, kernel_rows
from coolsd.models.embedded import condition_prefix, num_conditions
from coolsd.models.llama import LayerStack


@torch.no_grad()
def sample_batch(target_model, labels: torch.Tensor, sampling, gen: torch.Generator,
                 with_features: bool = False, kernel: torch.Tensor | None = None, channel_temperature: float = 1.0):
    """Vanilla AR samples of a whole batch: condition ids (B,) -> codes (B, T) int64
    [, features (B, G, T, D) fp16: post-norm feature before each image token (after the last prefix
    token, then after codes[:-1])].

    Same maths as the engine's vanilla decoding (`SamplingConfig.probs` on the (cond, uncond) rows); `kernel`
    (V, V): the target's look-alike channel (`coolsd.models.channel`), each drawn code passed through it, the
    logits divided by `channel_temperature` first (the engine's channel target, under the emoji model's plain
    sampling: T 1, no top-k). The model may sit on any device; the draws run on the CPU under `gen` (the same
    codes wherever the model runs, up to its arithmetic), and what is returned lies on the CPU.
    """
    cfg = target_model.config
    k, (h, w) = cfg.codebook_size, cfg.image_grid
    b = len(labels)
    rows = torch.cat([condition_prefix(cfg, labels), condition_prefix(cfg, labels, null=True)])
    rows = rows[: sampling.rows * b]  # (G*B, P)
    p = rows.shape[1]
    rows_of_kernel = None if kernel is None else kernel_rows(kernel)
    stack = LayerStack(target_model.model.layers, cfg, h * w + p)
    embed = target_model.model.embed_tokens.weight
    device = embed.device
    stack.reset(len(rows), device, embed.dtype)
    x, positions = embed[rows.to(device)], torch.arange(p, device=device)
    codes, feats = [], []
    for t in range(h * w):
        out = stack.forward(x, positions, None)
        positions = torch.tensor([p + t], device=device)
        feat = torch.nn.functional.rms_norm(out, (out.shape[-1],), target_model.model.norm.weight, stack.eps)
        if with_features:
            feats.append(feat[:, -1].half().cpu())
        logits = (feat[:, -1] @ target_model.lm_head.weight[:k].T).cpu().double().view(-1, b, k) / channel_temperature
        ids = torch.multinomial(sampling.probs(logits), 1, generator=gen)[:, 0]  # (B,)
        if kernel is not None:
            ids = emit(ids, rows_of_kernel, gen)
        codes.append(ids)
        x = embed[ids.repeat(len(rows) // b).to(device)][:, None]
    codes = torch.stack(codes, dim=1)
    if not with_features:
        return codes
    f = torch.stack(feats, dim=1)  # (G*B, T, D)
    return codes, f.view(-1, b, *f.shape[1:]).transpose(0, 1).contiguous()


class SampleShards:
    """Self-samples stored as shards `folder/shard_00000.pt` of {codes, labels, features}.

    Shard i holds `batch` images of condition ids (i * batch + j) % num_conditions (the class, or
    class * S + style), drawn with generator seed
    `seed * 100003 + i`, so its content does not depend on when (or after how many resumes) it is made.
    """

    def __init__(self, target_model, folder: Path, seed: int = 0, batch: int = 50, sampling=None,
                 kernel: torch.Tensor | None = None, channel_temperature: float = 1.0) -> None:
        self.model, self.folder, self.seed, self.batch, self.kernel = target_model, Path(folder), seed, batch, kernel
        self.channel_temperature = channel_temperature
        self.sampling = sampling or EMBEDDED_SAMPLING
        self.folder.mkdir(parents=True, exist_ok=True)
        self.codes, self.labels, self.features = [], [], []
        while (self.folder / f"shard_{len(self.codes):05d}.pt").exists():
            s = torch.load(self.folder / f"shard_{len(self.codes):05d}.pt")
            self.codes.append(s["codes"]), self.labels.append(s["labels"]), self.features.append(s["features"])

    def __len__(self) -> int:
        return sum(len(c) for c in self.codes)

    def grow(self) -> None:
        """Sample and store one more shard."""
        i = len(self.codes)
        labels = (torch.arange(self.batch) + i * self.batch) % num_conditions(self.model.config)
        gen = torch.Generator().manual_seed(self.seed * 100003 + i)
        codes, feats = sample_batch(self.model, labels, self.sampling, gen, with_features=True, kernel=self.kernel,
                                    channel_temperature=self.channel_temperature)
        tmp = self.folder / "shard.tmp"
        torch.save({"codes": codes, "labels": labels, "features": feats}, tmp)
        tmp.replace(self.folder / f"shard_{i:05d}.pt")
        self.codes.append(codes), self.labels.append(labels), self.features.append(feats)

    def fill(self, n: int) -> None:
        from tqdm.auto import tqdm

        if len(self) < n:
            bar = tqdm(total=n, initial=len(self), desc=f"self-samples {self.folder.name}")
            while len(self) < n:
                self.grow()
                bar.update(self.batch)
            bar.close()

    def draw(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """n random samples (with replacement): codes (n, T), labels (n,), features (n, G, T, D) fp16."""
        idx = torch.randint(len(self), (n,), generator=gen).tolist()
        pick = [(i // self.batch, i % self.batch) for i in idx]
        return (torch.stack([self.codes[s][j] for s, j in pick]), torch.stack([self.labels[s][j] for s, j in pick]),
                torch.stack([self.features[s][j] for s, j in pick]))

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """codes (N, T), labels (N,), features (N, G, T, D) fp16."""
        return torch.cat(self.codes), torch.cat(self.labels), torch.cat(self.features)
