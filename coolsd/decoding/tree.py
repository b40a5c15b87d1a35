"""Static-tree drafting and verification (spec section 4), with the same Rule methods as chains.

A tree shape is a list of paths of sibling ranks: (0,) is the first child of the root, (0, 1)
the second child of that node, and so on. Each expanded node draws its children from q without
replacement (Gumbel top-k), every random number from the session's noise source (one stream: a tree runs only
there, `coolsd.decoding.drafting.Tree.same_noise`); siblings are verified in rank order against q with the earlier
siblings removed and renormalised, and every rejection replaces p by the rule's residual.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from coolsd.decoding.events import RoundEvent, TokenOutcome
from coolsd.decoding.protocol import ModelStep
from coolsd.decoding.round import Clock, Session, make_event, nan_after

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


@dataclass
class DraftTree:
    """One round's tree as drafted. Nodes are paths of sibling ranks (`()` is the root: the last committed
    token). children: node -> its child paths in rank order (the shape, cut at the round's depth);
    token_of: node -> drafted id; q_of: node -> (V,) draft probs of its children; hidden_of: node ->
    the drafter's (1, 1, D) feature (None for drafters without features); slot_of: node -> its drafter
    cache slot; calls: drafter forwards so far."""

    paths: list[tuple[int, ...]]
    children: dict[tuple, list[tuple]]
    token_of: dict[tuple, int] = field(default_factory=dict)
    q_of: dict[tuple, Tensor] = field(default_factory=dict)
    hidden_of: dict[tuple, Tensor | None] = field(default_factory=dict)
    slot_of: dict[tuple, int] = field(default_factory=dict)
    calls: int = 0

    @property
    def nodes(self) -> list[tuple[int, ...]]:
        """The drafted nodes, by depth then rank (the target's verify rows 1..N)."""
        return [p for p in self.paths if p in self.token_of]


@dataclass
class Walk:
    """The verification walk: accepted nodes (root to leaf), the distribution the last token is drawn from,
    how the round ended, and every acceptance test (depth, a) with the first a at each depth."""

    accepted: list[tuple[int, ...]] = field(default_factory=list)
    p: Tensor | None = None
    last: TokenOutcome = TokenOutcome.BONUS
    first_a: list[float] = field(default_factory=list)
    tested_d: list[int] = field(default_factory=list)
    tested_a: list[float] = field(default_factory=list)


def cut_shape(paths: list[tuple[int, ...]], depth_max: int) -> DraftTree:
    """The shape's nodes down to `depth_max`, by depth then rank, with each node's children."""
    paths = sorted((p for p in paths if len(p) <= depth_max), key=lambda p: (len(p), p))
    children: dict[tuple, list[tuple]] = {(): []}
    for p in paths:
        children.setdefault(p, [])
        children[p[:-1]].append(p)
    return DraftTree(paths, children)


def _draw_children(s: Session, tree: DraftTree, d: int) -> None:
    """Draw the depth-d nodes: each depth-(d-1) parent's children from its q, without replacement."""
    for parent in [p for p in tree.q_of if len(p) == d - 1]:
        kids = tree.children.get(parent, [])
        drawn = s.noise.children(tree.q_of[parent], len(kids))
        for kid, tok in zip(kids, drawn):
            tree.token_of[kid] = tok


def _draft_level(s: Session, tree: DraftTree, feed: list[tuple[int, ...]], t: int, d: int) -> None:
    """One drafter forward on the depth-d nodes `feed` (each sees the committed tokens and its ancestors);
    records each node's q and feature for its children."""
    length = s.drafter.length
    for j, p in enumerate(feed):
        tree.slot_of[p] = length + j
    mask = torch.zeros(len(feed), length + len(feed), dtype=torch.bool, device=s.device)
    mask[:, :t] = True  # committed slots: the drafter holds tokens 0..t-1
    for j, p in enumerate(feed):
        for k in range(1, len(p) + 1):
            mask[j, tree.slot_of[p[:k]]] = True
    ids = torch.tensor([tree.token_of[p] for p in feed], device=s.device)
    hid = None if tree.hidden_of[()] is None else torch.cat([tree.hidden_of[p[:-1]] for p in feed], dim=1)
    pos = torch.full((len(feed),), t - 1 + d, device=s.device)
    out = s.drafter.forward(ids, hid, pos, mask)
    tree.calls += 1
    for j, p in enumerate(feed):
        tree.q_of[p] = s.probs(out.logits[:, j : j + 1])[0]
        tree.hidden_of[p] = None if out.hidden is None else out.hidden[:, j : j + 1]


def draft_tree(s: Session, tree: DraftTree, t: int, depth_max: int, clock: Clock) -> None:
    """Draft `tree` level by level from the committed prefix of length t; only nodes with children are fed
    to the drafter (the deepest level never is)."""
    clock.switch("draft")
    out = s.ingest_pending()
    tree.q_of[()] = s.probs(out.logits[:, -1:])[0]
    tree.hidden_of[()] = None if out.hidden is None else out.hidden[:, -1:]
    tree.calls = 1
    for d in range(1, depth_max + 1):
        clock.switch("other")
        _draw_children(s, tree, d)
        feed = [p for p in tree.paths if len(p) == d and p in tree.token_of and tree.children.get(p)]
        if feed and d < depth_max:
            clock.switch("draft")
            _draft_level(s, tree, feed, t, d)


def verify_tree(s: Session, tree: DraftTree, t: int) -> tuple[ModelStep, dict[tuple, int], int]:
    """One target forward on [x_{t-1}] + every drafted node with a tree attention mask.

    Returns the target's step (logits (1 + N, V) rows, root first), node -> row, and the target's cache
    length before the forward."""
    nodes = tree.nodes
    row_of = {(): 0} | {p: j + 1 for j, p in enumerate(nodes)}
    old = s.target.length
    mask = torch.zeros(1 + len(nodes), old + 1 + len(nodes), dtype=torch.bool, device=s.device)
    mask[:, : old + 1] = True
    for p in nodes:
        for k in range(1, len(p) + 1):
            mask[row_of[p], old + row_of[p[:k]]] = True
    ids = torch.cat([s.last_id, torch.tensor([tree.token_of[p] for p in nodes], dtype=torch.long, device=s.device)])
    pos = torch.tensor([t - 1] + [t - 1 + len(p) for p in nodes], device=s.device)
    return s.target.forward(ids, pos, mask), row_of, old


def _test_siblings(s: Session, tree: DraftTree, walk: Walk, node: tuple, p: Tensor,
                   tree_depth: int) -> tuple[tuple | None, Tensor]:
    """Test `node`'s drafted children in rank order against q with the earlier siblings removed; each
    rejection replaces p by the rule's residual. Returns (the accepted child or None, the current p)."""
    d = len(node) + 1
    depth = torch.tensor(d, device=s.device)
    q = tree.q_of[node].clone()
    for kid in [k for k in tree.children.get(node, []) if k in tree.token_of]:
        x = torch.tensor(tree.token_of[kid], device=s.device)
        q_norm = q / q.sum()
        a = float(s.rule.accept_prob(p, q_norm, x, depth, tree_depth))
        walk.tested_d.append(d)
        walk.tested_a.append(a)
        if len(walk.tested_d) == 1 or walk.tested_d[-2] != d:
            walk.first_a.append(a)
        if s.accepted([a], [s.noise.uniform()]):
            return kid, p
        p = s.rule.residual(p, q_norm, x, depth, tree_depth)
        q[tree.token_of[kid]] = 0.0  # draw without replacement: later siblings never repeat x
    return None, p


def walk_tree(s: Session, tree: DraftTree, p_rows: Tensor, row_of: dict[tuple, int], tree_depth: int) -> Walk:
    """Walk from the root: accept a child and go down, until a node has no drafted child (bonus) or every
    child is rejected (resampled). `walk.p` is what the round's last token is drawn from."""
    walk, node = Walk(), ()
    while True:
        p = p_rows[row_of[node]]
        if not any(k in tree.token_of for k in tree.children.get(node, [])):
            break
        chosen, p = _test_siblings(s, tree, walk, node, p, tree_depth)
        if chosen is None:
            walk.last = TokenOutcome.RESAMPLED
            break
        walk.accepted.append(chosen)
        node = chosen
    walk.p = p
    return walk


def tree_round(s: Session, index: int, paths: list[tuple[int, ...]]) -> RoundEvent:
    """One static-tree round: draft the tree level by level, verify it in one target forward, walk it.

    Needs at least one token left to draft (the engine runs the image's last token as a chain step).
    """
    clock = s.clock()
    t = len(s.committed)
    tree_depth = max(len(p) for p in paths)  # the shape's L: what the rule's schedule is defined over
    depth_max = min(tree_depth, s.num_tokens - t - 1)  # fewer levels near the end of the image
    if depth_max < 1:
        raise ValueError("a tree round needs at least one draftable token; the last token is a plain step")
    tree = cut_shape(paths, depth_max)
    draft_tree(s, tree, t, depth_max, clock)
    clock.switch("verify")
    step, row_of, old = verify_tree(s, tree, t)
    clock.switch("other")
    walk = walk_tree(s, tree, s.probs(step.logits), row_of, tree_depth)
    y = int(s.draw(walk.p, s.noise.uniform()))
    # commit; keep the accepted path in the target cache, drop every drafted slot
    tokens = [tree.token_of[k] for k in walk.accepted] + [y]
    keep = torch.tensor([old + row_of[k] for k in walk.accepted], dtype=torch.long, device=s.device)
    s.target.crop(old + 1, keep if walk.accepted else None)
    s.drafter.crop(t)
    hidden = None if step.hidden is None else step.hidden[:, [0] + [row_of[k] for k in walk.accepted]]
    s.commit(tokens, torch.tensor(tokens, dtype=torch.long, device=s.device), hidden)
    omega_all = s.omegas(depth_max, tree_depth)
    return make_event(index=index, start=t, tokens=tokens, n_accepted=len(walk.accepted), seconds=clock.read(),
                      last=walk.last, accept_probs=nan_after(walk.first_a, depth_max), omega=omega_all,
                      tested_depths=walk.tested_d, tested_probs=walk.tested_a, target_forwards=1,
                      draft_forwards=tree.calls)
