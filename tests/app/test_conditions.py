"""The one condition resolver (`coolsd.models.conditions`) on a model of the named kind: every name read from
the bundle (about 30 emoji, four styles, groups), typos matched, an unknown name answered with the closest
ones; and the app's controls, race plan and lab on that model."""

from __future__ import annotations

import difflib

import gradio as gr
import pytest
import torch
from new_emoji import CHARS, CLASS_GROUPS, CREDITS, DEFAULT, NAMES, STYLES, save_new_emoji

from coolsd.app import controls, race_view
from coolsd.app import race as race_ui
from coolsd.app.context import Catalogue
from coolsd.app.demo import header_markdown, model_info
from coolsd.app.lab import LabPanel
from coolsd.app.settings import RaceSettings, specs
from coolsd.models.conditions import Conditions, default_condition, name_choices, name_notice
from coolsd.models.emoji import load_emoji
from coolsd.models.tiny import tiny_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return load_emoji(save_new_emoji(tmp_path_factory.mktemp("new-emoji")), device="cpu")


@pytest.fixture(scope="module")
def ctx(bundle):
    return Catalogue(["emoji"], loader=lambda key: [bundle]).add("emoji", [bundle])


def typo(name: str) -> str:
    """`name` with two neighbouring letters swapped in its longest word (a typical typing slip)."""
    word = max(name.split(), key=len)
    i = len(word) // 2
    return name.replace(word, word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :], 1)


def test_the_bundle_names_every_emoji_its_group_and_the_styles(bundle):
    names = bundle.conditions
    assert list(names.classes) == NAMES and list(names.styles) == STYLES and list(names.groups) == CLASS_GROUPS
    assert names.count == len(NAMES) * len(STYLES) == len(bundle.class_names)
    pixels = bundle.tokenizer.decode(torch.zeros(bundle.num_tokens, dtype=torch.long))
    assert pixels.shape == (3, 16, 16)  # 4 x 4 tokens of 4 x 4 pixels: the size comes from the bundle


def test_every_name_and_style_resolves_to_class_times_styles_plus_style(bundle):
    for c, name in enumerate(bundle.conditions.classes):
        for s, style in enumerate(bundle.conditions.styles):
            cond = bundle.condition(name, style)
            assert cond == c * len(STYLES) + s
            assert bundle.condition(bundle.conditions.label(cond)) == cond  # the "<name> · <style>" label
            assert bundle.condition(name.upper().replace(" ", "  "), style.lower()) == cond
        assert bundle.condition(name) == c * len(STYLES)  # no style: the first
        assert bundle.condition(name, "") == c * len(STYLES)


def test_typos_are_matched_and_unknown_names_get_the_closest(bundle):
    for name in bundle.conditions.classes:
        if len(max(name.split(), key=len)) >= 5:
            assert bundle.condition(typo(name)) == bundle.condition(name), typo(name)
    with pytest.raises(ValueError) as err:
        bundle.condition("rockettt ship to the stars")
    message = str(err.value)
    assert "\n" not in message and len(message) < 300 and "unknown emoji" in message and "rocket" in message
    with pytest.raises(ValueError, match="unknown emoji 'zzzz'"):
        bundle.condition("zzzz")
    with pytest.raises(ValueError, match="unknown style"):
        bundle.condition(NAMES[0], "Sketch")


def similarity(text: str, name: str) -> float:
    """How alike a typed text and a name are (difflib's ratio on lower case, the better way round)."""
    a, b = text.lower(), name.lower()
    return max(difflib.SequenceMatcher(None, a, b).ratio(), difflib.SequenceMatcher(None, b, a).ratio())


@pytest.mark.parametrize("text", ["<script>alert(1)</script>", "xylophonequartet", "%%%% tomato %%%%"])
def test_an_unknown_name_lists_the_names_most_like_it(bundle, text):
    """A text close to no name gets the names most similar to it, not the first names of the list."""
    with pytest.raises(ValueError) as err:
        bundle.condition(text)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300 and message.startswith("unknown emoji "), message
    listed = [n for n in NAMES if f"'{n}'" in message]
    assert len(listed) == 3, message
    others = max(similarity(text, n) for n in NAMES if n not in listed)
    assert min(similarity(text, n) for n in listed) >= others - 0.05, (message, others)  # (normalised spaces aside)
    assert listed != NAMES[:3]


def race_values(ctx, **changes) -> dict:
    return RaceSettings.defaults(ctx).as_dict() | {"racers": ["eagle-1"]} | changes


@pytest.mark.parametrize("typed, notice", [
    ("rockit", "rockit: showing rocket"), ("rokcet · Noto", "rokcet: showing rocket"),
    ("apple", "apple: showing red apple"), ("Rocket", ""), ("birthday-cake", ""), ("Cat  Face · Noto", ""),
    ("7", ""), (7, ""),
])
def test_a_name_read_as_another_is_said(ctx, typed, notice):
    settings = RaceSettings.check(ctx, race_values(ctx, condition=typed))
    assert name_notice(ctx.model.conditions, typed, settings.condition) == notice


def test_a_typo_races_its_name_and_the_page_and_the_api_say_so(ctx, monkeypatch):
    """"rockit" races rocket: a toast, every frame's status line and the stats JSON's "notice" say so; a name
    typed right races with no notice."""
    toasts = []
    monkeypatch.setattr(gr, "Info", lambda message, *a, **kw: toasts.append(message))
    monkeypatch.setattr(race_ui, "IMAGE_EVERY_S", 0.0)
    monkeypatch.setattr(race_ui, "FRAME_SHARE", 1.0)
    stream = race_ui.RaceStream(ctx, race_ui.LiveRaces())
    frames = list(stream.race(**race_values(ctx, condition="rockit", style="Noto")))
    assert toasts == ["rockit: showing rocket"] and len(frames) > 1
    assert frames[-1].trace.settings.condition == "rocket · Noto"
    for frame in frames:
        assert frame.stats["notice"] == "rockit: showing rocket"
        assert frame.stats_md.split("\n")[0].endswith("*rockit: showing rocket.*"), frame.stats_md
    toasts.clear()
    plain = list(stream.race(**race_values(ctx, condition="ROCKET")))[-1]
    assert toasts == [] and plain.stats["notice"] == "" and "showing" not in plain.stats_md


def test_an_unknown_name_on_the_page_is_one_message_and_the_pictures_stay(ctx, monkeypatch):
    """"zzzz" from the Generate button: one toast, the status line says it and nothing of the last race's status
    ("rockit: showing rocket") is left; the pictures, their lines and the plots are not touched (no error over
    every output). The API's /race still raises that message for its client."""
    toasts, infos = [], []
    monkeypatch.setattr(gr, "Warning", lambda message, *a, **kw: toasts.append(message))
    monkeypatch.setattr(gr, "Info", lambda message, *a, **kw: infos.append(message))
    stream = race_ui.RaceStream(ctx, race_ui.LiveRaces())
    handle = race_ui.RaceHandle(None, stream, None, (), (), ())
    page, api = handle.page_race(), handle.gradio_race()
    assert list(page(**race_values(ctx, condition="rockit")))[-1]  # a race whose status says "rockit: ..."
    with pytest.raises(gr.Error, match="unknown emoji 'zzzz'") as refused:
        list(api(**race_values(ctx, condition="zzzz")))
    (reply,) = list(page(**race_values(ctx, condition="zzzz")))
    slots = len(race_view.RaceFrame().images)
    status, others = reply[slots], reply[:slots] + reply[slots + 1:]  # outputs: the images, then stats_md, ...
    assert toasts == [refused.value.message] and "\n" not in toasts[0]
    assert status.startswith(f"**Not raced:** {toasts[0].rstrip('.')}.") and "rockit" not in status
    assert len(others) == len(race_view.RaceOutputs.values(race_view.RaceFrame())) - 1
    assert all(v == gr.skip() for v in others)  # pictures, their lines, plots, stats and the race state untouched


def test_an_integer_condition_is_the_engines_id(bundle):
    assert bundle.condition(7) == 7 and bundle.condition("7") == 7
    with pytest.raises(ValueError, match=r"condition id must be in \[0, 119\]"):
        bundle.condition(len(NAMES) * len(STYLES))
    with pytest.raises(ValueError):
        bundle.condition(True)


def test_a_condition_id_sent_as_text_is_the_same_condition_style_included(ctx):
    """A share link or a form sends the id as text: "7" is condition 7 (emoji 1 in style 3), as the int 7 is."""
    for value in (7, "7"):
        settings = RaceSettings.check(ctx, {"condition": value, "style": "", "racers": ["eagle-1"]})
        assert settings.plan(ctx).cond == 7, value


def test_the_app_models_default_class_follows_a_picked_model_without_that_class(bundle):
    """A call that names another model and leaves the condition at the app's default gets the picked model's own
    start: a digit model's "3" is no pick of an emoji (to the emoji model it is only condition id 3)."""
    tiny = tiny_bundle()
    models = {"tiny": [tiny], "emoji": [bundle]}
    for app_key, other in (("tiny", "emoji"), ("emoji", "tiny")):
        app = Catalogue([app_key, other], loader=models.get).add(app_key, models[app_key])
        picked = app.for_model(other)
        settings = RaceSettings.check(app, RaceSettings.defaults(app).as_dict() | {"model": other})
        assert (settings.condition, settings.style) == (RaceSettings.defaults(picked).condition,
                                                        RaceSettings.defaults(picked).style), app_key
        assert settings.plan(app).cond == picked.model.condition(
            *default_condition(picked.model.conditions, picked.model.default_class)), app_key


def test_names_are_shown_after_their_characters_and_a_page_starts_on_the_models_class():
    names = Conditions(("red apple", "cat face", "rocket", "dog face"), ("Twemoji", "Noto"))
    assert name_choices(names, ["🍎", "🐱", "🚀", "🐶"])[1] == ("🐱 cat face", "cat face")
    assert name_choices(names, ["🍎"]) == [(n, n) for n in names.classes]  # (characters not one per class: none)
    assert default_condition(names, "rocket") == ("rocket", "Twemoji")
    assert default_condition(names, "unicorn") == default_condition(names) == ("cat face", "Noto")  # condition 3
    assert default_condition(Conditions(("0", "1")), None) == ("1", "")  # 3 % 2 conditions
    assert default_condition(Conditions(kind="text"), None, ("a fox", "a cat")) == ("a fox", "")


def test_a_notice_says_only_a_name_read_as_another():
    names = Conditions(("red apple", "rocket"), ("Twemoji", "Noto"))
    assert name_notice(names, "rokcet · Noto", "rocket") == "rokcet: showing rocket"
    assert name_notice(names, "<b>rockit</b>", "rocket") == ""  # (not read as rocket: too far)
    assert name_notice(names, "Red_Apple", "red apple") == ""  # the same name up to case and underscores
    assert name_notice(names, "rockit", "red apple") == ""  # another model's default replaced: no reading
    assert name_notice(names, "1", "rocket") == name_notice(Conditions(kind="text"), "rockit", "rocket") == ""


def test_groups_filter_the_names():
    names = Conditions(tuple(NAMES), tuple(STYLES), tuple(CLASS_GROUPS))
    assert names.in_group("Food & Drink") == [n for n, g in zip(NAMES, CLASS_GROUPS) if g == "Food & Drink"]
    assert names.in_group(None) == NAMES and names.in_group("no such group") == NAMES
    with pytest.raises(ValueError, match="one group per class"):
        Conditions(("a", "b"), (), ("g",))


def test_the_app_offers_every_name_filters_by_group_and_races_a_typo(ctx):
    spec = specs(ctx)["condition"]
    assert [v for _, v in spec.choices] == NAMES and spec.label == "Emoji"
    assert [label for label, _ in spec.choices] == [f"{c} {n}" for c, n in zip(CHARS, NAMES)]  # the emoji shown
    assert spec.default == DEFAULT and specs(ctx)["style"].default == STYLES[0]  # the model's own start
    assert spec.extra["allow_custom_value"] and spec.extra["filterable"]
    assert controls.group_choices(ctx) == [controls.ALL_GROUPS, *dict.fromkeys(CLASS_GROUPS)]
    food = controls.filter_names(ctx, "Food & Drink", NAMES[0])
    assert food.choices == [(f"{c} {n}", n) for c, n, g in zip(CHARS, NAMES, CLASS_GROUPS) if g == "Food & Drink"]
    name = "birthday cake"
    settings = RaceSettings.check(ctx, {"condition": typo(name), "style": "Noto", "racers": ["eagle-1"]})
    assert settings.condition == name
    assert settings.plan(ctx).cond == NAMES.index(name) * len(STYLES) + STYLES.index("Noto")
    info = model_info(ctx)
    assert info["classes"] == NAMES and info["styles"] == STYLES and info["groups"] == CLASS_GROUPS


def test_the_lab_spreads_its_samples_over_the_classes(ctx):
    lab = LabPanel(ctx)
    _, conditions, _, headers = lab.plan("cool-sd", 2.0, 10, 0, None, ctx)
    classes = [c // len(STYLES) for c in conditions]
    assert len(set(classes)) == 10 and max(classes) >= len(NAMES) - len(NAMES) // 10 - 1
    assert [c % len(STYLES) for c in conditions] == [j % len(STYLES) for j in range(10)]
    assert headers == [ctx.model.conditions.label(c) for c in conditions]


def test_the_page_credits_the_artwork_the_model_names(ctx):
    """Issue 25: the artwork's authors and licences come from the model's config (`credits`), shown in the header
    (which follows the model picker) and in /model_info; a model without credits shows none."""
    assert ctx.model.credits == CREDITS
    assert f"Credits: {CREDITS}." in header_markdown(ctx) and model_info(ctx)["credits"] == CREDITS
    tiny = tiny_bundle()
    plain = Catalogue(["tiny"], loader=lambda key: [tiny]).add("tiny", [tiny])
    assert plain.model.credits == "" and "Credits" not in header_markdown(plain)
