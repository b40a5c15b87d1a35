"""The one picture-sheet drawer (`coolsd.util.sheet`): pixels to RGB, the layout's sizes and cells, labels that
fit, pictures scaled into their cells or pasted as they are."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image, ImageDraw

from coolsd.util.sheet import Sheet, fit, font, picture, to_rgb_array, wrap

WHITE, RED = (255, 255, 255), (255, 0, 0)


def test_to_rgb_array_greyscale_and_colour():
    grey = torch.tensor([[[0.0, 1.0], [0.5, 2.0]]])  # (1, 2, 2), out-of-range clamps
    rgb = to_rgb_array(grey)
    assert rgb.shape == (2, 2, 3) and rgb.dtype == np.uint8
    assert rgb[0, 0].tolist() == [0, 0, 0] and rgb[0, 1].tolist() == [255, 255, 255] and rgb[1, 1, 0] == 255
    assert rgb[1, 0, 0] in (127, 128)
    colour = torch.zeros(3, 2, 2)
    colour[0] = 1.0
    assert to_rgb_array(colour)[0, 0].tolist() == [255, 0, 0]


def test_a_picture_is_enlarged_sharp_to_its_cell():
    pixels = torch.tensor([[[0.0, 1.0]]])  # (1, 1, 2): black, white
    img = picture(pixels, (8, 4))
    assert img.size == (8, 4) and img.getpixel((3, 3)) == (0, 0, 0) and img.getpixel((4, 0)) == WHITE


def test_the_layout_places_cells_after_the_labels_with_gaps_and_margins():
    sheet = Sheet.grid(rows=2, cols=3, cell=(10, 20), label_w=50, head_h=30, gap=4, margin=2)
    assert sheet.size == (50 + 2 * 2 + 3 * 10 + 2 * 4, 30 + 2 * 2 + 2 * 20 + 4)
    assert sheet.at(0, 0) == (52, 32) and sheet.at(1, 2) == (52 + 2 * 14, 32 + 24)
    strip = Sheet((10, 6), (12,), head_h=5, gap=8)  # columns of their own widths
    assert strip.size == (10 + 8 + 6, 12 + 5) and strip.at(0, 1) == (18, 5)


def test_draw_fills_the_cells_and_leaves_empty_ones_white():
    sheet = Sheet.grid(rows=2, cols=2, cell=16, label_w=60, head_h=20, gap=4, margin=4)
    red = torch.zeros(3, 2, 2)
    red[0] = 1.0
    image = sheet.draw([[red, None], [None, Image.new("RGB", (8, 8), (0, 0, 255))]], ["vanilla AR", "a longer row "
                       "label that wraps"], ["0", "cat face\nNoto"])
    assert image.size == sheet.size
    x, y = sheet.at(0, 0)
    assert image.getpixel((x, y)) == image.getpixel((x + 15, y + 15)) == RED  # scaled to the whole cell
    x, y = sheet.at(1, 1)
    assert image.getpixel((x + 7, y + 7)) == (0, 0, 255) and image.getpixel((x + 12, y + 12)) == WHITE  # as it is
    x, y = sheet.at(0, 1)
    assert image.getpixel((x + 8, y + 8)) == WHITE  # an empty cell
    assert any(image.getpixel((i, j)) != WHITE for i in range(60) for j in range(20, 60))  # a row label is drawn
    assert any(image.getpixel((i, j)) != WHITE for i in range(60, 104) for j in range(20))  # and a column label


def test_labels_are_cut_and_wrapped_to_their_width():
    draw, face = ImageDraw.Draw(Image.new("RGB", (1, 1))), font(12)
    assert fit(draw, "short", face, 200) == "short"
    cut = fit(draw, "a very long name of an emoji", face, 40)
    assert cut.endswith("…") and draw.textlength(cut, font=face) <= 40
    lines = wrap(draw, "COOL-SD delta = 8\n(nearest the race's)", face, 120)
    assert lines[0] == "COOL-SD delta = 8" and len(lines) >= 2 and lines[1].startswith("(nearest")
    assert all(draw.textlength(line, font=face) <= 120 for line in lines)
