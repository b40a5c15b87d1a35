"""The microscope's numbers against an independent recomputation from the models at each round's prefix.

For every round of Eagle-1, LANTERN++ and COOL-SD (interior rounds included) in a race at non-default
sampling (CFG 2, temperature 0.9, top-k 20): a fresh copy of the target and drafter is run on the
committed prefix plus the round's drafts in ONE call each (the engine fed them round by round), the
logits are processed here (not by `coolsd.decoding.sampling`), omega_i, a_i and the residual are
computed here from the spec's formulas, and a generator seeded like the race's replays every random
draw from the recomputed rows (a round's 2L + 1 uniforms in one call: the drafts', the tests', the last token's;
each token the inverse CDF of its row, written here): it must draw the same drafts, the same u_i and the same
last token.
"""

from __future__ import annotations

import math

import pytest
import torch

from coolsd.compare.microscope import REJECTED, recorded, rerun, residual_label, round_at, round_view
from coolsd.compare.race import Race, Racer, fork_models
from coolsd.compare.trace import RaceTrace, TraceSettings
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.rules import CoolSDRule, EagleRule, LanternPPRule
from coolsd.decoding.sampling import SamplingConfig

SAMPLING = {"cfg_scale": 2.0, "temperature": 0.9, "top_k": 20, "top_p": 1.0}
RULES = {"eagle-1": {"rule": "eagle-1"},
         "lantern++": {"rule": "lantern++", "k": 3, "lam": 20.0, "residual_kind": "published"},
         "cool-sd": {"rule": "cool-sd", "delta": 3.0, "nu": 0.7, "mu": None, "floor_at_one": True,
                     "residual_kind": "optimal"}}
DRAFT_LEN, SEED, COND = 3, 11, 4


@pytest.fixture(scope="module")
def bundle(tiny):
    return tiny


@pytest.fixture(scope="module")
def trace(bundle):
    """A race of the three rules and vanilla AR on the tiny model, recorded as the app records one."""
    from coolsd.compare.microscope import rule_of

    t = RaceTrace("tiny", TraceSettings.from_json({"sampling": SAMPLING, "draft_len": DRAFT_LEN, "drafting": "chain",
                                                   "seed": SEED, "condition": str(COND), "rules": RULES}),
                  [(k, k) for k in RULES] + [("vanilla", "Vanilla AR")], bundle.num_tokens, bundle.grid)
    racers = []
    for key, _ in t.racers:
        target, drafter = fork_models(bundle.target, bundle.drafter)
        rule = rule_of(t, key, bundle.neighbours)
        events = generate(target, drafter, rule, cond=COND, num_tokens=bundle.num_tokens,
                          sampling=SamplingConfig(**SAMPLING), config=DecodeConfig(Chain(DRAFT_LEN)), seed=SEED)
        racers.append(Racer(key, key, events, bundle.num_tokens))
    for racer, event in Race(racers):
        t.record([k for k, _ in t.racers].index(racer.key), event)
    return t


def process(logits: torch.Tensor) -> torch.Tensor:
    """(G, n, V) raw -> (n, V): CFG mix, temperature, top-k, softmax (written here from the spec)."""
    z = logits.double()
    z = z[1] + SAMPLING["cfg_scale"] * (z[0] - z[1]) if z.shape[0] == 2 else z[0]
    z = z / SAMPLING["temperature"]
    kth = z.sort(-1, descending=True).values[:, SAMPLING["top_k"] - 1 : SAMPLING["top_k"]]
    return z.masked_fill(z < kth, -math.inf).softmax(-1)


def rows_at(bundle, prefix: list[int], drafts: list[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(p (L + 1, V), [q_1..q_L] computed one draft at a time) at `prefix` + `drafts`, from fresh model copies."""
    target, drafter = fork_models(bundle.target, bundle.drafter)
    t, guidance = len(prefix), SAMPLING["cfg_scale"] != 1
    first = target.start(COND, guidance)
    out = target.forward(torch.tensor(prefix + drafts), torch.arange(t + len(drafts)))
    p = process(out.logits[:, t - 1 :])  # row t-1+j predicts token t+j
    drafter.start(COND, guidance)
    feats = torch.cat([first.hidden[:, -1:], out.hidden[:, : t - 1]], dim=1)  # the feature before each token
    step = drafter.forward(torch.tensor(prefix), feats, torch.arange(t))
    qs = [process(step.logits[:, -1:])[0]]
    for i, x in enumerate(drafts[:-1]):
        step = drafter.forward(torch.tensor([x]), step.hidden[:, -1:], torch.tensor([t + i]))
        qs.append(process(step.logits[:, -1:])[0])
    return p, qs


def drawn(probs: torch.Tensor, u: float) -> int:
    """The inverse CDF of (V,) probs at u: the first id whose cumulative mass exceeds u * total."""
    cdf = probs.cumsum(0)
    return int((cdf <= u * float(cdf[-1])).sum())


def omega_of(key: str, depth: int) -> float:
    if key != "cool-sd":
        return 1.0
    c = RULES["cool-sd"]
    mu = math.log(sum(math.exp(-c["nu"] * i) for i in range(1, DRAFT_LEN + 1)) / DRAFT_LEN)
    return max(1.0, c["delta"] * math.exp(-c["nu"] * depth - mu))


def lantern_parts(p: torch.Tensor, x: int, neighbours: torch.Tensor) -> tuple[float, int]:
    """(p~(x), m): x's own mass plus its nearest codes' while the sum stays within (lam - 1) p(x)."""
    c = RULES["lantern++"]
    mass, m = 0.0, 0
    for j in range(c["k"]):
        if mass + float(p[neighbours[x, j]]) > (c["lam"] - 1) * float(p[x]):
            break
        mass, m = mass + float(p[neighbours[x, j]]), j + 1
    return float(p[x]) + mass, m


POOLED: list[int] = []  # LANTERN++ rejections whose draft pooled neighbour mass (m >= 1): q' != q there


def accept_and_residual(key, p, q, x, depth, neighbours, rejected=False) -> tuple[float, torch.Tensor]:
    """a_i of draft x and the residual the rule samples after rejecting it."""
    if key == "lantern++":
        p_tilde, m = lantern_parts(p, x, neighbours)
        if rejected and m >= 1:
            POOLED.append(x)
        q_prime = q.clone()
        if m >= 1:
            q_prime[neighbours[x, : RULES["lantern++"]["k"] + 1]] = 0.0
        r = (p - q_prime).clamp_min(0)
        return min(1.0, p_tilde / float(q[x])), r / r.sum()
    w = omega_of(key, depth)
    r = (p - torch.minimum(q, w * p)).clamp_min(0)  # G*; Eagle-1's omega = 1 gives Norm([p - q]+)
    return min(1.0, w * float(p[x]) / float(q[x])), r / r.sum()


def close(a, b, rel=1e-4, abs_=1e-7) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)


@pytest.mark.parametrize("key", list(RULES))
def test_every_number_of_every_round_equals_a_recomputation(bundle, trace, key):
    from coolsd.compare.microscope import rule_of

    events = rerun(trace, key, *fork_models(bundle.target, bundle.drafter), COND, bundle.neighbours)
    assert [e.tokens.tolist() for e in events] == [e.tokens.tolist() for e in recorded(trace, key)]
    gen = torch.Generator().manual_seed(SEED)
    label = residual_label(rule_of(trace, key, bundle.neighbours))
    committed: list[int] = []
    kinds = set()
    for e in events:
        if e.index == 0:  # the prefix step: one token from p_0, its bars p_0 only
            p0 = process(bundle.target.fork().start(COND, True).logits)[-1]
            assert drawn(p0, float(torch.rand(1, generator=gen, dtype=torch.float64))) == e.tokens[0]
            view = round_view(e, trace.grid, label)
            assert view["depths"] == [] and view["n_accepted"] == 0 and view["token"] == e.tokens[0]
            assert view["last"] == "bonus" and set(view["top"]) == {"p"}
            tops = {r["token"]: r["prob"] for r in view["top"]["p"]}
            assert set(torch.topk(p0, 8).indices.tolist()) <= set(tops) and int(e.tokens[0]) in tops
            assert all(close(prob, p0[tok]) for tok, prob in tops.items())
            d = e.detail  # no drafts: every per-draft field is an empty float64 row, the bars' values float64
            for empty in (d.q_draft, d.p_draft, d.accept, d.uniforms, d.omega):
                assert empty.shape == (0,) and empty.dtype == torch.float64
            assert d.dists["p"].dtype == torch.float64 and d.drafts.shape == (0,)
            committed += e.tokens.tolist()
            continue
        view = round_view(e, trace.grid, label)
        drafts = [row["token"] for row in view["depths"]]
        p, qs = rows_at(bundle, committed, drafts)
        u = torch.rand(2 * len(drafts) + 1, generator=gen, dtype=torch.float64).tolist()  # the round's one call
        for i, (row, q) in enumerate(zip(view["depths"], qs)):
            assert drawn(q, u[i]) == row["token"]  # the same draft from the same q
            a, _ = accept_and_residual(key, p[i], q, row["token"], i + 1, bundle.neighbours)
            assert close(row["q"], q[row["token"]]) and close(row["p"], p[i, row["token"]])
            assert close(row["omega"], omega_of(key, i + 1)) and close(row["accept"], a)
            assert row["position"] == list(divmod(e.start + i, trace.grid[1]))
        n = view["n_accepted"]
        if drafts:
            tests = torch.tensor(u[len(drafts) : 2 * len(drafts)], dtype=torch.float64)
            assert [row["u"] for row in view["depths"]] == pytest.approx(tests.tolist(), abs=0)
            accepted = (tests <= torch.tensor([row["accept"] for row in view["depths"]])).long().cumprod(0).sum()
            assert int(accepted) == n
        if n < len(drafts):
            _, source = accept_and_residual(key, p[n], qs[n], drafts[n], n + 1, bundle.neighbours, rejected=True)
            shown = {"p": p[n], "q": qs[n], "residual": source}
            assert view["depths"][n]["verdict"] == REJECTED and view["last"] == "resampled"
        else:
            source, shown = p[n], {"p": p[n]}
        assert set(view["top"]) == set(shown)
        for name, dist in shown.items():
            tops = {r["token"]: r["prob"] for r in view["top"][name]}
            assert set(torch.topk(dist, 8).indices.tolist()) <= set(tops)  # its own top tokens are listed
            assert all(close(prob, dist[tok]) for tok, prob in tops.items())
        assert drawn(source, u[-1]) == view["token"] == e.tokens[-1]
        kinds.add((view["last"], len(drafts) > 0))
        committed += e.tokens.tolist()
    assert 1 < len(events) - 1 and len(committed) == bundle.num_tokens
    assert ("resampled", True) in kinds  # a rejection was checked (residual bars)
    if key == "lantern++":
        assert POOLED, "no LANTERN++ rejection pooled neighbour mass: the published residual's q' went unchecked"


def test_a_full_acceptance_shows_the_bonus_from_p_next(bundle, trace):
    """COOL-SD relaxed enough has a round with every draft accepted: its bars are p_{L+1} only."""
    events = rerun(trace, "cool-sd", *fork_models(bundle.target, bundle.drafter), COND, bundle.neighbours)
    full = [e for e in events[1:] if e.detail.n_accepted == len(e.detail.drafts) > 0]
    assert full, "no full acceptance in this race: choose a seed with one"
    view = round_view(full[0], trace.grid, "G*")
    assert view["last"] == "bonus" and set(view["top"]) == {"p"} and view["drawn_from"].startswith("p_")


def test_race_events_carry_no_detail_and_round_at_finds_positions(bundle, trace):
    assert all(e.detail is None for _, e in trace.steps)  # the race stays light
    events = recorded(trace, "eagle-1")
    for j, e in enumerate(events):
        for pos in range(e.start, e.start + len(e.tokens)):
            assert round_at(events, pos) == j
    with pytest.raises(ValueError, match="no detail"):
        round_view(events[1], trace.grid, "x")


def test_until_stops_early(bundle, trace):
    events = rerun(trace, "eagle-1", *fork_models(bundle.target, bundle.drafter), COND, bundle.neighbours, until=2)
    assert [e.index for e in events] == [0, 1, 2]


def test_residual_labels_name_the_rule():
    assert "published" in residual_label(LanternPPRule())
    assert "G*" in residual_label(LanternPPRule(residual_kind="optimal")) and "G*" in residual_label(CoolSDRule())
    assert "lossless" in residual_label(EagleRule()) and "vanilla" in residual_label(None)
