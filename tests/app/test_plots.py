"""coolsd.app.plots: token grid to image, outcome overlay, stats table and figures, on hand-made inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from coolsd.app.plots import (
    ACCEPTED,
    BONUS,
    KIND_COLOURS,
    NO_REFERENCE,
    OVERLAY_ALPHA,
    PLACEHOLDER_GREYS,
    RESAMPLED,
    acceptance_figure,
    display_size,
    fill_ids,
    image_strip,
    length_figure,
    length_histogram,
    overlay_legend_html,
    placeholder,
    stats_markdown,
    token_image,
)
from coolsd.decoding.events import EMPTY_CODE as EMPTY


def test_fill_ids_uses_the_most_common_committed_id():
    tokens = torch.tensor([5, 7, 7, -1, -1, 2])
    assert fill_ids(tokens).tolist() == [5, 7, 7, 7, 7, 2]
    assert fill_ids(torch.full((4,), -1)).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("pixels, expected", [((32, 32), (256, 256)), ((8, 8), (256, 256)), ((512, 512), (512, 512)),
                                              ((100, 100), (300, 300))])
def test_display_size_is_an_integer_upscale(pixels, expected):
    assert display_size((4, 4), pixels) == expected


def test_token_image_shows_committed_cells_and_a_placeholder_elsewhere():
    grid = (2, 2)
    pixels = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])  # one pixel per token
    filled = torch.tensor([True, True, False, False])  # top row committed
    img = np.asarray(token_image(pixels, filled, grid, min_size=8))
    assert img.shape == (8, 8, 3)
    assert (img[:4, :4] == 0).all() and (img[:4, 4:] == 255).all()  # top row: the pixels, upscaled nearest
    bottom = img[4:]
    assert set(np.unique(bottom)) <= set(PLACEHOLDER_GREYS)  # bottom row: neutral checkerboard
    assert bottom[0, 0, 0] != bottom[0, 4, 0]  # neighbouring cells alternate


def test_overlay_tints_each_token_by_its_outcome():
    grid = (1, 4)
    pixels = torch.zeros(1, 1, 4)  # black
    filled = torch.tensor([True, True, True, False])
    kinds = torch.tensor([ACCEPTED, RESAMPLED, BONUS, EMPTY], dtype=torch.int8)
    plain = np.asarray(token_image(pixels, filled, grid, kinds, overlay=False, min_size=4))
    tinted = np.asarray(token_image(pixels, filled, grid, kinds, overlay=True, min_size=4))
    assert (plain[:, :3] == 0).all()
    for col, code in enumerate((ACCEPTED, RESAMPLED, BONUS)):
        expected = np.round(OVERLAY_ALPHA * np.array(KIND_COLOURS[code]))
        assert np.abs(tinted[0, col].astype(float) - expected).max() <= 1
    assert (tinted[:, 3] == plain[:, 3]).all()  # the placeholder cell is not tinted


def test_placeholder_has_the_display_size():
    img = placeholder((4, 4), (256, 256))
    assert img.size == (256, 256) and img.mode == "RGB"
    assert set(np.unique(np.asarray(img))) == set(PLACEHOLDER_GREYS)


def test_legend_names_every_outcome():
    text = overlay_legend_html()
    assert "accepted" in text and "resampled" in text and "bonus" in text


def test_the_same_noise_legend_names_its_one_tint_or_says_there_is_nothing_to_compare():
    text = overlay_legend_html("same")
    assert "not vanilla AR's token" in text and "accepted" not in text and "resampled" not in text
    assert NO_REFERENCE in overlay_legend_html("same", reference=False)


def _stats(label, tokens, forwards, seconds, speedup, finished):
    return {"decoder": label, "tokens": tokens, "num_tokens": 16, "target_forwards": forwards,
            "mean_accepted_length": tokens / forwards if forwards else math.nan, "compute_seconds": seconds,
            "speedup": speedup, "finished": finished}


def test_stats_markdown_one_row_per_decoder():
    md = stats_markdown([_stats("Eagle-1", 16, 5, 0.5, 2.0, True), _stats("Vanilla AR", 0, 0, 0.0, math.nan, False)],
                        status="**Finished**")
    lines = md.splitlines()
    assert lines[0] == "**Finished**"
    rows = [line for line in lines if line.startswith("| Eagle") or line.startswith("| Vanilla")]
    assert len(rows) == 2
    assert "Eagle-1 ✓" in rows[0] and "16 / 16" in rows[0] and "3.20" in rows[0] and "2.00×" in rows[0]
    assert "–" in rows[1]  # nan shown as a dash, not "nan"
    assert "nan" not in md


class _FakeRacer:
    def __init__(self, key, rates, counts, round_tokens):
        self.key, self.label = key, key.upper()
        self.accept_rate = torch.tensor(rates, dtype=torch.float64)
        self.depth_count = torch.tensor(counts, dtype=torch.float64)
        self.round_tokens = round_tokens
        self.num_tokens = max(sum(round_tokens), 1)
        self.tau = sum(round_tokens) / max(len(round_tokens), 1)


def test_acceptance_figure_has_a_line_per_decoder_and_the_omega_curve():
    racers = [_FakeRacer("eagle-1", [0.9, 0.8, math.nan], [10, 8, 0], [3, 2]),
              _FakeRacer("cool-sd", [1.0, 0.9, 0.5], [10, 9, 7], [4, 4])]
    omega = torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64)
    fig = acceptance_figure(racers, 3, {"cool-sd": omega})
    names = [t.name for t in fig.data]
    assert names[:2] == ["EAGLE-1", "COOL-SD"] and names[2] == "COOL-SD ωᵢ (right axis)"  # no literal "_i"
    assert list(fig.data[0].y) == [0.9, 0.8, None]  # an untested depth is a gap
    assert list(fig.data[2].y) == [2.0, 1.0, 0.5] and fig.data[2].yaxis == "y2"
    line, = fig.layout.shapes  # omega = 1 (lossless), dotted across the plot on the right axis
    assert (line.yref, line.y0, line.y1, line.xref) == ("y2", 1.0, 1.0, "x domain")
    assert fig.layout.annotations[0].text == "ω = 1 (lossless)" and fig.layout.yaxis2.overlaying == "y"
    assert (fig.layout.xaxis.title.text, list(fig.layout.xaxis.range)) == ("draft position i", [0.5, 3.5])
    assert fig.layout.uirevision == "keep"  # a streamed update keeps the visitor's zoom
    plain = acceptance_figure(racers, 3, None)
    assert len(plain.data) == 2 and not plain.layout.shapes and "yaxis2" not in plain.layout


def test_length_figure_plots_a_running_mean_along_the_image():
    """Issue 26 #8: three zig-zags of every round were unreadable: the running mean of SMOOTH_ROUNDS rounds, against
    the share of the image committed."""
    from coolsd.app.plots import SMOOTH_ROUNDS
    from coolsd.compare.race import running_mean

    fig = length_figure([_FakeRacer("eagle-1", [], [], [3, 1, 4])])
    assert list(fig.data[0].y) == pytest.approx([3, 2, 8 / 3]) and list(fig.data[0].x) == pytest.approx(
        [37.5, 50.0, 100.0])
    assert "vanilla" in fig.data[-1].name.lower() and fig.data[0].mode == "lines"
    values = list(range(40))
    smooth = running_mean(values, SMOOTH_ROUNDS)
    assert smooth[-1] == pytest.approx(sum(values[-SMOOTH_ROUNDS:]) / SMOOTH_ROUNDS) and smooth[0] == 0


def test_length_histogram_gives_each_racer_its_share_of_rounds():
    fig = length_histogram([_FakeRacer("eagle-1", [], [], [3, 1, 3, 3]), _FakeRacer("cool-sd", [], [], [])])
    assert len(fig.data) == 1  # a racer without speculative rounds has no bars
    assert list(fig.data[0].x) == [1, 2, 3] and list(fig.data[0].y) == [0.25, 0.0, 0.75]
    assert list(fig.data[0].customdata) == [1, 0, 3]


def test_image_strip_puts_the_images_side_by_side_under_their_labels():
    from PIL import Image

    a, b = Image.new("RGB", (10, 12), (255, 0, 0)), Image.new("RGB", (6, 6), (0, 0, 255))
    strip = image_strip([a, b], ["A", "B"], band=5)
    assert strip.size == (10 + 8 + 6, 12 + 5)
    assert strip.getpixel((0, 5)) == (255, 0, 0) and strip.getpixel((18, 5)) == (0, 0, 255)
    assert strip.getpixel((18, 16)) == (255, 255, 255)  # below the shorter image: background
