"""Quality metrics of the benchmark (spec section 5): offline FID in the digit classifier's feature
space, the classifier's accuracy on the requested class, and the target's NLL of generated tokens.

The "FID" here is the Frechet distance of Heusel et al. 2017 between Gaussians fitted to the
128-d pooled features of the shipped ResNet digit classifier (not Inception). With few images it
is biased upwards (the bias shrinks like 1/N), so compare values only at equal N and report N.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

CLASSIFIER_SIZE = 32  # pixels: the classifier was trained on 32x32 digits (coolsd.train.data.IMAGE_SIZE)


# ---------------------------------------------------------------- classifier features
@torch.no_grad()
def classifier_outputs(classifier, images01: Tensor, batch_size: int = 64) -> tuple[Tensor, Tensor]:
    """Pooled features and logits of a `ResNetForImageClassification`.

    Args:
        images01: (N, 1, H, W) float in [0, 1]; resized (bilinear) to 32x32 when H, W differ.
    Returns:
        features (N, 128) float64, logits (N, num_labels) float64, on CPU.
    """
    if images01.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images01.shape)}")
    device = next(classifier.parameters()).device
    dtype = next(classifier.parameters()).dtype
    feats, logits = [], []
    for chunk in images01.split(batch_size):
        x = chunk.to(device=device, dtype=dtype)
        if x.shape[-2:] != (CLASSIFIER_SIZE, CLASSIFIER_SIZE):
            x = torch.nn.functional.interpolate(x, size=(CLASSIFIER_SIZE, CLASSIFIER_SIZE), mode="bilinear",
                                                align_corners=False)
        pooled = classifier.resnet(pixel_values=x * 2 - 1).pooler_output.flatten(1)  # (n, 128), input in [-1, 1]
        feats.append(pooled.double().cpu())
        logits.append(classifier.classifier(pooled).double().cpu())
    return torch.cat(feats), torch.cat(logits)


def classifier_features(classifier, images01: Tensor, batch_size: int = 64) -> Tensor:
    """(N, 1, 32, 32) images in [0, 1] -> (N, 128) float64 pooled classifier features."""
    return classifier_outputs(classifier, images01, batch_size)[0]


def predicted(classifier, logits: torch.Tensor, cond: int) -> dict:
    """{"pred": predicted condition id} from one image's classifier logits (V,); a class + style
    classifier (config num_styles > 0: class logits, then style logits) also gives class_ok / style_ok
    against the requested condition cond = class * S + style."""
    styles = getattr(classifier.config, "num_styles", 0)
    if not styles:
        return {"pred": int(logits.argmax())}
    c = classifier.config.num_classes
    pc, ps = int(logits[:c].argmax()), int(logits[c:].argmax())
    return {"pred": pc * styles + ps, "class_ok": pc == cond // styles, "style_ok": ps == cond % styles}


# ---------------------------------------------------------------- Frechet distance
def feature_stats(features: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) features -> (mu (D,), sigma (D, D)) float64; sigma is the unbiased covariance (N - 1)."""
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or len(f) < 2:
        raise ValueError(f"feature_stats needs (N >= 2, D) features, got shape {f.shape}")
    return f.mean(0), np.cov(f, rowvar=False)


def _sqrt_psd(s: np.ndarray) -> np.ndarray:
    """Symmetric square root of a PSD matrix via eigh; tiny negative eigenvalues (rounding) are clipped."""
    w, v = np.linalg.eigh((s + s.T) / 2)
    return (v * np.sqrt(w.clip(min=0))) @ v.T


def frechet_distance(mu1, sigma1, mu2, sigma2) -> float:
    """||mu1 - mu2||^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2): the Frechet distance of two Gaussians.

    tr((S1 S2)^1/2) is computed as tr((S1^1/2 S2 S1^1/2)^1/2), a symmetric PSD matrix, so two eigh
    calls suffice (no scipy.linalg.sqrtm, no complex parts to discard).
    """
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    s1, s2 = np.asarray(sigma1, np.float64), np.asarray(sigma2, np.float64)
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != mu1.shape * 2:
        raise ValueError(f"shape mismatch: mu {mu1.shape} / {mu2.shape}, sigma {s1.shape} / {s2.shape}")
    root1 = _sqrt_psd(s1)
    middle = root1 @ s2 @ root1
    w = np.linalg.eigvalsh((middle + middle.T) / 2).clip(min=0)
    value = float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(w).sum())
    return max(value, 0.0)  # rounding can give -1e-12 for identical sets


def fid_from_features(features, mu_real, sigma_real) -> float:
    """Frechet distance of (N, D) generated features to the real statistics."""
    mu, sigma = feature_stats(features)
    return frechet_distance(mu, sigma, mu_real, sigma_real)


def fid_bootstrap_std(features, mu_real, sigma_real, n_boot: int = 20, seed: int = 0) -> float:
    """Spread of the FID when the N generated images are resampled with replacement (seeded, deterministic).

    An indication of sampling noise for comparisons at small N, not a confidence interval.
    """
    f = np.asarray(features, dtype=np.float64)
    rng = np.random.default_rng(seed)
    values = [fid_from_features(f[rng.integers(0, len(f), len(f))], mu_real, sigma_real) for _ in range(n_boot)]
    return float(np.std(values, ddof=1)) if n_boot > 1 else 0.0


# ---------------------------------------------------------------- real-image statistics on disk
def save_real_stats(path: str | Path, mu, sigma, n: int) -> None:
    """Write mu (D,), sigma (D, D) float64 and the image count n to a safetensors file."""
    from safetensors.torch import save_file

    mu_t = torch.as_tensor(np.asarray(mu), dtype=torch.float64)
    sigma_t = torch.as_tensor(np.asarray(sigma), dtype=torch.float64)
    if mu_t.ndim != 1 or sigma_t.shape != (len(mu_t), len(mu_t)):
        raise ValueError(f"expected mu (D,) and sigma (D, D), got {tuple(mu_t.shape)} and {tuple(sigma_t.shape)}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file({"mu": mu_t.contiguous(), "sigma": sigma_t.contiguous(), "n": torch.tensor([int(n)])}, str(path))


def load_real_stats(path: str | Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Read (mu (D,), sigma (D, D) float64, n) written by `save_real_stats`; a clear error if missing."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"real-image feature statistics not found: {path}. They are made from held-out real digits "
            "(classifier_features -> feature_stats -> save_real_stats); pass another file with --real-stats.")
    data = load_file(str(path))
    missing = {"mu", "sigma", "n"} - set(data)
    if missing:
        raise ValueError(f"{path} lacks the keys {sorted(missing)} (expected mu, sigma, n)")
    return data["mu"].double().numpy(), data["sigma"].double().numpy(), int(data["n"].reshape(-1)[0])


# ---------------------------------------------------------------- likelihood under the target
@torch.no_grad()
def token_logits(target, guidance: bool, cond, tokens: Tensor) -> Tensor:
    """The target's logits before each of `tokens` (T,): (G, T, V), G = 2 with classifier-free guidance (cond row,
    then the unconditional one). One prefix step plus one forward over tokens[:-1] (the TokenModel protocol)."""
    tokens = tokens.reshape(-1)
    first = target.start(cond, guidance)
    logits = first.logits
    if len(tokens) > 1:
        ids = tokens[:-1].to(logits.device)
        step = target.forward(ids, torch.arange(len(ids), device=logits.device))
        logits = torch.cat([first.logits, step.logits], dim=1)  # (G, T, V)
    return logits


def token_probs(target, sampling, cond, tokens: Tensor) -> Tensor:
    """The target's processed p (CFG mix, temperature, top-k/top-p of `sampling`: the distribution every decoder
    aims to sample) before each of `tokens` (T,): (T, V) float64."""
    return sampling.probs(token_logits(target, sampling.guidance, cond, tokens).double())


def token_nll(target, sampling, cond, tokens: Tensor) -> float:
    """Mean negative log-likelihood (nats/token) of `tokens` (T,) under the target's processed p
    (`token_probs`). A token outside p's support (possible only after top-k/top-p) scores inf."""
    return nll_of(token_probs(target, sampling, cond, tokens), tokens)


def nll_of(p: Tensor, tokens: Tensor) -> float:
    """Mean -log p[t, tokens[t]] over t: p (T, V), tokens (T,); nats/token."""
    picked = p.gather(-1, tokens.reshape(-1, 1).to(p.device)).squeeze(-1)  # (T,)
    return float(-picked.log().mean())


def ambiguity(p: Tensor, keep: Tensor | None = None) -> dict[str, float]:
    """How sure the target is, over positions: p (T, V) its distributions, `keep` (T,) bool the positions to
    count (default all). {"top1": mean of max_v p (1 = certain), "entropy": mean of -sum_v p log p (nats),
    "positions": how many were counted}; NaN means when none is kept."""
    p = p if keep is None else p[keep.to(p.device)]
    if len(p) == 0:
        return {"top1": float("nan"), "entropy": float("nan"), "positions": 0}
    entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)
    return {"top1": float(p.max(-1).values.mean()), "entropy": float(entropy.mean()), "positions": len(p)}


def plain_background(image01: Tensor, grid: tuple[int, int], tol: float = 5 / 255) -> Tensor:
    """Which token patches of an image are plain background: every pixel of the patch within `tol` of the
    top-left pixel's colour (white for emoji, black for MNIST). image01 (C, H, W) in [0, 1]; grid (h, w) the
    token grid, H and W multiples of it -> (h * w,) bool in raster order."""
    c, hh, ww = image01.shape
    h, w = grid
    off = (image01 - image01[:, :1, :1]).abs().amax(0)  # (H, W): a pixel's largest channel difference
    patches = off.reshape(h, hh // h, w, ww // w).amax(dim=(1, 3))  # (h, w)
    return (patches <= tol).flatten()


def class_accuracy(logits: Tensor, labels: Tensor) -> float:
    """Share of rows whose argmax equals the label; logits (N, C), labels (N,)."""
    return float((logits.argmax(-1) == labels.to(logits.device)).double().mean())
