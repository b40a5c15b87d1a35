"""Labelled picture sheets drawn with PIL: pictures in cells, row labels on the left, column labels on top.

The one drawer of the lab's grid, the δ sweep's samples, a race's take-away strip and the training runs' sample
sheets. A `Sheet` is the layout (cell sizes, label band, gaps); `Sheet.draw` fills it; `Sheet.at` says where a
cell is, for a caller that marks cells afterwards (the lab's frames). Drawing only.

    sheet = Sheet.grid(rows=2, cols=3, cell=64, label_w=150, head_h=34, gap=6, margin=6)
    image = sheet.draw(pictures, ["vanilla AR", "Eagle-1"], ["0", "1", "2"])   # pictures[row][col]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor

LABEL_PAD = 5  # pixels between the sheet's left edge and its row labels


def quantise(pixels: Tensor) -> Tensor:
    """(C, h, w) float in [0, 1] -> the same (C, h, w) as uint8 on the CPU (a quarter of the memory; drawn
    from, it gives exactly the image the float pixels give)."""
    return (pixels.detach().float().clamp(0, 1).cpu() * 255 + 0.5).to(torch.uint8)


def to_rgb_array(pixels: Tensor) -> np.ndarray:
    """(C, h, w) float in [0, 1] or uint8 (`quantise`), C = 1 or 3 -> (h, w, 3) uint8."""
    x = pixels.detach().cpu() if pixels.dtype == torch.uint8 else quantise(pixels)
    if x.dim() == 2:
        x = x[None]
    if x.shape[0] == 1:
        x = x.expand(3, -1, -1)
    return x[:3].permute(1, 2, 0).numpy().copy()


def picture(pixels: Tensor, size: tuple[int, int]) -> Image.Image:
    """(C, h, w) pixels (`to_rgb_array`) -> an RGB image of `size` (width, height): nearest when enlarged (token
    cells stay sharp), Lanczos when shrunk."""
    img = Image.fromarray(to_rgb_array(pixels))
    if img.size == size:
        return img
    return img.resize(size, Image.NEAREST if img.width <= size[0] else Image.LANCZOS)


def font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """PIL's default font at `size` pixels."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size
        return ImageFont.load_default()


def fit(draw: ImageDraw.ImageDraw, text: str, face, width: float) -> str:
    """`text`, cut to at most `width` pixels in font `face` (ending in "…" when cut)."""
    if draw.textlength(text, font=face) <= width:
        return text
    while len(text) > 1 and draw.textlength(text + "…", font=face) > width:
        text = text[:-1]
    return text.rstrip() + "…"


def wrap(draw: ImageDraw.ImageDraw, text: str, face, width: float) -> list[str]:
    """The lines of `text` (its own line breaks kept), each filled word by word up to `width` pixels in `face`;
    a word longer than a line is cut (`fit`)."""
    lines: list[str] = []
    for given in text.split("\n"):
        start = len(lines)
        for word in given.split(" "):
            if len(lines) > start and draw.textlength(lines[-1] + " " + word, font=face) <= width:
                lines[-1] += " " + word
            else:
                lines.append(fit(draw, word, face, width))
    return lines


@dataclass(frozen=True)
class Sheet:
    """The layout of a labelled picture sheet, in pixels.

    widths: each column's width; heights: each row's height; label_w: the row labels' column on the left (0: none);
    head_h: the column labels' band on top (0: none); gap: between cells; margin: around the cells (inside the
    label column and band); head_size / label_size: the font sizes of the column and of the row labels.
    """

    widths: tuple[int, ...]
    heights: tuple[int, ...]
    label_w: int = 0
    head_h: int = 0
    gap: int = 0
    margin: int = 0
    head_size: int = 12
    label_size: int = 12

    @classmethod
    def grid(cls, rows: int, cols: int, cell: int | tuple[int, int], **layout) -> Sheet:
        """`rows` x `cols` cells of one size: `cell` pixels square, or (width, height)."""
        w, h = (cell, cell) if isinstance(cell, int) else cell
        return cls((w,) * cols, (h,) * rows, **layout)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the whole sheet."""
        return (self.label_w + 2 * self.margin + sum(self.widths) + self.gap * (len(self.widths) - 1),
                self.head_h + 2 * self.margin + sum(self.heights) + self.gap * (len(self.heights) - 1))

    def at(self, row: int, col: int) -> tuple[int, int]:
        """(x, y) of the top-left pixel of cell (row, col)."""
        return (self.label_w + self.margin + sum(self.widths[:col]) + self.gap * col,
                self.head_h + self.margin + sum(self.heights[:row]) + self.gap * row)

    def blank(self) -> Image.Image:
        """The sheet, white, with no picture and no label."""
        return Image.new("RGB", self.size, "white")

    def draw(self, pictures: list[list], row_labels: list[str] = (), col_labels: list[str] = ()) -> Image.Image:
        """The sheet with `pictures[row][col]` in its cell: (C, h, w) pixels in [0, 1] (or uint8) scaled to the
        cell (`picture`), a PIL image pasted at the cell's top-left as it is, or None (an empty cell).

        row_labels: wrapped into the label column, centred on their row's height; col_labels: their lines ("\\n")
        each cut to the column, centred over it in the top band.
        """
        canvas = self.blank()
        draw = ImageDraw.Draw(canvas)
        head, side = font(self.head_size), font(self.label_size)
        for j, text in enumerate(col_labels):
            x = self.at(0, j)[0] + self.widths[j] / 2
            lines = "\n".join(fit(draw, line, head, self.widths[j] + self.gap - 2) for line in text.split("\n"))
            draw.multiline_text((x, self.head_h / 2), lines, fill="black", font=head, anchor="mm", align="center",
                                spacing=1)
        for i, text in enumerate(row_labels):
            lines = "\n".join(wrap(draw, text, side, self.label_w - 2 * LABEL_PAD))
            draw.multiline_text((LABEL_PAD, self.at(i, 0)[1] + self.heights[i] / 2), lines, fill="black", font=side,
                                anchor="lm")
        for i, row in enumerate(pictures):
            for j, pixels in enumerate(row):
                if pixels is not None:
                    cell = (self.widths[j], self.heights[i])
                    image = pixels if isinstance(pixels, Image.Image) else picture(pixels, cell)
                    canvas.paste(image.convert("RGB"), self.at(i, j))
        return canvas
