"""The race settings: `RaceSettings`, one field per /race argument in API order (new ones appended), each with a
per-model `Spec` making its check and control; a rule setting's default and range are its rule field's (`rule_knob`).
Checks run in the handlers (preprocess=False): Gradio swaps an updated component for a fresh copy per session."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

import gradio as gr

from coolsd.app import racers as choice
from coolsd.app.context import MAX_SEED, Context, bad, user_errors
from coolsd.compare.race import Race, Racer
from coolsd.compare.trace import RaceTrace, TraceSettings, recorded_seed
from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain, Drafting, Jacobi, chain_or_tree
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.noise import NOISES
from coolsd.decoding.omega_text import format_omegas, parse_omegas
from coolsd.decoding.rules import (
    CoolSDRule,
    CustomScheduleRule,
    LanternPPRule,
    LanternRule,
    LinearDecayRule,
    Rule,
    UniformRSDRule,
)
from coolsd.decoding.sampling import SamplingConfig
from coolsd.decoding.tree import TREES
from coolsd.models.conditions import STYLE_SEP, default_condition, name_choices
from coolsd.util.checks import check_bool, check_choice, check_int, check_number, same_value, show

MAX_DRAFT_LEN = {f.name: f for f in fields(Chain)}["draft_len"].metadata["ui"][1]  # the L slider's top (Chain's knob)
# (choice) the end of COOL-SD's delta slider: past where the shipped models' pictures break (the Lab's sweep,
# `python -m coolsd.bench.delta_sweep`), so a visitor sees relaxation cost; tests/app check it covers every sweep
DELTA_TOP = 1024.0
MAX_OMEGAS_CHARS = 400  # the custom schedule's text (at most 64 numbers; longer is a typo or an attack)
MEAN_OMEGA = CoolSDRule.mu is None  # "mean omega = delta" is on by default exactly when the rule's mu is (None)
DEFAULT_OMEGAS = format_omegas(CustomScheduleRule.omegas)  # the custom racer's list, as text (the rule's default)
DRAFTING = {"chain": "chain (L drafts per round)", "eagle-25": "static tree (Eagle-1's 25 nodes)"}
assert set(DRAFTING) - {"chain"} <= set(TREES), "every static tree offered must exist in coolsd.decoding.tree.TREES"
NOISE = {"stream": "one stream: each racer reads its own dice",
         "same": "same noise: dice keyed by position (lossless racers draw vanilla AR's picture)"}
assert tuple(NOISE) == NOISES, "the noise choices are the library's (coolsd.decoding.noise.NOISES)"
NOISE_INFO = ("Same noise: the dice of token j are keyed by (seed, j), so racers differ by their rules, not their "
              "dice (not with a static tree). The overlay then marks where each picture left vanilla AR's.")
EXAMPLE_PROMPTS = ["a red fox sitting in the snow, photo", "a lighthouse on a cliff at sunset",
                   "a bowl of ramen, studio lighting"]
WIDGETS = {"dropdown": gr.Dropdown, "radio": gr.Radio, "checkboxgroup": gr.CheckboxGroup, "textbox": gr.Textbox}


@dataclass(frozen=True)
class Spec:
    label: str
    kind: str  # "number" | "int" | "bool" | "choice" | "custom"
    default: object
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None  # a slider (None: a number box)
    choices: tuple = ()  # (label, value) pairs
    widget: str = ""
    elem_id: str | None = None
    check_fn: Callable | None = None  # "custom": value -> clean value, or ValueError / gr.Error
    extra: Mapping = field(default_factory=dict)  # more component kwargs
    name: str | None = None  # the setting's name in messages (default: the label; lower-cased in "unknown <name>")

    def check(self, value):
        """The clean value, or a ValueError (gr.Error from a custom check) whose message names the label."""
        if self.kind in ("number", "int"):
            check = check_number if self.kind == "number" else check_int
            return check(self.name or self.label, value, self.minimum, self.maximum)
        if self.kind == "bool":
            return check_bool(self.name or self.label, value)
        if self.kind == "choice":
            return check_choice(self.name or self.label.lower(), value, [v for _, v in self.choices])
        return self.check_fn(value)

    def component(self, **extra) -> gr.components.Component:
        """The control showing the default (or `value=`); also the update to this Spec on a model switch."""
        kw = {"label": self.label, "value": self.default, "elem_id": self.elem_id, "visible": True, **self.extra,
              **extra}
        if self.kind in ("number", "int") and self.step is not None:
            return gr.Slider(self.minimum, self.maximum, step=self.step, **kw)
        if self.kind in ("number", "int"):
            return gr.Number(minimum=self.minimum, maximum=self.maximum, precision=0 if self.kind == "int" else None,
                             **kw)
        if self.kind == "bool":
            return gr.Checkbox(**kw)
        widget = WIDGETS[self.widget]
        return widget(choices=list(self.choices), **kw) if self.choices else widget(**kw)


def _top_k(ctx: Context) -> Spec:
    top = int(getattr(ctx.model.target, "vocab_size", 256))  # the codebook size: top-k >= V keeps every code
    return Spec("top-k (0 = off)", "int", min(ctx.model.default_sampling.top_k, top), 0, top, 1, elem_id="top-k")


def _condition(ctx: Context) -> Spec:
    m = ctx.model
    if m.conditioning == "text":
        def check_prompt(value):
            ctx.check_condition(value)  # the model family's own prompt check (gr.Error)
            return value

        prompts = m.example_prompts or EXAMPLE_PROMPTS
        return Spec("Prompt", "custom", prompts[0], widget="textbox", elem_id="condition", check_fn=check_prompt,
                    extra={"max_length": m.max_prompt_chars, "lines": 2})
    names = m.conditions

    def check_name(value):
        """The class name `value` means (typos matched); an engine id (int or digits) stays an id (its style too)."""
        cond = ctx.check_condition(value, None)
        return value if names.is_id(value) or names.label(cond) == value else names.split(cond)[0]

    label = {"emoji": "Emoji", "digit": "Digit"}.get(names.noun, "Class")
    return Spec(label, "custom", default_condition(names, m.default_class)[0],
                choices=tuple(name_choices(names, m.class_chars)), widget="dropdown", elem_id="condition",
                check_fn=check_name, name=names.noun, extra={"allow_custom_value": True, "filterable": True})


def _style(ctx: Context) -> Spec:
    """The emoji style ("" = the default); models without styles take any text and ignore it."""
    names = ctx.model.conditions if ctx.model.conditioning == "class" else None
    styles = list(names.styles) if names else []
    default = default_condition(ctx.model.conditions, ctx.model.default_class)[1]

    def check_style(value):
        if not isinstance(value, str):
            raise ValueError(f"style must be a text such as {show(default or 'Noto')}, got {show(value)}")
        if not styles:
            return ""
        return default if value == "" else styles[names.style_index(value)]

    choices = tuple((n, n) for n in styles) or (("", ""),)  # (a hidden control without styles)
    return Spec("Style", "custom", default, choices=choices, widget="dropdown", elem_id="style",
                check_fn=check_style, extra={"visible": bool(styles)})


def _model(ctx: Context) -> Spec:
    catalogue = ctx.catalogue
    choices = tuple(catalogue.choices()) if catalogue else ((ctx.model.name, ctx.model_key),)
    return Spec("Model", "custom", ctx.model_key, choices=choices, widget="dropdown", elem_id="model",
                check_fn=catalogue.check if catalogue else lambda v: check_choice("model", v, [ctx.model_key]),
                extra={"visible": len(choices) > 1})


def _racers(ctx: Context) -> Spec:
    group = f"the last {len(choice.NO_DRAFTER)}: no drafter, the target drafts for itself"
    return Spec(f"Racers (up to {choice.MAX_RACERS}; vanilla AR always races; {group})", "custom",
                list(choice.DEFAULT_RACERS), choices=tuple((label, key) for key, label in choice.RACERS.items()),
                widget="checkboxgroup", elem_id="racers", check_fn=choice.check_racers)


def _resolution(ctx: Context) -> Spec:
    variants = list(ctx.variants) or [ctx.variant_key]
    return Spec("resolution (px)", "choice", ctx.variant_key, choices=tuple((v, v) for v in variants), widget="radio",
                elem_id="resolution", extra={"visible": len(variants) > 1}, name="resolution")


def _omegas(text) -> str:
    """The custom schedule's text, kept as typed once it parses (the rule checks the values when it races)."""
    if not isinstance(text, str):  # (the library also takes a list; the API's argument is text, as a link carries it)
        raise ValueError(f"custom omegas must be text such as '2, 1, 0.5', got {show(text)}")
    if len(text) > MAX_OMEGAS_CHARS:
        raise ValueError(f"the custom omega list is too long: {len(text)} characters (at most {MAX_OMEGAS_CHARS})")
    choice.parse_omegas(text)
    return text


def specs(ctx: Context) -> dict[str, Spec]:
    """name -> Spec of every race setting for this model, in the API's order (RaceSettings' field order)."""
    return {f.name: f.metadata["spec"](ctx) for f in fields(RaceSettings)}


def setting(make: Callable[[Context], Spec]):
    return field(metadata={"spec": make})


def _number(label: str, default: Callable, low: float, high: float, step: float, elem_id: str, kind: str = "number"):
    return setting(lambda ctx: Spec(label, kind, default(ctx), low, high, step, elem_id=elem_id))


def rule_field(rule: type, name: str) -> dataclasses.Field:
    return {f.name: f for f in fields(rule)}[name]


def rule_spec(rule: type, name: str, label: str, elem_id: str, kind: str = "number", default=None,
              top: float | None = None, extra: Mapping | None = None, reach: float | None = None) -> Spec:
    """A control for `rule`'s field `name` at its default, range and step; `top` lowers the top, `reach` raises it."""
    low, high, step = rule_field(rule, name).metadata["ui"]
    high = high if top is None else min(high, top)
    high = high if reach is None else max(high, reach)
    value = rule_field(rule, name).default if default is None else default
    return Spec(label, kind, value if value is None else min(value, high), low, high, step, elem_id=elem_id,
                extra=extra or {})


def rule_setting(make: Callable[[Context], Spec], default, sets: Mapping[str, str] | None = None,
                 read: Callable[[Mapping], object] | None = None):
    """A field setting rule fields (`sets`: slug -> field); read(all rule settings): the rule's value if not its own."""
    return field(metadata={"spec": make, "default": default, "sets": dict(sets or {}), "read": read})


def rule_knob(rule: type[Rule], name: str, label: str, elem_id: str, kind: str = "number", default=None,
              high: Callable | None = None, extra: Mapping | None = None, also: tuple[type[Rule], ...] = (),
              read: Callable[[Mapping], object] | None = None, reach: float | None = None):
    """A `rule_setting` for field `name` of `rule` and each of `also` (control: `rule_spec`; `high(ctx)`: a top)."""
    return rule_setting(lambda ctx: rule_spec(rule, name, label, elem_id, kind, default,
                                              None if high is None else high(ctx), extra, reach),
                        rule_field(rule, name).default if default is None else default,
                        {r.name: name for r in (rule, *also)}, read)


@dataclass(frozen=True)
class RacePlan:
    """What one race runs; config: shared drafting and noise (vanilla AR's); rules / configs: the other racers'."""

    ctx: Context
    cond: object
    keys: list[str]
    sampling: SamplingConfig
    config: DecodeConfig
    rules: dict[str, Rule]
    configs: dict[str, DecodeConfig]
    recorded: TraceSettings

    def trace(self) -> RaceTrace:
        """An empty trace of this race: its racers (vanilla AR last) and settings."""
        m = self.ctx.model
        racers = [(k, choice.RACERS[k]) for k in self.keys] + [choice.VANILLA]
        return RaceTrace(m.name, self.recorded, racers, m.num_tokens, m.grid)

    def race(self, trace: RaceTrace, lane: list) -> Race:
        """The race of `trace`'s racers on a lane (`Context.lane`), seeded with the race's seed; close it when done."""
        racers = []
        for (key, label), (target, drafter) in zip(trace.racers, lane):
            events = generate(target, drafter, self.rules.get(key), cond=self.cond, num_tokens=trace.num_tokens,
                              sampling=self.sampling, config=self.configs.get(key, self.config),
                              seed=self.recorded.seed)
            racers.append(Racer(key, label, events, trace.num_tokens))
        return Race(racers, workers=self.ctx.race_threads)


@dataclass(frozen=True)
class RaceSettings:
    """The /race arguments in order (checked values); each field's Spec is made per model (`specs(ctx)`)."""

    condition: str = setting(_condition)
    seed: int = setting(lambda ctx: Spec("seed", "int", recorded_seed(ctx.model.name), 0, MAX_SEED, elem_id="seed"))
    temperature: float = _number("temperature (0 = greedy)", lambda ctx: ctx.model.default_sampling.temperature,
                                 0.0, 2.0, 0.05, "temperature")
    top_k: int = setting(_top_k)
    cfg_scale: float = _number("CFG scale (1 = off)", lambda ctx: ctx.model.default_sampling.cfg_scale, 1.0, 10.0,
                               0.1, "cfg")
    draft_len: int = setting(lambda ctx: rule_spec(Chain, "draft_len", "draft length L", "draft-len", kind="int"))
    drafting: str = setting(lambda ctx: Spec("Drafting", "choice", "chain", widget="radio", elem_id="drafting",
                                             choices=tuple((v, k) for k, v in DRAFTING.items())))
    delta: float = rule_knob(CoolSDRule, "delta", "delta (overall relaxation)", "delta",
                             reach=DELTA_TOP)  # (COOL-SD with or without a drafter: one rule, one setting)
    nu: float = rule_knob(CoolSDRule, "nu", "nu (annealing rate)", "nu")
    mu: float = rule_knob(CoolSDRule, "mu", "mu (schedule shift)", "mu", default=0.0,
                          extra={"interactive": not MEAN_OMEGA},
                          read=lambda v: None if v["mean_omega"] else v["mu"])  # (None: mean-normalised)
    mean_omega: bool = rule_setting(lambda ctx: Spec("mean omega = delta (sets mu)", "bool", MEAN_OMEGA,
                                                     elem_id="mean-omega"), MEAN_OMEGA)  # (read by mu)
    lantern_k: int = rule_knob(LanternPPRule, "k", "k (neighbours)", "lantern-k", kind="int", also=(LanternRule,),
                               high=lambda ctx: ctx.k_max)  # (the model's neighbour table bounds k)
    lantern_lambda: float = rule_knob(LanternPPRule, "lam", "lambda (budget)", "lantern-lambda")
    overlay: bool = setting(lambda ctx: Spec("overlay: colour tokens by outcome", "bool", False, elem_id="overlay"))
    racers: list[str] = setting(_racers)
    uniform_delta: float = rule_knob(UniformRSDRule, "delta", "UniformRSD delta", "uniform-delta")
    linear_delta: float = rule_knob(LinearDecayRule, "delta", "linear decay delta (mean omega)", "linear-delta")
    linear_slope: float = rule_knob(LinearDecayRule, "slope", "linear decay slope (0 = uniform, 1 = falls to 0)",
                                    "linear-slope")
    custom_omegas: str = rule_setting(lambda ctx: Spec("custom schedule ω₁, ω₂, …", "custom", DEFAULT_OMEGAS,
                                                       widget="textbox", elem_id="custom-omegas", check_fn=_omegas,
                                                       extra={"max_lines": 1}),
                                      DEFAULT_OMEGAS, {CustomScheduleRule.name: "omegas"},
                                      read=lambda v: parse_omegas(v["custom_omegas"]))  # (text in the race)
    resolution: str = setting(_resolution)
    model: str = setting(_model)  # (appended after the original arguments: older API calls keep their meaning)
    style: str = setting(_style)
    sjd_window: int = setting(lambda ctx: rule_spec(Jacobi, "window", "SJD window W (drafts per iteration)",
                                                    "sjd-window", kind="int"))  # no-drafter racers' Jacobi window
    noise: str = setting(lambda ctx: Spec("Noise", "choice", DecodeConfig().noise, choices=tuple(
        (v, k) for k, v in NOISE.items()), widget="radio", elem_id="noise", name="noise",
        extra={"info": NOISE_INFO}))  # (appended last: older calls keep their meaning)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def defaults(cls, ctx: Context) -> RaceSettings:
        return cls(**{name: spec.default for name, spec in specs(ctx).items()})

    @classmethod
    def check(cls, ctx: Context, values: Mapping) -> RaceSettings:
        """Every value checked (missing: default) by the picked model's Specs; one gr.Error for the first bad one."""
        unknown = set(values) - set(cls.names())
        if unknown:
            raise bad(f"unknown race setting {show(sorted(unknown)[0])}")
        picked = ctx.picked(values["model"]) if "model" in values else ctx  # (missing: the default, the app's)
        return cls(**check_values(specs(picked), follow_model(ctx, picked, values), defaults=True))

    @classmethod
    def signature(cls, ctx: Context) -> inspect.Signature:
        """The handler's signature: one parameter per setting (default: the setting's), then the request."""
        p = inspect.Parameter
        params = [p(name, p.POSITIONAL_OR_KEYWORD, default=spec.default) for name, spec in specs(ctx).items()]
        return inspect.Signature([*params, p("request", p.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request)])

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes) -> RaceSettings:
        return dataclasses.replace(self, **changes)

    def plan(self, ctx: Context) -> RacePlan:
        """The plan, or one gr.Error for what single values do not show (rules, configs; share links too)."""
        variant = ctx.for_model(self.model).variant(self.resolution)
        cond = variant.check_condition(self.condition, self.style)
        with user_errors():
            sampling = SamplingConfig(cfg_scale=self.cfg_scale, temperature=self.temperature, top_k=self.top_k)
            config = DecodeConfig(self.shared_drafting(), noise=self.noise)
            configs = {key: dataclasses.replace(config, drafting=self.drafting_of(key)) for key in self.racers}
        rules = make_rules(variant, self.racers, self.as_dict())
        m = variant.model
        recorded = TraceSettings(
            m.conditions.label(cond) if m.conditioning == "class" else cond, self.seed, sampling, self.draft_len,
            self.drafting, self.noise, tuple(self.racers), variant.variant_key, variant.model_key, self.style,
            m.execution, {k: r.config() for k, r in rules.items()},
            {k: c.drafting.config() for k, c in configs.items()})
        return RacePlan(variant, cond, self.racers, sampling, config, rules, configs, recorded)

    def shared_drafting(self) -> Drafting:
        """The racers with a drafter: a chain of `draft_len`, or the static tree named."""
        return chain_or_tree(self.draft_len, None if self.drafting == "chain" else self.drafting)

    def drafting_of(self, key: str) -> Drafting:
        """Racer `key`'s drafting: Jacobi iteration of window `sjd_window` for the no-drafter group, else shared."""
        return variants.drafting(key, self.shared_drafting(), {"window": self.sjd_window})


def rule_options(key: str, values: Mapping) -> dict:
    """Racer `key`'s rule options at race settings `values`; only that rule's are read (a bad one stops it alone)."""
    slug = variants.get(key).rule
    table = {f.name: f.metadata for f in fields(RaceSettings) if "sets" in f.metadata}
    filled = {name: m["default"] for name, m in table.items()} | {k: v for k, v in values.items() if k in table}
    return {m["sets"][slug]: m["read"](filled) if m["read"] else filled[name]
            for name, m in table.items() if slug in m["sets"]}


def make_racer_rule(ctx: Context, key: str, settings: Mapping) -> Rule:
    """Racer `key`'s rule at the race `settings` (`rule_options`); a bad value is one error naming the racer."""
    if key not in choice.RACERS:
        raise bad(f"unknown racer {show(key)}; choose from {', '.join(choice.RACERS)}")
    try:
        return variants.build(key, rule_options(key, settings), ctx.model.neighbours)
    except ValueError as err:
        raise bad(f"{choice.RACERS[key]}: {err}") from None


def make_rules(ctx: Context, keys: list[str], settings: Mapping) -> dict[str, Rule]:
    return {key: make_racer_rule(ctx, key, settings) for key in keys}


def follow_model(ctx: Context, picked: Context, values: Mapping) -> dict:
    """`values` made to fit the picked model: "<class> · <style>" becomes (class, style); an app default the picked
    model refuses, or a class it lacks by that very name (a digit "3" is not emoji id 3), becomes its default."""
    out = dict(values)
    label = out.get("condition")
    if picked.model.style_names and isinstance(label, str) and STYLE_SEP.strip() in label:
        try:
            out["condition"], out["style"] = picked.model.conditions.split(picked.model.condition(label))
        except ValueError:
            pass  # (the condition's own check names it)
    if picked is ctx:
        return out
    own, app = specs(picked), specs(ctx)
    for name, value in out.items():
        if name in own and name != "model" and same_value(value, app[name].default):  # (True is not 1.0 here)
            if name == "condition" and ctx.model.conditioning == "class" and picked.model.conditioning == "class" \
                    and value not in picked.model.conditions.classes:
                out[name] = own[name].default  # another model's class
                continue
            try:
                own[name].check(value)
            except ValueError:  # (gr.Error is one too)
                out[name] = own[name].default
    return out


def check_values(table: Mapping[str, Spec], values: Mapping, defaults: bool = False) -> dict:
    """name -> checked value for each name in `values` (each in `table`, missing at default, when `defaults`)."""
    names = table if defaults else [n for n in table if n in values]
    out = {}
    for name in names:
        with user_errors():
            out[name] = table[name].check(values[name]) if name in values else table[name].default
    return out
