"""The microscope's record of a round, exactly (issue 27): `round_detail` (what a chain round keeps) and the
view of it (`coolsd.compare.microscope`: verdicts, grid cells, the last token's source, rounds by position,
the re-run's setup), on hand-made rows and events with every expected number written out here.

`test_microscope.py` checks the numbers against a recomputation on a real race; these pin the parts it only
reads in passing: which depths are accepted / rejected / not tested, positions on a non-square grid, which
tokens the bars keep (exactly the top 8 of each distribution and the drawn token), the round-0 and bonus
labels, the round holding a position at and past the ends, the seed / draft length a re-run defaults to.
"""

from __future__ import annotations

import pytest
import torch

from coolsd.compare import microscope as scope
from coolsd.compare.trace import RaceTrace, TraceSettings
from coolsd.decoding.drafting import Chain, Jacobi, Tree
from coolsd.decoding.events import RoundDetail
from coolsd.decoding.round import make_event, round_detail
from coolsd.decoding.rules import CoolSDRule, EagleRule, LanternPPRule, UniformRSDRule
from coolsd.decoding.sampling import SamplingConfig

F = torch.float64
A, R, N = scope.ACCEPTED, scope.REJECTED, scope.NOT_TESTED


# ---------------------------------------------------------------- verdicts and grid cells
@pytest.mark.parametrize("drafted, accepted, expected", [
    (0, 0, []),
    (1, 0, [R]), (1, 1, [A]),
    (4, 0, [R, N, N, N]), (4, 1, [A, R, N, N]), (4, 2, [A, A, R, N]), (4, 3, [A, A, A, R]), (4, 4, [A, A, A, A]),
])
def test_verdicts_per_depth(drafted, accepted, expected):
    assert scope.verdicts(drafted, accepted) == expected


@pytest.mark.parametrize("index, cell", [(0, [0, 0]), (4, [0, 4]), (5, [1, 0]), (7, [1, 2]), (14, [2, 4])])
def test_grid_cells_are_row_major_on_a_non_square_grid(index, cell):
    assert scope.grid_cell(index, (3, 5)) == cell  # 3 rows of 5: the column count divides
    assert scope.grid_cell(index, (5, 3)) == list(divmod(index, 3))


# ---------------------------------------------------------------- the view of a hand-made round
GRID = (3, 5)


def detail(drafts, n, token, dists, ids) -> RoundDetail:
    L = len(drafts)
    return RoundDetail(drafts=torch.tensor(drafts, dtype=torch.long),
                       q_draft=torch.tensor([0.5, 0.25, 0.125][:L], dtype=F),
                       p_draft=torch.tensor([0.375, 0.0625, 0.75][:L], dtype=F),
                       omega=torch.tensor([2.0, 1.5, 1.0][:L], dtype=F), accept=torch.tensor([0.75, 0.375, 1.0][:L],
                                                                                                dtype=F),
                       uniforms=torch.tensor([0.125, 0.5, 0.25][:L], dtype=F), n_accepted=n, token=token,
                       ids=torch.tensor(ids), dists={k: torch.tensor(v, dtype=F) for k, v in dists.items()})


def event(index, start, tokens, d):
    return make_event(index=index, start=start, tokens=tokens, n_accepted=d.n_accepted, seconds={"other": 0.0},
                      detail=d)


def test_a_rejection_at_depth_two_of_three():
    d = detail([9, 4, 6], 1, 2, {"p": [0.5, 0.25, 0.25], "q": [0.125, 0.75, 0.125], "residual": [0.625, 0.0, 0.375]},
               [2, 4, 11])
    view = scope.round_view(event(3, 7, [9, 2], d), GRID, "G*")
    assert (view["round"], view["start"], view["n_drafted"], view["n_accepted"]) == (3, 7, 3, 1)
    assert [row["depth"] for row in view["depths"]] == [1, 2, 3]
    assert [row["position"] for row in view["depths"]] == [[1, 2], [1, 3], [1, 4]]
    assert [row["verdict"] for row in view["depths"]] == [A, R, N]
    assert [(row["token"], row["q"], row["p"], row["omega"], row["accept"], row["u"]) for row in view["depths"]] == [
        (9, 0.5, 0.375, 2.0, 0.75, 0.125), (4, 0.25, 0.0625, 1.5, 0.375, 0.5), (6, 0.125, 0.75, 1.0, 1.0, 0.25)]
    assert view["positions"] == [[1, 2], [1, 3], [1, 4]] and view["committed"] == [[1, 2], [1, 3]]
    assert view["last"] == "resampled" and view["token"] == 2 and view["token_position"] == [1, 3]
    assert view["drawn_from"] == "the residual at depth 2" and view["residual"] == "G*"
    # the bars: every distribution's tokens, largest first; the drawn token's probability in each
    assert view["top"]["p"] == [{"token": 2, "prob": 0.5}, {"token": 4, "prob": 0.25}, {"token": 11, "prob": 0.25}]
    assert [r["token"] for r in view["top"]["q"]] == [4, 2, 11]
    assert [r["token"] for r in view["top"]["residual"]] == [2, 11, 4]
    assert view["token_probs"] == {"p": 0.5, "q": 0.125, "residual": 0.625}


def test_a_full_acceptance_takes_the_bonus_from_p_next():
    d = detail([9, 4], 2, 11, {"p": [0.25, 0.75]}, [3, 11])
    view = scope.round_view(event(1, 1, [9, 4, 11], d), GRID, "G*")
    assert [row["verdict"] for row in view["depths"]] == [A, A]
    assert view["last"] == "bonus" and view["drawn_from"] == "p_3 (bonus: every draft accepted)"
    assert view["token_position"] == [0, 3] and view["committed"] == [[0, 1], [0, 2], [0, 3]]
    assert view["positions"] == [[0, 1], [0, 2]] and view["token_probs"] == {"p": 0.75}


def test_round_zero_has_one_position_and_no_drafts():
    empty = torch.zeros(0, dtype=F)
    d = RoundDetail(drafts=torch.zeros(0, dtype=torch.long), q_draft=empty, p_draft=empty, omega=empty, accept=empty,
                    uniforms=empty, n_accepted=0, token=5, ids=torch.tensor([1, 5]),
                    dists={"p": torch.tensor([0.875, 0.125], dtype=F)})
    view = scope.round_view(event(0, 0, [5], d), GRID, "none")
    assert view["depths"] == [] and view["n_drafted"] == 0 and view["positions"] == [[0, 0]]
    assert view["committed"] == [[0, 0]] and view["token_position"] == [0, 0]
    assert view["last"] == "bonus" and view["drawn_from"] == "p (no drafts this round)"
    assert view["token_probs"] == {"p": 0.125}


# ---------------------------------------------------------------- the round holding a position
def test_round_at_finds_every_position_and_clamps_at_both_ends():
    events = [make_event(index=i, start=s, tokens=[0] * n, n_accepted=n - 1, seconds={})
              for i, (s, n) in enumerate([(0, 1), (1, 3), (4, 2)])]
    assert [scope.round_at(events, p) for p in range(6)] == [0, 1, 1, 1, 2, 2]
    assert scope.round_at(events, 6) == 2 and scope.round_at(events, 100) == 2  # past the last round: the last
    assert scope.round_at(events, -1) == 0 and scope.round_at([], 3) == 0
    # a prefix of the rounds (a re-run stopped early): positions beyond it go to its last round
    assert scope.round_at(events[:2], 5) == 1
    single = events[:1] + [make_event(index=1, start=1, tokens=[0], n_accepted=0, seconds={})]  # one token each
    assert [scope.round_at(single, p) for p in range(4)] == [0, 1, 1, 1]
    # one round given (a re-run stopped after round 0): every position is that round's
    assert [scope.round_at(events[:1], p) for p in (-1, 0, 1, 5)] == [0, 0, 0, 0]


def test_matches_compares_starts_and_tokens():
    def ev(start, tokens):
        return make_event(index=1, start=start, tokens=tokens, n_accepted=len(tokens) - 1, seconds={})

    trace = RaceTrace("tiny", TraceSettings(), [("eagle-1", "Eagle-1"), ("vanilla", "Vanilla AR")], 6, (2, 3))
    for index, e in [(0, ev(0, [1])), (1, ev(0, [1])), (0, ev(1, [2, 3])), (0, ev(3, [4]))]:
        trace.record(index, e)
    assert [(e.start, e.tokens.tolist()) for e in scope.recorded(trace, "eagle-1")] == [(0, [1]), (1, [2, 3]), (3, [4])]
    same = [ev(0, [1]), ev(1, [2, 3]), ev(3, [4])]
    assert scope.matches(trace, "eagle-1", same)
    assert not scope.matches(trace, "eagle-1", [ev(0, [1]), ev(1, [2, 5]), ev(3, [4])])  # a token differs
    assert not scope.matches(trace, "eagle-1", [ev(0, [1]), ev(2, [2, 3]), ev(3, [4])])  # a start differs
    assert scope.matches(trace, "eagle-1", same[:2])  # a re-run stopped early matches what it reached


# ---------------------------------------------------------------- what a re-run uses
def test_setup_of_reads_the_race_settings_and_defaults():
    sampling, config, seed = scope.setup_of(RaceTrace("tiny", TraceSettings(), [], 4, (2, 2)))
    assert seed == 0 and config.drafting == Chain() and config.detail
    assert sampling == SamplingConfig()
    s = {"sampling": {"temperature": 0.5, "top_k": 3}, "draft_len": 2, "drafting": "eagle-25", "seed": 17}
    sampling, config, seed = scope.setup_of(RaceTrace("tiny", TraceSettings.from_json(s), [], 4, (2, 2)))
    assert (seed, config.drafting, config.detail) == (17, Tree("eagle-25"), True)
    assert sampling == SamplingConfig(temperature=0.5, top_k=3)
    _, config, _ = scope.setup_of(RaceTrace("tiny", TraceSettings(draft_len=2), [], 4, (2, 2)))
    assert config.drafting == Chain(2)
    # a racer's own drafting where the trace records it (the no-drafter group: Jacobi, whatever the race's)
    s |= {"draftings": {"sjd": {"drafting": "jacobi", "window": 5, "reuse": True, "init": "last"}}}
    trace = RaceTrace("tiny", TraceSettings.from_json(s), [], 4, (2, 2))
    assert scope.setup_of(trace, "sjd")[1].drafting == Jacobi(5, reuse=True)
    assert scope.setup_of(trace, "eagle-1")[1].drafting == Tree("eagle-25")


def test_rule_of_rebuilds_each_racer():
    table = torch.arange(40).reshape(8, 5) % 8
    rules = {"cool-sd": {"rule": "cool-sd", "delta": 1.5, "nu": 0.3}, "lantern++": {"rule": "lantern++", "k": 2}}
    racers = [("cool-sd", "c"), ("lantern++", "l"), ("vanilla", "v")]
    trace = RaceTrace("tiny", TraceSettings(rules=rules), racers, 4, (2, 2))
    assert scope.rule_of(trace, "cool-sd", table) == CoolSDRule(delta=1.5, nu=0.3)
    lantern = scope.rule_of(trace, "lantern++", table)
    assert isinstance(lantern, LanternPPRule) and lantern.k == 2 and lantern.neighbours is table
    assert scope.rule_of(trace, "vanilla", table) is None
    with pytest.raises(ValueError, match="'eagle-1' is not in this race"):
        scope.rule_of(trace, "eagle-1", table)
    assert trace.settings.rules["cool-sd"] == {"rule": "cool-sd", "delta": 1.5, "nu": 0.3}  # left as it was


def test_rule_of_a_trace_without_rule_settings():
    """A trace whose settings hold no "rules" (a race of vanilla AR alone): vanilla is None, any other racer is
    the same one-line refusal as a racer missing from the rules."""
    trace = RaceTrace("tiny", TraceSettings(seed=3), [("vanilla", "v")], 4, (2, 2))
    assert scope.rule_of(trace, "vanilla", None) is None
    with pytest.raises(ValueError, match=r"^racer 'cool-sd' is not in this race; it raced \['vanilla'\]$"):
        scope.rule_of(trace, "cool-sd", None)


def test_describe_is_the_rule_config_or_vanilla():
    """The Step view's header: vanilla AR by name, a rule by its own JSON-ready config (name and fields; the
    LANTERN++ neighbour table, a tensor, left out)."""
    assert scope.describe(None) == {"rule": "vanilla"}
    assert scope.describe(CoolSDRule(delta=1.5, nu=0.3)) == CoolSDRule(delta=1.5, nu=0.3).config()
    assert scope.describe(CoolSDRule(delta=1.5, nu=0.3))["rule"] == "cool-sd"
    lantern = scope.describe(LanternPPRule(k=2).with_neighbours(torch.arange(40).reshape(8, 5) % 8))
    assert lantern["rule"] == "lantern++" and lantern["k"] == 2 and "neighbours" not in lantern


def test_residual_label_names_the_residual_each_rule_samples_from():
    """The Step view's "residual" line, per rule and residual option: the formula the rule's `residual` computes,
    in the notation of the docs (Norm, G*, q'), and which kind it is (lossless, published, ablation)."""
    table = torch.arange(40).reshape(8, 5) % 8
    g_star = "G* = Norm([p - q a]+), the optimal residual of this acceptance"
    cases = [
        (None, "none (vanilla AR samples every token from p)"),
        (EagleRule(), "Norm([p - q]+), lossless (= G* of Eagle-1)"),
        (LanternPPRule(k=2).with_neighbours(table),
         "LANTERN++'s published Norm([p - q']+), q' = q zeroed on the k+1 nearest codes"),
        (LanternPPRule(k=2, residual_kind="optimal").with_neighbours(table), g_star),
        (CoolSDRule(delta=1.5, residual_kind="lossless"), "Norm([p - q]+) (ablation)"),
        (CoolSDRule(delta=1.5), g_star),
        (UniformRSDRule(delta=1.5), g_star),  # no residual option: G*
    ]
    for rule, label in cases:
        assert scope.residual_label(rule) == label, rule


# ---------------------------------------------------------------- round_detail: what a chain round keeps
V = 12


def rows(seed: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (2.0 * torch.randn(n, V, generator=g, dtype=F)).softmax(-1)


def top8(row: torch.Tensor) -> set[int]:
    order = sorted(range(V), key=lambda i: -float(row[i]))  # no ties in these random rows
    return set(order[:8])


@pytest.mark.parametrize("n", [0, 1, 2])
def test_round_detail_after_a_rejection(n):
    L = 3
    p, q, residual = rows(1, L + 1), rows(2, L), rows(3, L)
    rows_ = torch.cat([residual, p[L:]])
    x = torch.tensor([3, 7, 0])
    a, u = torch.tensor([0.9, 0.6, 0.3], dtype=F), torch.tensor([0.1, 0.2, 0.95], dtype=F)
    omega = [2.0, 1.25, 1.0]
    token = int(residual[n].argmin())  # drawn last: in none of the top 8 of a distribution here
    d = round_detail(p, q, x, a, u, omega, rows_[n], n, token)
    assert d.drafts.tolist() == [3, 7, 0] and d.drafts.dtype == torch.long
    assert d.q_draft.tolist() == [float(q[i, x[i]]) for i in range(L)]
    assert d.p_draft.tolist() == [float(p[i, x[i]]) for i in range(L)]
    assert d.omega.tolist() == omega and d.accept.tolist() == a.tolist() and d.uniforms.tolist() == u.tolist()
    assert all(t.dtype == F for t in (d.q_draft, d.p_draft, d.omega, d.accept, d.uniforms))
    assert (d.n_accepted, d.token) == (n, token)
    expected = top8(p[n]) | top8(q[n]) | top8(residual[n]) | {token}
    assert sorted(d.ids.tolist()) == sorted(expected) and len(d.ids) == len(expected)
    assert set(d.dists) == {"p", "q", "residual"}
    for name, row in (("p", p[n]), ("q", q[n]), ("residual", residual[n])):
        assert d.dists[name].tolist() == [float(row[i]) for i in d.ids.tolist()]


def test_round_detail_of_a_full_acceptance_keeps_p_next_only():
    L = 3
    p, q = rows(4, L + 1), rows(5, L)
    x, a, u = torch.tensor([1, 2, 3]), torch.ones(L, dtype=F), torch.tensor([0.5, 0.25, 0.75], dtype=F)
    token = int(p[L].argmax())
    d = round_detail(p, q, x, a, u, [1.0] * L, p[L], L, token)
    assert set(d.dists) == {"p"} and d.n_accepted == L
    assert sorted(d.ids.tolist()) == sorted(top8(p[L])) and len(d.ids) == 8  # the drawn token is one of them
    assert d.dists["p"].tolist() == [float(p[L, i]) for i in d.ids.tolist()]
