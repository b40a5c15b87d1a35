"""One chain round (spec section 2): draft L tokens, verify them in one target forward, accept/reject.

Everything between the round's start and its end stays on the model's device: drafts are sampled
without reading them back, the rule's acceptance test and the residual draw are vectorised over
depths, and the round's outcome (n accepted, the committed ids, the tested a_i) comes back to the
host in ONE transfer. Random draws happen in the same order as a host-side loop would make them
(one multinomial per draft, one uniform per depth, one multinomial for the last token), so a seed
gives the same tokens on every path. On an accelerator the phase clock times launches: the wait
for the device lands in "other", at the round's one transfer (wall time per round stays exact).
"""

from __future__ import annotations

import torch
from torch import Tensor

from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.decoding.round import Clock, Session, make_event, nan_after, round_detail, sample
from coolsd.decoding.rules import omega_values


def chain_round(s: Session, index: int, draft_len: int) -> RoundEvent:
    """One chain round of L = `draft_len` drafts (fewer near the end of the image; 0 without a drafter)."""
    clock = Clock()
    t = len(s.committed)
    n_draft = min(draft_len, s.num_tokens - t - 1) if s.drafter is not None else 0
    dev = s.device
    # 1. draft L tokens with Q (device tensors only)
    x_list, q_list = [], []
    if n_draft > 0:
        clock.switch("draft")
        out = s.ingest_pending()
        for i in range(n_draft):
            clock.switch("other")
            q_list.append(s.probs(out.logits[:, -1:])[0])  # (V,)
            x_list.append(sample(q_list[-1], s.gen))  # (1,)
            if i + 1 < n_draft:
                clock.switch("draft")
                hidden = None if out.hidden is None else out.hidden[:, -1:]
                out = s.drafter.forward(x_list[-1], hidden, torch.arange(t + i, t + i + 1, device=dev))
    return verify(s, index, clock, x_list, q_list, draft_len, draft_forwards=n_draft)[0]


def verify(s: Session, index: int, clock: Clock, x_list: list[Tensor], q_list: list[Tensor], draft_len: int,
           draft_forwards: int) -> tuple[RoundEvent, Tensor]:
    """Steps 2-4 of a chain round on drafts x_1..x_L (each (1,) int64) drawn from q_1..q_L (each (V,)), L >= 0:
    one target forward, the rule's test, commit. Shared by chain and Jacobi drafting (`coolsd.decoding.jacobi`).

    Returns the round's event and p: (L + 1, V) the processed target distributions of positions t..t+L.
    """
    t, dev, n_draft = len(s.committed), s.device, len(x_list)
    # 2. one target forward on [x_{t-1}, d_1..d_L] gives p_1..p_{L+1}
    clock.switch("verify")
    ids = torch.cat([s.last_id, *x_list])  # (L + 1,)
    step = s.target.forward(ids, torch.arange(t - 1, t + n_draft, device=dev))
    clock.switch("other")
    p = s.probs(step.logits)  # (L + 1, V)
    # 3. accept/reject with the rule, vectorised over depths; the first failure ends the round
    if n_draft > 0:
        q, x = torch.stack(q_list), ids[1:]  # (L, V), (L,)
        depth = torch.arange(1, n_draft + 1, device=dev)
        a, residual = s.rule.judge(p[:n_draft], q, x, depth, draft_len)  # (L,), (L, V)
        u = torch.rand(n_draft, generator=s.gen, device=dev, dtype=a.dtype)
        n = (u <= a).long().cumprod(0).sum()  # () accepted drafts, on the device
        # where the last token comes from: the residual at the first rejection, or p_{L+1} (bonus)
        rows = torch.cat([residual, p[n_draft:]])  # (L + 1, V)
        y = sample(rows.index_select(0, n.view(1))[0], s.gen)  # a tensor index: no host sync
    else:
        a = torch.zeros(0, dtype=p.dtype, device=dev)
        n = torch.zeros((), dtype=torch.long, device=dev)
        y = sample(p[0], s.gen)
        q = u = None
        rows = p
    # the round's outcome: one transfer to the host
    outcome = torch.cat([n.view(1), y, ids[1:]]).to(a.dtype)
    packed = torch.cat([outcome, a]).tolist()
    n, y_host = int(packed[0]), int(packed[1])
    drafts, a_host = [int(v) for v in packed[2 : 2 + n_draft]], packed[2 + n_draft :]
    # 4. commit n + 1 tokens; crop both caches to what was committed
    tokens = drafts[:n] + [y_host]
    s.target.crop(t + n)
    if n_draft > 0 and s.drafter is not None:
        s.drafter.crop(t)
    s.commit(tokens, torch.cat([ids[1 : n + 1], y]), None if step.hidden is None else step.hidden[:, : n + 1])
    tested = min(n + 1, n_draft)
    omega = omega_values(s.rule, n_draft, draft_len) if n_draft > 0 else []  # host floats
    last = TokenOutcome.RESAMPLED if n < n_draft else TokenOutcome.BONUS
    detail = round_detail(p, q, ids[1:], a, u, omega, rows, n, y_host) if s.detail else None  # the microscope
    return make_event(index=index, start=t, tokens=tokens, n_accepted=n, seconds=clock.read(),
                      last=last, accept_probs=nan_after(a_host[:tested], n_draft),
                      omega=omega, tested_depths=list(range(1, tested + 1)), tested_probs=a_host[:tested],
                      target_forwards=1, draft_forwards=draft_forwards, detail=detail), p
