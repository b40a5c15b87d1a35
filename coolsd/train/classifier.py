"""Stage 4: a small digit classifier (transformers `ResNetForImageClassification`), trained on the real
training split. The benchmark uses its pooled features for an offline Frechet distance ("FID")."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import ResNetConfig, ResNetForImageClassification

from coolsd.train.loop import run_budgeted


def classifier_config(labels: list[str] | None = None, channels: int = 1, widths=(32, 64, 128),
                      **extra) -> ResNetConfig:
    """3 stages of basic blocks on Cx32x32 inputs; widths[-1]-d pooled features. Default: the 10
    MNIST digits, grey, about 0.3 M parameters. `extra` fields are stored in the config."""
    labels = labels or [str(i) for i in range(10)]
    return ResNetConfig(num_channels=channels, embedding_size=widths[0], hidden_sizes=list(widths),
                        depths=[1] * len(widths), layer_type="basic", num_labels=len(labels),
                        downsample_in_first_stage=False, id2label=dict(enumerate(labels)),
                        label2id={name: i for i, name in enumerate(labels)}, **extra)


def shift(x: torch.Tensor, gen: torch.Generator, max_px: int = 2, fill: float = -1.0) -> torch.Tensor:
    """Random translation by up to max_px pixels (background `fill`), the augmentation of training."""
    dy, dx = (torch.randint(-max_px, max_px + 1, (2,), generator=gen)).tolist()
    return torch.roll(F.pad(x, (max_px,) * 4, value=fill), (dy, dx), dims=(2, 3))[..., max_px:-max_px, max_px:-max_px]


@torch.no_grad()
def accuracy(model, images: torch.Tensor, labels: torch.Tensor) -> float:
    return (model(pixel_values=images).logits.argmax(-1) == labels).float().mean().item()


def train_classifier(data: dict, out: Path, budget_s: float, seed: int = 0, batch: int = 64,
                     lr: float = 2e-3) -> ResNetForImageClassification:
    torch.manual_seed(seed)
    model = ResNetForImageClassification(classifier_config())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(seed)
    x, y = data["train"]
    vx, vy = data["val"]

    def step(i: int) -> dict[str, float]:
        rows = torch.randint(len(x), (batch,), generator=gen)
        loss = F.cross_entropy(model(pixel_values=shift(x[rows], gen)).logits, y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    state = run_budgeted("classifier", model, opt, step, out / "classifier.ckpt", budget_s, lr,
                         lambda: {"val_acc": accuracy(model, vx, vy)}, eval_every=100)
    model.save_pretrained(out / "classifier")
    torch.save(state, out / "classifier_state.pt")
    return model
