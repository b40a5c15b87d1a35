"""Rules (spec section 3): a shared contract for every registered rule, then each rule's own identities."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from exact_engine import engine_distribution

from coolsd.decoding.drafting import DRAFTINGS, Chain, Jacobi, Tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.maths import g_star, lossless_residual, normalise, pick
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import (
    RULES,
    CoolSDRule,
    EagleRule,
    LanternPPRule,
    LanternRule,
    UniformRSDRule,
    make_rule,
    omega_values,
)
from coolsd.theory.jacobi_oracle import exact_jacobi
from coolsd.theory.oracle import exact, rule_step
from coolsd.theory.tabular import random_tables

V, L = 8, 3  # codebook size and draft length of the contract batches
RULE_VARIANTS = {"cool-sd": [{"residual_kind": "lossless"}, {"floor_at_one": False}],
                  "lantern++": [{"residual_kind": "optimal"}], "lantern": [{"residual_kind": "optimal"}],
                  "linear-decay": [{"floor_at_one": True}], "custom": [{"floor_at_one": True}]}
# one of each drafting (`coolsd.decoding.drafting`), small enough to enumerate every draw: a chain of 2, the static
# chain-as-a-tree (its oracle is the chain's of its depth, 5) and a Jacobi window of 2
DRAFTING_CASES = {"chain": Chain(2), "tree": Tree("chain-5"), "jacobi": Jacobi(2)}


def line_codebook(v: int) -> torch.Tensor:
    """Codes on a line at 0, 1, 2.5, 4.5, ... (distinct gaps, so neighbour order has no ties)."""
    gaps = torch.arange(1, v, dtype=torch.float64) * 0.5 + 0.5
    return torch.cat([torch.zeros(1, dtype=torch.float64), gaps.cumsum(0)]).unsqueeze(-1)


class RuleContract:
    """What every rule must answer (like diffusers' SchedulerCommonTest). Subclasses set `name`."""

    name = ""

    @pytest.fixture
    def rule(self, build_rule):
        return build_rule(self.name)

    @pytest.fixture(params=[0.0, 0.3], ids=["dense", "sparse"])
    def batch(self, request, probs, gen):
        """p, q (L, V) (sparse: some zeros, as after top-k), drafts x ~ q, depth 1..L."""
        p = probs(L, V, generator=gen, zeros=request.param)
        q = probs(L, V, generator=gen, zeros=request.param)
        x = torch.multinomial(q, 1, generator=gen).squeeze(-1)
        return p, q, x, torch.arange(1, L + 1)

    def test_registered(self, rule):
        assert RULES[self.name] is type(rule)

    def test_config_round_trip(self, rule):
        config = rule.config()
        json.dumps(config)
        name = config.pop("rule")
        assert name == self.name
        assert make_rule(name, **config) == rule

    def test_frozen(self, rule):
        field = dataclasses.fields(rule)[0].name if dataclasses.fields(rule) else "x"
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(rule, field, 1)

    def test_shapes_and_ranges(self, rule, batch):
        p, q, x, depth = batch
        omega = rule.omega(depth, L)
        a_all = rule.accept_all(p, q, depth, L)
        a = rule.accept_prob(p, q, x, depth, L)
        r = rule.residual(p, q, x, depth, L)
        assert omega.shape == (L,) and torch.isfinite(omega).all() and (omega > 0).all()
        assert a_all.shape == (L, V) and a.shape == (L,) and r.shape == (L, V)
        assert ((a >= 0) & (a <= 1)).all() and ((a_all >= 0) & (a_all <= 1)).all()
        torch.testing.assert_close(a, pick(a_all, x), rtol=0, atol=1e-12)

    def test_the_test_at_the_drafts_is_accept_all_bit_for_bit(self, build_rule, batch):
        """A chain round's test reads the drafts' entries only: exactly accept_all at x, and its host floats
        (`chain_accept`) exactly accept_prob's, also for the other residuals and floors a rule offers; its residual
        is G* of accept_all (or the rule's own), and the one row a round asks for equals that row of the batched
        call; the event's cached host omegas are the rule's omega."""
        for settings in [{}, *RULE_VARIANTS.get(self.name, [])]:
            self.check_test_and_residual(build_rule(self.name, **settings), batch)

    @staticmethod
    def check_test_and_residual(rule, batch):
        p, q, x, depth = batch
        for draft_len in (L, L + 2):  # a round's host test: every depth of a shorter round than the rule's L too
            assert rule.chain_accept(p, q, x, draft_len) == rule.accept_prob(p, q, x, depth, draft_len).tolist()
        q_zero = q.clone()
        q_zero[0, x[0]] = 0.0  # never drafted; the rule's answer still holds (1 for the ratio rules)
        assert rule.chain_accept(p, q_zero, x, L) == rule.accept_prob(p, q_zero, x, depth, L).tolist()
        for d in (depth, depth + 2):  # interior depths too
            assert torch.equal(rule.accept_prob(p, q, x, d, L), pick(rule.accept_all(p, q, d, L), x))
            r = rule.residual(p, q, x, d, L)
            for i in range(L):
                torch.testing.assert_close(rule.residual(p[i], q[i], x[i], d[i], L), r[i], rtol=0, atol=1e-15)
            if getattr(rule, "residual_kind", "optimal") == "optimal" and not isinstance(rule, EagleRule):
                torch.testing.assert_close(r, g_star(p, q, rule.accept_all(p, q, d, L)), rtol=0, atol=1e-12)
        assert omega_values(rule, L, L) == rule.omega(depth, L).tolist()
        assert omega_values(rule, 2, 5) == rule.omega(torch.arange(1, 3), 5).tolist()

    def test_residual_is_a_distribution(self, rule, batch):
        p, q, x, depth = batch
        r = rule.residual(p, q, x, depth, L)
        assert (r >= 0).all()
        torch.testing.assert_close(r.sum(-1), torch.ones(L, dtype=r.dtype), rtol=0, atol=1e-12)

    def test_residual_when_p_equals_q(self, rule, batch):
        """[p - q]_+ has no mass: the fallback is p itself, never a uniform row (spec section 1)."""
        p, _, x, depth = batch
        r = rule.residual(p, p, x, depth, L)
        torch.testing.assert_close(r.sum(-1), torch.ones(L, dtype=r.dtype), rtol=0, atol=1e-12)
        assert (r[p == 0] == 0).all()

    def test_vectorised_equals_rows(self, rule, batch):
        p, q, x, depth = batch
        a = rule.accept_prob(p, q, x, depth, L)
        r = rule.residual(p, q, x, depth, L)
        omega = rule.omega(depth, L)
        for i in range(L):
            torch.testing.assert_close(rule.accept_prob(p[i], q[i], x[i], depth[i], L), a[i], rtol=0, atol=1e-14)
            torch.testing.assert_close(rule.residual(p[i], q[i], x[i], depth[i], L), r[i], rtol=0, atol=1e-14)
            torch.testing.assert_close(rule.omega(depth[i], L), omega[i], rtol=0, atol=1e-14)

    def test_extra_leading_dims(self, rule, probs, gen):
        """Any leading dims `...`: a (2, L) batch equals its two (L,) halves."""
        p, q = probs(2, L, V, generator=gen), probs(2, L, V, generator=gen)
        x = torch.multinomial(q.reshape(-1, V), 1, generator=gen).reshape(2, L)
        depth = torch.arange(1, L + 1).expand(2, L)
        a = rule.accept_prob(p, q, x, depth, L)
        r = rule.residual(p, q, x, depth, L)
        assert a.shape == (2, L) and r.shape == (2, L, V)
        for b in range(2):
            torch.testing.assert_close(rule.accept_prob(p[b], q[b], x[b], depth[b], L), a[b], rtol=0, atol=1e-14)
            torch.testing.assert_close(rule.residual(p[b], q[b], x[b], depth[b], L), r[b], rtol=0, atol=1e-14)

    def test_inputs_not_modified(self, rule, batch):
        p, q, x, depth = batch
        before = [t.clone() for t in batch]
        rule.accept_all(p, q, depth, L), rule.accept_prob(p, q, x, depth, L), rule.residual(p, q, x, depth, L)
        for t, t0 in zip(batch, before):
            assert torch.equal(t, t0)

    def test_step_kernel(self, rule, probs, gen):
        """One verification step outputs a distribution; a lossless rule outputs p exactly."""
        for depth in range(1, L + 1):
            p, q = probs(V, generator=gen), probs(V, generator=gen)
            step = rule_step(rule, p, q, depth, L)
            assert (step.kernel >= 0).all() and math.isclose(float(step.kernel.sum()), 1, abs_tol=1e-12)
            assert 0 <= step.accept_rate <= 1
            if type(rule).lossless:
                torch.testing.assert_close(step.kernel, p, rtol=0, atol=1e-12)

    @pytest.mark.parametrize("drafting", list(DRAFTING_CASES))
    def test_every_drafting_gives_its_oracle_exactly(self, build_rule, monkeypatch, drafting):
        """Any rule runs on any drafting (no class per pair): the engine's exact output distribution (every draw
        enumerated, `tests/exact_engine.py`) and expected target forwards are the oracle's for the pair (chain and
        tree: `exact` at the drafting's L; Jacobi: `exact_jacobi`), V = 3, T = 3."""
        target, drafter = random_tables(3, 3, seed=5)
        small = {"k": 1} if RULES[self.name].reads_neighbours else {}  # (V = 3: one neighbour per code)
        rule, shape = build_rule(self.name, codebook=target.codebook, **small), DRAFTING_CASES[drafting]
        dist, forwards = engine_distribution(target, drafter, rule, 3, DecodeConfig(shape), monkeypatch)
        oracle = exact_jacobi(target, rule, shape) if isinstance(shape, Jacobi) else \
            exact(target, drafter, rule, shape.draft_len)
        assert float((dist - oracle.dist).abs().max()) <= 1e-12, (self.name, drafting)
        assert math.isclose(forwards, oracle.expected_rounds, rel_tol=1e-12)

    @pytest.mark.parametrize("drafting", list(DRAFTING_CASES))
    def test_same_noise_on_every_drafting_that_allows_it(self, build_rule, drafting):
        """Same noise runs on each drafting that declares it (`Drafting.same_noise`), and is refused in one line
        by the one that does not (a static tree), before any decoding."""
        target, drafter = random_tables(3, 4, seed=2)
        small = {"k": 1} if RULES[self.name].reads_neighbours else {}  # (V = 3: one neighbour per code)
        rule, shape = build_rule(self.name, codebook=target.codebook, **small), DRAFTING_CASES[drafting]
        if not shape.same_noise:
            with pytest.raises(ValueError, match="same noise does not apply to tree drafting"):
                DecodeConfig(shape, noise="same")
            return
        result = run(target, drafter, rule, num_tokens=4, config=DecodeConfig(shape, noise="same"), seed=3)
        assert len(result.tokens) == 4

    def test_greedy_commits_argmax(self, rule):
        """One-hot p and q (temperature 0): the step outputs the target's argmax, drafted right or wrong."""
        eye = torch.eye(V, dtype=torch.float64)
        for depth in range(1, L + 1):
            for drafted in (2, 5):
                step = rule_step(rule, eye[2], eye[drafted], depth, L)
                torch.testing.assert_close(step.kernel, eye[2], rtol=0, atol=1e-12)


def test_every_registered_rule_has_a_contract():
    import test_schedules  # noqa: F401  (its RuleContract subclasses cover linear-decay and custom)

    def contracts(cls):
        return [c for sub in cls.__subclasses__() for c in (sub, *contracts(sub))]

    covered = {cls.name for cls in contracts(RuleContract) if cls.name}
    assert covered == set(RULES), f"add a RuleContract subclass for {sorted(set(RULES) - covered)}"
    assert set(DRAFTING_CASES) == set(DRAFTINGS), "RuleContract runs every rule on every drafting"


# ---------------------------------------------------------------- per rule
class TestEagle(RuleContract):
    name = "eagle-1"

    def test_formulas(self, rule, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x = torch.arange(L)
        depth = torch.arange(1, L + 1)
        torch.testing.assert_close(rule.accept_prob(p, q, x, depth, L), pick((p / q).clamp(max=1), x))
        expected = (p - q).clamp_min(0)
        torch.testing.assert_close(rule.residual(p, q, x, depth, L), expected / expected.sum(-1, keepdim=True))
        assert (rule.omega(depth, L) == 1).all()


class TestUniformRSD(RuleContract):
    name = "uniform-rsd"

    def test_formulas(self, rule, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        depth = torch.arange(1, L + 1)
        assert (rule.omega(depth, L) == rule.delta).all()
        torch.testing.assert_close(rule.accept_all(p, q, depth, L), (rule.delta * p / q).clamp(max=1))

    @pytest.mark.parametrize("delta", [1.0, 1.5, 4.0])
    def test_residual_is_lossless_for_delta_at_least_one(self, delta, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x, depth = torch.zeros(L, dtype=torch.long), torch.arange(1, L + 1)
        torch.testing.assert_close(UniformRSDRule(delta).residual(p, q, x, depth, L), lossless_residual(p, q),
                                   rtol=0, atol=1e-12)

    def test_delta_one_is_eagle(self, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x, depth = torch.arange(L), torch.arange(1, L + 1)
        eagle, uniform = EagleRule(), UniformRSDRule(delta=1.0)
        torch.testing.assert_close(uniform.accept_prob(p, q, x, depth, L), eagle.accept_prob(p, q, x, depth, L))
        torch.testing.assert_close(uniform.residual(p, q, x, depth, L), eagle.residual(p, q, x, depth, L))


class TestCoolSD(RuleContract):
    name = "cool-sd"

    def test_the_test_reads_no_whole_row_and_overrides_are_honoured(self, batch):
        """The ratio test never builds accept_all (the drafts' entries only); a subclass's own accept_all is what
        its test and G* read, and a subclass's own residual is the one used."""
        calls = []

        class Counting(CoolSDRule):
            def accept_all(self, *args):
                calls.append(args[2])
                return super().accept_all(*args).clamp(max=0.5)

        class OwnResidual(CoolSDRule):
            def residual(self, p, q, x, depth, draft_len):
                return p

        p, q, x, depth = batch
        plain = CoolSDRule()
        assert torch.equal(plain.accept_prob(p, q, x, depth, L), pick(plain.accept_all(p, q, depth, L), x))
        a = Counting().accept_prob(p, q, x, depth, L)
        assert len(calls) == 1 and torch.equal(a, pick(plain.accept_all(p, q, depth, L), x).clamp(max=0.5))
        counted = Counting().residual(p, q, x, depth, L)
        torch.testing.assert_close(counted, g_star(p, q, plain.accept_all(p, q, depth, L).clamp(max=0.5)))
        assert torch.equal(OwnResidual().residual(p, q, x, depth, L), p)

    @pytest.mark.parametrize("draft_len", [1, 2, 3, 5, 8])
    @pytest.mark.parametrize("nu", [0.0, 0.3, 0.7, 2.0])
    def test_default_mu_makes_mean_omega_delta(self, draft_len, nu):
        rule = CoolSDRule(delta=1.7, nu=nu, floor_at_one=False)  # the schedule before the floor
        omega = rule.omega(torch.arange(1, draft_len + 1), draft_len)
        assert math.isclose(float(omega.mean()), 1.7, rel_tol=1e-12)
        assert (omega[1:] <= omega[:-1]).all()  # annealed: never larger deeper in the round

    def test_omega_closed_form(self):
        """L = 2, mean-normalised: omega_1 = 2 delta / (1 + e^-nu), omega_2 = omega_1 e^-nu."""
        delta, nu = 1.1, 0.7
        omega = CoolSDRule(delta=delta, nu=nu, floor_at_one=False).omega(torch.tensor([1, 2]), 2)
        w1 = 2 * delta / (1 + math.exp(-nu))
        torch.testing.assert_close(omega, torch.tensor([w1, w1 * math.exp(-nu)], dtype=torch.float64))

    def test_explicit_mu_and_floor(self):
        depth = torch.arange(1, 5)
        omega = CoolSDRule(delta=2.0, nu=0.5, mu=0.25, floor_at_one=False).omega(depth, 4)
        torch.testing.assert_close(omega, 2.0 * torch.exp(-0.5 * depth.double() - 0.25))
        floored = CoolSDRule(delta=2.0, nu=0.5, mu=0.25, floor_at_one=True).omega(depth, 4)
        torch.testing.assert_close(floored, omega.clamp_min(1.0))
        assert (omega < 1).any()
        assert torch.equal(CoolSDRule(delta=2.0, nu=0.5, mu=0.25).omega(depth, 4), floored)  # the default floors

    def test_default_is_floored_at_one(self):
        """Spec section 3 (revised): omega_i = max(1, delta exp(-nu i - mu)) unless floor_at_one=False."""
        depth = torch.arange(1, 4)
        assert CoolSDRule().floor_at_one and (CoolSDRule(delta=1.1).omega(depth, 3) >= 1).all()
        assert (CoolSDRule(delta=1.1, floor_at_one=False).omega(depth, 3)[1:] < 1).all()

    def test_accept_uses_omega_per_depth(self, rule, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        depth = torch.arange(1, L + 1)
        omega = rule.omega(depth, L).unsqueeze(-1)
        torch.testing.assert_close(rule.accept_all(p, q, depth, L), (omega * p / q).clamp(max=1))

    def test_omega_one_is_eagle(self, probs, gen):
        """delta = 1, nu = 0: omega == 1 at every depth, and every output equals Eagle-1's."""
        p, q = probs(L, V, generator=gen, zeros=0.3), probs(L, V, generator=gen, zeros=0.3)
        x, depth = torch.multinomial(q, 1, generator=gen).squeeze(-1), torch.arange(1, L + 1)
        cool, eagle = CoolSDRule(delta=1.0, nu=0.0), EagleRule()
        assert (cool.omega(depth, L) == 1).all()
        assert torch.equal(cool.accept_all(p, q, depth, L), eagle.accept_all(p, q, depth, L))
        torch.testing.assert_close(cool.residual(p, q, x, depth, L), eagle.residual(p, q, x, depth, L),
                                   rtol=0, atol=1e-15)

    def test_nu_zero_is_uniform(self, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x, depth = torch.arange(L), torch.arange(1, L + 1)
        cool, uniform = CoolSDRule(delta=1.7, nu=0.0), UniformRSDRule(delta=1.7)
        torch.testing.assert_close(cool.omega(depth, L), uniform.omega(depth, L), rtol=1e-14, atol=0)
        torch.testing.assert_close(cool.accept_all(p, q, depth, L), uniform.accept_all(p, q, depth, L))
        torch.testing.assert_close(cool.residual(p, q, x, depth, L), uniform.residual(p, q, x, depth, L))

    def test_residual_kinds(self, probs, gen):
        """'optimal' is G* of the acceptance; 'lossless' is Norm([p - q]_+); they differ where omega < 1."""
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x, depth = torch.arange(L), torch.arange(1, L + 1)
        optimal = CoolSDRule(delta=2.0, nu=0.7, floor_at_one=False)
        lossless = CoolSDRule(delta=2.0, nu=0.7, floor_at_one=False, residual_kind="lossless")
        omega = optimal.omega(depth, L)
        assert omega[0] > 1 > omega[-1]
        r_opt, r_loss = optimal.residual(p, q, x, depth, L), lossless.residual(p, q, x, depth, L)
        torch.testing.assert_close(r_opt, g_star(p, q, optimal.accept_all(p, q, depth, L)))
        torch.testing.assert_close(r_loss, lossless_residual(p, q))
        torch.testing.assert_close(r_opt[omega >= 1], r_loss[omega >= 1], rtol=0, atol=1e-12)
        assert (r_opt[omega < 1] - r_loss[omega < 1]).abs().max() > 1e-3


class TestLanternPP(RuleContract):
    name = "lantern++"

    # codes on a line: the neighbours of code 0 are 1, 2, 3, 4 in that order. p and q put different mass on
    # them (p: 0.2, 0.3, 0.15; q: 0.05, 0.05, 0.3), so aggregating q's neighbours instead of p's changes a.
    P = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25], dtype=torch.float64)
    Q = torch.tensor([0.5, 0.05, 0.05, 0.3, 0.1], dtype=torch.float64)

    def rule_on_line(self, **kwargs) -> LanternPPRule:
        return LanternPPRule(**kwargs).with_neighbours(neighbour_table(line_codebook(5)))

    def test_neighbour_order(self):
        assert neighbour_table(line_codebook(5))[0].tolist() == [1, 2, 3, 4]

    def test_hand_computed_example(self):
        """p(x) = 0.1, lambda = 3.5: budget 0.25 fits c_1 = 0.2 but not c_2 = 0.5, so p~ = 0.3, a = 0.6.

        (q's neighbour masses 0.05, 0.1, 0.4 would fit two neighbours and give p~ = 0.2, a = 0.4.)"""
        x, d = torch.tensor(0), torch.tensor(1)
        rule = self.rule_on_line(k=3, lam=3.5)
        assert math.isclose(float(rule.accept_prob(self.P, self.Q, x, d, 1)), 0.6, rel_tol=1e-12)
        # published residual: m >= 1, so q is zeroed on the k + 1 = 4 nearest codes of x
        expected = (self.P - torch.tensor([0.5, 0, 0, 0, 0], dtype=torch.float64)).clamp_min(0)
        torch.testing.assert_close(rule.residual(self.P, self.Q, x, d, 1), expected / expected.sum())
        # a small budget aggregates nothing (m = 0): Eagle's acceptance and residual
        small = self.rule_on_line(k=3, lam=1.4)
        assert math.isclose(float(small.accept_prob(self.P, self.Q, x, d, 1)), 0.2, rel_tol=1e-12)
        torch.testing.assert_close(small.residual(self.P, self.Q, x, d, 1), lossless_residual(self.P, self.Q))

    def test_k_limits_the_search(self):
        """lambda = 10 (budget 0.9) fits c_3 = 0.65; k = 2 stops the search at c_2 = 0.5."""
        x, d = torch.tensor(0), torch.tensor(1)
        q = torch.tensor([0.8, 0.05, 0.05, 0.05, 0.05], dtype=torch.float64)
        a = self.rule_on_line(k=2, lam=10.0).accept_prob(self.P, q, x, d, 1)
        assert math.isclose(float(a), 0.6 / 0.8, rel_tol=1e-12)
        a = self.rule_on_line(k=3, lam=10.0).accept_prob(self.P, q, x, d, 1)
        assert math.isclose(float(a), 0.75 / 0.8, rel_tol=1e-12)

    def test_budget_bounds_p_tilde(self, build_rule, probs, gen):
        """p~(x) = a q(x) <= lambda p(x) whenever a < 1."""
        for lam in (1.0, 2.0, 5.0, 20.0):
            rule = build_rule(self.name, lam=lam)
            p, q = probs(64, V, generator=gen, zeros=0.2), probs(64, V, generator=gen, zeros=0.2)
            x = torch.multinomial(q, 1, generator=gen).squeeze(-1)
            a = rule.accept_prob(p, q, x, torch.ones(64, dtype=torch.long), 1)
            eagle = EagleRule().accept_prob(p, q, x, torch.ones(64, dtype=torch.long), 1)
            below = a < 1
            assert (a * pick(q, x) <= lam * pick(p, x) * (1 + 1e-12) + 1e-15)[below].all()
            assert (a >= eagle - 1e-15).all()
            if lam == 1.0:
                torch.testing.assert_close(a, eagle, rtol=0, atol=1e-15)

    def test_the_host_test_pools_as_the_tensor_test(self, build_rule, probs, gen):
        """chain_accept == accept_prob bit for bit on many drafts, where m runs from 0 to k (both rules' budgets),
        and on the worked example above (m = 1, a = 0.6); the published residual of one draft (m on the host)
        equals its row of the batched call."""
        for name, budgets in (("lantern++", {"lam": [1.0, 2.0, 5.0, 20.0]}), ("lantern", {"delta": [0.05, 0.3, 1.0]})):
            for key, values in budgets.items():
                for value in values:
                    rule = build_rule(name, **{key: value})
                    p, q = probs(64, V, generator=gen, zeros=0.2), probs(64, V, generator=gen, zeros=0.2)
                    x = torch.multinomial(q, 1, generator=gen).squeeze(-1)
                    a = rule.accept_prob(p, q, x, torch.arange(1, 65), 64)
                    assert rule.chain_accept(p, q, x, 64) == a.tolist()
                    r = rule.residual(p, q, x, torch.arange(1, 65), 64)
                    for i in range(64):
                        one = rule.residual(p[i], q[i], x[i], torch.tensor(i + 1), 64)
                        torch.testing.assert_close(one, r[i], rtol=0, atol=1e-15)
        rule = self.rule_on_line(k=3, lam=3.5)
        (a,) = rule.chain_accept(self.P[None], self.Q[None], torch.tensor([0]), 1)
        assert a == float(rule.accept_prob(self.P, self.Q, torch.tensor(0), torch.tensor(1), 1))
        assert math.isclose(a, 0.6, rel_tol=1e-12)

    def test_lambda_one_is_eagle_on_dense_p(self, build_rule, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x, depth = torch.multinomial(q, 1, generator=gen).squeeze(-1), torch.arange(1, L + 1)
        rule = build_rule(self.name, lam=1.0)
        torch.testing.assert_close(rule.residual(p, q, x, depth, L), lossless_residual(p, q), rtol=0, atol=1e-15)

    def test_optimal_residual_is_g_star(self, build_rule, probs, gen):
        p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
        x, depth = torch.arange(L), torch.arange(1, L + 1)
        rule = build_rule(self.name, residual_kind="optimal")
        torch.testing.assert_close(rule.residual(p, q, x, depth, L), g_star(p, q, rule.accept_all(p, q, depth, L)))

    def test_needs_a_table(self, probs, gen):
        p = probs(V, generator=gen)
        with pytest.raises(ValueError, match="neighbour table"):
            LanternPPRule().accept_prob(p, p, torch.tensor(0), torch.tensor(1), 1)
        with pytest.raises(ValueError, match="columns"):
            LanternPPRule(k=5).with_neighbours(neighbour_table(line_codebook(5)))


class TestLantern(RuleContract):
    name = "lantern"

    def test_absolute_budget(self):
        """delta = 0.55 fits c_2 = 0.5, not c_3 = 0.65: p~ = 0.6, whatever p(x)."""
        rule = LanternRule(k=3, delta=0.55).with_neighbours(neighbour_table(line_codebook(5)))
        a = rule.accept_prob(TestLanternPP.P, TestLanternPP.Q, torch.tensor(0), torch.tensor(1), 1)
        assert math.isclose(float(a), 1.0)
        q = torch.tensor([0.8, 0.05, 0.05, 0.05, 0.05], dtype=torch.float64)
        a = rule.accept_prob(TestLanternPP.P, q, torch.tensor(0), torch.tensor(1), 1)
        assert math.isclose(float(a), 0.6 / 0.8, rel_tol=1e-12)

    def test_delta_above_one_is_refused(self):
        with pytest.raises(ValueError, match="lantern\\+\\+"):
            LanternRule(delta=1.5)


# ---------------------------------------------------------------- shared maths
def test_normalise_falls_back_to_p():
    p = torch.tensor([0.2, 0.8], dtype=torch.float64)
    assert torch.equal(normalise(torch.zeros(2, dtype=torch.float64), p), p)
    assert torch.equal(normalise(torch.full((2,), 1e-300, dtype=torch.float64), p), p)
    torch.testing.assert_close(normalise(torch.tensor([1.0, 3.0], dtype=torch.float64), p),
                               torch.tensor([0.25, 0.75], dtype=torch.float64))


# ---------------------------------------------------------------- bad parameters fail early
BAD = [
    ("uniform-rsd", {"delta": 0.0}, "delta"),
    ("uniform-rsd", {"delta": -1.0}, "delta"),
    ("cool-sd", {"delta": 0.0}, "delta"),
    ("cool-sd", {"nu": -0.1}, "nu"),
    ("cool-sd", {"residual_kind": "uniform"}, "residual_kind"),
    ("lantern++", {"k": 0}, "k"),
    ("lantern++", {"k": 2.5}, "k"),
    ("lantern++", {"lam": 0.5}, "lam"),
    ("lantern++", {"residual_kind": "lossless"}, "residual_kind"),
    ("lantern", {"delta": 0.0}, "delta"),
]
NUMERIC = [("uniform-rsd", "delta"), ("cool-sd", "delta"), ("cool-sd", "nu"), ("cool-sd", "mu"),
           ("lantern++", "k"), ("lantern++", "lam"), ("lantern", "delta")]


@pytest.mark.parametrize(("name", "kwargs", "field"), BAD)
def test_bad_parameters(name, kwargs, field):
    with pytest.raises(ValueError, match=field):
        make_rule(name, **kwargs)


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [(n, f, v) for n, f in NUMERIC for v in (math.nan, math.inf, -math.inf, "2", None, True)
     if not (f == "mu" and v is None)],  # mu=None is the default: mean-normalised
)
def test_non_finite_or_non_numbers(name, field, value):
    with pytest.raises(ValueError, match=field):
        make_rule(name, **{field: value})


def test_make_rule_errors():
    with pytest.raises(ValueError, match="unknown rule 'medusa'.*cool-sd"):
        make_rule("medusa")
    with pytest.raises(ValueError, match="bad options for rule 'cool-sd'"):
        make_rule("cool-sd", lam=2.0)


def test_integral_float_k_becomes_int():
    """k = 2.0 (a UI slider's float) is accepted and usable as a slice bound, not kept as a float."""
    rule = make_rule("lantern++", k=2.0)
    assert type(rule.k) is int and rule.k == 2


def test_make_rule_builds_each_class():
    assert make_rule("cool-sd", delta=1.1) == CoolSDRule(delta=1.1)
    assert isinstance(make_rule("eagle-1"), EagleRule)
    assert make_rule("lantern++", k=5, lam=10.0) == LanternPPRule(k=5, lam=10.0)


# ---------------------------------------------------------------- exact messages and boundaries (mutation testing)
EXACT_MESSAGES = [
    ("uniform-rsd", {"delta": 0.0}, "delta must be > 0, got 0.0"),
    ("cool-sd", {"delta": -1.0}, "delta must be > 0, got -1.0"),
    ("cool-sd", {"nu": -1}, "nu must be >= 0, got -1"),
    ("cool-sd", {"mu": math.inf}, "mu must be a finite number, got inf"),
    ("cool-sd", {"residual_kind": "x"}, "residual_kind must be 'optimal' or 'lossless', got 'x'"),
    ("lantern++", {"k": 0}, "k must be >= 1, got 0"),
    ("lantern++", {"k": 2.5}, "k must be a whole number, got 2.5"),
    ("lantern++", {"lam": 0.5}, "lam must be >= 1, got 0.5"),
    ("lantern++", {"residual_kind": "x"}, "residual_kind must be 'published' or 'optimal', got 'x'"),
    ("lantern", {"delta": 0.0}, "delta must be > 0, got 0.0"),
    ("lantern", {"delta": 1.5}, "LANTERN's absolute delta must be <= 1, got 1.5 (use lantern++ for lambda)"),
    ("linear-decay", {"slope": 2}, "slope must be in [0, 1] (1 falls from 2 delta to 0), got 2"),
    ("custom", {"omegas": ()}, "omegas must hold at least one number (omega_1)"),
    ("custom", {"omegas": (1, -1)}, "omega_2 must be > 0, got -1"),
]


@pytest.mark.parametrize(("name", "kwargs", "message"), EXACT_MESSAGES)
def test_error_messages_name_the_field_and_value(name, kwargs, message):
    """The app shows these texts as they are: the whole message is checked, not a fragment."""
    with pytest.raises(ValueError) as err:
        make_rule(name, **kwargs)
    assert str(err.value) == message


def test_boundaries_that_are_allowed():
    assert LanternRule(delta=1.0).delta == 1.0  # LANTERN's absolute budget may be 1 (spec: delta <= 1)
    from coolsd.decoding.rules import MAX_SCHEDULE_LEN, CustomScheduleRule

    assert len(CustomScheduleRule(omegas=(1.0,) * MAX_SCHEDULE_LEN).omegas) == MAX_SCHEDULE_LEN
    with pytest.raises(ValueError, match="at most"):
        CustomScheduleRule(omegas=(1.0,) * (MAX_SCHEDULE_LEN + 1))


def test_neighbour_table_columns_are_checked():
    """k needs k + 1 columns (codes besides x); a table with many rows but too few columns is refused."""
    table = neighbour_table(line_codebook(8), k_max=1)  # (8, 2)
    assert table.shape == (8, 2)
    with pytest.raises(ValueError) as err:
        LanternPPRule(k=3).with_neighbours(table)
    assert str(err.value) == "k=3 needs a neighbour table with >= 4 columns, got 2"
    LanternPPRule(k=1).with_neighbours(table)  # k + 1 = 2 columns: fine


def test_lantern_budget_is_inclusive():
    """c_j <= budget (spec): a neighbour mass exactly equal to the budget is aggregated (binary fractions)."""
    p = torch.tensor([0.25, 0.25, 0.5, 0.0, 0.0], dtype=torch.float64)
    q = torch.tensor([0.5, 0.125, 0.125, 0.125, 0.125], dtype=torch.float64)
    rule = LanternPPRule(k=1, lam=2.0).with_neighbours(neighbour_table(line_codebook(5)))  # budget p(0) = 0.25
    a = rule.accept_prob(p, q, torch.tensor(0), torch.tensor(1), 1)
    assert float(a) == 1.0  # p~ = 0.25 + p(1) = 0.5 = q(0); with a strict < it would be 0.5


def test_lantern_never_drafted_token_accepts():
    """q(x) = 0 (never drafted): a = 1 by convention, also when p(x) and its neighbours' mass are 0."""
    p = torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0], dtype=torch.float64)
    q = torch.tensor([0.0, 0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    rule = LanternPPRule(k=1, lam=2.0).with_neighbours(neighbour_table(line_codebook(5)))
    assert float(rule.accept_prob(p, q, torch.tensor(0), torch.tensor(1), 1)) == 1.0


@pytest.mark.parametrize("name", sorted(RULES))
def test_float32_inputs_stay_float32(build_rule, probs, gen, name):
    """The rules compute in the dtype of p and q (a float32 GPU path stays float32) and agree with float64."""
    rule = build_rule(name)
    p, q = probs(L, V, generator=gen), probs(L, V, generator=gen)
    x, depth = torch.multinomial(q, 1, generator=gen).squeeze(-1), torch.arange(1, L + 1)
    a32 = rule.accept_all(p.float(), q.float(), depth, L)
    r32 = rule.residual(p.float(), q.float(), x, depth, L)
    assert a32.dtype == r32.dtype == torch.float32
    torch.testing.assert_close(a32.double(), rule.accept_all(p, q, depth, L), rtol=0, atol=1e-5)
    torch.testing.assert_close(r32.double(), rule.residual(p, q, x, depth, L), rtol=0, atol=1e-5)


def test_schedules_floor_and_length():
    from coolsd.decoding.rules import LinearDecayRule

    floored = LinearDecayRule(delta=1.0, slope=0.5, floor_at_one=True).omega(torch.tensor([1, 2]), 2)
    assert floored.tolist() == [1.5, 1.0]  # 0.5 floored at exactly 1
    for draft_len in (1, 2, 3, 4):
        assert LinearDecayRule(delta=1.3, slope=0.5).schedule(draft_len).shape == (draft_len,)


def test_normalise_threshold_is_sixteen_eps_exclusive():
    """Mass 16.5 eps is normalised; mass exactly 16 eps is rounding noise and falls back to p."""
    from coolsd.decoding.rules import normalise
    eps = torch.finfo(torch.float64).eps
    fallback = torch.tensor([0.25, 0.75], dtype=torch.float64)
    above = normalise(torch.tensor([16.5 * eps, 0.0], dtype=torch.float64), fallback)
    assert torch.equal(above, torch.tensor([1.0, 0.0], dtype=torch.float64))
    at = normalise(torch.tensor([16.0 * eps, 0.0], dtype=torch.float64), fallback)
    assert torch.equal(at, fallback)


def test_ratio_accept_is_one_where_q_is_zero_even_if_p_is_zero():
    from coolsd.decoding.rules import ratio_accept
    a = ratio_accept(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64), 1.0)
    assert torch.equal(a, torch.tensor([1.0, 1.0], dtype=torch.float64))
