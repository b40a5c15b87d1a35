"""Stage 1: the VQ tokenizer, a diffusers `VQModel` mapping 32x32 images (grey digits or RGB emoji)
to a 16x16 token grid."""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import VQModel

from coolsd.models.embedded import vq_config
from coolsd.models.patch_vq import PatchVQModel
from coolsd.train.loop import run_budgeted


def psnr(x: torch.Tensor, y: torch.Tensor) -> float:
    """PSNR in dB of images in [-1, 1] (computed on the [0, 1] scale)."""
    mse = ((x - y) / 2).pow(2).mean().item()
    return 10 * torch.log10(torch.tensor(1.0 / max(mse, 1e-12))).item()


@torch.no_grad()
def encode_tokens(vq: VQModel, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """(N, C, 32, 32) images in [-1, 1] -> (N, 16, 16) int64 token ids."""
    out = []
    for i in range(0, len(images), batch):
        h = vq.encode(images[i : i + batch]).latents
        _, _, (_, _, ids) = vq.quantize(h)
        out.append(ids.reshape(h.shape[0], h.shape[2], h.shape[3]))
    return torch.cat(out)


@torch.no_grad()
def codebook_usage(vq: VQModel, images: torch.Tensor) -> int:
    return int(encode_tokens(vq, images).unique().numel())


def flip_where(x: torch.Tensor, flippable: torch.Tensor | None, gen: torch.Generator) -> torch.Tensor:
    """Mirror each image (B, C, H, W) left-right with probability 1/2 where `flippable` (B,) bool allows."""
    if flippable is None:
        return x
    mirror = flippable & (torch.rand(len(x), generator=gen) < 0.5)
    return torch.where(mirror[:, None, None, None], x.flip(-1), x)


@torch.no_grad()
def restart_codes(vq: VQModel, images: torch.Tensor, gen: torch.Generator, dead_only: bool) -> int:
    """Re-seed codes from random encoder outputs of `images`: all of them, or only those no image
    uses (`dead_only`). Returns the number of codes re-seeded."""
    h = vq.encode(images).latents
    flat = h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])
    k = vq.quantize.embedding.weight.shape[0]
    if dead_only:
        _, _, (_, _, ids) = vq.quantize(h)
        dead = torch.ones(k, dtype=torch.bool)
        dead[ids.unique()] = False
        which = torch.nonzero(dead).flatten()
    else:
        which = torch.arange(k)
    pick = torch.randperm(len(flat), generator=gen)[: len(which)]
    vq.quantize.embedding.weight[which] = flat[pick]
    return len(which)


def same_patch_spread(x: torch.Tensor, h: torch.Tensor, levels: int = 8) -> torch.Tensor:
    """Mean squared distance of each latent (B, c, g, g) from the mean latent of every patch of the batch that
    shows the same pixels (x (B, C, H, W) in [-1, 1], one patch of H/g x W/g pixels per latent; pixels compared
    after rounding to `levels` steps per unit, so a plain white patch is one group). Patches whose content
    occurs once do not count; 0 when no content repeats. A local tokenizer gives equal patches equal codes."""
    b, c, g, _ = h.shape
    s = x.shape[-1] // g
    pixels = x.unfold(2, s, s).unfold(3, s, s).permute(0, 2, 3, 1, 4, 5).reshape(b * g * g, -1)
    _, group = torch.unique((pixels.detach() * levels).round(), dim=0, return_inverse=True)
    z = h.permute(0, 2, 3, 1).reshape(b * g * g, c).float()
    count = torch.bincount(group).float()
    mean = torch.zeros(len(count), c).index_add_(0, group, z) / count[:, None]
    repeated = count[group] > 1
    if not repeated.any():
        return z.sum() * 0
    return (z - mean[group]).pow(2).sum(1)[repeated].mean()


def _step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> float:
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def _train_and_save(vq, opt, step, val_x: torch.Tensor, out: Path, budget_s: float, lr: float):
    """`run_budgeted` over `step` (evaluated every 200 steps: held-out PSNR, codes used), then `out`/vq (and
    the loop state in vq_state.pt); returns the VQ in eval mode."""

    def evaluate() -> dict[str, float]:
        return {"val_psnr_db": psnr(vq(val_x).sample.clamp(-1, 1), val_x),
                "codes_used": float(codebook_usage(vq, val_x))}

    state = run_budgeted("vq", vq, opt, step, out / "vq.ckpt", budget_s, lr, evaluate, eval_every=200)
    vq.eval()
    vq.save_pretrained(out / "vq")
    torch.save(state, out / "vq_state.pt")
    return vq


def train_vq(data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 32, lr: float = 1e-3,
             codebook_size: int = 256, reinit_step: int = 50, restart_every: int = 0, restart_until: int = 0,
             bf16: bool = False, local_weight: float = 0.0, **arch) -> VQModel:
    """Train with MSE + commitment loss (+ `local_weight` x `same_patch_spread`: equal patches, equal latents);
    at `reinit_step` re-seed the codebook from encoder outputs, then (if `restart_every`) re-seed unused codes
    every `restart_every` steps until `restart_until`.

    data["train"] = (images (N, C, 32, 32) in [-1, 1], labels[, ..., flippable (N,) bool]); `arch`
    goes to `vq_config` (channels, widths, latent_channels); `bf16`: autocast the forward."""
    torch.manual_seed(seed)
    vq = VQModel(**vq_config(codebook_size, **arch))
    opt = torch.optim.Adam(vq.parameters(), lr=lr)
    train_x, val_x = data["train"][0], data["val"][0]
    flippable = data["train"][3] if len(data["train"]) > 3 else None
    gen = torch.Generator().manual_seed(seed)

    def step(i: int) -> dict[str, float]:
        rows = torch.randint(len(train_x), (batch,), generator=gen)
        x = flip_where(train_x[rows], None if flippable is None else flippable[rows], gen)
        if i == reinit_step or (restart_every and i % restart_every == 0 and reinit_step < i <= restart_until):
            n = restart_codes(vq, train_x[torch.randperm(len(train_x), generator=gen)[:512]], gen, i != reinit_step)
            if i != reinit_step:
                print(f"[vq] step {i}: re-seeded {n} unused codes", flush=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            h = vq.encode(x).latents
            dec = vq.decode(h)
        loss = torch.nn.functional.mse_loss(dec.sample.float(), x) + dec.commit_loss.float().mean()
        if local_weight:
            loss = loss + local_weight * same_patch_spread(x, h)
        return {"loss": _step(opt, loss)}

    return _train_and_save(vq, opt, step, val_x, out, budget_s, lr)


def patches_of(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(N, C, H, W) -> (N * H/p * W/p, C * p * p): every patch's pixels, in PatchVQModel's latent order."""
    h = torch.nn.functional.pixel_unshuffle(images, patch)
    return h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])


@torch.no_grad()
def kmeans_codebook(points: torch.Tensor, k: int, gen: torch.Generator, iters: int = 30,
                    chunk: int = 65536) -> torch.Tensor:
    """k-means (Lloyd) of `points` (M, d): (k, d) centroids, seeded from k distinct points; an empty cluster is
    re-seeded at the points worst fitted so far. Raises ValueError when the points have fewer than k distinct
    values."""
    distinct = torch.unique(points, dim=0)
    if len(distinct) < k:
        raise ValueError(f"{len(distinct)} distinct patches cannot seed {k} codes; use a smaller codebook")
    centroids = distinct[torch.randperm(len(distinct), generator=gen)[:k]].clone()
    for _ in range(iters):
        ids = nearest(points, centroids, chunk)
        count = torch.bincount(ids, minlength=k)
        sums = torch.zeros_like(centroids).index_add_(0, ids, points)
        alive = count > 0
        centroids[alive] = sums[alive] / count[alive, None]
        dead = torch.nonzero(~alive).flatten()
        if len(dead):
            err = (points - centroids[ids]).pow(2).sum(1)
            centroids[dead] = points[err.topk(len(dead)).indices]
    return centroids


def nearest(points: torch.Tensor, centroids: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    """(M,) index of the nearest centroid (Euclidean) of each point, `chunk` points at a time."""
    return torch.cat([torch.cdist(points[i : i + chunk], centroids).argmin(1) for i in range(0, len(points), chunk)])


def train_patch_vq(data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 32, lr: float = 1e-3,
                   codebook_size: int = 2048, patch: int = 2, widths: tuple[int, ...] = (32, 64), channels: int = 3,
                   groups: int = 16, bf16: bool = False, **_):
    """The local tokenizer (`coolsd.models.patch_vq.PatchVQModel`): the codebook is the k-means of every training
    patch (fixed from then on), then the decoder's correction learns, with MSE for `budget_s` seconds, to turn a
    grid of codes into the picture. data as for `train_vq`; images in [-1, 1]."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_x, val_x = data["train"][0], data["val"][0]
    vq = PatchVQModel(in_channels=channels, patch_size=patch, num_vq_embeddings=codebook_size,
                      block_out_channels=tuple(widths), norm_num_groups=groups, sample_size=train_x.shape[-1])
    vq.quantize.embedding.weight.data.copy_(kmeans_codebook(patches_of(train_x, patch), codebook_size, gen))
    vq.quantize.embedding.weight.requires_grad_(False)
    params = [p for p in vq.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    flippable = data["train"][3] if len(data["train"]) > 3 else None

    def step(i: int) -> dict[str, float]:
        rows = torch.randint(len(train_x), (batch,), generator=gen)
        x = flip_where(train_x[rows], None if flippable is None else flippable[rows], gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            dec = vq(x).sample
        loss = torch.nn.functional.mse_loss(dec.float(), x)
        return {"loss": _step(opt, loss)}

    return _train_and_save(vq, opt, step, val_x, out, budget_s, lr)
