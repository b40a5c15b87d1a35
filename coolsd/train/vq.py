"""Stage 1: the VQ tokenizer, a diffusers `VQModel` mapping 32x32 digits to a 16x16 token grid."""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import VQModel

from coolsd.models.embedded import vq_config
from coolsd.train.loop import run_budgeted


def psnr(x: torch.Tensor, y: torch.Tensor) -> float:
    """PSNR in dB of images in [-1, 1] (computed on the [0, 1] scale)."""
    mse = ((x - y) / 2).pow(2).mean().item()
    return 10 * torch.log10(torch.tensor(1.0 / max(mse, 1e-12))).item()


@torch.no_grad()
def encode_tokens(vq: VQModel, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """(N, 1, 32, 32) images in [-1, 1] -> (N, 16, 16) int64 token ids."""
    out = []
    for i in range(0, len(images), batch):
        h = vq.encode(images[i : i + batch]).latents
        _, _, (_, _, ids) = vq.quantize(h)
        out.append(ids.reshape(h.shape[0], h.shape[2], h.shape[3]))
    return torch.cat(out)


@torch.no_grad()
def codebook_usage(vq: VQModel, images: torch.Tensor) -> int:
    return int(encode_tokens(vq, images).unique().numel())


def train_vq(data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 32, lr: float = 1e-3,
             codebook_size: int = 256, reinit_step: int = 50) -> VQModel:
    """Train with MSE + commitment loss; at `reinit_step` re-seed the codebook from encoder outputs."""
    torch.manual_seed(seed)
    vq = VQModel(**vq_config(codebook_size))
    opt = torch.optim.Adam(vq.parameters(), lr=lr)
    train_x, _ = data["train"]
    val_x, _ = data["val"]
    gen = torch.Generator().manual_seed(seed)

    def step(i: int) -> dict[str, float]:
        x = train_x[torch.randint(len(train_x), (batch,), generator=gen)]
        if i == reinit_step:  # dead-code fix: codes restart on real encoder outputs
            with torch.no_grad():
                h = vq.encode(train_x[torch.randperm(len(train_x), generator=gen)[:512]]).latents
                flat = h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])
                pick = torch.randperm(len(flat), generator=gen)[:codebook_size]
                vq.quantize.embedding.weight.copy_(flat[pick])
        dec = vq(x)
        loss = torch.nn.functional.mse_loss(dec.sample, x) + dec.commit_loss.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    def evaluate() -> dict[str, float]:
        return {"val_psnr_db": psnr(vq(val_x).sample.clamp(-1, 1), val_x),
                "codes_used": float(codebook_usage(vq, val_x))}

    state = run_budgeted("vq", vq, opt, step, out / "vq.ckpt", budget_s, lr, evaluate, eval_every=200)
    vq.eval()
    vq.save_pretrained(out / "vq")
    torch.save(state, out / "vq_state.pt")
    return vq
