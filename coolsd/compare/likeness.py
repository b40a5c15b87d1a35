"""How like its real picture a decoded picture is: the readout that calls a broken emoji broken.

A class of the emoji model is one (emoji, style) pair, and each pair has one real picture (the canonical
render the model was trained on, shipped as `real_pictures.safetensors` beside the classifier). The model
draws that picture again at a slightly different framing each time (it was trained on renders scaled by
0.85-1 and shifted by up to a pixel), so a picture is compared with the real one at the real one's best
framing:

    likeness(picture, real) = max over framings f of SSIM(f(real), picture)          in [-1, 1], 1 = identical

SSIM (structural similarity: means, variances and covariance in a 7 x 7 window, averaged over pixels and
channels) rewards the same shapes in the same places, so a cat whose nose and mouth are gone, or a rocket
dissolved into blobs, scores low even where the classifier still reads "cat face" or "rocket". A picture
below `BROKEN_BELOW` is called broken. The classifier's top-1 stays beside it: it says *what* is drawn,
likeness says *how well*.

Digit models have no such readout: a digit class has thousands of real drawings, not one picture.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor

# (choice) the framings searched: the emoji target's training framings (scales 0.85-1, shifts of -1..1 px)
SCALES = (0.85, 0.9, 0.95, 1.0)
SHIFTS = (-1.0, 0.0, 1.0)
FRAMINGS = [(s, dx, dy) for s in SCALES for dx in SHIFTS for dy in SHIFTS]
WINDOW = 7  # SSIM's window, px (square, uniform weights)
SSIM_C1, SSIM_C2 = 0.01 ** 2, 0.03 ** 2  # SSIM's stabilisers for pixel values in [0, 1]
# (choice) below this a picture is called broken: on 120 pictures of the emoji model judged by eye (64 vanilla AR,
# 64 COOL-SD at delta 1024, the 8 unclear ones left out) it caught 32 of 34 broken ones and flagged 7 of 86 good
# ones (`python tools/likeness_calibration.py`; the model card lists the counts at other thresholds)
BROKEN_BELOW = 0.65
REAL_PICTURES_NAME = "real_pictures.safetensors"


def framed(real: Tensor, scale: float, dx: float, dy: float) -> Tensor:
    """Pictures (N, C, H, W) in [0, 1] on white, scaled by `scale` about the centre and shifted by (dx, dy) px
    (bilinear; white comes in at the edges)."""
    size = real.shape[-1]
    theta = torch.tensor([[1 / scale, 0, -dx * 2 / size / scale], [0, 1 / scale, -dy * 2 / size / scale]],
                         dtype=real.dtype)
    grid = F.affine_grid(theta[None].expand(len(real), 2, 3), list(real.shape), align_corners=False)
    return F.grid_sample(real - 1, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + 1


def ssim(x: Tensor, y: Tensor, window: int = WINDOW) -> Tensor:
    """Mean SSIM of each pair of pictures x, y (N, C, H, W) in [0, 1]: (N,), 1 for identical pictures. The window
    is uniform; pictures are padded by their edge pixels."""
    pad = window // 2

    def mean(t: Tensor) -> Tensor:
        return F.avg_pool2d(F.pad(t, (pad,) * 4, mode="replicate"), window, 1)

    mx, my = mean(x), mean(y)
    vx, vy, cxy = mean(x * x) - mx * mx, mean(y * y) - my * my, mean(x * y) - mx * my
    s = ((2 * mx * my + SSIM_C1) * (2 * cxy + SSIM_C2)) / ((mx * mx + my * my + SSIM_C1) * (vx + vy + SSIM_C2))
    return s.mean((1, 2, 3))


@torch.no_grad()
def likeness(pictures: Tensor, real: Tensor) -> Tensor:
    """SSIM of each picture (N, C, H, W) in [0, 1] to its real picture (N, C, H, W) at the real one's best framing
    (FRAMINGS): (N,) in [-1, 1]."""
    pictures, real = pictures.float(), real.float().to(pictures.device)
    return torch.stack([ssim(framed(real, *f), pictures) for f in FRAMINGS]).max(0).values


def broken(value: float) -> bool:
    """Whether a likeness calls its picture broken (below BROKEN_BELOW)."""
    return value < BROKEN_BELOW


class RealPictures:
    """Each class's real picture: conditions (N,) engine condition ids, pictures (N, C, H, W) uint8."""

    def __init__(self, conditions: Tensor, pictures: Tensor) -> None:
        if pictures.ndim != 4 or len(conditions) != len(pictures):
            raise ValueError(f"need (N,) conditions and (N, C, H, W) pictures, got {tuple(conditions.shape)} and "
                             f"{tuple(pictures.shape)}")
        self.pictures = pictures
        self.index = {int(c): i for i, c in enumerate(conditions.tolist())}

    def of(self, condition: int) -> Tensor | None:
        """The real picture of engine condition `condition` as (C, H, W) float in [0, 1]; None when it has none."""
        i = self.index.get(int(condition))
        return None if i is None else self.pictures[i].float() / 255

    def save(self, path: str | Path) -> None:
        conditions = torch.tensor(sorted(self.index, key=self.index.get), dtype=torch.long)
        save_file({"conditions": conditions, "pictures": self.pictures.contiguous()}, str(path))

    @classmethod
    def load(cls, path: str | Path) -> RealPictures:
        data = load_file(str(path))
        return cls(data["conditions"], data["pictures"])

    @classmethod
    def beside(cls, classifier_folder: str | Path) -> RealPictures | None:
        """The real pictures shipped in a classifier's folder (REAL_PICTURES_NAME), or None where it has none."""
        path = Path(classifier_folder) / REAL_PICTURES_NAME
        return cls.load(path) if path.is_file() else None
