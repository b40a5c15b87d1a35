"""`python -m coolsd.train export`: copy the trained parts into assets/embedded as fp16 safetensors."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from coolsd.compare.metrics import classifier_features, feature_stats, save_real_stats
from coolsd.train.data import splits


def export_bundle(runs: Path, assets: Path) -> None:
    from transformers import LlamaForCausalLM, ResNetForImageClassification

    from coolsd.models.eagle import EagleHead
    from coolsd.models.patch_vq import load_vq

    assets.mkdir(parents=True, exist_ok=True)
    parts = {"vq": load_vq, "target": LlamaForCausalLM.from_pretrained, "drafter": EagleHead.from_pretrained,
             "classifier": ResNetForImageClassification.from_pretrained}
    for name, load in parts.items():
        src = runs / name
        if not src.is_dir():
            print(f"[export] skip {name}: {src} missing")
            continue
        model = load(src).to(torch.float16)
        dst = assets / name
        if dst.exists():
            shutil.rmtree(dst)
        model.save_pretrained(dst)
        size = sum(f.stat().st_size for f in dst.rglob("*")) / 1e6
        print(f"[export] {name}: {size:.2f} MB -> {dst}")


def export_real_stats(assets: Path, seed: int = 0, images01=None, what: str = "held-out digits") -> None:
    """Classifier-feature mean/covariance of real images -> classifier/real_stats.safetensors.

    `images01`: (N, C, 32, 32) in [0, 1]; default the held-out real digits. The benchmark's offline
    FID compares generated images against these statistics.
    """
    from transformers import ResNetForImageClassification

    classifier = ResNetForImageClassification.from_pretrained(assets / "classifier").float().eval()
    if images01 is None:
        images01 = (splits(seed)["val"][0] + 1) / 2
    feats = classifier_features(classifier, images01)
    mu, sigma = feature_stats(feats)
    save_real_stats(assets / "classifier" / "real_stats.safetensors", mu, sigma, len(feats))
    print(f"[export] real_stats: {len(feats)} {what}, {feats.shape[1]}-d features")
