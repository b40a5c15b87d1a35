"""coolsd.compare.metrics on known inputs: Frechet distance closed forms, stats on disk, classifier features, NLL."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from coolsd.compare.metrics import (
    ambiguity,
    class_accuracy,
    classifier_features,
    classifier_outputs,
    feature_stats,
    fid_bootstrap_std,
    fid_from_features,
    frechet_distance,
    load_real_stats,
    nll_of,
    plain_background,
    save_real_stats,
    token_nll,
    token_probs,
)


def _spd(d: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).normal(size=(d, d))
    return a @ a.T + 0.1 * np.eye(d)


def test_identical_sets_have_distance_zero():
    x = np.random.default_rng(0).normal(size=(300, 16))
    mu, sigma = feature_stats(x)
    assert frechet_distance(mu, sigma, mu, sigma) == pytest.approx(0.0, abs=1e-8)
    assert fid_from_features(x, mu, sigma) == pytest.approx(0.0, abs=1e-8)


def test_shifted_samples_give_the_squared_shift():
    """Y = X + m has exactly X's covariance, so the distance is ||m||^2."""
    x = np.random.default_rng(1).normal(size=(500, 8)) @ _spd(8, 2)
    shift = np.arange(8) / 4.0
    mx, sx = feature_stats(x)
    my, sy = feature_stats(x + shift)
    assert frechet_distance(mx, sx, my, sy) == pytest.approx(float((shift**2).sum()), rel=1e-8)


def test_gaussians_closed_forms():
    d = 6
    rng = np.random.default_rng(3)
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    dmu = float(((mu1 - mu2) ** 2).sum())
    # diagonal covariances: sum (sqrt(a) - sqrt(b))^2
    a, b = rng.uniform(0.5, 3, size=d), rng.uniform(0.5, 3, size=d)
    expected = dmu + float(((np.sqrt(a) - np.sqrt(b)) ** 2).sum())
    assert frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expected, rel=1e-9)
    # S2 = c^2 S1 (not diagonal): (1 - c)^2 tr(S1)
    s1, c = _spd(d, 4), 1.7
    assert frechet_distance(mu1, s1, mu2, c**2 * s1) == pytest.approx(dmu + (1 - c) ** 2 * np.trace(s1), rel=1e-9)
    # symmetric in its two arguments, also for non-commuting covariances
    s2 = _spd(d, 5)
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(frechet_distance(mu2, s2, mu1, s1), rel=1e-9)


def test_rank_deficient_covariance_is_fine():
    """N < D (few generated images) gives a singular covariance; the distance stays finite and >= 0."""
    x = np.random.default_rng(6).normal(size=(5, 32))
    y = np.random.default_rng(7).normal(size=(400, 32))
    value = fid_from_features(x, *feature_stats(y))
    assert np.isfinite(value) and value > 0


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="shape mismatch"):
        frechet_distance(np.zeros(3), np.eye(3), np.zeros(4), np.eye(4))
    with pytest.raises(ValueError, match="N >= 2"):
        feature_stats(np.zeros((1, 4)))


def test_bootstrap_spread_is_deterministic():
    x = np.random.default_rng(8).normal(size=(40, 4))
    mu, sigma = feature_stats(np.random.default_rng(9).normal(size=(200, 4)))
    a, b = fid_bootstrap_std(x, mu, sigma, 10, seed=0), fid_bootstrap_std(x, mu, sigma, 10, seed=0)
    assert a == b and a > 0


def test_real_stats_round_trip(tmp_path):
    mu, sigma = np.arange(4, dtype=np.float64), _spd(4, 10)
    save_real_stats(tmp_path / "s" / "real_stats.safetensors", mu, sigma, 500)
    mu2, sigma2, n = load_real_stats(tmp_path / "s" / "real_stats.safetensors")
    assert n == 500 and mu2.dtype == np.float64
    np.testing.assert_array_equal(mu2, mu)
    np.testing.assert_array_equal(sigma2, sigma)


def test_missing_real_stats_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="real-image feature statistics not found"):
        load_real_stats(tmp_path / "nope.safetensors")


@pytest.fixture(scope="module")
def classifier():
    from transformers import ResNetForImageClassification

    from coolsd.train.classifier import classifier_config

    torch.manual_seed(0)
    return ResNetForImageClassification(classifier_config()).eval()


def test_classifier_features_shapes_and_resize(classifier):
    images = torch.rand(3, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    feats, logits = classifier_outputs(classifier, images, batch_size=2)
    assert feats.shape == (3, 128) and feats.dtype == torch.float64 and logits.shape == (3, 10)
    # same as the model's own forward on [-1, 1] inputs
    with torch.no_grad():
        ref = classifier(pixel_values=images * 2 - 1).logits.double()
    torch.testing.assert_close(logits, ref)
    # another batching changes only float rounding (the benchmark scores images one by one)
    torch.testing.assert_close(classifier_features(classifier, images), feats, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(classifier_features(classifier, images[:1]), feats[:1], rtol=1e-5, atol=1e-5)
    small = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))  # tiny bundle images
    assert classifier_features(classifier, small).shape == (2, 128)
    assert class_accuracy(logits, logits.argmax(-1)) == 1.0


def test_token_nll_matches_token_by_token(tiny):
    """One forward over the sequence == the sum of incremental steps (the target's cache agrees)."""
    bundle = tiny
    sampling = bundle.default_sampling
    tokens = torch.randint(0, bundle.target.vocab_size, (bundle.num_tokens,),
                           generator=torch.Generator().manual_seed(0))
    step = bundle.target.start(3, sampling.guidance)
    logps = [sampling.probs(step.logits.double())[-1, tokens[0]].log()]
    for t in range(1, len(tokens)):
        step = bundle.target.forward(tokens[t - 1 : t], torch.tensor([t - 1]))
        logps.append(sampling.probs(step.logits.double())[-1, tokens[t]].log())
    expected = -float(torch.stack(logps).mean())
    assert token_nll(bundle.target, sampling, 3, tokens) == pytest.approx(expected, rel=1e-5)


def test_ambiguity_on_the_tiny_model_matches_a_hand_count(tiny):
    """top-1 and entropy of the target before each of its tokens, counted position by position with the
    incremental steps, over all tokens and over a chosen subset."""
    bundle, sampling = tiny, tiny.default_sampling
    gen = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, bundle.target.vocab_size, (bundle.num_tokens,), generator=gen)
    step = bundle.target.start(5, sampling.guidance)
    rows = [sampling.probs(step.logits.double())[-1]]
    for t in range(1, len(tokens)):
        step = bundle.target.forward(tokens[t - 1 : t], torch.tensor([t - 1]))
        rows.append(sampling.probs(step.logits.double())[-1])
    top1 = [float(r.max()) for r in rows]
    ent = [float(-sum(x * math.log(x) for x in r.tolist() if x > 0)) for r in rows]
    p = token_probs(bundle.target, sampling, 5, tokens)
    assert p.shape == (len(tokens), bundle.target.vocab_size)
    whole = ambiguity(p)
    assert whole["top1"] == pytest.approx(sum(top1) / len(top1), rel=1e-6)
    assert whole["entropy"] == pytest.approx(sum(ent) / len(ent), rel=1e-6)
    keep = torch.zeros(len(tokens), dtype=torch.bool)
    keep[[0, 3, 7]] = True
    part = ambiguity(p, keep)
    assert part["positions"] == 3 and part["top1"] == pytest.approx((top1[0] + top1[3] + top1[7]) / 3, rel=1e-6)
    assert part["entropy"] == pytest.approx((ent[0] + ent[3] + ent[7]) / 3, rel=1e-6)
    assert math.isnan(ambiguity(p, torch.zeros(len(tokens), dtype=torch.bool))["top1"])
    assert nll_of(p, tokens) == pytest.approx(token_nll(bundle.target, sampling, 5, tokens), rel=1e-12)


def test_ambiguity_of_certain_and_uniform_rows():
    p = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    a = ambiguity(p)
    assert a["top1"] == pytest.approx(0.625) and a["entropy"] == pytest.approx(math.log(4) / 2)


def test_plain_background_marks_patches_of_the_corner_colour():
    image = torch.ones(3, 8, 8)  # white, 4 x 4 grid of 2 x 2 patches
    image[:, 2:4, 2:4] = 0.2  # patch (1, 1) drawn
    image[0, 7, 0] = 1 - 3 / 255  # patch (3, 0): off by less than the tolerance
    image[1, 0, 7] = 1 - 9 / 255  # patch (0, 3): off by more
    bg = plain_background(image, (4, 4))
    assert bg.shape == (16,)
    assert (~bg).nonzero().flatten().tolist() == [3, 5]
    black = torch.zeros(1, 4, 4)
    black[0, 3, 3] = 1.0
    assert plain_background(black, (2, 2)).tolist() == [True, True, True, False]


# ---------------------------------------------------------------- textbook values on tiny inputs
def test_feature_stats_textbook_values():
    """Three 2-d points: mean (3, 4); deviations (-2, -2), (0, 2), (2, 0); unbiased covariance = sum / (N - 1)."""
    mu, sigma = feature_stats(np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 4.0]]))
    np.testing.assert_allclose(mu, [3.0, 4.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(sigma, [[4.0, 2.0], [2.0, 4.0]], rtol=0, atol=1e-14)  # biased (/ N) would be 8/3, 4/3


def test_frechet_distance_textbook_values():
    # 1-d: (mu1 - mu2)^2 + s1 + s2 - 2 sqrt(s1 s2) = 9 + 4 + 1 - 4
    assert frechet_distance([0.0], [[4.0]], [3.0], [[1.0]]) == pytest.approx(10.0, abs=1e-12)
    # the three points above against N(0, I) shifted to their mean: tr S + tr I - 2 tr S^1/2, eig(S) = 6, 2
    x = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 4.0]])
    expected = 8.0 + 2.0 - 2 * (np.sqrt(6.0) + np.sqrt(2.0))
    assert fid_from_features(x, [3.0, 4.0], np.eye(2)) == pytest.approx(expected, abs=1e-12)
    assert fid_from_features(x, [3.0, 5.0], [[4.0, 2.0], [2.0, 4.0]]) == pytest.approx(1.0, abs=1e-12)


def _frechet_by_eigvals(mu1, s1, mu2, s2) -> float:
    """Independent route: tr (S1 S2)^1/2 = sum of sqrt of the (real, >= 0) eigenvalues of the product S1 S2."""
    eig = np.linalg.eigvals(np.asarray(s1) @ np.asarray(s2)).real.clip(min=0)
    shift = float(((np.asarray(mu1) - np.asarray(mu2)) ** 2).sum())
    return shift + float(np.trace(s1) + np.trace(s2) - 2 * np.sqrt(eig).sum())


def test_frechet_distance_agrees_with_an_independent_route():
    rng = np.random.default_rng(11)
    for d in (1, 3, 16):
        mu1, mu2, s1, s2 = rng.normal(size=d), rng.normal(size=d), _spd(d, 20 + d), _spd(d, 40 + d)
        assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(_frechet_by_eigvals(mu1, s1, mu2, s2), rel=1e-9)


def test_class_accuracy_textbook_values():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 1.0, 5.0], [4.0, 0.0, 1.0]])
    assert class_accuracy(logits, torch.tensor([0, 1, 2, 0])) == 1.0
    assert class_accuracy(logits, torch.tensor([0, 1, 2, 1])) == 0.75
    assert class_accuracy(logits, torch.tensor([0, 0, 0, 1])) == 0.25
    assert class_accuracy(logits, torch.tensor([1, 0, 0, 1])) == 0.0


# ---------------------------------------------------------------- the shipped classifier and real-digit statistics
SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "embedded" / "classifier"
shipped = pytest.mark.skipif(not (SHIPPED / "real_stats.safetensors").is_file(), reason="assets/embedded not exported")


@shipped
def test_shipped_real_stats_and_classifier_features():
    """The real-digit statistics: 128-d, symmetric PSD, from held-out digits; the shipped classifier's features
    of blank or noise images are far from them (FID much larger than between two halves of the statistics' own
    spread), and both FID routes agree on them."""
    from transformers import ResNetForImageClassification

    mu, sigma, n = load_real_stats(SHIPPED / "real_stats.safetensors")
    assert mu.shape == (128,) and sigma.shape == (128, 128) and n >= 100
    np.testing.assert_allclose(sigma, sigma.T, rtol=0, atol=1e-12)
    assert np.linalg.eigvalsh(sigma).min() > -1e-9
    classifier = ResNetForImageClassification.from_pretrained(SHIPPED, dtype=torch.float32).eval()
    noise = torch.rand(16, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    feats = classifier_features(classifier, noise).numpy()
    fid_noise = fid_from_features(feats, mu, sigma)
    m, s = feature_stats(feats)
    assert fid_noise == pytest.approx(_frechet_by_eigvals(m, s, mu, sigma), rel=1e-6)
    # a Gaussian sample drawn from the real statistics themselves scores far lower than noise images
    rng = np.random.default_rng(0)
    fake_real = rng.multivariate_normal(mu, sigma, size=2000)
    assert fid_from_features(fake_real, mu, sigma) < 0.1 * fid_noise


# ---------------------------------------------------------------- edges and dtypes (mutation testing)
def test_feature_stats_two_points_and_float32_input():
    mu, sigma = feature_stats(np.array([[0.0, 1.0], [2.0, 5.0]], dtype=np.float32))  # N = 2 is enough
    assert mu.dtype == sigma.dtype == np.float64
    np.testing.assert_allclose(mu, [1.0, 3.0], rtol=0, atol=0)
    np.testing.assert_allclose(sigma, [[2.0, 4.0], [4.0, 8.0]], rtol=0, atol=0)


def test_frechet_distance_computes_in_float64():
    rng = np.random.default_rng(12)
    mu1, mu2, s1, s2 = rng.normal(size=8), rng.normal(size=8), _spd(8, 60), _spd(8, 61)
    ref = frechet_distance(mu1, s1, mu2, s2)
    for args in ((mu1.astype(np.float32), s1, mu2, s2), (mu1, s1, mu2.astype(np.float32), s2),
                 (mu1, s1.astype(np.float32), mu2, s2), (mu1, s1, mu2, s2.astype(np.float32))):
        cast = [np.asarray(a, dtype=np.float64) for a in args]  # the same float32-rounded values, in float64
        assert frechet_distance(*args) == pytest.approx(frechet_distance(*cast), rel=1e-12, abs=1e-12)
    assert ref > 0


@pytest.mark.parametrize(("mu1", "s1", "mu2", "s2"), [
    (np.zeros(3), np.eye(3), np.zeros(3), np.eye(4)),  # sigmas differ
    (np.zeros(3), np.eye(3), np.zeros(4), np.eye(3)),  # means differ
    (np.zeros(3), np.eye(4), np.zeros(3), np.eye(4)),  # sigma does not fit mu
])
def test_each_shape_mismatch_is_refused(mu1, s1, mu2, s2):
    with pytest.raises(ValueError, match="shape mismatch"):
        frechet_distance(mu1, s1, mu2, s2)


def test_bootstrap_std_textbook():
    """The spread of FIDs of n_boot resamples (rng.integers(0, N, N) per resample), sample std (ddof 1)."""
    x = np.random.default_rng(13).normal(size=(12, 3)).astype(np.float32)
    mu, sigma = np.zeros(3), np.eye(3)
    rng = np.random.default_rng(5)
    f = x.astype(np.float64)
    values = [fid_from_features(f[rng.integers(0, 12, 12)], mu, sigma) for _ in range(4)]
    assert fid_bootstrap_std(x, mu, sigma, 4, seed=5) == pytest.approx(float(np.std(values, ddof=1)), rel=1e-12)
    assert fid_bootstrap_std(x, mu, sigma, 1, seed=5) == 0.0  # one resample: no spread
    assert fid_bootstrap_std(x, mu, sigma, 2, seed=5) > 0


def test_real_stats_file_is_float64_in_nested_folders(tmp_path):
    from safetensors.torch import load_file

    path = tmp_path / "a" / "b" / "real_stats.safetensors"
    save_real_stats(path, np.arange(3, dtype=np.float32), np.eye(3, dtype=np.float32), 7)
    save_real_stats(path, np.arange(3, dtype=np.float32), np.eye(3, dtype=np.float32), 7)  # again: folder exists
    data = load_file(str(path))
    assert data["mu"].dtype == data["sigma"].dtype == torch.float64 and int(data["n"][0]) == 7


@pytest.mark.parametrize(("mu", "sigma"), [(np.zeros((2, 2)), np.eye(2)), (np.zeros(2), np.eye(3))])
def test_save_real_stats_refuses_bad_shapes(tmp_path, mu, sigma):
    with pytest.raises(ValueError) as err:
        save_real_stats(tmp_path / "x.safetensors", mu, sigma, 1)
    assert str(err.value) == f"expected mu (D,) and sigma (D, D), got {mu.shape} and {sigma.shape}"


def test_load_real_stats_messages(tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(FileNotFoundError) as err:
        load_real_stats(tmp_path / "nope.safetensors")
    assert str(err.value).endswith("(classifier_features -> feature_stats -> save_real_stats); pass another file "
                                   "with --real-stats.")
    save_file({"mu": torch.zeros(2, dtype=torch.float64)}, str(tmp_path / "part.safetensors"))
    with pytest.raises(ValueError) as err:
        load_real_stats(tmp_path / "part.safetensors")
    assert str(err.value) == f"{tmp_path / 'part.safetensors'} lacks the keys ['n', 'sigma'] (expected mu, sigma, n)"


def test_bootstrap_defaults_are_20_resamples_seed_0():
    x = np.random.default_rng(14).normal(size=(10, 2))
    mu, sigma = np.zeros(2), np.eye(2)
    assert fid_bootstrap_std(x, mu, sigma) == fid_bootstrap_std(x, mu, sigma, 20, seed=0)
    assert fid_bootstrap_std(x, mu, sigma) != fid_bootstrap_std(x, mu, sigma, 21, seed=0)
    assert fid_bootstrap_std(x, mu, sigma) != fid_bootstrap_std(x, mu, sigma, 20, seed=1)
