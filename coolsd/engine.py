"""The one draft/verify loop (spec sections 2, 4, 5): `decode` yields a RoundEvent per round.

Everything (app, benchmark, tests) drives this loop. A rule is an object (`coolsd.rules`); the
drafting shape is data (`DecodeConfig.tree`): chain drafting here, static trees in `coolsd.tree`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from coolsd.events import BONUS, RESAMPLED, DecodeResult, RoundEvent
from coolsd.models.protocol import Drafter, TokenModel
from coolsd.rules import Rule
from coolsd.sampling import SamplingConfig


@dataclass(frozen=True)
class DecodeConfig:
    """draft_len: L, drafts per round (chain) >= 1. tree: a name in `coolsd.tree.TREES` or None (chain)."""

    draft_len: int = 5
    tree: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.draft_len, bool) or not isinstance(self.draft_len, int) or self.draft_len < 1:
            raise ValueError(f"draft_len must be an integer >= 1, got {self.draft_len!r}")
        if self.tree is not None:
            from coolsd.tree import TREES

            if self.tree not in TREES:
                raise ValueError(f"unknown tree {self.tree!r}; choose one of {sorted(TREES)} or None for chain")


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The only source of randomness of a decode: same seed, same tokens."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    return torch.Generator(device=device).manual_seed(seed)


def sample(probs: Tensor, gen: torch.Generator) -> int:
    """One token id from (V,) probabilities."""
    return int(torch.multinomial(probs, 1, generator=gen).item())


class _Clock:
    """Accumulates wall seconds per phase of a round."""

    def __init__(self) -> None:
        self.seconds = {"draft": 0.0, "verify": 0.0, "other": 0.0}
        self._t = time.perf_counter()
        self._phase = "other"

    def switch(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[self._phase] += now - self._t
        self._t, self._phase = now, phase

    def read(self) -> dict[str, float]:
        self.switch("other")
        return self.seconds


class Session:
    """State of one image being decoded: committed tokens and what the drafter still has to read.

    Round invariant: the target cache holds tokens 0..t-2 (t = committed); the drafter cache holds
    a prefix of them and `pending_*` the rest: pending token j comes with the target feature of
    the position before it (what an Eagle drafter reads).
    """

    def __init__(self, target: TokenModel, drafter: Drafter | None, rule: Rule | None, sampling: SamplingConfig,
                 gen: torch.Generator, num_tokens: int) -> None:
        self.target, self.drafter, self.rule, self.sampling, self.gen = target, drafter, rule, sampling, gen
        self.num_tokens = num_tokens
        self.committed: list[int] = []
        self.pending_ids: list[int] = []
        self.pending_hidden: list[Tensor | None] = []

    def probs(self, logits: Tensor) -> Tensor:
        """(G, n, V) -> (n, V) processed, float64 for exact maths on small vocabularies."""
        return self.sampling.probs(logits.double())

    def commit(self, ids: list[int], hidden: Tensor | None) -> None:
        """Append ids; hidden (G, len(ids), D): target features of the positions before each."""
        self.committed += ids
        self.pending_ids += ids
        for j in range(len(ids)):
            self.pending_hidden.append(None if hidden is None else hidden[:, j : j + 1])

    def ingest_pending(self) -> Any:
        """Feed pending tokens to the drafter; returns its ModelStep (last row drafts the next token)."""
        ids = torch.tensor(self.pending_ids, device=self.device)
        start = len(self.committed) - len(ids)
        hidden = None if self.pending_hidden[0] is None else torch.cat(self.pending_hidden, dim=1)
        out = self.drafter.forward(ids, hidden, torch.arange(start, start + len(ids), device=self.device))
        self.pending_ids, self.pending_hidden = [], []
        return out

    @property
    def device(self) -> torch.device:
        return self._device

    def first(self) -> RoundEvent:
        """Round 0: the target's prefix step commits token 0."""
        clock = _Clock()
        clock.switch("verify")
        step = self.target.start(self.cond, self.sampling.guidance)
        self._device = step.logits.device
        clock.switch("other")
        y = sample(self.probs(step.logits)[-1], self.gen)
        self.commit([y], None if step.hidden is None else step.hidden[:, -1:])
        if self.drafter is not None:
            clock.switch("draft")
            self.drafter.start(self.cond, self.sampling.guidance)
        return _event(0, 0, [y], 0, [], [], [], [], BONUS, 1, 0, clock.read())


def _event(index, start, tokens, n_acc, a, omega, tested_d, tested_a, last, n_t, n_d, seconds) -> RoundEvent:
    f = torch.float64
    return RoundEvent(index=index, start=start, tokens=torch.tensor(tokens, dtype=torch.long), n_accepted=n_acc,
                      n_drafted=len(omega), accept_probs=torch.tensor(a, dtype=f), omega=torch.tensor(omega, dtype=f),
                      tested_depths=torch.tensor(tested_d, dtype=torch.long),
                      tested_probs=torch.tensor(tested_a, dtype=f),
                      last=last, target_forwards=n_t, draft_forwards=n_d, seconds=seconds)


def chain_round(s: Session, index: int, draft_len: int) -> RoundEvent:
    """One chain round (spec section 2): draft L, one target forward on [x_{t-1}, drafts], accept/reject."""
    clock = _Clock()
    t = len(s.committed)
    n_draft = min(draft_len, s.num_tokens - t - 1) if s.drafter is not None else 0
    drafts: list[int] = []
    q_rows: list[Tensor] = []
    n_draft_calls = 0
    # 1. draft L tokens with Q
    if n_draft > 0:
        clock.switch("draft")
        out = s.ingest_pending()
        n_draft_calls += 1
        for i in range(n_draft):
            clock.switch("other")
            q = s.probs(out.logits[:, -1:])[0]  # (V,)
            drafts.append(sample(q, s.gen))
            q_rows.append(q)
            if i + 1 < n_draft:
                clock.switch("draft")
                hidden = None if out.hidden is None else out.hidden[:, -1:]
                pos = torch.tensor([t + i], device=s.device)
                out = s.drafter.forward(torch.tensor([drafts[-1]], device=s.device), hidden, pos)
                n_draft_calls += 1
    # 2. one target forward on [x_{t-1}, d_1..d_L] gives p_1..p_{L+1}
    clock.switch("verify")
    ids = torch.tensor([s.committed[-1]] + drafts, device=s.device)
    step = s.target.forward(ids, torch.arange(t - 1, t + n_draft, device=s.device))
    clock.switch("other")
    p = s.probs(step.logits)  # (L+1, V)
    # 3. accept/reject with the rule, vectorised over depths; the first failure ends the round
    a_list: list[float] = []
    omega: list[float] = []
    n = 0
    if n_draft > 0:
        q = torch.stack(q_rows)  # (L, V)
        x = torch.tensor(drafts, device=s.device)
        depth = torch.arange(1, n_draft + 1, device=s.device)
        a = s.rule.accept_prob(p[:n_draft], q, x, depth, draft_len)  # (L,)
        u = torch.rand(n_draft, generator=s.gen, device=s.device, dtype=a.dtype)
        rejected = (u > a).nonzero()
        n = int(rejected[0, 0]) if len(rejected) else n_draft
        a_list = [float(v) for v in a[: n + 1]] + [math.nan] * (n_draft - n - 1)
        omega = s.rule.omega(depth, draft_len).tolist()
    if n < n_draft:
        residual = s.rule.residual(p[n], q[n], x[n], depth[n], draft_len)
        y, last = sample(residual, s.gen), RESAMPLED
    else:
        y, last = sample(p[n_draft], s.gen), BONUS
    # 4. commit n + 1 tokens; crop both caches to what was committed
    tokens = drafts[:n] + [y]
    s.target.crop(t + n)
    if s.drafter is not None and n_draft > 0:
        s.drafter.crop(t)
    s.commit(tokens, None if step.hidden is None else step.hidden[:, : n + 1])
    tested = list(range(1, min(n + 1, n_draft) + 1))
    return _event(index, t, tokens, n, a_list, omega, tested, a_list[: len(tested)], last, 1, n_draft_calls,
                  clock.read())


def decode(target: TokenModel, drafter: Drafter | None, rule: Rule | None, cond: Any, num_tokens: int,
           sampling: SamplingConfig | None = None, config: DecodeConfig | None = None,
           generator: torch.Generator | None = None) -> Iterator[RoundEvent]:
    """Decode one image of `num_tokens` tokens; yields a RoundEvent as soon as each round ends.

    drafter=None (or rule=None) is vanilla AR: one target forward per token.
    """
    sampling = sampling or SamplingConfig()
    config = config or DecodeConfig()
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens must be an integer >= 1, got {num_tokens!r}")
    if (drafter is None) != (rule is None):
        drafter, rule = None, None  # vanilla AR needs neither
    s = Session(target, drafter, rule, sampling, generator or make_generator(0), num_tokens)
    s.cond = cond
    yield s.first()
    index = 1
    if config.tree is not None and drafter is not None:
        from coolsd.tree import TREES, tree_round

        shape = TREES[config.tree]
        while len(s.committed) < num_tokens:
            yield tree_round(s, index, shape)
            index += 1
        return
    while len(s.committed) < num_tokens:
        yield chain_round(s, index, config.draft_len)
        index += 1


def generate(target: TokenModel, drafter: Drafter | None, rule: Rule | None, cond: Any, num_tokens: int,
             sampling: SamplingConfig | None = None, config: DecodeConfig | None = None,
             seed: int = 0) -> Iterator[RoundEvent]:
    """One call: the events iterator of `decode` with a generator seeded by `seed` (same seed, same tokens).

    Arguments are checked here, before the first event, so bad input fails early.
    """
    sampling = sampling or SamplingConfig()
    config = config or DecodeConfig()
    gen = make_generator(seed, getattr(target, "device", "cpu"))
    return decode(target, drafter, rule, cond, num_tokens, sampling, config, gen)


def run(*args, **kwargs) -> DecodeResult:
    """`generate(...)` drained into a DecodeResult."""
    return DecodeResult.from_events(generate(*args, **kwargs))
