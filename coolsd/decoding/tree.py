"""Static-tree drafting and verification (spec section 4), with the same Rule methods as chains.

A tree shape is a list of paths of sibling ranks: (0,) is the first child of the root, (0, 1)
the second child of that node, and so on. Each expanded node draws its children from q without
replacement (Gumbel top-k); siblings are verified in rank order against q with the earlier
siblings removed and renormalised, and every rejection replaces p by the rule's residual.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.decoding.round import Clock, Session, make_event, nan_after, sample

# Eagle-1's default 25-node tree (`mc_sim_7b_63`; 4, 8, 8, 3, 2 nodes per depth).
EAGLE_25 = [(0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
            (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
            (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1)]

# LANTERN's static tree for LlamaGen (`naive_extend_57` in its choices.py; 5, 13, 16, 14, 9 nodes per depth).
NAIVE_EXTEND_57 = [
    (0,), (1,), (2,), (3,), (4,),
    (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (4, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 1, 0), (0, 1, 1), (0, 1, 2), (0, 2, 0), (0, 2, 1), (0, 2, 2),
    (0, 3, 0), (0, 3, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (2, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 3), (0, 0, 1, 0), (0, 0, 1, 1), (0, 0, 1, 2), (0, 0, 2, 0),
    (0, 0, 2, 1), (0, 0, 3, 0), (0, 1, 0, 0), (0, 1, 0, 1), (0, 1, 1, 0), (0, 2, 0, 0),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 0, 2), (0, 0, 0, 1, 0), (0, 0, 0, 1, 1), (0, 0, 1, 0, 0),
    (0, 0, 1, 0, 1), (0, 0, 1, 1, 0), (0, 0, 2, 0, 0),
]

def chain_tree(depth: int) -> list[tuple[int, ...]]:
    """A one-child-per-node tree: the chain of length `depth` expressed as a tree."""
    return [(0,) * d for d in range(1, depth + 1)]


def binary_tree(depth: int) -> list[tuple[int, ...]]:
    """Two children per node down to `depth` (2 + 4 + ... nodes); small, for tests."""
    paths = [()]
    out = []
    for _ in range(depth):
        paths = [p + (r,) for p in paths for r in (0, 1)]
        out += paths
    return out


TREES: dict[str, list[tuple[int, ...]]] = {
    "eagle-25": EAGLE_25,
    "lantern-57": NAIVE_EXTEND_57,
    "chain-5": chain_tree(5),
    "binary-2": binary_tree(2),
}


def validate(paths: list[tuple[int, ...]]) -> None:
    """Every prefix of a path is a node and sibling ranks are 0..c-1 (prefix-closed)."""
    nodes = set(paths)
    for path in paths:
        if path[:-1] and path[:-1] not in nodes:
            raise ValueError(f"tree path {path} has no parent {path[:-1]}")
        if path[-1] > 0 and path[:-1] + (path[-1] - 1,) not in nodes:
            raise ValueError(f"tree path {path} has no elder sibling")


def _sample_without_replacement(q: Tensor, n: int, gen: torch.Generator) -> list[int]:
    """Up to n distinct ids in draw order from (V,) probs q (Gumbel top-k; never a q == 0 token)."""
    u = torch.rand(q.shape, generator=gen, device=q.device, dtype=q.dtype).clamp_min(1e-300)
    keys = q.log() - (-u.log()).log()
    keys = keys.masked_fill(q <= 0, -math.inf)
    order = torch.topk(keys, min(n, int((q > 0).sum())), dim=-1).indices
    return order.tolist()


def tree_round(s: Session, index: int, paths: list[tuple[int, ...]]) -> RoundEvent:
    """One static-tree round: draft the tree level by level, verify it in one target forward.

    Needs at least one token left to draft (the engine runs the image's last token as a chain step).
    """
    clock = Clock()
    t = len(s.committed)
    tree_depth = max(len(p) for p in paths)  # the shape's L: what the rule's schedule is defined over
    depth_max = min(tree_depth, s.num_tokens - t - 1)  # fewer levels near the end of the image
    if depth_max < 1:
        raise ValueError("a tree round needs at least one draftable token; the last token is a plain step")
    paths = sorted((p for p in paths if len(p) <= depth_max), key=lambda p: (len(p), p))
    children: dict[tuple, list[tuple]] = {(): []}
    for p in paths:
        children.setdefault(p, [])
        children[p[:-1]].append(p)
    # 1. draft level by level; only nodes with children are fed to the drafter
    clock.switch("draft")
    out = s.ingest_pending()
    q_of: dict[tuple, Tensor] = {(): s.probs(out.logits[:, -1:])[0]}
    hidden_of = {(): None if out.hidden is None else out.hidden[:, -1:]}
    slot_of: dict[tuple, int] = {}
    token_of: dict[tuple, int] = {}
    n_calls = 1
    for d in range(1, depth_max + 1):
        clock.switch("other")
        for parent in [p for p in q_of if len(p) == d - 1]:
            kids = children.get(parent, [])
            drawn = _sample_without_replacement(q_of[parent], len(kids), s.gen)
            for kid, tok in zip(kids, drawn):
                token_of[kid] = tok
        feed = [p for p in paths if len(p) == d and p in token_of and children.get(p)]
        if not feed or d == depth_max:
            continue
        clock.switch("draft")
        length = s.drafter.length
        for j, p in enumerate(feed):
            slot_of[p] = length + j
        mask = torch.zeros(len(feed), length + len(feed), dtype=torch.bool, device=s.device)
        mask[:, :t] = True  # committed slots: the drafter holds tokens 0..t-1
        for j, p in enumerate(feed):
            for k in range(1, len(p) + 1):
                mask[j, slot_of[p[:k]]] = True
        ids = torch.tensor([token_of[p] for p in feed], device=s.device)
        hid = None if hidden_of[()] is None else torch.cat([hidden_of[p[:-1]] for p in feed], dim=1)
        pos = torch.full((len(feed),), t - 1 + d, device=s.device)
        out = s.drafter.forward(ids, hid, pos, mask)
        n_calls += 1
        for j, p in enumerate(feed):
            q_of[p] = s.probs(out.logits[:, j : j + 1])[0]
            hidden_of[p] = None if out.hidden is None else out.hidden[:, j : j + 1]
    nodes = [p for p in paths if p in token_of]
    # 2. one target forward on [x_{t-1}] + every node, with a tree attention mask
    clock.switch("verify")
    row_of = {(): 0} | {p: j + 1 for j, p in enumerate(nodes)}
    old = s.target.length
    mask = torch.zeros(1 + len(nodes), old + 1 + len(nodes), dtype=torch.bool, device=s.device)
    mask[:, : old + 1] = True
    for p in nodes:
        for k in range(1, len(p) + 1):
            mask[row_of[p], old + row_of[p[:k]]] = True
    ids = torch.cat([s.last_id, torch.tensor([token_of[p] for p in nodes], dtype=torch.long, device=s.device)])
    pos = torch.tensor([t - 1] + [t - 1 + len(p) for p in nodes], device=s.device)
    step = s.target.forward(ids, pos, mask)
    clock.switch("other")
    p_rows = s.probs(step.logits)  # (1 + N, V)
    # 3. walk the tree: siblings in rank order, each rejection replaces p by the residual
    node, accepted, first_a, tested_d, tested_a = (), [], [], [], []
    last = TokenOutcome.BONUS
    while True:
        d = len(node) + 1
        p = p_rows[row_of[node]]
        kids = [k for k in children.get(node, []) if k in token_of]
        if not kids:
            break
        depth = torch.tensor(d, device=s.device)
        q = q_of[node].clone()
        chosen = None
        for kid in kids:
            x = torch.tensor(token_of[kid], device=s.device)
            q_norm = q / q.sum()
            a = float(s.rule.accept_prob(p, q_norm, x, depth, tree_depth))
            tested_d.append(d)
            tested_a.append(a)
            if len(tested_d) == 1 or tested_d[-2] != d:
                first_a.append(a)
            if float(torch.rand((), generator=s.gen, device=s.device, dtype=p.dtype)) <= a:
                chosen = kid
                break
            p = s.rule.residual(p, q_norm, x, depth, tree_depth)
            q[token_of[kid]] = 0.0  # draw without replacement: later siblings never repeat x
        if chosen is None:
            last = TokenOutcome.RESAMPLED
            break
        accepted.append(chosen)
        node = chosen
    y = int(sample(p, s.gen))
    # 4. commit; keep the accepted path in the target cache, drop every drafted slot
    tokens = [token_of[k] for k in accepted] + [y]
    keep = torch.tensor([old + row_of[k] for k in accepted], dtype=torch.long, device=s.device)
    s.target.crop(old + 1, keep if len(accepted) else None)
    s.drafter.crop(t)
    hidden = None if step.hidden is None else step.hidden[:, [0] + [row_of[k] for k in accepted]]
    s.commit(tokens, torch.tensor(tokens, dtype=torch.long, device=s.device), hidden)
    omega_all = s.rule.omega(torch.arange(1, depth_max + 1), tree_depth).tolist()
    return make_event(index=index, start=t, tokens=tokens, n_accepted=len(accepted), seconds=clock.read(), last=last,
                      accept_probs=nan_after(first_a, depth_max), omega=omega_all, tested_depths=tested_d,
                      tested_probs=tested_a, target_forwards=1, draft_forwards=n_calls)
