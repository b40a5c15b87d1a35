"""What the engine reports (spec section 5): one RoundEvent per target forward, and DecodeResult."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

import torch
from torch import Tensor

EMPTY_CODE = 0  # `TokenOutcome.code` of a position with no token yet (the race's per-token tensors)


class TokenOutcome(str, Enum):  # noqa: UP042 - StrEnum needs Python 3.11; requires-python is 3.10
    """How a committed token came to be. A str (JSON and messages read "accepted", ...); `code` is its
    int8 code in per-token tensors (`coolsd.compare.race.Racer.kinds`, the overlay), 0 = `EMPTY_CODE`."""

    ACCEPTED = "accepted"  # a draft the rule accepted
    RESAMPLED = "resampled"  # drawn from the residual after a rejected draft (ends the round)
    BONUS = "bonus"  # drawn from the target after every tested draft was accepted (or with no drafts)

    def __str__(self) -> str:
        return self.value

    @property
    def code(self) -> int:
        return _CODES[self]


_CODES = {TokenOutcome.ACCEPTED: 1, TokenOutcome.RESAMPLED: 2, TokenOutcome.BONUS: 3}


@dataclass(frozen=True)
class RoundDetail:
    """Every number one chain round computed (the microscope's data), kept only when asked.

    drafts: (L,) int64 drafted ids x~_1..x~_L (L = 0: a round without drafts, e.g. round 0).
    q_draft, p_draft: (L,) float64 processed q_i(x~_i) and p_i(x~_i); omega, accept: (L,) omega_i and a_i
        at every drafted depth (also past the first rejection); uniforms: (L,) the u_i drawn.
    n_accepted: n; token: the id committed last, drawn from the residual at depth n + 1 after a
        rejection, else (bonus) from p_{n+1}.
    ids: (M,) int64, the union of the top tokens of every distribution in `dists`, and `token`;
    dists: name -> (M,) float64 probabilities at `ids`: "p" = p_{n+1}; after a rejection also
        "q" = q_{n+1} and "residual" = the distribution the last token was drawn from.
    """

    drafts: Tensor
    q_draft: Tensor
    p_draft: Tensor
    omega: Tensor
    accept: Tensor
    uniforms: Tensor
    n_accepted: int
    token: int
    ids: Tensor
    dists: dict[str, Tensor]


@dataclass(frozen=True)
class RoundEvent:
    """One round: drafts, one target forward, n accepted drafts + 1 resampled or bonus token.

    index: round number; round 0 is the target's prefix step (no drafts, one token).
    start: image-token index of tokens[0]; grid position of token j is divmod(start + j, W).
    tokens: (n_accepted + 1,) int64 committed ids, on CPU.
    n_drafted: L of this round (depth of the tree for tree drafting; 0 for vanilla AR).
    accept_probs: (n_drafted,) float, a_i actually drawn against at depth i (tree: the first
        sibling tested at that depth); nan at depths not reached.
    omega: (n_drafted,) float omega_i of the rule at each depth.
    tested_depths, tested_probs: (m,) every acceptance test of the round (tree: every sibling).
    last: "resampled" (a draft was rejected) or "bonus" (every tested depth accepted / no draft).
    target_forwards, draft_forwards: model calls in this round.
    seconds: wall seconds by phase: "draft", "verify" (target forward), "other" (rules, sampling).
    detail: every number of the round (`RoundDetail`), only when asked (`DecodeConfig(detail=True)`, chain
        rounds and round 0); None otherwise, so a race stays as light as without it.
    """

    index: int
    start: int
    tokens: Tensor
    n_accepted: int
    n_drafted: int
    accept_probs: Tensor
    omega: Tensor
    tested_depths: Tensor
    tested_probs: Tensor
    last: TokenOutcome
    target_forwards: int
    draft_forwards: int
    seconds: dict[str, float]
    detail: RoundDetail | None = field(default=None, repr=False, compare=False)

    @property
    def kinds(self) -> list[TokenOutcome]:
        """Per committed token: ACCEPTED, then RESAMPLED or BONUS."""
        return [TokenOutcome.ACCEPTED] * self.n_accepted + [self.last]


@dataclass
class DecodeResult:
    """Summary of one image, derived from its events only (nothing is counted twice).

    tokens: (T,) int64; kinds: per-token "accepted" | "resampled" | "bonus";
    tau: mean accepted length = tokens / target forwards (vanilla AR: 1.0).
    """

    tokens: Tensor
    kinds: list[TokenOutcome]
    rounds: int
    target_forwards: int
    draft_forwards: int
    seconds: dict[str, float]
    events: list[RoundEvent] = field(repr=False, default_factory=list)

    @property
    def tau(self) -> float:
        return len(self.tokens) / max(self.target_forwards, 1)

    @property
    def wall_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def mean_accepted(self) -> float:
        """Mean accepted drafts per speculative round (excludes round 0)."""
        spec = [e.n_accepted for e in self.events if e.index > 0]
        return sum(spec) / len(spec) if spec else math.nan

    @classmethod
    def from_events(cls, events: Iterable[RoundEvent]) -> DecodeResult:
        events = list(events)
        seconds = {"draft": 0.0, "verify": 0.0, "other": 0.0}
        for e in events:
            for k, v in e.seconds.items():
                seconds[k] += v
        return cls(
            tokens=torch.cat([e.tokens for e in events]) if events else torch.zeros(0, dtype=torch.long),
            kinds=[k for e in events for k in e.kinds],
            rounds=len(events),
            target_forwards=sum(e.target_forwards for e in events),
            draft_forwards=sum(e.draft_forwards for e in events),
            seconds=seconds,
            events=events,
        )
