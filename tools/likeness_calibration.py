"""Where the likeness readout calls a picture broken: its threshold against pictures judged by eye.

    python tools/likeness_calibration.py                  # counts at several thresholds, from the shipped labels
    python tools/likeness_calibration.py --sheets DIR     # also draw each set's pictures beside their real ones

The labelled pictures (`assets/emoji/likeness_calibration.json.gz`: each picture's tokens, condition, seed and
label) are the delta sweep's first 64 samples decoded by vanilla AR and by COOL-SD at delta 1024 (L = 2). Each
was judged by eye beside its real picture as "good", "broken" or "unclear" (a picture drawn with a part missing,
dissolved or another object is broken). For each threshold the command prints how many broken pictures the
readout catches and how many good ones it flags (`coolsd.compare.likeness.BROKEN_BELOW` is the one shipped). The
tokens are kept with their labels: a retrained model's pictures need judging again.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import torch

from coolsd.compare.likeness import BROKEN_BELOW, RealPictures, likeness
from coolsd.compare.recognise import EMOJI_CLASSIFIER
from coolsd.models.emoji import load_emoji
from coolsd.util.paths import EMOJI_DIR
from coolsd.util.sheet import Sheet

LABELS = EMOJI_DIR / "likeness_calibration.json.gz"
THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7)


def counts(values: list[float], labels: list[str], threshold: float) -> tuple[int, int, int, int]:
    """(broken caught, broken, good flagged, good) at `threshold` ("unclear" pictures left out)."""
    broken = [v for v, lab in zip(values, labels) if lab == "broken"]
    good = [v for v, lab in zip(values, labels) if lab == "good"]
    return sum(v < threshold for v in broken), len(broken), sum(v < threshold for v in good), len(good)


def show(name: str, row) -> None:
    """Two lines: broken caught / broken and good flagged / good at each threshold."""
    print(f"{name}\n  broken caught: " + "  ".join(f"{c}/{n}".ljust(7) for c, n, _, _ in row))
    print("  good flagged:  " + "  ".join(f"{f}/{g}".ljust(7) for _, _, f, g in row))


def draw_sheet(pictures: torch.Tensor, reals: torch.Tensor, path: Path, per_row: int = 8) -> None:
    """Each picture right of its real one, `per_row` pairs a row; picture j sits in row j // per_row under
    column "+j % per_row"."""
    rows = -(-len(pictures) // per_row)
    cells = [[None] * (2 * per_row) for _ in range(rows)]
    for j, (real, picture) in enumerate(zip(reals, pictures)):
        cells[j // per_row][2 * (j % per_row):2 * (j % per_row) + 2] = [real, picture]
    sheet = Sheet.grid(rows, 2 * per_row, 96, label_w=70, head_h=20, gap=2, margin=4)
    heads = [text for k in range(per_row) for text in ("real", f"+{k}")]
    sheet.draw(cells, [f"{per_row * r}-" for r in range(rows)], heads).save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sheets", type=Path, default=None, help="draw each set's pictures into this folder")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = json.loads(gzip.decompress(LABELS.read_bytes()))
    bundle = load_emoji(device="cpu")
    real = RealPictures.beside(EMOJI_CLASSIFIER)
    print("threshold: " + "  ".join(f"{t:<7}" for t in THRESHOLDS) + f"   (shipped: {BROKEN_BELOW})")
    total = [[0, 0, 0, 0] for _ in THRESHOLDS]
    for name, entry in data["sets"].items():
        pictures = bundle.tokenizer.decode(torch.tensor(entry["tokens"]))
        reals = torch.stack([real.of(c) for c in data["conditions"]])
        values = likeness(pictures, reals).tolist()
        if args.sheets:
            args.sheets.mkdir(parents=True, exist_ok=True)
            draw_sheet(pictures, reals, args.sheets / f"{name.replace(' ', '_')}.png")
        row = [counts(values, entry["labels"], t) for t in THRESHOLDS]
        total = [[a + b for a, b in zip(t, r)] for t, r in zip(total, row)]
        show(name, row)
    show("all", total)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
