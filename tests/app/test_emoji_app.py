"""The app's model choice with the emoji model: picked, defaulted to when shipped, fallback said on the page."""

from __future__ import annotations

import types

import pytest

import coolsd.models.llamagen
from coolsd.app import context
from coolsd.models.bundle import BundleError


def stub(name: str, execution: str = "") -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, target=None, drafter=None, tokenizer=None, neighbours=None, grid=(2, 2),
                                 conditioning="class", class_names=["0"], default_sampling=None, execution=execution)


def test_emoji_choice_loads_it_and_keeps_its_execution_path(monkeypatch):
    monkeypatch.setattr(context, "load_emoji", lambda: stub("emoji", "bf16 (measured at load)"))
    model = context.load_model("emoji")
    assert model.kind == "emoji" and model.execution == "bf16 (measured at load)" and model.note == ""


def test_emoji_choice_falls_back_to_mnist_and_says_so(monkeypatch):
    def missing(*args, **kw):
        raise BundleError("emoji model folder not found or incomplete: assets/emoji")

    monkeypatch.setattr(context, "load_emoji", missing)
    monkeypatch.setattr(context, "load_embedded", lambda: stub("mnist"))
    model = context.load_model("emoji")
    assert model.kind == "embedded" and "emoji model is missing" in model.note
    assert context.load_model("mnist").kind == "embedded"


@pytest.mark.parametrize("shipped,expected", [(True, "emoji"), (False, "embedded")])
def test_default_is_the_emoji_model_when_shipped(monkeypatch, tmp_path, shipped, expected):
    monkeypatch.delenv("COOLSD_MODEL", raising=False)
    monkeypatch.setattr(coolsd.models.llamagen, "find_llamagen", lambda: None)
    if shipped:
        (tmp_path / "target").mkdir()
        (tmp_path / "target" / "config.json").write_text("{}")
    monkeypatch.setattr(context, "EMOJI_DIR", tmp_path)
    assert context.default_model_choice() == expected


def test_the_demo_loads_its_model_at_the_threads_it_serves_with(monkeypatch):
    """The emoji model's load-time fp32 / bf16 timing must run single-threaded on a CPU, as the app then decodes:
    at 2 threads fp32 won the round timing, at 1 thread bf16 did (this Xeon, 1 Dec 2026)."""
    import torch

    from coolsd.app import demo

    seen = []
    real = demo.load_models
    monkeypatch.setattr(demo, "load_models", lambda choice: seen.append(torch.get_num_threads()) or real(choice))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        demo.make_demo("tiny", workers=1, models=[])
        assert seen == [1 if not torch.cuda.is_available() else 2]
    finally:
        torch.set_num_threads(before)
