"""One chain round (spec section 2): draft L tokens, verify them in one target forward, accept/reject.

A round's dice (`coolsd.decoding.noise`; on the default stream, 2L + 1 uniforms drawn in one call: u_1..u_L draw
the drafts by inverse CDF of q_i, u_{L+1}..u_{2L} are the tests' (u_i <= a_i), the last one draws the last token)
come from the session's noise source. The test reads only the drafts'
entries of p and q (`Rule.chain_accept`: a_i as host floats, n counted on the host); the residual is computed at
the one depth that failed, if any. Drafts are drawn without reading them back; the tests' numbers and the round's
ids come back to the host in a few small transfers: on an accelerator the phase clock times launches, the waits
land in "other".
"""

from __future__ import annotations

import torch
from torch import Tensor

from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.decoding.round import Clock, Session, make_event, nan_after, round_detail


def chain_round(s: Session, index: int, draft_len: int) -> RoundEvent:
    """One chain round of L = `draft_len` drafts (fewer near the end of the image; 0 without a drafter)."""
    clock = s.clock()
    t = len(s.committed)
    n_draft = min(draft_len, s.num_tokens - t - 1) if s.drafter is not None else 0
    dice = s.noise.round(t, n_draft)  # the round's randomness (`coolsd.decoding.noise`)
    ids, q = s.last_id, None
    if n_draft > 0:
        ids, q = draft_chain(s, clock, n_draft, dice)
    return verify(s, index, clock, ids, q, dice, draft_len, draft_forwards=n_draft)[0]


def draft_chain(s: Session, clock: Clock, n_draft: int, dice) -> tuple[Tensor, Tensor]:
    """Step 1 of a chain round: n_draft >= 1 drafter forwards, draft i drawn from q_i with the round's dice.

    Returns ids (L + 1,) int64 = [last committed, x_1..x_L] and q (L, V), on the device."""
    t = len(s.committed)
    clock.switch("draft")
    out = s.ingest_pending()
    x_list, q_list = [s.last_id], []
    for i in range(n_draft):
        clock.switch("other")
        q_list.append(s.probs(out.logits[:, -1]))  # (V,)
        x_list.append(dice.draft(i, q_list[-1]))  # (1,)
        if i + 1 < n_draft:
            clock.switch("draft")
            hidden = None if out.hidden is None else out.hidden[:, -1:]
            out = s.drafter.forward(x_list[-1], hidden, torch.arange(t + i, t + i + 1, device=s.device))
    clock.switch("other")
    return torch.cat(x_list), torch.stack(q_list)


def verify(s: Session, index: int, clock: Clock, ids: Tensor, q: Tensor | None, dice, draft_len: int,
           draft_forwards: int) -> tuple[RoundEvent, Tensor]:
    """Steps 2-4 of a chain round: one target forward, the rule's test, commit. Shared by chain and Jacobi drafting
    (`coolsd.decoding.jacobi`).

    ids: (L + 1,) int64 = [last committed, x_1..x_L], L >= 0; q: (L, V) the rows the drafts were drawn from (None
    when L = 0); dice: the round's randomness (`coolsd.decoding.noise`: the tests' uniforms, the last token's draw).
    Returns the round's event and p: (L + 1, V) the processed target distributions of positions t..t+L.
    """
    t, n_draft = len(s.committed), ids.shape[0] - 1
    # 2. one target forward on [x_{t-1}, d_1..d_L] gives p_1..p_{L+1}
    clock.switch("verify")
    step = s.target.forward(ids, torch.arange(t - 1, t + n_draft, device=s.device))
    clock.switch("other")
    p = s.probs(step.logits)  # (L + 1, V)
    # 3. the rule's test on the drafts' entries; the first failure ends the round
    x, a, u, n = ids[1:], [], [], 0
    if n_draft > 0:
        a, u, n = dice.test(s.rule, p[:n_draft], q, x, draft_len)  # L host floats a_i and u_i, n accepted
    # the last token: from the residual at the first rejection, or p_{L+1} (bonus); row (V,), y (1,)
    row, y = dice.last(s.rule, p, q, x, n, draft_len)
    # 4. commit n + 1 tokens; crop both caches to what was committed
    committed = y if n == 0 else torch.cat([x[:n], y])  # (n + 1,) on the device
    tokens = committed.tolist()
    s.target.crop(t + n)
    if n_draft > 0 and s.drafter is not None:
        s.drafter.crop(t)
    hidden = step.hidden if step.hidden is None or step.hidden.shape[1] == n + 1 else step.hidden[:, : n + 1]
    s.commit(tokens, committed, hidden)  # the features before each committed token
    tested = min(n + 1, n_draft)
    omega = s.omegas(n_draft, draft_len)
    last = TokenOutcome.RESAMPLED if n < n_draft else TokenOutcome.BONUS
    detail = None
    if s.detail:  # the microscope
        tests = torch.tensor([a, u], dtype=p.dtype)  # (2, L): a_i, u_i
        detail = round_detail(p, q, x, tests[0], tests[1] if n_draft else None, omega, row, n, tokens[-1])
    return make_event(index=index, start=t, tokens=committed, n_accepted=n, seconds=clock.read(),
                      last=last, accept_probs=nan_after(a[:tested], n_draft),
                      omega=omega, tested_depths=list(range(1, tested + 1)), tested_probs=a[:tested],
                      target_forwards=1, draft_forwards=draft_forwards, detail=detail), p
