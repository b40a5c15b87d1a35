"""coolsd.compare.lab (the quality lab backend): samples equal independent decodes, the numbers are recomputed here."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

from coolsd.compare.lab import CACHED, Lab, LabDecoder, LabSample, lab_decoders, load_classifier, summarise
from coolsd.compare.metrics import classifier_outputs, token_nll
from coolsd.compare.race import fork_models
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import CoolSDRule, EagleRule, LanternPPRule, LinearDecayRule, UniformRSDRule

EMBEDDED = Path(__file__).resolve().parents[2] / "assets" / "embedded"
EMOJI = EMBEDDED.parent / "emoji"


@pytest.fixture(scope="module")
def tiny(tiny):
    """The conftest's tiny bundle; tests decode on `reference` handles, so labs can still fork its models."""
    tiny.reference = fork_models(tiny.target, tiny.drafter)
    return tiny


def test_decoders_and_twins(tiny):
    names = {key: [type(d.rule).__name__ if d.rule else None for d in lab_decoders(key, 2.0, tiny.neighbours)]
             for key in ("cool-sd", "cool-sd-floor", "cool-sd-unclipped", "uniform-rsd", "linear-decay", "lantern++")}
    assert all(v[:2] == [None, "EagleRule"] for v in names.values())
    assert names["cool-sd"][2:] == ["CoolSDRule", "UniformRSDRule"]
    assert names["uniform-rsd"][2:] == ["UniformRSDRule", "CoolSDRule"]
    assert names["linear-decay"][2:] == ["LinearDecayRule", "UniformRSDRule"]
    assert names["cool-sd-unclipped"][2:] == ["CoolSDRule", "UniformRSDRule"]
    assert lab_decoders("cool-sd-unclipped", 1.5)[2].rule == CoolSDRule(delta=1.5, floor_at_one=False)
    assert lab_decoders("cool-sd", 1.5)[2].rule == CoolSDRule(delta=1.5, floor_at_one=True)  # the default
    floor = lab_decoders("cool-sd-floor", 1.5)  # the old key
    assert floor[2].rule == CoolSDRule(delta=1.5, floor_at_one=True) and floor[3].rule == UniformRSDRule(delta=1.5)
    lantern = lab_decoders("lantern++", 5.0, tiny.neighbours, lantern_k=99)
    assert isinstance(lantern[2].rule, LanternPPRule) and lantern[2].rule.lam == 5.0
    assert lantern[2].rule.k == tiny.neighbours.shape[-1] - 1  # clamped to the table
    assert lantern[2].rule.residual_kind == "published" and lantern[3].rule.residual_kind == "optimal"
    assert lab_decoders("linear-decay", 3.0)[2].rule == LinearDecayRule(delta=3.0)
    assert len({d.key for d in floor}) == 4


@pytest.mark.parametrize("args, message", [
    (("cool", 2.0), "unknown lab rule 'cool'"), (("cool-sd", math.nan), "must be a finite number"),
    (("cool-sd", "2"), "the relaxation must be a number"), (("cool-sd", 0.0), "delta must be > 0"),
    (("lantern++", 0.5), "lam must be >= 1"), (("lantern++", 5.0, None), "needs the model's neighbour table"),
])
def test_decoder_errors(tiny, args, message):
    rule, relaxation, *rest = args
    neighbours = rest[0] if rest else tiny.neighbours
    with pytest.raises(ValueError, match=message):
        lab_decoders(rule, relaxation, neighbours)


def test_grid_equals_independent_decodes_and_numbers(tiny):
    """Every streamed sample equals run() on the same condition and seed; NLL recomputed independently."""
    lab = Lab(tiny.target, tiny.drafter, tiny.tokenizer, tiny.num_tokens, workers=2)
    decoders = lab_decoders("cool-sd", 3.0, tiny.neighbours)
    conds, seeds = [0, 1, 2], [5, 5, 5]
    config = DecodeConfig(Chain(3))
    samples = list(lab.run(decoders, conds, seeds, tiny.default_sampling, config))
    assert len(samples) == 12 and {(s.row, s.column) for s in samples} == {(r, c) for r in range(3) for c in range(4)}
    for s in samples:
        rule = decoders[s.column].rule
        target, drafter = tiny.reference
        ref = run(target, drafter, rule, cond=conds[s.row], num_tokens=tiny.num_tokens, sampling=tiny.default_sampling,
                  config=config, seed=seeds[s.row])
        assert torch.equal(s.tokens, ref.tokens) and s.tau == ref.tau
        assert math.isclose(s.nll, token_nll(target, tiny.default_sampling, conds[s.row], ref.tokens),
                            rel_tol=1e-6)
        assert s.image.shape == tiny.tokenizer.decode(ref.tokens).shape and s.predicted is None
    summary = summarise(samples, decoders)
    for j, row in enumerate(summary):
        mine = [s for s in samples if s.column == j]
        assert row["n"] == 3 and row["accuracy"] is None
        assert math.isclose(row["nll"], sum(s.nll for s in mine) / 3, rel_tol=1e-12)
        assert math.isclose(row["tau"], 3 * tiny.num_tokens / sum(s.target_forwards for s in mine), rel_tol=1e-12)
    assert summary[0]["speedup"] == 1.0 and summary[0]["tau"] == 1.0


def test_cache_reuses_only_the_relaxation_free_decoders(tiny):
    lab = Lab(tiny.target, tiny.drafter, tiny.tokenizer, tiny.num_tokens, workers=1)
    first = list(lab.run(lab_decoders("uniform-rsd", 2.0), [0, 1], [3, 3], tiny.default_sampling))
    again = list(lab.run(lab_decoders("uniform-rsd", 4.0), [0, 1], [3, 3], tiny.default_sampling))
    reused = {(s.decoder, s.row) for s in again if s.cached}
    assert reused == {(key, row) for key in CACHED for row in (0, 1)}
    before = {(s.decoder, s.row): s for s in first}
    for s in again:
        if s.cached:
            assert torch.equal(s.tokens, before[(s.decoder, s.row)].tokens)
            assert torch.equal(s.image, before[(s.decoder, s.row)].image)  # re-decoded from the cached tokens
    fresh = list(lab.run(lab_decoders("uniform-rsd", 2.0), [0], [3], tiny.default_sampling, use_cache=False))
    assert not any(s.cached for s in fresh)


def test_closing_early_stops_and_frees_the_handles(tiny):
    lab = Lab(tiny.target, tiny.drafter, tiny.tokenizer, tiny.num_tokens, workers=2)
    stream = lab.run(lab_decoders("cool-sd", 2.0), [0, 1, 2], [0, 1, 2], tiny.default_sampling, use_cache=False)
    next(stream)
    done = threading.Event()

    def close():
        stream.close()
        done.set()

    threading.Thread(target=close, daemon=True).start()
    assert done.wait(timeout=60), "closing a lab run did not return within 60 s"
    assert not [t for t in threading.enumerate() if t.name.startswith("coolsd-lab") and t.is_alive()]
    assert len(list(lab.run(lab_decoders("cool-sd", 2.0), [0], [0], tiny.default_sampling))) == 4  # still usable


def test_a_worker_error_reaches_the_caller(tiny):
    class Broken(EagleRule):
        def accept_prob(self, *args):
            raise RuntimeError("boom")

    lab = Lab(tiny.target, tiny.drafter, tiny.tokenizer, tiny.num_tokens, workers=2)
    with pytest.raises(RuntimeError, match="boom"):
        list(lab.run([LabDecoder("broken", "broken", Broken())], [0], [0], tiny.default_sampling))
    with pytest.raises(ValueError, match="one seed per condition"):
        list(lab.run(lab_decoders("cool-sd", 2.0), [0, 1], [0], tiny.default_sampling))
    with pytest.raises(ValueError, match="workers must be"):
        Lab(tiny.target, tiny.drafter, tiny.tokenizer, tiny.num_tokens, workers=0)


def test_summarise_speedup_uses_rows_both_finished():
    def sample(row, column, seconds, predicted=None, cond=0):
        return LabSample(row, column, "x", cond, 0, torch.zeros(4, dtype=torch.long), torch.zeros(1, 2, 2), 2.0, 2,
                         seconds, 1.0, predicted)

    decoders = [LabDecoder("vanilla", "Vanilla AR", None), LabDecoder("eagle-1", "Eagle-1", EagleRule())]
    rows = summarise([sample(0, 0, 4.0, 0), sample(1, 0, 6.0, 1), sample(0, 1, 2.0, 3)], decoders)
    assert rows[1]["speedup"] == 2.0  # row 1 of Eagle-1 has not finished: only row 0 counts
    assert rows[0]["accuracy"] == 0.5 and rows[1]["accuracy"] == 0.0
    assert summarise([], decoders)[1]["speedup"] is None


def test_a_styled_sample_is_judged_on_its_class_alone():
    def sample(predicted, cond, styles):
        return LabSample(0, 0, "x", cond, 0, torch.zeros(4, dtype=torch.long), torch.zeros(3, 2, 2), 2.0, 2,
                         1.0, 1.0, predicted, styles=styles)

    # S = 2 styles: condition 4 is class 2 style 0; a reading of 5 is class 2 in the other style
    assert sample(5, 4, styles=2).correct is True and sample(4, 4, styles=2).correct is True
    assert sample(6, 4, styles=2).correct is False and sample(3, 4, styles=2).correct is False
    assert sample(5, 4, styles=0).correct is False  # without styles the whole id must match
    assert sample(None, 4, styles=2).correct is None


@pytest.mark.skipif(not (EMOJI / "classifier").is_dir(), reason="the emoji model is not shipped here")
def test_emoji_lab_reads_the_class_the_classifier_reads(monkeypatch):
    """On the shipped emoji model: each sample's reading is the class + style classifier's, recomputed here."""
    from coolsd.compare.metrics import predicted
    from coolsd.models.emoji import load_emoji

    monkeypatch.setenv("COOLSD_DTYPE", "fp32")
    bundle = load_emoji(device="cpu")
    classifier = load_classifier(EMOJI / "classifier")
    styles = classifier.config.num_styles
    assert styles == len(bundle.style_names) > 0
    lab = Lab(bundle.target, bundle.drafter, bundle.tokenizer, bundle.num_tokens, classifier, workers=2)
    decoders = lab_decoders("cool-sd", 2.0)[:1]  # vanilla AR: one decoder keeps it short
    conds = [2 * styles + 1, 5 * styles]
    samples = list(lab.run(decoders, conds, [0, 1], bundle.default_sampling))
    assert len(samples) == 2
    for s in samples:
        logits = classifier_outputs(classifier, s.image[None].float())[1][0]
        read = predicted(classifier, logits, s.condition)
        assert s.styles == styles and s.predicted == read["pred"]
        assert s.correct is read["class_ok"]
    assert summarise(samples, decoders)[0]["accuracy"] == sum(s.correct for s in samples) / 2


@pytest.mark.skipif(not (EMBEDDED / "classifier").is_dir(), reason="the embedded model is not shipped here")
def test_embedded_accuracy_matches_the_classifier():
    """On the shipped model: the lab's predictions are the classifier's, recomputed here on the same images."""
    from coolsd.models.bundle import load_embedded

    bundle = load_embedded(device="cpu")
    classifier = load_classifier()
    assert classifier is not None
    lab = Lab(bundle.target, bundle.drafter, bundle.tokenizer, bundle.num_tokens, classifier, workers=2)
    target, drafter = fork_models(bundle.target, bundle.drafter)
    decoders = lab_decoders("cool-sd", 2.0)[1:3]  # Eagle-1 and COOL-SD: two decoders keep it short
    samples = list(lab.run(decoders, [3, 7], [0, 0], bundle.default_sampling))
    for s in samples:
        ref = run(target, drafter, decoders[s.column].rule, cond=s.condition, num_tokens=bundle.num_tokens,
                  sampling=bundle.default_sampling, config=DecodeConfig(), seed=0)
        image = bundle.tokenizer.decode(ref.tokens)
        assert torch.equal(s.tokens, ref.tokens)
        assert s.predicted == int(classifier_outputs(classifier, image[None])[1][0].argmax())
    summary = summarise(samples, decoders)
    for j, row in enumerate(summary):
        mine = [s for s in samples if s.column == j]
        assert row["accuracy"] == sum(s.predicted == s.condition for s in mine) / 2
