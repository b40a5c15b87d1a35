"""The exact facts of spec section 6 on tabular models, and the comparisons it says to report (never assert)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from coolsd import CoolSDRule, EagleRule, LanternPPRule, LanternRule, UniformRSDRule, make_rule  # the public API
from coolsd.decoding import variants
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import g_star, lossless_residual, ratio_accept
from coolsd.theory import sweeps
from coolsd.theory.oracle import exact, match_tau, rule_step, sequence_probs, step_output
from coolsd.theory.tabular import TabularDrafter, TabularLM

EXACT = 1e-9  # "equal" for whole-sequence distributions (float64 rounding is ~1e-16)


def rule_zoo(codebook: torch.Tensor) -> list:
    """Every rule kind and option, LANTERN(++) with the model's neighbour table (k fits V - 1 others)."""
    table = neighbour_table(codebook)
    k = min(2, table.shape[-1] - 1)
    return [
        EagleRule(),
        UniformRSDRule(delta=0.7), UniformRSDRule(delta=1.7), UniformRSDRule(delta=4.0),
        CoolSDRule(delta=1.1), CoolSDRule(delta=2.0), CoolSDRule(delta=2.0, nu=1.5),
        CoolSDRule(delta=1.1, floor_at_one=False), CoolSDRule(delta=2.0, floor_at_one=False),
        CoolSDRule(delta=2.0, floor_at_one=False, residual_kind="lossless"),
        CoolSDRule(delta=2.0, residual_kind="lossless"),
        CoolSDRule(delta=3.0, nu=0.3, mu=0.5), CoolSDRule(delta=3.0, nu=0.3, mu=0.5, floor_at_one=False),
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
    CoolSDRule(delta=0.5, nu=0.7, floor_at_one=False),  # omega = 0.86, 0.43, 0.21 for L = 3
    CoolSDRule(delta=0.9, nu=0.0, floor_at_one=False),
    CoolSDRule(delta=1.5, nu=0.7, mu=1.0, floor_at_one=False),  # omega = 0.27, 0.14, 0.07
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
        lossless = CoolSDRule(rule.delta, rule.nu, rule.mu, floor_at_one=False, residual_kind="lossless")
        biased = exact(target, drafter, lossless, draft_len)
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


def test_match_tau_below_eagle(tabular):
    """The default bracket (1e-3, 1e3) also finds deltas below 1 (slower than Eagle-1): delta = 0.5 comes back."""
    target, drafter = tabular(3, 4, seed=0)
    goal = exact(target, drafter, UniformRSDRule(delta=0.5), 2).tau
    rule, result = match_tau(lambda d: UniformRSDRule(delta=d), goal, target, drafter, 2)
    assert abs(rule.delta - 0.5) < 1e-6 and abs(result.tau - goal) < 1e-9


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
    return sweeps.compare(deltas=(2.0,))


@pytest.mark.heavy
def test_report_annealed_vs_uniform_and_g_star_vs_lossless(report):
    """Spec section 3: these comparisons are reported; only their computation is checked."""
    print("\n" + sweeps.format_report(report))
    assert report["setup"]["n_models"] == 20
    for row in report["results"]:
        for key in ("annealed_lower_tv", "annealed_lower_bound", "gstar_lower_tv"):
            assert 0 <= row[key] <= 1
        assert row["max_tau_gap"] < 1e-3  # the tau match is tight enough to compare
        assert row["mean_cool_tv"] <= row["mean_cool_bound"] + 1e-12
    json.dumps(report)


# ---------------------------------------------------------------- the theory view
def small_curves() -> dict:
    return sweeps.tradeoff_curves(vocab_size=3, num_tokens=4, draft_len=2, k=1, deltas=(1.0, 2.0), lams=(1.0, 4.0))


def test_tradeoff_curves():
    curves = small_curves()
    json.dumps(curves)
    assert set(curves["curves"]) == {"uniform-rsd", "cool-sd", "cool-sd-unclipped", "lantern++"}
    eagle = curves["eagle-1"]
    assert eagle["tv"] <= EXACT
    for name, points in curves["curves"].items():
        assert len(points) == 2
        for pt in points:
            assert pt["tv"] <= pt["bound"] + 1e-12 and 1 < pt["tau"] <= 4  # T = 4; drafts are accepted
            rule = make_rule(**{k if k != "rule" else "name": v for k, v in pt["rule"].items()})
            assert variants.variant_of(rule.config()) == name
    # delta = 1 for UniformRSD and lambda = 1 for LANTERN++ (dense p) are Eagle-1
    for name in ("uniform-rsd", "lantern++"):
        first = curves["curves"][name][0]
        assert first["tv"] <= EXACT and math.isclose(first["tau"], eagle["tau"], rel_tol=1e-12)


def test_tradeoff_figure_and_mark():
    curves = small_curves()
    fig = sweeps.tradeoff_figure(curves)
    names = [trace.name for trace in fig.data]
    assert {"uniform-rsd", "cool-sd", "lantern++", "eagle-1 (lossless)"} <= set(names)
    fig = sweeps.tradeoff_figure(curves, mark=make_rule("lantern++", k=10, lam=5.0))
    assert fig.data[-1].name == "current: lantern++ (k 10 -> 1 on the toy codebook)"
    fig = sweeps.tradeoff_figure(curves, mark=make_rule("cool-sd", delta=2.0))
    cool_2 = curves["curves"]["cool-sd"][1]
    assert math.isclose(fig.data[-1].x[0], cool_2["tau"]) and math.isclose(fig.data[-1].y[0], cool_2["tv"])
    fig = sweeps.tradeoff_figure(curves, mark={"tau": 1.5, "tv": 0.1, "label": "here"})
    assert fig.data[-1].name == "here"


def test_cli_writes_figure_and_points(tmp_path, capsys, monkeypatch):
    """The CLI plumbing (HTML, so no browser is needed), on the small sweeps to keep it quick."""
    curves = small_curves()
    monkeypatch.setattr(sweeps, "tradeoff_curves", lambda: curves)
    out = tmp_path / "tradeoff.html"
    assert sweeps.main(["--out", str(out)]) == 0
    assert out.exists() and out.stat().st_size > 1000
    points = json.loads(out.with_suffix(".json").read_text())
    assert points == json.loads(json.dumps(curves))
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        sweeps.main([])  # nothing to do


# ---------------------------------------------------------------- hand-computed two-token cases (independent of code)
# T = 3, V = 4. Round 0 draws x_0 from P0; round 1 drafts ONE token x_1 ~ q (t = 1 leaves one token after it) and
# commits it plus a bonus x_2 ~ P2, or a resampled x_1 and then round 2 draws x_2 ~ P2. So the output is
# P0(x_0) K(x_1) P2(x_2 | x_0 x_1) with K the one-step kernel, and E[rounds] = 2 + (1 - beta), beta = sum_x q(x) a(x).
# p, q at position 1 are the same for every x_0. Codes on a line at 0, 1, 2.5, 4.5: nearest others of
# 0: [1, 2, 3]; 1: [0, 2, 3]; 2: [1, 3, 0]; 3: [2, 1, 0].
HAND_P0 = (0.1, 0.2, 0.3, 0.4)
HAND_P = (0.35, 0.1, 0.2, 0.35)
HAND_Q = (0.1, 0.3, 0.4, 0.2)
HAND_CODES = torch.tensor([[0.0], [1.0], [2.5], [4.5]], dtype=torch.float64)
HAND_CASES = {
    # Eagle-1: a = (1, 1/3, 1/2, 1), beta = 0.6, residual [p - q]_+ / 0.4 = (0.625, 0, 0, 0.375): K = p.
    "eagle-1": (EagleRule(), 1, (0.35, 0.1, 0.2, 0.35), 2.4),
    # UniformRSD delta = 1.5: a = (1, 1/2, 3/4, 1), q a = (0.1, 0.15, 0.3, 0.2), beta = 0.75;
    # G* = [p - q a]_+ = (0.25, 0, 0, 0.15) / 0.4; K = q a + 0.25 G* = (0.25625, 0.15, 0.3, 0.29375).
    "uniform-rsd": (UniformRSDRule(delta=1.5), 1, (0.25625, 0.15, 0.3, 0.29375), 2.25),
    # COOL-SD at L = 1 has omega_1 = delta (mean-normalised): delta = 1.5 is the same step as UniformRSD 1.5.
    "cool-sd": (CoolSDRule(delta=1.5, nu=0.7), 1, (0.25625, 0.15, 0.3, 0.29375), 2.25),
    # COOL-SD delta = 0.5 (omega < 1): a = (1, 1/6, 1/4, 7/8), q a = (0.1, 0.05, 0.1, 0.175), beta = 0.425;
    # G* = (p - q a) / 0.575 (all positive), so K = q a + (p - q a) = p: stricter than lossless, still exact.
    "cool-sd-omega<1": (CoolSDRule(delta=0.5, nu=0.7, floor_at_one=False), 1, (0.35, 0.1, 0.2, 0.35), 2.575),
    # ... and with the lossless residual (0.625, 0, 0, 0.375) instead: K = (0.459375, 0.05, 0.1, 0.390625), biased.
    "cool-sd-omega<1-lossless": (CoolSDRule(delta=0.5, nu=0.7, floor_at_one=False, residual_kind="lossless"), 1,
                                 (0.459375, 0.05, 0.1, 0.390625), 2.575),
    # LANTERN++ k = 1, lambda = 2 (budget p(x)): x = 0: c_1 = p(1) = 0.1 <= 0.35, m = 1, a = 1;
    # x = 1: c_1 = p(0) = 0.35 > 0.1, m = 0, a = 1/3; x = 2: c_1 = p(1) = 0.1 <= 0.2, m = 1, p~ = 0.3, a = 3/4;
    # x = 3: a = 1. Rejections: x = 1 (mass 0.2) resamples [p - q]_+ / 0.4 = (0.625, 0, 0, 0.375); x = 2 (mass 0.1)
    # zeroes q on codes {1, 3}: [p - (0.1, 0, 0.4, 0)]_+ / 0.7 = (5/14, 1/7, 0, 1/2).
    # K = q a + 0.2 r_1 + 0.1 r_2 = (73/280, 4/35, 3/10, 13/40); beta = 0.7.
    "lantern++": (LanternPPRule(k=1, lam=2.0), 1, (73 / 280, 4 / 35, 3 / 10, 13 / 40), 2.3),
    # LANTERN absolute budget 0.15: the same m for the rejected drafts (x = 1: 0.35 > 0.15; x = 2: 0.1 <= 0.15).
    "lantern": (LanternRule(k=1, delta=0.15), 1, (73 / 280, 4 / 35, 3 / 10, 13 / 40), 2.3),
    # LANTERN++ with G*: [p - q a]_+ = (0.25, 0, 0, 0.15) / 0.4 for every rejection; K = q a + 0.3 G* =
    # (0.2875, 0.1, 0.3, 0.3125).
    "lantern++-g*": (LanternPPRule(k=1, lam=2.0, residual_kind="optimal"), 1, (0.2875, 0.1, 0.3, 0.3125), 2.3),
}


def hand_models() -> tuple[TabularLM, TabularDrafter]:
    """The T = 3 tables above; P2 depends on the whole prefix (a rotation of HAND_P0 by x_0 + 2 x_1)."""
    v = 4
    p_table = {(): torch.tensor(HAND_P0, dtype=torch.float64)}
    q_table = {(): torch.full((v,), 1 / v, dtype=torch.float64)}  # never used: round 0 is the target's
    for x0 in range(v):
        p_table[(x0,)], q_table[(x0,)] = torch.tensor(HAND_P, dtype=torch.float64), torch.tensor(HAND_Q,
                                                                                                  dtype=torch.float64)
        for x1 in range(v):
            p_table[(x0, x1)] = torch.tensor(HAND_P0, dtype=torch.float64).roll(x0 + 2 * x1)
            q_table[(x0, x1)] = torch.full((v,), 1 / v, dtype=torch.float64)  # never used: nothing left to draft
    return TabularLM(p_table, v, 3, HAND_CODES), TabularDrafter(q_table, v, 3, HAND_CODES)


def hand_rule(rule):
    return rule.with_neighbours(neighbour_table(HAND_CODES)) if isinstance(rule, LanternPPRule) else rule


@pytest.mark.parametrize("case", list(HAND_CASES))
def test_hand_computed_two_token_case(case):
    """The oracle's whole-sequence distribution and expected rounds against values worked out by hand."""
    rule, draft_len, kernel, rounds = HAND_CASES[case]
    target, drafter = hand_models()
    result = exact(target, drafter, hand_rule(rule), draft_len)
    k = torch.tensor(kernel, dtype=torch.float64)
    assert math.isclose(float(k.sum()), 1.0, abs_tol=1e-15)  # the hand values are a distribution
    expected = torch.zeros(64, dtype=torch.float64)
    for x0, x1, x2 in itertools.product(range(4), repeat=3):
        expected[16 * x0 + 4 * x1 + x2] = HAND_P0[x0] * k[x1] * target.probs((x0, x1))[x2]
    torch.testing.assert_close(result.dist, expected, rtol=0, atol=1e-14)
    assert math.isclose(result.expected_rounds, rounds, rel_tol=1e-12)
    assert math.isclose(result.tau, 3 / rounds, rel_tol=1e-12)
    step_tv = 0.5 * float((k - torch.tensor(HAND_P, dtype=torch.float64)).abs().sum())
    assert math.isclose(result.tv, step_tv, abs_tol=1e-12)  # P0 and P2 are exact, so only the step errs
    assert result.tv <= result.bound + 1e-12


def test_hand_step_kernel_per_rejected_draft():
    """rule_step on the hand p, q: the LANTERN++ residual differs per rejected draft (x = 1 vs x = 2)."""
    p, q = torch.tensor(HAND_P, dtype=torch.float64), torch.tensor(HAND_Q, dtype=torch.float64)
    step = rule_step(hand_rule(LanternPPRule(k=1, lam=2.0)), p, q, 1, 1)
    torch.testing.assert_close(step.kernel, torch.tensor((73 / 280, 4 / 35, 3 / 10, 13 / 40), dtype=torch.float64),
                               rtol=0, atol=1e-14)
    assert math.isclose(step.accept_rate, 0.7, rel_tol=1e-12)


def test_per_depth_outputs_on_a_deterministic_schedule():
    """P = (1/2, 1/2), Q = (3/4, 1/4) after every prefix; delta = 1000 accepts every draft, so with T = 6
    and L = 2 the rounds start at lengths 1 (2 drafts) and 4 (1 draft); each test costs TV(Q, P) = 1/4."""
    v, t = 2, 6
    p, q = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.75, 0.25], dtype=torch.float64)
    prefixes = [x for n in range(t) for x in itertools.product(range(v), repeat=n)]
    target = TabularLM({x: p for x in prefixes}, v, t)
    drafter = TabularDrafter({x: q for x in prefixes}, v, t)
    res = exact(target, drafter, UniformRSDRule(delta=1000.0), 2)
    assert res.expected_rounds == pytest.approx(3.0, abs=1e-12)
    assert res.depth_tests == pytest.approx((2.0, 1.0), abs=1e-12)
    assert res.depth_accepts == pytest.approx((2.0, 1.0), abs=1e-12)
    assert res.depth_bound == pytest.approx((0.5, 0.25), abs=1e-12)
    assert res.bound == pytest.approx(0.75, abs=1e-12)


def test_depth_bound_sums_to_bound_and_accepts_add_up_to_the_tokens(tabular):
    """sum(depth_bound) == bound; every image has T tokens = one per round plus the accepted drafts."""
    target, drafter = tabular(3, 5, 2)
    for rule in (CoolSDRule(delta=2.0), UniformRSDRule(delta=0.7), EagleRule()):
        res = exact(target, drafter, rule, 3)
        assert len(res.depth_tests) == len(res.depth_accepts) == len(res.depth_bound) == 3
        assert sum(res.depth_bound) == pytest.approx(res.bound, abs=1e-12)
        assert res.expected_rounds + sum(res.depth_accepts) == pytest.approx(5.0, abs=1e-12)
        assert all(a <= t + 1e-12 for a, t in zip(res.depth_accepts, res.depth_tests))


def test_exact_with_a_single_token_is_p():
    """T = 1: only the target's prefix step runs; its output is p(()) itself."""
    p = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    q = torch.tensor([0.6, 0.2, 0.2], dtype=torch.float64)
    res = exact(TabularLM({(): p}, 3, 1), TabularDrafter({(): q}, 3, 1), EagleRule(), 2)
    assert torch.equal(res.dist, p)
    assert res.expected_rounds == 1.0 and res.tv == 0.0
