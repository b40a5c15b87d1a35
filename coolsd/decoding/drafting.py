"""How a round's drafts are made (spec sections 2, 4, 4b), chosen independently of the acceptance rule.

A decode is a (drafting, rule) pair: the drafting makes the drafts x_1..x_L and the proposals q_1..q_L they were
drawn from, the rule (`coolsd.decoding.rules`) tests them against the target's p_1..p_L. A rule never needs to
know how its drafts were made: it sees (p, q, x, depth, draft_len) only, with draft_len the `draft_len` of the
drafting (the L its schedule is defined over). Three draftings, one small frozen dataclass each:

    Chain(draft_len=L)                 a drafter's chain of L drafts per round (`coolsd.decoding.chain`)
    Tree(shape="eagle-25")             a drafter's static tree (`coolsd.decoding.tree`, shapes in TREES)
    Jacobi(window=W, reuse, init)      no drafter: the target drafts for itself one iteration late (SJD,
                                       `coolsd.decoding.jacobi`); any rule runs on it, e.g. SJD = Eagle-1's test

Each answers `needs_drafter`, `draft_len` and `rounds(session)` (index -> the next RoundEvent), takes every random
number from the session's noise source (`coolsd.decoding.noise`), and says whether same noise can apply to it
(`same_noise`; `coolsd.decoding.noise.check_noise` is the one refusal). Its fields are its settings: defaults and
a control's range (`knob`) live here, once. `make_drafting("jacobi", window=8)` builds one by name; `config()` is
its JSON form ({"drafting": name, fields...}), which `drafting_of` reads back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import ClassVar

from coolsd.decoding.chain import chain_round
from coolsd.decoding.events import RoundEvent
from coolsd.decoding.jacobi import JacobiDrafts
from coolsd.decoding.round import Session
from coolsd.decoding.rules import MAX_SCHEDULE_LEN, knob
from coolsd.decoding.tree import TREES, tree_round
from coolsd.util.checks import check_bool, check_choice, check_int, show

JACOBI_INITS = ("last", "uniform")  # Jacobi.init: the proposal of a window position no forward has seen yet


@dataclass(frozen=True)
class Drafting:
    """Base of the draftings: its name, whether it reads a drafter, and whether same noise applies to it."""

    name: ClassVar[str] = ""
    needs_drafter: ClassVar[bool] = True
    same_noise: ClassVar[bool] = True  # False: its draws cannot be keyed by position (`check_noise` refuses)
    detail: ClassVar[bool] = True  # its rounds report a RoundDetail under `DecodeConfig.detail` (the microscope)

    @property
    def draft_len(self) -> int:
        """L: drafts per round, the length a rule's schedule is defined over."""
        raise NotImplementedError

    def rounds(self, s: Session) -> Callable[[int], RoundEvent]:
        """index -> the next RoundEvent of session `s` (which has a rule, and a drafter if `needs_drafter`)."""
        raise NotImplementedError

    def config(self) -> dict:
        """Name + fields, JSON-ready (what traces and benchmarks record beside the rule's config)."""
        return {"drafting": self.name} | asdict(self)


@dataclass(frozen=True)
class Chain(Drafting):
    """A drafter's chain: L drafts per round, each drawn from the drafter's q given the ones before it."""

    name: ClassVar[str] = "chain"
    # (choice) L = 2: the race's and the benchmark's default, chosen on the shipped emoji model by
    # `python -m coolsd.bench.tuning` (its table: assets/emoji/bench/round_tuning.md)
    draft_len: int = knob(2, 1, 8, 1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft_len", check_int("draft_len", self.draft_len, 1))  # (3.0 from a JSON client)

    def rounds(self, s):
        return lambda index: chain_round(s, index, self.draft_len)


@dataclass(frozen=True)
class Tree(Drafting):
    """A drafter's static tree: each expanded node draws its children without replacement (spec section 4);
    the shape's depth is the draft length. Same noise does not apply: siblings are drawn from one stream."""

    name: ClassVar[str] = "tree"
    same_noise: ClassVar[bool] = False
    detail: ClassVar[bool] = False
    shape: str = "eagle-25"

    def __post_init__(self) -> None:
        check_choice("tree", self.shape, sorted(TREES))

    @property
    def paths(self) -> list[tuple[int, ...]]:
        return TREES[self.shape]

    @property
    def draft_len(self) -> int:
        return max(len(p) for p in self.paths)

    def rounds(self, s):
        def round_(index: int) -> RoundEvent:
            # the last token of an image has nothing left to draft: a plain target step
            if len(s.committed) == s.num_tokens - 1:
                return chain_round(s, index, self.draft_len)
            return tree_round(s, index, self.paths)

        return round_


@dataclass(frozen=True)
class Jacobi(Drafting):
    """Jacobi drafting (spec section 4b): no draft model, the target drafts for itself one iteration late.

    window: W, drafts per iteration (one target forward of the last committed token + W drafts); the draft length;
    reuse: False = every draft drawn afresh from its q; True (ours, after SJD++): a position keeps its previous draft
        with probability min(1, q(d) / q_prev(d)) (a maximal coupling of the two proposals);
    init: the proposal of a position no forward has computed yet: "last" (choice) = the last distribution the
        target computed, "uniform" = 1/V.
    """

    name: ClassVar[str] = "jacobi"
    needs_drafter: ClassVar[bool] = False
    # (choice) W = 4: chosen on the shipped emoji model (its table: assets/emoji/bench/sjd_window.md)
    window: int = knob(4, 1, 16, 1)
    reuse: bool = False
    init: str = "last"

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", check_int("Jacobi window W", self.window, 1, MAX_SCHEDULE_LEN))
        check_bool("reuse", self.reuse)
        if self.init not in JACOBI_INITS:
            raise ValueError(f"init must be one of {', '.join(JACOBI_INITS)}, got {show(self.init)}")

    @property
    def draft_len(self) -> int:
        return self.window

    def rounds(self, s):
        return JacobiDrafts(s, self).round


DRAFTINGS: dict[str, type[Drafting]] = {d.name: d for d in (Chain, Tree, Jacobi)}


def make_drafting(name: str, **kwargs) -> Drafting:
    """Build a drafting by name: make_drafting("chain", draft_len=3), make_drafting("jacobi", window=8, reuse=True).
    Unknown names or fields raise ValueError."""
    cls = DRAFTINGS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown drafting {show(name)}; choose one of {', '.join(DRAFTINGS)}")
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ValueError(f"bad options for drafting {name!r}: {err}") from None


def drafting_of(config: dict) -> Drafting:
    """The drafting a `Drafting.config()` dict names (keys other than its fields are ignored: a racer's config
    holds the rule's too)."""
    cls = DRAFTINGS.get(config.get("drafting"))
    if cls is None:
        raise ValueError(f"unknown drafting {show(config.get('drafting'))}; choose one of {', '.join(DRAFTINGS)}")
    names = {f for f in cls.__dataclass_fields__}
    return cls(**{k: v for k, v in config.items() if k in names})


def chain_or_tree(draft_len: int = Chain.draft_len, tree: str | None = None) -> Drafting:
    """A drafter's drafting from a (draft length, tree name or None) pair: the tree if one is named, else the chain."""
    return Tree(tree) if tree is not None else Chain(draft_len)
