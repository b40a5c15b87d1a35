"""Jacobi drafting (spec section 4b): the target drafting for itself one iteration late, under any chain rule.

SJD (Speculative Jacobi Decoding, Teng et al., arXiv 2410.01699) needs no draft model. An iteration holds a window
of W drafts for the positions after the committed prefix; draft x_j was drawn from q_j, the target's processed
distribution for that position as the *previous* iteration's forward computed it. One target forward on
[last committed, x_1..x_W] gives p_1..p_{W+1}; the rule verifies x_1..x_W exactly as a chain round does
(`coolsd.decoding.chain.verify`, the same code: depth j = position in the window, draft_len = W). Then the window
moves past what was committed and every position gets its new q: the row this forward just computed for it (from a
context that may hold rejected drafts), or, for a position no forward has computed, the rule's `init` ("last":
the last row computed; "uniform").

Drafting and acceptance are independent: the drafting is `coolsd.decoding.drafting.Jacobi` (window, reuse, init)
and the rule any rule: SJD is Eagle-1's test on these drafts, "COOL-SD, no drafter" COOL-SD's (omega over the
window's depths, G* residual), "LANTERN++, no drafter" LANTERN++'s.

Why the per-position maths is the chain's: at position j, q_j is fixed (a function of earlier forwards, hence of
the tokens and drafts at positions before j) before x_j is drawn from it, and the verified prefix is exactly the
context p_j conditions on. So given everything at earlier positions, x_j ~ q_j and the token committed at j has
the chain rule's step kernel at (p_j, q_j, depth j, W): P exactly for Eagle-1, the relaxed rule's own kernel (and
its bound) for the others (tests/decoding/test_jacobi.py checks both against `coolsd.theory.jacobi_oracle`).

"+ reuse" (`Jacobi.reuse`, ours, after SJD++'s reuse of drafts): instead of a fresh draw, a position keeps
its previous draft d (drawn from q_prev, never tested: it lay beyond the last rejection) with probability
min(1, q(d) / q_prev(d)), else draws from Norm([q - q_prev]_+): a maximal coupling, so x is still a draw from q
given everything at earlier positions (d was never tested, and given those, d ~ q_prev), and the test still uses q.
What the coupling does break is independence from the previous draft d itself: given d, x_j is not a draw from
q_j. Every rule here reads only p_j, q_j and x_j, so all run with reuse; a rule whose test read d (e.g. keeping a
draft untested because it was drafted twice) would not be exact. Acceptance at the position is unchanged; the
drafts after it more often keep the context the last forward saw, so their q already is their p.
"""

from __future__ import annotations

import torch
from torch import Tensor

from coolsd.decoding.chain import verify
from coolsd.decoding.events import RoundEvent
from coolsd.decoding.maths import normalise, pick
from coolsd.decoding.round import Session


def coupled_draw(q: Tensor, q_prev: Tensor, d: Tensor) -> Tensor:
    """(..., V) distribution of a draft that keeps the previous draft d ((...) int64, drawn from q_prev) where q
    allows: keep w.p. min(1, q(d) / q_prev(d)), else a draw from Norm([q - q_prev]_+). Averaged over d ~ q_prev it
    is q. q, q_prev: (..., V); rows are independent."""
    keep = (pick(q, d) / pick(q_prev, d)).clamp(max=1.0).unsqueeze(-1)  # (..., 1)
    moved = normalise((q - q_prev).clamp_min(0), q)  # (..., V) where q has more mass than q_prev
    return (1 - keep) * moved + keep * torch.nn.functional.one_hot(d, q.shape[-1]).to(q.dtype)


class JacobiDrafts:
    """The window of one image (spec 4b) and its iterations: `round(index)` is one engine round.

    State after each forward: rows (m, V) the processed target distributions of positions base..base+m-1, and the
    drafts that forward read at positions base..: ids (k,) with the q each was drawn from, (k, V).
    """

    def __init__(self, s: Session, drafting) -> None:
        self.s, self.drafting = s, drafting  # (a `coolsd.decoding.drafting.Jacobi`)
        self.base = 0
        self.rows = s.first_probs  # (1, V) round 0's p of token 0
        self.drafts = torch.zeros(0, dtype=torch.long, device=s.device)
        self.draft_q = self.rows[:0]

    def proposals(self, t: int, n: int) -> Tensor:
        """q (n, V) of window positions t..t+n-1: the last forward's rows for them, the drafting's `init` after
        those."""
        have = self.rows[t - self.base : t - self.base + n]
        if len(have) == n:
            return have
        if self.drafting.init == "uniform":
            fill = torch.full_like(self.rows[-1], 1.0 / self.rows.shape[-1])
        else:
            fill = self.rows[-1]
        return torch.cat([have, fill.expand(n - len(have), -1)])

    def draws(self, t: int, q: Tensor, dice) -> Tensor:
        """x (n,) int64 for positions t..t+n-1, a draw from each row of q (n, V) with the round's dice; under
        `reuse`, a position that holds a previous draft couples the draw with it."""
        rows = q
        j = t - self.base
        kept = max(0, min(len(q), len(self.drafts) - j)) if self.drafting.reuse else 0  # positions with a draft
        if kept:
            coupled = coupled_draw(q[:kept], self.draft_q[j : j + kept], self.drafts[j : j + kept])
            rows = torch.cat([coupled, q[kept:]])
        return dice.drafts(rows)

    def round(self, index: int) -> RoundEvent:
        """One Jacobi iteration: W drafts (fewer near the image's end), one target forward, the rule's test."""
        s = self.s
        clock = s.clock()
        t = len(s.committed)
        n_draft = min(self.drafting.window, s.num_tokens - t - 1)
        dice = s.noise.round(t, n_draft)  # the round's randomness (`coolsd.decoding.noise`)
        ids, q = s.last_id, None
        # 1. the window: q_j from the last iteration, x_j drawn from it (no model call)
        if n_draft > 0:
            clock.switch("draft")
            q = self.proposals(t, n_draft)
            ids = torch.cat([s.last_id, self.draws(t, q, dice)])
        # 2.-4. one target forward, the rule's test, commit (the chain round's own code)
        event, p = verify(s, index, clock, ids, q, dice, self.drafting.window, draft_forwards=0)
        # the Jacobi update: this forward's rows and drafts are the next iteration's proposals
        self.base, self.rows = t, p  # (n_draft + 1, V): positions t..t+n_draft
        if n_draft > 0:
            self.drafts, self.draft_q = ids[1:], q
        return event
