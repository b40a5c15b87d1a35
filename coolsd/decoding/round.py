"""What every round shares (spec sections 2, 4, 5): the image's state, the phase clock, the draws, events.

Chain, tree and Jacobi rounds (`coolsd.decoding.chain`, `.tree`, `.jacobi`) import this module; each drafting of
`coolsd.decoding.drafting` makes its rounds, and `coolsd.decoding.engine.decode` is the one loop that calls them.

Randomness (one sampler for every decoder, vanilla AR included): a round's dice come from the session's noise
source (`coolsd.decoding.noise`). On the default stream a round draws the uniforms it needs in one call of the
seeded generator (`Session.uniforms`), each token is the inverse CDF of its distribution at one of them
(`Session.draw`), and each acceptance test compares a_i with one (`Session.accepted`). Those two methods, the same
noise's exponential race (`coolsd.decoding.noise.race`) and a static tree's draws without replacement
(`coolsd.decoding.noise.without_replacement`) are the only places randomness becomes decisions
(tests/exact_engine.py enumerates them).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

from coolsd.decoding.events import RoundDetail, RoundEvent, TokenOutcome
from coolsd.decoding.maths import pick
from coolsd.decoding.noise import make_noise
from coolsd.decoding.protocol import Drafter, TokenModel
from coolsd.decoding.rules import Rule, omega_values
from coolsd.decoding.sampling import SamplingConfig, inverse_cdf


def clock_source(device: torch.device):
    """The clock a decode on `device` is charged by, in seconds: this thread's CPU time on a CPU, so the work of
    other threads (a page drawing frames, another visitor's race) never lands in a racer's time; wall time on an
    accelerator, whose kernels run while the host thread waits."""
    return time.thread_time if torch.device(device).type == "cpu" else time.perf_counter


class Clock:
    """Accumulates seconds of `now` (default wall time; a session's `clock_source`) per phase of a round:
    "draft", "verify" (target forward), "other"."""

    def __init__(self, now=None) -> None:
        self.now = now or time.perf_counter
        self.seconds = {"draft": 0.0, "verify": 0.0, "other": 0.0}
        self._t = self.now()
        self._phase = "other"

    def switch(self, phase: str) -> None:
        now = self.now()
        self.seconds[self._phase] += now - self._t
        self._t, self._phase = now, phase

    def read(self) -> dict[str, float]:
        self.switch("other")
        return self.seconds


def make_event(*, index: int, start: int, tokens: list[int] | Tensor, n_accepted: int, seconds: dict[str, float],
               last: TokenOutcome = TokenOutcome.BONUS, accept_probs: list[float] = (), omega: list[float] = (),
               tested_depths: list[int] = (), tested_probs: list[float] = (), target_forwards: int = 1,
               draft_forwards: int = 0, detail: RoundDetail | None = None) -> RoundEvent:
    """A RoundEvent from host values (keyword only); n_drafted = len(omega). tokens: ids, or a (n,) int64 tensor
    (copied to the CPU if elsewhere). The three float lists become views of one float64 tensor (a round without
    drafts: shared empty tensors)."""
    a, w = len(accept_probs), len(omega)
    tokens = tokens.cpu() if isinstance(tokens, Tensor) else torch.from_numpy(np.array(tokens, dtype=np.int64))
    if not (a or w or tested_probs or tested_depths):
        accept, omegas, tested, depths = _EMPTY_FLOATS, _EMPTY_FLOATS, _EMPTY_FLOATS, _EMPTY_IDS
    else:
        floats = torch.from_numpy(np.array([*accept_probs, *omega, *tested_probs], dtype=np.float64))
        accept, omegas, tested = floats[:a], floats[a : a + w], floats[a + w :]
        depths = torch.from_numpy(np.array(tested_depths, dtype=np.int64))
    return RoundEvent(index=index, start=start, tokens=tokens, n_accepted=n_accepted, n_drafted=w,
                      accept_probs=accept, omega=omegas, tested_depths=depths, tested_probs=tested, last=last,
                      target_forwards=target_forwards, draft_forwards=draft_forwards, seconds=seconds, detail=detail)


_EMPTY_FLOATS = torch.zeros(0, dtype=torch.float64)  # what a round without drafts reports (no element to change)
_EMPTY_IDS = torch.zeros(0, dtype=torch.long)


class Session:
    """State of one image being decoded: committed tokens and what the drafter still has to read.

    Round invariant: the target cache holds tokens 0..t-2 (t = committed); the drafter cache holds
    a prefix of them and `pending_*` the rest: pending token j comes with the target feature of
    the position before it (what an Eagle drafter reads). Pending ids stay on the model device.
    """

    def __init__(self, target: TokenModel, drafter: Drafter | None, rule: Rule | None, sampling: SamplingConfig,
                 gen: torch.Generator, num_tokens: int, cond: Any, noise: str = "stream") -> None:
        self.target, self.drafter, self.rule, self.sampling, self.gen = target, drafter, rule, sampling, gen
        self.num_tokens, self.cond = num_tokens, cond
        self.device = torch.device(target.device)
        self.committed: list[int] = []  # host copy of every committed id
        self.last_id: Tensor | None = None  # (1,) int64 on the device: committed[-1]
        self.pending_ids: list[Tensor] = []
        self.pending_hidden: list[Tensor | None] = []
        self.detail = False  # True: every chain round's event carries its RoundDetail (the microscope)
        self.first_probs: Tensor | None = None  # (1, V) p of token 0, once round 0 ran (Jacobi drafting's first rows)
        self.depths = torch.arange(1, num_tokens + 1, device=self.device)  # (T,) int64: depth i is depths[i - 1]
        self._plain = sampling == SamplingConfig()  # no guidance, temperature 1, no top-k / top-p
        self.now = clock_source(self.device)  # what each round's Clock reads
        self.noise = make_noise(noise, self)  # where the rounds' dice come from (`coolsd.decoding.noise`)

    def clock(self) -> Clock:
        """A new round's clock, on this decode's clock source."""
        return Clock(self.now)

    def probs(self, logits: Tensor) -> Tensor:
        """(G, ..., V) -> (..., V) processed, float64 for exact maths on small vocabularies. The processing runs
        on float64 logits; without any (one row, temperature 1, no truncation) the softmax converts them itself,
        the same numbers with one copy fewer."""
        if self._plain:
            return logits[0].softmax(-1, dtype=torch.float64)
        return self.sampling.probs(logits.double())

    def uniforms(self, n: int) -> Tensor:
        """(n,) float64 uniforms in [0, 1) on the device: one call of the decode's generator (a round's draws)."""
        return torch.rand(n, generator=self.gen, device=self.device, dtype=torch.float64)

    def draw(self, probs: Tensor, u: float | Tensor) -> Tensor:
        """Token ids from rows probs (..., V) at uniforms u (a host float for one row, else (..., 1) on the
        device): (..., 1) int64 on the device (`coolsd.decoding.sampling.inverse_cdf`, every decoder's sampler)."""
        return inverse_cdf(probs, u)

    def accepted(self, a: list[float], u: list[float]) -> int:
        """n: how many leading drafts pass their test u_i <= a_i (the first failure ends the walk); host floats."""
        for n, (a_i, u_i) in enumerate(zip(a, u)):
            if u_i > a_i:
                return n
        return len(a)

    def omegas(self, depths: int, draft_len: int) -> list[float]:
        """The rule's omega_1..omega_depths of a round of `draft_len`, host floats (what an event records)."""
        return omega_values(self.rule, depths, draft_len) if depths else []

    def commit(self, ids: list[int], ids_on_device: Tensor, hidden: Tensor | None) -> None:
        """Append ids (host list and the same (n,) int64 on the device); hidden (G, n, D): target
        features of the positions before each."""
        self.committed += ids
        self.last_id = ids_on_device[-1:]
        self.pending_ids.append(ids_on_device)
        self.pending_hidden.append(hidden)

    def ingest_pending(self) -> Any:
        """Feed pending tokens to the drafter; returns its ModelStep (last row drafts the next token)."""
        ids = self.pending_ids[0] if len(self.pending_ids) == 1 else torch.cat(self.pending_ids)
        n = ids.shape[0]
        hidden = self.pending_hidden[0]
        if hidden is not None and len(self.pending_hidden) > 1:
            hidden = torch.cat(self.pending_hidden, dim=1)
        out = self.drafter.forward(ids, hidden, torch.arange(len(self.committed) - n, len(self.committed),
                                                             device=self.device))
        self.pending_ids, self.pending_hidden = [], []
        return out

    def first(self) -> RoundEvent:
        """Round 0: the target's prefix step commits token 0."""
        clock = self.clock()
        clock.switch("verify")
        step = self.target.start(self.cond, self.sampling.guidance)
        clock.switch("other")
        p = self.first_probs = self.probs(step.logits)[-1:]  # (1, V)
        y = self.noise.first(p[0])  # (1,)
        token = int(y)
        self.commit([token], y, None if step.hidden is None else step.hidden[:, -1:])
        if self.drafter is not None:
            clock.switch("draft")
            self.drafter.start(self.cond, self.sampling.guidance)
        none = p[:0, 0].long()
        detail = round_detail(p, None, none, none.double(), None, [], p[0], 0, token) if self.detail else None
        return make_event(index=0, start=0, tokens=y, n_accepted=0, seconds=clock.read(), detail=detail)


def nan_after(values: list[float], length: int) -> list[float]:
    """values padded with nan to `length` (depths a round did not reach)."""
    return list(values) + [math.nan] * (length - len(values))


TOP_TOKENS = 8  # tokens of each distribution a RoundDetail keeps (the microscope's bars)


def round_detail(p: Tensor, q: Tensor | None, x: Tensor, a: Tensor, u: Tensor | None, omega: list[float],
                 row: Tensor, n: int, token: int) -> RoundDetail:
    """A chain round's RoundDetail from its tensors (any device; copied to the host as float64).

    p: (L + 1, V) processed target rows; q: (L, V) draft rows (None when L = 0); x, a, u: (L,) drafts,
    acceptance probabilities and uniforms (u None when L = 0); omega: L floats; row: (V,) the distribution the
    last token was drawn from (the residual at depth n + 1, or p_{L+1}); n: drafts accepted; token: the id drawn
    last.
    """
    def host(t: Tensor) -> Tensor:
        return t.detach().to("cpu", torch.float64)

    length = len(x)
    dists = {"p": p[n]} if n == length else {"p": p[n], "q": q[n], "residual": row}
    tops = [torch.topk(r, min(TOP_TOKENS, r.numel())).indices.cpu() for r in dists.values()]
    ids = torch.cat([*tops, torch.tensor([token])]).unique()
    empty = torch.zeros(0, dtype=torch.float64)
    return RoundDetail(drafts=x.detach().cpu().long(), q_draft=host(pick(q, x)) if length else empty,
                       p_draft=host(pick(p[:length], x)) if length else empty,
                       omega=torch.tensor(omega, dtype=torch.float64), accept=host(a),
                       uniforms=host(u) if length else empty, n_accepted=n, token=token, ids=ids,
                       dists={k: host(r)[ids] for k, r in dists.items()})
