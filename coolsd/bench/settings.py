"""The decoder settings a benchmark compares: one `Setting` per (rule config, drafting shape).

A setting is data: rule slug + options + draft length + tree. Settings are built from the sweep
flags (`sweep`) or from a one-line spec (`parse_spec`, e.g. "lantern++:k=10,lam=5@eagle-25").
"""

from __future__ import annotations

from dataclasses import dataclass

from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain, chain_or_tree
from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.rules import CoolSDRule, LanternPPRule, Rule, make_rule, rule_class

VANILLA = "vanilla"  # vanilla AR: no drafter, one target forward per token (not a rule)
COOL_SD = ("cool-sd", "cool-sd-jacobi")  # COOL-SD with a drafter and on Jacobi drafts: labels leave out nu = 0.7
LANTERN_PP = ("lantern++", "lantern++-jacobi")  # LANTERN++ with a drafter and on Jacobi drafts: k in the family


@dataclass(frozen=True)
class Setting:
    """One decoder to benchmark.

    rule: a slug of `coolsd.decoding.rules.RULES`, or None for vanilla AR.
    options: the rule's fields, as sorted (name, value) pairs (hashable).
    draft_len: L for chain drafting; tree: a name in `coolsd.decoding.tree.TREES` or None (chain).
    """

    rule: str | None
    options: tuple[tuple[str, object], ...] = ()
    draft_len: int = Chain.draft_len
    tree: str | None = None

    @property
    def kwargs(self) -> dict:
        return dict(self.options)

    @property
    def family(self) -> str:
        """Curve of the Pareto figure: settings that differ only in their swept strength share one."""
        return self._name() + (f" tree {self.tree}" if self.tree else "")

    @property
    def variant(self) -> str | None:
        """Its key in `coolsd.decoding.variants` ("cool-sd", "lantern++-gstar", ...), None if none matches."""
        return variants.variant_of(None if self.rule is None else {"rule": self.rule, **self.kwargs})

    def _name(self) -> str:
        """The rule slug, LANTERN++'s k, and the variant's tag ("G*", "unclipped")."""
        if self.rule is None:
            return VANILLA
        name = self.rule
        if self.rule in LANTERN_PP:
            name += f" k={self.kwargs.get('k', LanternPPRule.k)}"
        key = self.variant
        tag = variants.VARIANTS[key].tag if key else ""
        return f"{name} {tag}" if tag else name

    @property
    def label(self) -> str:
        """Unique, readable name: "cool-sd delta=2", "lantern++ k=5 G* lam=10", "eagle-1 tree eagle-25"."""
        if self.rule is None:
            return VANILLA
        key = self.variant
        hidden = set(variants.VARIANTS[key].fixed if key else ()) | ({"k"} if self.rule in LANTERN_PP else set())
        shown = {k: v for k, v in self.options if k not in hidden}
        if shown.get("nu") == CoolSDRule.nu and self.rule in COOL_SD:
            shown.pop("nu")  # the paper's value, left out of labels
        parts = [self._name()] + [f"{k}={_fmt(v)}" for k, v in shown.items()]
        jacobi = rule_class(self.rule).jacobi  # (no drafter: its window W is its draft length, named as window=W)
        if self.tree is None and self.draft_len != Chain.draft_len and not jacobi:  # the default L: unnamed
            parts.append(f"L={self.draft_len}")
        if self.tree:
            parts.append(f"tree {self.tree}")
        return " ".join(parts)

    def decode_config(self) -> DecodeConfig:
        return DecodeConfig(chain_or_tree(self.draft_len, self.tree))

    def build_rule(self, neighbours) -> Rule | None:
        """The rule object (LANTERN rules get the bundle's neighbour table); None for vanilla."""
        if self.rule is None:
            return None
        rule = make_rule(self.rule, **self.kwargs)
        if isinstance(rule, LanternPPRule):
            rule = rule.with_neighbours(neighbours)
        return rule

    def describe(self, neighbours) -> dict:
        """JSON-ready: label, family, the rule's exact config (`Rule.config()`), L and tree."""
        rule = self.build_rule(neighbours)
        config = rule.config() if rule is not None else None
        return {"setting": self.label, "family": self.family, "rule_config": config,
                "draft_len": 0 if self.rule is None else self.draft_len, "tree": self.tree}


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _setting(rule: str | None, draft_len: int, tree: str | None = None, **options) -> Setting:
    return Setting(rule, tuple(sorted(options.items())), draft_len, tree)


def parse_spec(text: str, draft_len: int = Chain.draft_len) -> Setting:
    """'rule[:name=value,...][@tree]' -> Setting, e.g. 'cool-sd:delta=2,nu=0.5@eagle-25', 'vanilla'.

    Values are read as int, then float, then true/false, else kept as text; 'L=3' sets the draft length.
    """
    body, _, tree = text.strip().partition("@")
    name, _, opts = body.partition(":")
    name = name.strip()
    options: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in opts.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"bad option {item!r} in setting {text!r}: expected name=value")
        options[key.strip()] = _value(value.strip())
    if "L" in options:
        draft_len = int(options.pop("L"))
    if name == VANILLA:
        if options or tree:
            raise ValueError(f"vanilla takes no options or tree, got {text!r}")
        return _setting(None, draft_len)
    setting = _setting(name, draft_len, tree.strip() or None, **options)
    setting.build_rule(None if name not in LANTERN_PP else _dummy_table(setting))  # fail early on bad options
    setting.decode_config()
    return setting


def _dummy_table(setting: Setting):
    import torch

    k = int(setting.kwargs.get("k", LanternPPRule.k))
    return torch.zeros(1, k + 1, dtype=torch.long)


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _variant_setting(key: str, draft_len: int, **options) -> Setting:
    """A setting of variant `key` (`coolsd.decoding.variants`): its rule, `options` and the variant's fixed options."""
    v = variants.get(key)
    return _setting(v.rule, draft_len, **(options | v.fixed))


def sweep(draft_len: int = Chain.draft_len, lantern_k: list[int] = (), lantern_lam: list[float] = (),
          lantern_gstar: bool = True,
          uniform_delta: list[float] = (), cool_delta: list[float] = (), cool_nu: float = CoolSDRule.nu,
          cool_unclipped_delta: list[float] = (), extra: list[str] = (), sjd_window: list[int] = (),
          sjd_reuse: bool = True, jacobi_cool_delta: list[float] = (),
          jacobi_lantern_lam: list[float] = ()) -> list[Setting]:
    """Vanilla AR, Eagle-1, then every swept rule at chain length `draft_len`, the no-drafter rows, then the `extra`
    specs.

    cool_delta: COOL-SD (floored at 1, the default); cool_unclipped_delta: the unclipped schedule;
    sjd_window: SJD at each window W (its draft length), and "SJD + reuse" too when `sjd_reuse`; at each W as well,
    COOL-SD on Jacobi drafts at each of `jacobi_cool_delta` (nu = `cool_nu`) and LANTERN++ on Jacobi drafts at each
    of `jacobi_lantern_lam` (k: the first of `lantern_k`, else the rule's).
    """
    out = [_setting(None, draft_len), _setting("eagle-1", draft_len)]
    for k in lantern_k:
        out += [_variant_setting("lantern++", draft_len, k=int(k), lam=float(lam)) for lam in lantern_lam]
    if lantern_gstar:
        for k in lantern_k:
            out += [_variant_setting("lantern++-gstar", draft_len, k=int(k), lam=float(lam)) for lam in lantern_lam]
    out += [_setting("uniform-rsd", draft_len, delta=float(d)) for d in uniform_delta]
    out += [_variant_setting("cool-sd", draft_len, delta=float(d), nu=float(cool_nu)) for d in cool_delta]
    out += [_variant_setting("cool-sd-unclipped", draft_len, delta=float(d), nu=float(cool_nu))
            for d in cool_unclipped_delta]
    for key in ("sjd", "sjd-reuse") if sjd_reuse else ("sjd",):
        out += [_variant_setting(key, int(w), window=int(w)) for w in sjd_window]
    for w in sjd_window:
        out += [_variant_setting("cool-sd-jacobi", int(w), window=int(w), delta=float(d), nu=float(cool_nu))
                for d in jacobi_cool_delta]
        k = int(lantern_k[0]) if lantern_k else LanternPPRule.k
        out += [_variant_setting("lantern++-jacobi", int(w), window=int(w), k=k, lam=float(lam))
                for lam in jacobi_lantern_lam]
    out += [parse_spec(s, draft_len) for s in extra]
    labels = [s.label for s in out]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"settings listed twice: {dupes}")
    return out
