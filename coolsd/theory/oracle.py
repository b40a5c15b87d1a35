"""Exact oracle (spec section 6): the output distribution of chain speculative decoding, by enumeration.

Works on tabular models (`coolsd.theory.tabular`): small V, short T, prefix-dependent conditionals. Rounds
mirror the engine exactly: round 0 samples token 0 from P; every later round drafts
L_r = min(L, T - t - 1) tokens, tests them with the rule, and commits n accepted + 1 token.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from coolsd.decoding.rules import Rule
from coolsd.theory.tabular import TabularLM


@dataclass(frozen=True)
class StepOutput:
    """One verification step: kernel (V,) = q*a + sum_x q(x)(1-a(x)) residual_x, and its TV to p."""

    kernel: Tensor
    tv: float
    accept_rate: float  # beta = sum_x q(x) a(x)


def step_output(p: Tensor, q: Tensor, a_all: Tensor, residual: Tensor) -> StepOutput:
    """p, q, a_all: (V,); residual: (V,) (same for every rejected x) or (V, V) (row x after rejecting x)."""
    reject = q * (1 - a_all)  # (V,) mass of drafting x and rejecting it
    resampled = reject @ residual if residual.dim() == 2 else reject.sum() * residual
    kernel = q * a_all + resampled
    return StepOutput(kernel, 0.5 * float((kernel - p).abs().sum()), float((q * a_all).sum()))


def rule_step(rule: Rule, p: Tensor, q: Tensor, depth: int, draft_len: int) -> StepOutput:
    """The step kernel of `rule` at one depth, with its own residual for every possible rejected draft."""
    v = p.shape[-1]
    d = torch.tensor(depth)
    a_all = rule.accept_all(p, q, d, draft_len)
    every = torch.arange(v)
    residual = rule.residual(p.expand(v, v), q.expand(v, v), every, d.expand(v), draft_len)  # (V, V)
    return step_output(p, q, a_all, residual)


@dataclass(frozen=True)
class OracleResult:
    """dist: (V**T,) exact output probabilities of every sequence (row-major index);
    expected_rounds: E[target forwards] (round 0 included); tau = T / expected_rounds;
    tv: TV(output, P) over whole sequences; bound: sum over reached steps of reach prob x step TV
    (for G* this is the paper's bound sum E[sum_x [q a - p]_+]); it upper-bounds tv.
    Per draft depth i = 1..L (tuples of L floats, per image): depth_tests[i-1] = expected number of
    acceptance tests at depth i, depth_accepts[i-1] = expected accepted drafts there, depth_bound[i-1]
    = that depth's share of `bound` (so sum(depth_bound) == bound)."""

    dist: Tensor
    expected_rounds: float
    tau: float
    tv: float
    bound: float
    depth_tests: tuple[float, ...] = ()
    depth_accepts: tuple[float, ...] = ()
    depth_bound: tuple[float, ...] = ()


def sequence_probs(model: TabularLM) -> Tensor:
    """(V**T,) probability of every whole sequence under the tabular model."""
    v, t = model.vocab_size, model.num_tokens
    out = torch.zeros(v**t, dtype=torch.float64)
    for j, seq in enumerate(itertools.product(range(v), repeat=t)):
        out[j] = torch.prod(torch.stack([model.probs(seq[:i])[seq[i]] for i in range(t)]))
    return out


def exact(target: TabularLM, drafter: TabularLM, rule: Rule, draft_len: int,
          target_probs: Tensor | None = None) -> OracleResult:
    """Exact output distribution of chain drafting with `rule` and draft length L = draft_len.

    target_probs: `sequence_probs(target)` when the caller already has it (sweeps and bisections
    reuse it: it is a quarter of the time on V = 4, T = 5).
    """
    v, t_max = target.vocab_size, target.num_tokens
    dist = [0.0] * v**t_max  # Python floats (float64): the same sums as a tensor, without per-item tensor calls
    starts: list[dict] = [defaultdict(float) for _ in range(t_max + 1)]  # round-start mass per prefix
    acc = {"rounds": 1.0, "bound": 0.0}
    tests, accepts, bounds = [0.0] * draft_len, [0.0] * draft_len, [0.0] * draft_len  # per depth 1..L
    steps: dict[tuple, tuple[StepOutput, list[float], list[float]]] = {}  # (prefix, depth) -> step, q a, resampled
    bonus: dict[tuple, list[float]] = {}  # prefix -> p as floats

    def add(prefix: tuple, index: int, mass: float) -> None:
        """index: row-major index of `prefix` among sequences of its length."""
        if len(prefix) == t_max:
            dist[index] += mass
        else:
            starts[len(prefix)][prefix] += mass

    def walk(prefix: tuple, index: int, mass: float, depth: int, n_draft: int) -> None:
        if depth > n_draft:  # every draft accepted: bonus token from p
            if prefix not in bonus:
                bonus[prefix] = target.probs(prefix).tolist()
            for y, py in enumerate(bonus[prefix]):
                add(prefix + (y,), index * v + y, mass * py)
            return
        key = (prefix, depth)
        if key not in steps:
            p, q = target.probs(prefix), drafter.probs(prefix)
            step = rule_step(rule, p, q, depth, draft_len)
            accepted = q * rule.accept_all(p, q, torch.tensor(depth), draft_len)  # (V,) draft y and keep it
            steps[key] = (step, accepted.tolist(), (step.kernel - accepted).tolist())
        step, accepted, resampled = steps[key]
        acc["bound"] += mass * step.tv
        tests[depth - 1] += mass
        accepts[depth - 1] += mass * step.accept_rate
        bounds[depth - 1] += mass * step.tv
        for y in range(v):
            if accepted[y] > 0:
                walk(prefix + (y,), index * v + y, mass * accepted[y], depth + 1, n_draft)
            if resampled[y] > 0:
                add(prefix + (y,), index * v + y, mass * resampled[y])

    p0 = target.probs(())
    for y in range(v):  # round 0: the target's prefix step
        add((y,), y, float(p0[y]))
    for length in range(1, t_max):
        for prefix, mass in starts[length].items():
            acc["rounds"] += mass
            index = sum(x * v ** (length - 1 - i) for i, x in enumerate(prefix))
            walk(prefix, index, mass, 1, min(draft_len, t_max - length - 1))
    dist = torch.tensor(dist, dtype=torch.float64)
    reference = sequence_probs(target) if target_probs is None else target_probs
    tv = 0.5 * float((dist - reference).abs().sum())
    return OracleResult(dist, acc["rounds"], t_max / acc["rounds"], tv, acc["bound"], tuple(tests), tuple(accepts),
                        tuple(bounds))


def match_tau(make: Callable[[float], Rule], target_tau: float, target: TabularLM, drafter: TabularLM,
              draft_len: int, low: float = 1e-3, high: float = 1e3, iters: int = 60,
              target_probs: Tensor | None = None) -> tuple[Rule, OracleResult]:
    """Bisect a scalar knob (geometric) so that rule `make(knob)` reaches tau == target_tau.

    tau is non-decreasing in the knob for the relaxation rules here (delta of UniformRSD / COOL-SD).
    target_probs: as in `exact` (computed once here when None).
    """
    if target_probs is None:
        target_probs = sequence_probs(target)
    for _ in range(iters):
        mid = (low * high) ** 0.5
        if exact(target, drafter, make(mid), draft_len, target_probs).tau < target_tau:
            low = mid
        else:
            high = mid
    rule = make((low * high) ** 0.5)
    return rule, exact(target, drafter, rule, draft_len, target_probs)
