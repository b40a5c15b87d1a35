"""What every round shares (spec sections 2, 4, 5): the image's state, the phase clock, sampling, events.

Chain rounds (`coolsd.decoding.chain`) and tree rounds (`coolsd.decoding.tree`) both import this module and neither
imports the other; `coolsd.decoding.engine.decode` is the one loop that calls them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor

from coolsd.decoding.events import RoundDetail, RoundEvent, TokenOutcome
from coolsd.decoding.protocol import Drafter, TokenModel
from coolsd.decoding.rules import Rule, pick
from coolsd.decoding.sampling import SamplingConfig


def sample(probs: Tensor, gen: torch.Generator) -> Tensor:
    """One token id from (V,) probabilities, as a (1,) int64 tensor on their device.

    On CPU: `torch.multinomial`. On an accelerator, where `multinomial` waits for the device, the
    inverse CDF with one uniform draw (the first id whose cumulative mass exceeds u * total; an id of
    probability 0 is never picked), which never syncs with the host. Each device has its own random
    stream anyway, so a seed gives the same tokens on both paths of one device.
    """
    if probs.device.type == "cpu":
        return torch.multinomial(probs, 1, generator=gen)
    cdf = probs.cumsum(-1)  # (V,)
    u = torch.rand(1, generator=gen, device=probs.device, dtype=probs.dtype) * cdf[-1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[-1] - 1)


class Clock:
    """Accumulates wall seconds per phase of a round: "draft", "verify" (target forward), "other"."""

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


def make_event(*, index: int, start: int, tokens: list[int], n_accepted: int, seconds: dict[str, float],
               last: TokenOutcome = TokenOutcome.BONUS, accept_probs: list[float] = (), omega: list[float] = (),
               tested_depths: list[int] = (), tested_probs: list[float] = (), target_forwards: int = 1,
               draft_forwards: int = 0, detail: RoundDetail | None = None) -> RoundEvent:
    """A RoundEvent from plain host values (keyword only); n_drafted = len(omega)."""
    f = torch.float64
    return RoundEvent(index=index, start=start, tokens=torch.tensor(tokens, dtype=torch.long), n_accepted=n_accepted,
                      n_drafted=len(omega), accept_probs=torch.tensor(accept_probs, dtype=f),
                      omega=torch.tensor(omega, dtype=f), tested_depths=torch.tensor(tested_depths, dtype=torch.long),
                      tested_probs=torch.tensor(tested_probs, dtype=f), last=last,
                      target_forwards=target_forwards, draft_forwards=draft_forwards, seconds=seconds,
                      detail=detail)


class Session:
    """State of one image being decoded: committed tokens and what the drafter still has to read.

    Round invariant: the target cache holds tokens 0..t-2 (t = committed); the drafter cache holds
    a prefix of them and `pending_*` the rest: pending token j comes with the target feature of
    the position before it (what an Eagle drafter reads). Pending ids stay on the model device.
    """

    def __init__(self, target: TokenModel, drafter: Drafter | None, rule: Rule | None, sampling: SamplingConfig,
                 gen: torch.Generator, num_tokens: int, cond: Any) -> None:
        self.target, self.drafter, self.rule, self.sampling, self.gen = target, drafter, rule, sampling, gen
        self.num_tokens, self.cond = num_tokens, cond
        self.device = torch.device(target.device)
        self.committed: list[int] = []  # host copy of every committed id
        self.last_id: Tensor | None = None  # (1,) int64 on the device: committed[-1]
        self.pending_ids: list[Tensor] = []
        self.pending_hidden: list[Tensor | None] = []
        self.detail = False  # True: every chain round's event carries its RoundDetail (the microscope)
        self.first_probs: Tensor | None = None  # (1, V) p of token 0, once round 0 ran (Jacobi drafting's first rows)

    def probs(self, logits: Tensor) -> Tensor:
        """(G, n, V) -> (n, V) processed, float64 for exact maths on small vocabularies."""
        return self.sampling.probs(logits.double())

    def commit(self, ids: list[int], ids_on_device: Tensor, hidden: Tensor | None) -> None:
        """Append ids (host list and the same (n,) int64 on the device); hidden (G, n, D): target
        features of the positions before each."""
        self.committed += ids
        self.last_id = ids_on_device[-1:]
        self.pending_ids.append(ids_on_device)
        self.pending_hidden.append(hidden)

    def ingest_pending(self) -> Any:
        """Feed pending tokens to the drafter; returns its ModelStep (last row drafts the next token)."""
        ids = torch.cat(self.pending_ids)
        start = len(self.committed) - len(ids)
        hidden = None if self.pending_hidden[0] is None else torch.cat(self.pending_hidden, dim=1)
        out = self.drafter.forward(ids, hidden, torch.arange(start, start + len(ids), device=self.device))
        self.pending_ids, self.pending_hidden = [], []
        return out

    def first(self) -> RoundEvent:
        """Round 0: the target's prefix step commits token 0."""
        clock = Clock()
        clock.switch("verify")
        step = self.target.start(self.cond, self.sampling.guidance)
        clock.switch("other")
        p = self.first_probs = self.probs(step.logits)[-1:]  # (1, V)
        y = sample(p[0], self.gen)
        self.commit([int(y)], y, None if step.hidden is None else step.hidden[:, -1:])
        if self.drafter is not None:
            clock.switch("draft")
            self.drafter.start(self.cond, self.sampling.guidance)
        none = p[:0, 0].long()
        detail = round_detail(p, None, none, none.double(), None, [], p, 0, int(y)) if self.detail else None
        return make_event(index=0, start=0, tokens=self.committed[:1], n_accepted=0, seconds=clock.read(),
                          detail=detail)


def nan_after(values: list[float], length: int) -> list[float]:
    """values padded with nan to `length` (depths a round did not reach)."""
    return list(values) + [math.nan] * (length - len(values))


TOP_TOKENS = 8  # tokens of each distribution a RoundDetail keeps (the microscope's bars)


def round_detail(p: Tensor, q: Tensor | None, x: Tensor, a: Tensor, u: Tensor | None, omega: list[float],
                 rows: Tensor, n: int, token: int) -> RoundDetail:
    """A chain round's RoundDetail from its tensors (any device; copied to the host as float64).

    p: (L + 1, V) processed target rows; q: (L, V) draft rows (None when L = 0); x, a, u: (L,) drafts,
    acceptance probabilities and uniforms (u None when L = 0); omega: L floats; rows: (L + 1, V) the
    distribution the last token is drawn from for each n (the residual at depth n + 1, or p_{L+1});
    n: drafts accepted; token: the id drawn last.
    """
    def host(t: Tensor) -> Tensor:
        return t.detach().to("cpu", torch.float64)

    length = len(x)
    dists = {"p": p[n]} if n == length else {"p": p[n], "q": q[n], "residual": rows[n]}
    tops = [torch.topk(r, min(TOP_TOKENS, r.numel())).indices.cpu() for r in dists.values()]
    ids = torch.cat([*tops, torch.tensor([token])]).unique()
    empty = torch.zeros(0, dtype=torch.float64)
    return RoundDetail(drafts=x.detach().cpu().long(), q_draft=host(pick(q, x)) if length else empty,
                       p_draft=host(pick(p[:length], x)) if length else empty,
                       omega=torch.tensor(omega, dtype=torch.float64), accept=host(a),
                       uniforms=host(u) if length else empty, n_accepted=n, token=token, ids=ids,
                       dists={k: host(r)[ids] for k, r in dists.items()})
