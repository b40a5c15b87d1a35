"""The exact facts of spec section 6 on tabular models, and the comparisons it says to report (never assert)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from coolsd import theory
from coolsd.neighbours import neighbour_table
from coolsd.oracle import exact, match_tau, rule_step, sequence_probs, step_output
from coolsd.rules import (
    CoolSDRule,
    EagleRule,
    LanternPPRule,
    LanternRule,
    UniformRSDRule,
    g_star,
    lossless_residual,
    make_rule,
    ratio_accept,
)

EXACT = 1e-9  # "equal" for whole-sequence distributions (float64 rounding is ~1e-16)


def rule_zoo(codebook: torch.Tensor) -> list:
    """Every rule kind and option, LANTERN(++) with the model's neighbour table (k fits V - 1 others)."""
    table = neighbour_table(codebook)
    k = min(2, table.shape[-1] - 1)
    return [
        EagleRule(),
        UniformRSDRule(delta=0.7), UniformRSDRule(delta=1.7), UniformRSDRule(delta=4.0),
        CoolSDRule(delta=1.1), CoolSDRule(delta=2.0), CoolSDRule(delta=2.0, nu=1.5),
        CoolSDRule(delta=2.0, floor_at_one=True), CoolSDRule(delta=2.0, residual_kind="lossless"),
        CoolSDRule(delta=3.0, nu=0.3, mu=0.5),
        LanternPPRule(k=k, lam=3.0).with_neighbours(table), LanternPPRule(k=k, lam=20.0).with_neighbours(table),
        LanternPPRule(k=k, lam=3.0, residual_kind="optimal").with_neighbours(table),
        LanternRule(k=k, delta=0.2).with_neighbours(table),
    ]


def test_sequence_probs_is_a_distribution(tabular):
    target, _ = tabular(3, 4, seed=0)
    probs = sequence_probs(target)
    assert probs.shape == (81,) and (probs > 0).all()
    assert math.isclose(float(probs.sum()), 1.0, abs_tol=1e-12)
    # row-major index: sequence (x_0, ..., x_3) sits at sum x_i 3^(3 - i)
    seq = (2, 0, 1, 1)
    direct = math.prod(float(target.probs(seq[:i])[seq[i]]) for i in range(4))
    assert math.isclose(float(probs[2 * 27 + 0 * 9 + 1 * 3 + 1]), direct, rel_tol=1e-12)


# ---------------------------------------------------------------- lossless rules are exact
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("draft_len", [1, 2, 3])
def test_eagle_output_is_p(tabular, seed, draft_len):
    target, drafter = tabular(5, 4, seed=seed)
    result = exact(target, drafter, EagleRule(), draft_len)
    assert (result.dist - sequence_probs(target)).abs().max() <= EXACT
    assert result.tv <= EXACT and result.bound <= EXACT
    assert 1 <= result.tau <= 4


def test_eagle_output_is_p_all_depths(tabular):
    """T = L + 2, so the first speculative round drafts all L = 3 depths."""
    target, drafter = tabular(5, 5, seed=3)
    result = exact(target, drafter, EagleRule(), 3)
    assert (result.dist - sequence_probs(target)).abs().max() <= EXACT


@pytest.mark.parametrize("draft_len", [1, 3])
def test_cool_sd_with_omega_one_is_eagle(tabular, draft_len):
    target, drafter = tabular(4, 5, seed=1)
    cool = exact(target, drafter, CoolSDRule(delta=1.0, nu=0.0), draft_len)
    eagle = exact(target, drafter, EagleRule(), draft_len)
    assert (cool.dist - eagle.dist).abs().max() <= 1e-14
    assert math.isclose(cool.tau, eagle.tau, rel_tol=1e-14)


@pytest.mark.parametrize("rule", [
    CoolSDRule(delta=0.5, nu=0.7),  # omega = 0.86, 0.43, 0.21 for L = 3
    CoolSDRule(delta=0.9, nu=0.0),
    CoolSDRule(delta=1.5, nu=0.7, mu=1.0),  # omega = 0.27, 0.14, 0.07
    UniformRSDRule(delta=0.6),
], ids=["cool-sd-0.5", "cool-sd-nu0", "cool-sd-mu", "uniform-0.6"])
def test_omega_at_most_one_with_g_star_is_lossless(tabular, rule):
    """Stricter than Eagle-1 at every depth, with G*: still exact (and slower). With Norm([p - q]_+) it is not."""
    draft_len = 3
    assert (rule.omega(torch.arange(1, draft_len + 1), draft_len) <= 1).all()
    target, drafter = tabular(4, 5, seed=2)
    result = exact(target, drafter, rule, draft_len)
    assert (result.dist - sequence_probs(target)).abs().max() <= EXACT
    assert result.tau < exact(target, drafter, EagleRule(), draft_len).tau
    if isinstance(rule, CoolSDRule):
        biased = exact(target, drafter, CoolSDRule(rule.delta, rule.nu, rule.mu, residual_kind="lossless"), draft_len)
        assert biased.tv > 1e-3


# ---------------------------------------------------------------- G* (Proposition 1) and one-step optimality
def test_g_star_is_the_lossless_residual_iff_omega_at_least_one(probs, gen):
    p, q = probs(200, 7, generator=gen, zeros=0.2), probs(200, 7, generator=gen, zeros=0.2)
    for omega in (1.0, 1.0001, 1.3, 2.0, 5.0, 100.0):
        torch.testing.assert_close(g_star(p, q, ratio_accept(p, q, omega)), lossless_residual(p, q),
                                   rtol=0, atol=1e-12)
    for omega in (0.2, 0.7, 0.95):
        diff = (g_star(p, q, ratio_accept(p, q, omega)) - lossless_residual(p, q)).abs().amax(-1)
        # the two coincide only when p and q already agree on the tokens where q > p
        differs = diff > 1e-6
        assert differs.float().mean() > 0.9, f"omega={omega}: G* equals the lossless residual too often"


OMEGAS = [0.3, 0.7, 0.95, 1.0, 1.3, 2.0, 4.0]


@pytest.mark.parametrize("omega", OMEGAS)
def test_g_star_minimises_the_step_tv(probs, gen, omega):
    """Same acceptance, any residual: none reaches a lower TV(step output, p) than G*, which is
    sum_x [q a - p]_+ (0 when omega <= 1). Where omega < 1, G* is strictly better than any other."""
    v = 6
    for _ in range(10):
        p, q = probs(v, generator=gen, zeros=0.2), probs(v, generator=gen, zeros=0.2)
        a = ratio_accept(p, q, omega)
        best = step_output(p, q, a, g_star(p, q, a))
        assert math.isclose(best.tv, float((q * a - p).clamp_min(0).sum()), abs_tol=1e-12)
        if omega <= 1:
            assert best.tv <= 1e-12
        others = [lossless_residual(p, q), p, torch.full((v,), 1 / v, dtype=torch.float64)]
        others += list(torch.distributions.Dirichlet(torch.ones(v, dtype=torch.float64)).sample((20,)))
        others += [torch.distributions.Dirichlet(torch.ones(v, dtype=torch.float64)).sample((v,)) for _ in range(10)]
        for r in others:  # (V,) or (V, V): a residual that may depend on the rejected draft
            tv = step_output(p, q, a, r).tv
            assert tv >= best.tv - 1e-12
            if omega < 1 and r.dim() == 1 and not torch.allclose(r, g_star(p, q, a), atol=1e-9):
                assert tv > best.tv + 1e-9


def test_rule_step_uses_g_star(probs, gen, build_rule):
    """rule_step's TV is sum_x [q a - p]_+ for G*; LANTERN++'s published residual is never below its G*."""
    p, q = probs(8, generator=gen), probs(8, generator=gen)
    for depth in (1, 2, 3):
        cool = rule_step(CoolSDRule(delta=2.0), p, q, depth, 3)
        a = CoolSDRule(delta=2.0).accept_all(p, q, torch.tensor(depth), 3)
        assert math.isclose(cool.tv, float((q * a - p).clamp_min(0).sum()), abs_tol=1e-12)
    published = build_rule("lantern++", lam=5.0)
    optimal = build_rule("lantern++", lam=5.0, residual_kind="optimal")
    for _ in range(20):
        p, q = probs(8, generator=gen), probs(8, generator=gen)
        tv_pub, tv_opt = rule_step(published, p, q, 1, 1), rule_step(optimal, p, q, 1, 1)
        assert math.isclose(tv_pub.accept_rate, tv_opt.accept_rate, rel_tol=1e-12)
        assert tv_opt.tv <= tv_pub.tv + 1e-12


# ---------------------------------------------------------------- whole sequences: TV <= bound
@pytest.mark.parametrize(("vocab_size", "num_tokens", "draft_len", "seed"), [(4, 4, 2, 0), (3, 5, 3, 1), (3, 5, 3, 2)])
def test_tv_never_exceeds_the_bound(tabular, vocab_size, num_tokens, draft_len, seed):
    target, drafter = tabular(vocab_size, num_tokens, seed=seed)
    for rule in rule_zoo(target.codebook):
        result = exact(target, drafter, rule, draft_len)
        assert (result.dist >= 0).all() and math.isclose(float(result.dist.sum()), 1, abs_tol=1e-12), rule
        assert result.tv <= result.bound + 1e-12, rule
        assert 1 <= result.tau <= num_tokens, rule


def test_match_tau(tabular):
    target, drafter = tabular(3, 4, seed=0)
    goal = exact(target, drafter, CoolSDRule(delta=2.0), 2).tau
    rule, result = match_tau(lambda d: UniformRSDRule(delta=d), goal, target, drafter, 2)
    assert isinstance(rule, UniformRSDRule)
    assert abs(result.tau - goal) < 1e-9


# ---------------------------------------------------------------- reported, not asserted
@pytest.fixture(scope="module")
def report():
    """The delta = 2 row of `python -m coolsd.theory --report` (same models and seeds; delta = 1.1 only there)."""
    return theory.compare(deltas=(2.0,))


def test_report_annealed_vs_uniform_and_g_star_vs_lossless(report):
    """Spec section 3: these comparisons are reported; only their computation is checked."""
    print("\n" + theory.format_report(report))
    assert report["setup"]["n_models"] == 20
    for row in report["results"]:
        for key in ("annealed_lower_tv", "annealed_lower_bound", "gstar_lower_tv"):
            assert 0 <= row[key] <= 1
        assert row["max_tau_gap"] < 1e-3  # the tau match is tight enough to compare
        assert row["mean_cool_tv"] <= row["mean_cool_bound"] + 1e-12
    json.dumps(report)


# ---------------------------------------------------------------- the theory view
def small_curves() -> dict:
    return theory.tradeoff_curves(vocab_size=3, num_tokens=4, draft_len=2, k=1, deltas=(1.0, 2.0), lams=(1.0, 4.0))


def test_tradeoff_curves():
    curves = small_curves()
    json.dumps(curves)
    assert set(curves["curves"]) == {"uniform-rsd", "cool-sd", "lantern++"}
    eagle = curves["eagle-1"]
    assert eagle["tv"] <= EXACT
    for name, points in curves["curves"].items():
        assert len(points) == 2
        for pt in points:
            assert pt["tv"] <= pt["bound"] + 1e-12 and pt["tau"] >= 1
            assert make_rule(**{k if k != "rule" else "name": v for k, v in pt["rule"].items()}).name == name
    # delta = 1 for UniformRSD and lambda = 1 for LANTERN++ (dense p) are Eagle-1
    for name in ("uniform-rsd", "lantern++"):
        first = curves["curves"][name][0]
        assert first["tv"] <= EXACT and math.isclose(first["tau"], eagle["tau"], rel_tol=1e-12)


def test_tradeoff_figure_and_mark():
    curves = small_curves()
    fig = theory.tradeoff_figure(curves)
    names = [trace.name for trace in fig.data]
    assert {"uniform-rsd", "cool-sd", "lantern++", "eagle-1 (lossless)"} <= set(names)
    fig = theory.tradeoff_figure(curves, mark=make_rule("lantern++", k=10, lam=5.0))
    assert fig.data[-1].name == "current: lantern++ (k 10 -> 1 on the toy codebook)"
    fig = theory.tradeoff_figure(curves, mark=make_rule("cool-sd", delta=2.0))
    cool_2 = curves["curves"]["cool-sd"][1]
    assert math.isclose(fig.data[-1].x[0], cool_2["tau"]) and math.isclose(fig.data[-1].y[0], cool_2["tv"])
    fig = theory.tradeoff_figure(curves, mark={"tau": 1.5, "tv": 0.1, "label": "here"})
    assert fig.data[-1].name == "here"


def test_cli_writes_figure_and_points(tmp_path, capsys, monkeypatch):
    """The CLI plumbing (HTML, so no browser is needed), on the small sweeps to keep it quick."""
    curves = small_curves()
    monkeypatch.setattr(theory, "tradeoff_curves", lambda: curves)
    out = tmp_path / "tradeoff.html"
    assert theory.main(["--out", str(out)]) == 0
    assert out.exists() and out.stat().st_size > 1000
    points = json.loads(out.with_suffix(".json").read_text())
    assert points == json.loads(json.dumps(curves))
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        theory.main([])  # nothing to do
