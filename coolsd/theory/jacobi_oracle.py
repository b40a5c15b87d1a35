"""Exact oracle of Jacobi drafting (spec sections 4b and 6): the output distribution of (Jacobi drafting, any rule).

Written from the spec, not from the engine: a decode's state between iterations is (c, ctx, q_prev) with
c the committed tokens (t = len(c)), ctx the tokens the last target forward read (the committed prefix it started
from, then its drafts), so that forward computed p(. | ctx[:k]) for positions k <= len(ctx), and q_prev the rows
its drafts were drawn from (kept only under reuse). An iteration proposes, for window position t + i - 1,
i = 1..n (n = min(W, T - t - 1)):

    q_i = p(. | ctx[:k]) where k = t + i - 1 <= len(ctx), else the init: p(. | ctx) ("last") or 1/V ("uniform"),

draws x_i from q_i (under reuse, where ctx holds a draft d = ctx[k] drawn from q_prev: d kept with probability
min(1, q_i(d) / q_prev(d)), else a draw from Norm([q_i - q_prev]_+)), and walks depth i = 1..n with the rule's
chain maths at (p_i = p(. | c + x_<i), q_i, depth i, draft_len W): accept x_i with `accept_all`, else draw the
`residual` and stop; after n acceptances a bonus token from p(. | c + x). The next state is (c + committed,
c + x, (q_1..q_n)). Iterations always commit at least one token, so states are processed by length.

The bound is the chain rule's, summed over tested positions: reach probability x TV(step kernel at (p_i, q_i), p_i)
(`coolsd.theory.oracle.rule_step`); it holds with and without reuse, since given every earlier position the draft
at i is a draw from q_i either way.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import torch
from torch import Tensor

from coolsd.decoding.drafting import Jacobi
from coolsd.decoding.rules import Rule
from coolsd.theory.oracle import OracleResult, rule_step, sequence_probs
from coolsd.theory.tabular import TabularLM

State = tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[float, ...], ...]]  # (c, ctx, q_prev rows)


def proposal(target: TabularLM, drafting: Jacobi, ctx: tuple[int, ...], position: int) -> Tensor:
    """q (V,) of a window position after the forward that read `ctx`: its row, else the rule's init."""
    if position <= len(ctx):
        return target.probs(ctx[:position])
    if drafting.init == "uniform":
        return torch.full((target.vocab_size,), 1.0 / target.vocab_size, dtype=torch.float64)
    return target.probs(ctx)


def draft_row(q: Tensor, q_prev: Tensor | None, d: int | None) -> Tensor:
    """(V,) distribution of the draft at a position: q, or (reuse, previous draft d ~ q_prev) the coupling that
    keeps d w.p. min(1, q(d) / q_prev(d)) and otherwise draws from Norm([q - q_prev]_+)."""
    if q_prev is None:
        return q
    keep = min(1.0, float(q[d]) / float(q_prev[d]))
    moved = (q - q_prev).clamp_min(0)
    row = (1 - keep) * moved / moved.sum() if keep < 1 else torch.zeros_like(q)
    row[d] += keep
    return row


def exact_jacobi(target: TabularLM, rule: Rule, drafting: Jacobi, target_probs: Tensor | None = None) -> OracleResult:
    """Exact (V**T,) output distribution of Jacobi drafting with `rule` (its window W, init and reuse), its expected
    target forwards (tau = T / forwards), TV to P and the bound; depth statistics per window depth 1..W."""
    v, t_max, w = target.vocab_size, target.num_tokens, drafting.window
    states: list[dict[State, float]] = [defaultdict(float) for _ in range(t_max + 1)]
    dist = torch.zeros(v**t_max, dtype=torch.float64)
    acc = {"rounds": 1.0, "bound": 0.0, "tests": [0.0] * w, "accepts": [0.0] * w, "bounds": [0.0] * w}
    p0 = target.probs(())
    for y in range(v):  # round 0: the prefix step computed position 0's row only
        states[1][((y,), (), ())] += float(p0[y])
    for t in range(1, t_max + 1):
        for state, mass in states[t].items():
            if t == t_max:
                dist[_index(state[0], v)] += mass
                continue
            acc["rounds"] += mass
            for nxt, m in iteration(target, rule, drafting, state, acc, mass).items():
                states[len(nxt[0])][nxt] += m
    reference = sequence_probs(target) if target_probs is None else target_probs
    tv = 0.5 * float((dist - reference).abs().sum())
    return OracleResult(dist, acc["rounds"], t_max / acc["rounds"], tv, acc["bound"], tuple(acc["tests"]),
                        tuple(acc["accepts"]), tuple(acc["bounds"]))


def iteration(target: TabularLM, rule: Rule, drafting: Jacobi, state: State, acc: dict,
              mass: float) -> dict[State, float]:
    """One Jacobi iteration from `state` (reached with probability `mass`): next state -> probability."""
    c, ctx, q_prev = state
    t, w = len(c), drafting.window
    n = min(w, target.num_tokens - t - 1)
    q = [proposal(target, drafting, ctx, t + i) for i in range(n)]  # (n,) rows (V,)
    base = len(ctx) - len(q_prev)  # position of q_prev[0]'s draft
    rows = [draft_row(q[i], *_previous(ctx, q_prev, base, t + i)) if drafting.reuse else q[i] for i in range(n)]
    kept = tuple(tuple(r.tolist()) for r in q) if drafting.reuse else ()
    out: dict[State, float] = defaultdict(float)
    for x in itertools.product(*[(row > 0).nonzero().flatten().tolist() for row in rows]):
        m = mass * float(torch.prod(torch.tensor([float(rows[i][x[i]]) for i in range(n)], dtype=torch.float64)))
        for committed, share in walk(target, rule, w, c, x, q, acc, m):
            out[(c + committed, c + x, kept)] += share
    return out


def walk(target: TabularLM, rule: Rule, w: int, c: tuple, x: tuple, q: list[Tensor], acc: dict, mass: float):
    """The rule's walk over drafts x (probability `mass` of drawing them) in a window of W = `w`: (committed tokens,
    probability)."""
    for i in range(len(x)):
        p = target.probs(c + x[:i])
        depth = torch.tensor(i + 1)
        step = rule_step(rule, p, q[i], i + 1, w)
        acc["bound"] += mass * step.tv
        acc["bounds"][i] += mass * step.tv
        acc["tests"][i] += mass
        a = float(rule.accept_all(p, q[i], depth, w)[x[i]])
        acc["accepts"][i] += mass * a
        residual = rule.residual(p, q[i], torch.tensor(x[i]), depth, w)
        for y in range(len(p)):
            if residual[y] > 0 and a < 1:
                yield x[:i] + (y,), mass * (1 - a) * float(residual[y])
        mass *= a
        if mass <= 0:
            return
    p = target.probs(c + x)
    for y in range(len(p)):
        if p[y] > 0:
            yield x + (y,), mass * float(p[y])


def _previous(ctx: tuple, q_prev: tuple, base: int, position: int) -> tuple[Tensor | None, int | None]:
    """(q_prev row, draft) held at `position` by the last forward, or (None, None) where it held none."""
    if not base <= position < len(ctx):
        return None, None
    return torch.tensor(q_prev[position - base], dtype=torch.float64), ctx[position]


def _index(tokens: tuple[int, ...], v: int) -> int:
    """Row-major index of a whole sequence."""
    return sum(x * v ** (len(tokens) - 1 - i) for i, x in enumerate(tokens))
