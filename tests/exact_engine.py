"""The real engine's exact output distribution on tabular models, by enumerating every random draw it makes.

No sampling noise: `engine_distribution(...)` runs `coolsd.decoding.engine.run` once per path of random outcomes
(depth first) and adds up the path probabilities, so a test can compare the engine with the oracle or
with P to float rounding (1e-12) instead of a chi-square. The places where the engine turns uniforms into a
decision (`coolsd.decoding.round.Session`'s two, the only ones of vanilla, chain and Jacobi rounds, and a tree's
draws without replacement) are replaced by scripted choices while a path runs; the uniforms themselves are still
drawn, and ignored:

- `Session.draw(probs, u)` (drafts, Jacobi windows, residual and bonus tokens): for each row of probs, each token of
  its support, with probability probs[y] / sum(probs); so whatever distribution the engine samples from is what
  gets weighted;
- `Session.accepted(a, u)` (a chain round's tests, or one tree sibling's): the number of accepted drafts c = 0..n,
  with probability a_1 ... a_c (1 - a_{c+1}), a = the tests the engine computed;
- `coolsd.decoding.noise.without_replacement(q, n)`: every ordered tuple of distinct tokens of q's
  support, with probability prod_j q(x_j) / (1 - sum_{l<j} q(x_l));
- `coolsd.decoding.noise.race(probs, e)` (same noise): as `Session.draw`, a draw from each row. Valid where each
  race is an independent draw given earlier positions: vanilla AR and relaxed rules; a lossless rule's coupled
  test races p and q on the same noise and is checked pathwise instead (tests/decoding/test_same_noise.py).

The sampler itself (`coolsd.decoding.sampling.inverse_cdf`) and the engine with its real draws are tested against
their distributions in tests/decoding/test_sampler.py (and by the chi-square tests of test_engine.py).
Costs one engine run per path: keep V, T and the tree small (V = 3, T = 4, L = 2 is ~10^3 paths).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch

import coolsd.decoding.noise
import coolsd.decoding.tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.round import Session
from coolsd.theory.tabular import TabularDrafter, TabularLM


class _Pruned(Exception):
    """A path whose probability is already 0: nothing below it can contribute."""


class _RecordingRule:
    """Delegates to a rule; checks that every residual is asked for at a depth and draft length of the acceptance
    test it follows (else the resampling would not be the G* of the acceptance actually used)."""

    def __init__(self, rule) -> None:
        self._rule = rule
        self._accept_at: tuple[set[int], int] | None = None

    def accept_prob(self, p, q, x, depth, draft_len):  # a tree sibling's test
        self._accept_at = (set(torch.as_tensor(depth).flatten().tolist()), draft_len)
        return self._rule.accept_prob(p, q, x, depth, draft_len)

    def chain_accept(self, p, q, x, draft_len):  # a chain round's tests, depths 1..L
        self._accept_at = (set(range(1, len(x) + 1)), draft_len)
        return self._rule.chain_accept(p, q, x, draft_len)

    def residual(self, p, q, x, depth, draft_len):
        assert self._accept_at is not None, "a residual asked for before any acceptance test"
        depths, accept_len = self._accept_at
        assert set(torch.as_tensor(depth).flatten().tolist()) <= depths and draft_len == accept_len, (
            f"residual at depth {depth}, draft_len {draft_len}; acceptance at {sorted(depths)}, {accept_len}")
        return self._rule.residual(p, q, x, depth, draft_len)

    def __getattr__(self, name):
        return getattr(self._rule, name)


class _Path:
    """One run's scripted choices: `prefix` fixes the first ones, later choice points take option 0."""

    def __init__(self, prefix: list[int]) -> None:
        self.prefix = prefix
        self.choices: list[int] = []
        self.n_options: list[int] = []
        self.weight = 1.0

    def choose(self, n_options: int) -> int:
        i = len(self.choices)
        c = self.prefix[i] if i < len(self.prefix) else 0
        self.choices.append(c)
        self.n_options.append(n_options)
        return c

    def scale(self, w: float) -> None:
        self.weight *= w
        if w <= 0:
            raise _Pruned

    # -- the engine's random decisions ------------------------------------------------------------
    def draw(self, probs, u):
        shape = probs.shape[:-1] + (1,)
        assert isinstance(u, float) or u.shape == shape, "one uniform per row"
        ids = []
        for row in probs.reshape(-1, probs.shape[-1]):
            support = (row > 0).nonzero().flatten().tolist()
            y = support[self.choose(len(support))]
            self.scale(float(row[y]) / float(row.sum()))
            ids.append(y)
        return torch.tensor(ids, dtype=torch.long, device=probs.device).reshape(shape)

    def race(self, probs, e):
        assert e.shape == probs.shape, "one noise vector per row"
        return self.draw(probs, 0.0)

    def accepted(self, a, u):
        n = len(a)
        assert len(u) == n, f"one uniform per test: a {n}, u {len(u)}"
        c = self.choose(n + 1)  # number of accepted drafts
        self.scale(math.prod(a[:c]) * (1 - a[c] if c < n else 1.0))
        return c

    def without_replacement(self, q, n, gen):
        support = (q > 0).nonzero().flatten().tolist()
        orders = list(itertools.permutations(support, min(n, len(support))))
        order = orders[self.choose(len(orders))]
        w, left = 1.0, q.clone()
        for x in order:  # the mass left is summed, not subtracted: no cancellation when q(x) is close to 1
            w *= float(q[x]) / float(left.sum())
            left[x] = 0.0
        self.scale(w)
        return list(order)


def engine_distribution(target, drafter, rule, num_tokens: int, config: DecodeConfig, monkeypatch,
                        sampling=None, max_paths: int = 200_000) -> tuple[torch.Tensor, float]:
    """Exact (V**T,) output distribution of `coolsd.decoding.engine.run` and its expected number of target forwards.

    `monkeypatch` is pytest's fixture (the draws are patched only while this runs).
    """
    v = target.vocab_size
    assert not (config.noise == "same" and rule is not None and rule.lossless), "a coupled test is not enumerable"
    recording = _RecordingRule(rule) if rule is not None else None
    dist = torch.zeros(v**num_tokens, dtype=torch.float64)
    forwards = 0.0
    stack: list[list[int]] = [[]]
    paths = 0
    with monkeypatch.context() as mp:
        while stack:
            prefix = stack.pop()
            path = _Path(prefix)
            mp.setattr(Session, "draw", path.draw)
            mp.setattr(Session, "accepted", path.accepted)
            mp.setattr(coolsd.decoding.noise, "without_replacement", path.without_replacement)
            mp.setattr(coolsd.decoding.noise, "race", path.race)
            try:
                result = run(target, drafter, recording, cond=None, num_tokens=num_tokens,
                             sampling=sampling, config=config, seed=0)
            except _Pruned:
                result = None
            for i in range(len(prefix), len(path.choices)):
                stack += [path.choices[:i] + [c] for c in range(1, path.n_options[i])]
            paths += 1
            assert paths <= max_paths, "too many paths: use a smaller model"
            if result is None:
                continue
            index = sum(int(x) * v ** (num_tokens - 1 - i) for i, x in enumerate(result.tokens))
            dist[index] += path.weight
            forwards += path.weight * result.target_forwards
    return dist, forwards


# ---------------------------------------------------------------- models that check what the engine feeds them
def feature(prefix) -> torch.Tensor:
    """A (1, 1, D) stand-in for a model's last-layer feature of a context: its length and tokens (D = 16)."""
    f = torch.full((16,), -1.0, dtype=torch.float64)
    f[0] = len(prefix)
    f[1 : 1 + len(prefix)] = torch.tensor(list(prefix), dtype=torch.float64)
    return f.view(1, 1, -1)


def _contexts(model: TabularLM, ids, mask) -> list[tuple[int, ...]]:
    """Context (every visible token, the row's own included) of each new row, as TabularLM.forward reads it.
    A tree mask must be a (new rows, all slots) bool tensor (the protocol's), not just truthy numbers."""
    old = len(model._ids) - len(ids)
    if mask is not None:
        assert mask.dtype == torch.bool and tuple(mask.shape) == (len(ids), old + len(ids)), "tree mask"
    if mask is None:
        mask = torch.ones(len(ids), old + len(ids), dtype=torch.bool).tril(old)
    return [tuple(model._ids[s] for s in range(old + len(ids)) if mask[i, s]) for i in range(len(ids))]


class CheckedTarget(TabularLM):
    """A tabular target that returns `feature(context)` as its hidden state and checks the positions it is given."""

    def start(self, cond, guidance: bool):
        self.cond = cond  # what the engine conditioned on (checked by the tests)
        step = super().start(cond, guidance)
        return dataclasses.replace(step, hidden=feature(()).expand(step.logits.shape[0], 1, -1))

    def forward(self, ids, positions, mask=None, rows: int = 1):
        step = super().forward(ids, positions, mask, rows)
        contexts = _contexts(self, ids, mask)
        assert [len(c) - 1 for c in contexts] == torch.as_tensor(positions).tolist(), "target positions"
        return dataclasses.replace(step, hidden=torch.cat([feature(c) for c in contexts], dim=1))


class CheckedDrafter(TabularDrafter):
    """A tabular drafter that checks every token comes with the feature of the context before it (Eagle's
    input) at its own position, and returns `feature(context)` as its hidden state."""

    calls = 0  # forward calls since construction (compared with the events' draft_forwards)

    def start(self, cond, guidance: bool) -> None:
        self.cond = cond
        super().start(cond, guidance)

    def forward(self, ids, hidden, positions, mask=None):
        self.calls += 1
        step = TabularLM.forward(self, ids, positions, mask)
        contexts = _contexts(self, ids, mask)
        assert [len(c) - 1 for c in contexts] == torch.as_tensor(positions).tolist(), "drafter positions"
        assert hidden is not None and hidden.shape[1] == len(ids), "one feature per drafter input"
        for j, c in enumerate(contexts):
            assert torch.equal(hidden[0, j], feature(c[:-1])[0, 0]), f"feature of input {j}: context {c[:-1]}"
        return dataclasses.replace(step, hidden=torch.cat([feature(c) for c in contexts], dim=1))


def checked_models(target: TabularLM, drafter: TabularDrafter) -> tuple[CheckedTarget, CheckedDrafter]:
    """The same tables as models that check hidden features and positions."""
    return (CheckedTarget(target.table, target.vocab_size, target.num_tokens, target.codebook),
            CheckedDrafter(drafter.table, drafter.vocab_size, drafter.num_tokens, drafter.codebook))
