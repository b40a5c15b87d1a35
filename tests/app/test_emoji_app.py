"""The one model registry (`coolsd.models.registry`) the app loads from: emoji is the default when shipped, a missing
model falls back along the registry and says so, and the emoji model's precision is configuration (stored beside
the model, overridable by $COOLSD_DTYPE), never a timing at load."""

from __future__ import annotations

import json
import types

import pytest
import torch
from new_emoji import save_new_emoji

import coolsd.models.llamagen
from coolsd.app import context
from coolsd.models import emoji, registry
from coolsd.models.bundle import BundleError


def stub(kind: str, execution: str = "") -> types.SimpleNamespace:
    return types.SimpleNamespace(name=kind, kind=kind, execution=execution, note="")


def test_emoji_loads_through_the_registry_with_its_execution_path(monkeypatch):
    monkeypatch.setitem(registry.MODELS, "emoji", registry.ModelSpec("emoji", "Emoji", lambda: [stub("emoji", "bf16")],
                                                                      lambda: True, "mnist"))
    (model,), note = registry.load_or_fallback("emoji")
    assert model.kind == "emoji" and model.execution == "bf16" and note == ""


def test_emoji_falls_back_to_mnist_and_says_so(monkeypatch):
    def missing():
        raise BundleError("emoji model folder not found or incomplete: assets/emoji")

    monkeypatch.setitem(registry.MODELS, "emoji", registry.ModelSpec("emoji", "Emoji", missing, lambda: False, "mnist"))
    monkeypatch.setitem(registry.MODELS, "mnist", registry.ModelSpec("mnist", "MNIST", lambda: [stub("embedded")],
                                                                      lambda: True, "tiny"))
    (model,), note = registry.load_or_fallback("emoji")
    assert model.kind == "embedded" and "emoji model is missing" in note and "running MNIST" in note
    assert registry.key_of(model) == "mnist" and registry.resolve("embedded") == "mnist"
    with pytest.raises(ValueError, match="unknown model 'warp'; choose one of emoji, mnist, llamagen, tiny"):
        registry.resolve("warp")


@pytest.mark.parametrize("shipped,expected", [(True, "emoji"), (False, "mnist")])
def test_default_is_the_emoji_model_when_shipped(monkeypatch, shipped, expected):
    monkeypatch.delenv("COOLSD_MODEL", raising=False)
    monkeypatch.setattr(coolsd.models.llamagen, "find_llamagen", lambda: None)
    spec = registry.MODELS["emoji"]
    monkeypatch.setitem(registry.MODELS, "emoji", registry.ModelSpec("emoji", spec.label, spec.load,
                                                                      lambda: shipped, "mnist"))
    assert registry.default_key() == expected


def test_the_demo_serves_single_threaded_and_opens_on_the_picked_model(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        demo = context.open_context("tiny", others=[])
        context.serving_threads()
        assert torch.get_num_threads() == (1 if not torch.cuda.is_available() else 2)
        assert demo.key == "tiny" and demo.catalogue.keys == ["tiny"]
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_new_emoji(tmp_path_factory.mktemp("precision"))


@pytest.mark.parametrize("stored,env,path,expected", [
    (None, None, "fused", torch.float32),  # nothing stored: fp32 on a CPU
    ("bf16", None, "fused", torch.bfloat16),  # the stored choice, on the path it is stored for
    ("bf16", None, "eager", torch.float32),  # the eager CPU path runs fp32
    ("bf16", "fp32", "fused", torch.float32),  # the variable wins
    ("fp32", "bf16", "eager", torch.bfloat16),
])
def test_precision_is_stored_with_the_model_and_overridable(folder, monkeypatch, stored, env, path, expected):
    file = folder / emoji.PRECISION_FILE
    file.unlink(missing_ok=True)
    if stored:
        file.write_text(json.dumps({"fused": stored}))
    if env:
        monkeypatch.setenv(emoji.DTYPE_ENV, env)
    else:
        monkeypatch.delenv(emoji.DTYPE_ENV, raising=False)
    bundle = emoji.load_emoji(folder, device="cpu", execution_path=path)
    assert bundle.target.embed.dtype == expected and bundle.drafter.embed.dtype == expected
    word = {torch.float32: "fp32", torch.bfloat16: "bf16"}[expected]
    assert bundle.execution.startswith(word) and bundle.path == path
    assert ("set by COOLSD_DTYPE" in bundle.execution) == bool(env)
    assert ("stored with the model" in bundle.execution) == bool(stored and not env and path == "fused")
    file.unlink(missing_ok=True)


def test_loading_times_nothing(folder, monkeypatch):
    """The path no longer depends on the load of the moment: no call is timed while loading."""
    import coolsd.models.timing as timing

    monkeypatch.delenv(emoji.DTYPE_ENV, raising=False)
    monkeypatch.setattr(timing, "interleaved_medians", lambda *a, **k: pytest.fail("timed at load"))
    emoji.load_emoji(folder, device="cpu")
