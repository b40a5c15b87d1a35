"""The model picker: each model loaded once and shared, races on the picked model, sessions independent, share
links that name their model, a clear line for an unknown model.

The page is the tiny-model demo whose picker also offers the shipped models (`tests/demo_app.py: picker_demo`);
the emoji model loads in a few seconds on its first pick (the tests that need it skip where it is not shipped).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

import gradio as gr
import pytest
import torch
from demo_app import RaceAPI, api_frame, picker_demo

from coolsd.app import controls, share
from coolsd.app.demo import model_info
from coolsd.app.settings import RaceSettings
from coolsd.decoding.drafting import Chain
from coolsd.util.paths import EMOJI_DIR

APP = picker_demo()
RACE = RaceAPI(APP)
CONTROLS = APP.page.controls
needs_emoji = pytest.mark.skipif(not (EMOJI_DIR / "target" / "config.json").is_file(),
                                 reason="assets/emoji is not shipped here")
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


def defaults(model: str | None = None, /, **changes) -> dict:
    """The race's arguments at `model`'s defaults (default: the app's), with `changes`."""
    return RaceSettings.defaults(APP.ctx.for_model(model)).as_dict() | changes


def emoji_names() -> tuple[list[str], list[str]]:
    """(class names, style names) of the shipped emoji model, read from it."""
    names = APP.ctx.for_model("emoji").model.conditions
    return list(names.classes), list(names.styles)


def last_frame(**values):
    return list(RACE.race(**values))[-1]


def library_tokens(model: str, values: dict) -> dict[str, torch.Tensor]:
    """racer key -> tokens of a separate library run (`coolsd.decoding.engine.run`) per racer, on a freshly
    loaded copy of `model` run in the picked copy's dtype (emoji: its load-time choice)."""
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.sampling import SamplingConfig
    from coolsd.models import registry

    picked = APP.ctx.for_model(model)
    mp = pytest.MonkeyPatch()
    mp.setenv("COOLSD_DTYPE", picked.model.execution.split()[0])  # "fp32 (measured ...)" -> fp32
    try:
        fresh = registry.load(model)[0]
    finally:
        mp.undo()
    assert fresh.target is not picked.model.target  # a separate copy of the weights
    plan = RaceSettings.check(APP.ctx, values).plan(APP.ctx)
    cond = fresh.condition(values["condition"], values["style"])
    sampling = SamplingConfig(cfg_scale=values["cfg_scale"], temperature=values["temperature"], top_k=values["top_k"])
    out = {}
    for key in [*plan.keys, "vanilla"]:
        rule = plan.rules.get(key)
        if rule is not None and getattr(rule, "neighbours", None) is not None:
            rule = rule.with_neighbours(fresh.neighbours)
        out[key] = run(fresh.target, fresh.drafter, rule, cond=cond, num_tokens=fresh.num_tokens, sampling=sampling,
                       config=DecodeConfig(Chain(values["draft_len"])), seed=values["seed"]).tokens
    return out


def final_tokens(frame) -> dict[str, torch.Tensor]:
    trace = frame.trace
    return {r.key: r.tokens for r in trace.replay(len(trace))}


# ---------------------------------------------------------------- the picker
def test_the_picker_offers_the_app_model_first_and_the_shipped_ones():
    keys = APP.ctx.catalogue.keys
    assert keys[0] == "tiny" and keys == list(dict.fromkeys(keys))
    picker = CONTROLS["model"]
    assert [v for _, v in picker.choices] == keys and picker.value == "tiny"
    assert (EMOJI_DIR / "target" / "config.json").is_file() == ("emoji" in keys)
    # a preset keeps the picked model, class and style (its values are the app model's)
    picks = {CONTROLS[n]._id for n in ("model", "style", "condition")}
    presets = [f for f in APP.blocks.fns.values() if f.name == "load_example" and len(f.outputs) > 3]
    assert len(presets) == 1 and not picks & {c._id for c in presets[0].outputs}
    assert CONTROLS["seed"]._id in {c._id for c in presets[0].outputs}


@needs_emoji
def test_picking_emoji_races_exactly_what_the_library_decodes_on_it():
    names, styles = emoji_names()
    values = defaults("emoji", seed=5, condition=names[2], style=styles[0], racers=["eagle-1", "lantern++", "cool-sd"])
    frame = last_frame(**values)
    stats = frame.stats
    emoji = APP.ctx.for_model("emoji")
    assert stats["finished"] and stats["model"] == emoji.model.name and stats["settings"]["model"] == "emoji"
    assert stats["settings"]["condition"] == f"{names[2]} · {styles[0]}" and stats["settings"]["style"] == styles[0]
    assert frame.snapshot["model"] == "emoji" and frame.images[0].size == emoji.display_hw[::-1]
    raced, ref = final_tokens(frame), library_tokens("emoji", values)
    assert list(raced) == list(ref)
    for key in ref:
        assert torch.equal(raced[key], ref[key]), key
    # the app's own model still races its own tokens, after the switch as before
    tiny_values = defaults(seed=5)
    tiny_frame = last_frame(**tiny_values)
    assert tiny_frame.stats["model"] == APP.ctx.model.name and tiny_frame.stats["settings"]["model"] == "tiny"
    m = APP.ctx.model
    from coolsd.decoding.engine import run

    plan = RaceSettings.check(APP.ctx, tiny_values).plan(APP.ctx)
    ref = run(m.target, m.drafter, plan.rules["cool-sd"], cond=plan.cond, num_tokens=m.num_tokens,
              sampling=plan.sampling, config=plan.config, seed=5)
    assert torch.equal(final_tokens(tiny_frame)["cool-sd"], ref.tokens)


@needs_emoji
def test_each_model_is_loaded_once_and_shared():
    first = APP.ctx.for_model("emoji")
    assert APP.ctx.for_model("emoji") is first and APP.ctx.catalogue.get("emoji") is first
    assert first.for_model("tiny") is APP.ctx and first.catalogue is APP.ctx.catalogue
    assert APP.ctx.for_model(None) is APP.ctx and APP.ctx.model_key == "tiny"


@needs_emoji
def test_two_sessions_on_different_models_do_not_affect_each_other():
    """Interleaved races of two sessions, one per model: each ends with what it would alone."""
    a_values, b_values = defaults("emoji", seed=2, condition=emoji_names()[0][-1]), defaults(seed=2)
    alone = {"a": final_tokens(last_frame(**a_values)), "b": final_tokens(last_frame(**b_values))}

    class Request:
        def __init__(self, session: str) -> None:
            self.session_hash = session

    streams = {"a": RACE.race(**a_values, request=Request("a")), "b": RACE.race(**b_values, request=Request("b"))}
    last = {}
    while streams:
        for name in list(streams):
            try:
                last[name] = next(streams[name])
            except StopIteration:
                del streams[name]
    for name in ("a", "b"):
        got = final_tokens(last[name])
        assert list(got) == list(alone[name]) and all(torch.equal(got[k], alone[name][k]) for k in got), name
    assert last["a"].stats["settings"]["model"] == "emoji" and last["b"].stats["settings"]["model"] == "tiny"
    # after both, the page's default model and its settings are unchanged
    assert CONTROLS["model"].value == "tiny" and RaceSettings.defaults(APP.ctx).model == "tiny"


@needs_emoji
def test_switching_updates_the_model_controls_and_the_race_area():
    emoji = APP.ctx.for_model("emoji")
    names, styles = emoji_names()
    updates = controls.model_updates(APP.ctx, emoji)
    assert [c for _, c in updates["condition"].choices] == emoji.model.base_class_names == names
    assert updates["condition"].label == "Emoji"
    assert [c for _, c in updates["style"].choices] == styles and updates["style"].visible
    assert updates["top_k"].maximum == int(emoji.model.target.vocab_size)
    back = controls.model_updates(APP.ctx, APP.ctx)
    assert back["style"].visible is False and back["condition"].label == "Digit"
    on_pick = [f for f in APP.blocks.fns.values() if (CONTROLS["model"]._id, "input") in f.targets]
    assert "switch" in {f.name for f in on_pick}  # the picker's event, and a race of the old model is cancelled:
    assert {e["id"] for e in APP.page.race.run_events} <= {i for f in on_pick for i in f.cancels}
    view, _ = RACE.model_view("emoji", ["eagle-1", "uniform-rsd"])  # not the recorded racers: a blank race area
    assert view.trace is None and view.snapshot == {}
    assert view.images[0].size == emoji.display_hw[::-1]


@needs_emoji
def test_replay_and_microscope_read_the_trace_of_the_model_that_raced():
    from coolsd.app.microscope import MicroscopePanel

    names, styles = emoji_names()
    frame = last_frame(**defaults("emoji", seed=3, condition=names[-1], style=styles[-1], racers=["eagle-1"]))
    trace = frame.trace
    replayed = RACE.replay(len(trace), False, trace)
    assert replayed.stats["decoders"] == frame.stats["decoders"] and replayed.snapshot["model"] == "emoji"
    scope = MicroscopePanel(APP.ctx, RACE.recordings)
    view = scope.view("eagle-1", 1, trace, {})
    assert view[-2]["matches_race"] is True  # re-run on the emoji model: the recorded tokens again
    strip = RACE.after.view_context(frame.snapshot)
    assert strip is APP.ctx.for_model("emoji")


@needs_emoji
def test_model_info_names_each_model_and_its_execution_path():
    info = model_info(APP.ctx.for_model("emoji"))
    emoji = APP.ctx.for_model("emoji").model
    assert info["model_key"] == "emoji" and info["model"] == emoji.name and info["execution"] == emoji.execution
    assert info["execution"].split()[0] in ("fp32", "bf16") and info["styles"] == emoji_names()[1]
    assert info["classes"] == emoji_names()[0] and info["defaults"]["model"] == "emoji"
    tiny = model_info(APP.ctx)
    assert tiny["model_key"] == "tiny" and tiny["models"] == APP.ctx.catalogue.keys and tiny["styles"] == []


# ---------------------------------------------------------------- share links
@needs_emoji
def test_a_share_link_names_its_model_and_restores_it():
    names, styles = emoji_names()
    values = defaults("emoji", seed=11, condition=names[2], style=styles[0], delta=3.0)
    query = share.share_query(APP.ctx, values)
    assert "model=emoji" in query and "style=Twemoji" in query
    restored, errors = share.parse_query(APP.ctx, dict(parse_qsl(query[1:])))
    assert errors == [] and restored == values
    # an older link's combined label names the style; the style dropdown follows it
    old, errors = share.parse_query(APP.ctx, {"model": "emoji", "condition": f"{names[2]} · {styles[-1]}"})
    assert errors == [] and (old["condition"], old["style"]) == (names[2], styles[-1])
    query = share.share_query(APP.ctx, {"model": "emoji", "condition": f"{names[2]} · {styles[-1]}"})
    assert dict(parse_qsl(query[1:]))["condition"] == names[2] and dict(parse_qsl(query[1:]))["style"] == styles[-1]


@needs_emoji
def test_opening_a_link_of_another_model_switches_the_page_to_it():
    restore = next(f.fn for f in APP.blocks.fns.values() if getattr(f.fn, "__name__", "") == "restore")

    class Request:
        query_params = {"model": "emoji", "condition": emoji_names()[0][-1], "seed": "4"}

    out = dict(zip(RaceSettings.names(), restore(Request())))
    assert out["model"] == "emoji" and out["seed"] == 4
    assert isinstance(out["condition"], gr.Dropdown) and out["condition"].value == emoji_names()[0][-1]
    assert len(out["condition"].choices) == len(emoji_names()[0]) and out["style"].visible
    assert out["style"].value == RaceSettings.defaults(APP.ctx.for_model("emoji")).style


@pytest.mark.parametrize("call", ["race", "share_link", "share_restore", "model_info", "lab"])
def test_an_unknown_model_is_one_clear_line(call):
    message = "unknown model 'warp'; choose one of " + ", ".join(APP.ctx.catalogue.keys)
    with pytest.raises(gr.Error) as err:
        if call == "race":
            next(RACE.race(**defaults(model="warp")))
        elif call == "share_link":
            share.share_query(APP.ctx, {"model": "warp"})
        elif call == "share_restore":
            values, errors = share.parse_query(APP.ctx, {"model": "warp", "seed": "3"})
            assert values == {"seed": 3}  # the rest is still read, against the app's model
            raise gr.Error(errors[0])
        elif call == "model_info":
            APP.ctx.for_model("warp")
        else:
            next(APP.page.lab.panel.grid("cool-sd", 2.0, 1, 0, "3", "warp"))
    text = str(err.value.message)
    assert text == message, text
    assert "Traceback" not in text and "\n" not in text


def test_api_arguments_keep_their_order_with_model_and_style_last():
    """Arguments added later come after the others, so older calls keep working: model and style, then SJD's
    window, then the noise."""
    names = RaceSettings.names()
    assert names[-5:] == ["resolution", "model", "style", "sjd_window", "noise"]
    assert list(RaceSettings.signature(APP.ctx).parameters)[:-1] == names
    # a call with the app's defaults for another model's arguments: they follow the model
    emoji_keys = [k for k in APP.ctx.catalogue.keys if k != "tiny"]
    if emoji_keys:
        settings = RaceSettings.check(APP.ctx, defaults(model=emoji_keys[0]))
        picked = APP.ctx.for_model(emoji_keys[0])
        assert settings.condition == RaceSettings.defaults(picked).condition and settings.resolution == \
            picked.variant_key


def test_a_style_means_nothing_to_a_model_without_styles():
    assert RaceSettings.check(APP.ctx, defaults(style="Noto")).style == ""
    with pytest.raises(gr.Error, match=re.escape("style must be a text")):
        RaceSettings.check(APP.ctx, defaults(style=3))


@pytest.fixture(scope="module")
def client():
    """The picker demo served in-process; a gradio_client session on it."""
    from gradio_client import Client

    from coolsd.app.demo import LAUNCH_KWARGS

    _, url, _ = APP.blocks.launch(prevent_thread_lock=True, quiet=True, **LAUNCH_KWARGS)
    yield Client(url, verbose=False, download_files=False, analytics_enabled=False)
    APP.blocks.close()


def test_api_an_unknown_model_is_one_clean_line_and_old_calls_keep_working(client):
    from gradio_client.exceptions import AppError

    message = "unknown model 'warp'; choose one of " + ", ".join(APP.ctx.catalogue.keys)
    for endpoint, args in (("/race", defaults(model="warp")), ("/model_info", {"model": "warp"}),
                           ("/share_restore", {"query": "?model=warp"}), ("/share_link", defaults(model="warp"))):
        with pytest.raises(AppError) as err:
            client.predict(**args, api_name=endpoint)
        text = str(err.value)
        assert message in text and "Traceback" not in text and "\n" not in text.strip(), (endpoint, text)
    old = {k: v for k, v in defaults(seed=1).items() if k not in ("model", "style")}  # a call from before the picker
    stats = api_frame(client.predict(**old, api_name="/race")).stats
    assert stats["finished"] and stats["settings"]["model"] == "tiny"
    assert client.predict(api_name="/model_info")["model_key"] == "tiny"


@needs_emoji
def test_api_races_the_model_it_names(client):
    names, styles = emoji_names()
    values = defaults("emoji", seed=7, condition=names[-2], style=styles[0], racers=["eagle-1"])
    stats = api_frame(client.predict(**values, api_name="/race")).stats
    assert stats["finished"] and stats["model"] == APP.ctx.for_model("emoji").model.name
    assert stats["settings"]["condition"] == f"{names[-2]} · {styles[0]}"
    info = client.predict(model="emoji", api_name="/model_info")
    assert info["model_key"] == "emoji" and info["execution"] == APP.ctx.for_model("emoji").model.execution
    replay = api_frame(client.predict(step=2, overlay=False, api_name="/replay"))  # this session's emoji race
    assert replay.stats["model"] == stats["model"] and replay.stats["replay_step"] == 2


@needs_emoji
def test_an_older_combined_label_still_names_class_and_style():
    names, styles = emoji_names()
    label = f"{names[-1]} · {styles[0]}"
    settings = RaceSettings.check(APP.ctx, defaults("emoji", condition=label))
    assert (settings.condition, settings.style) == (names[-1], styles[0])  # the label's style, not the default
    emoji = APP.ctx.for_model("emoji")
    assert settings.plan(APP.ctx).cond == emoji.model.class_names.index(label)
    with pytest.raises(gr.Error, match=re.escape(f"unknown style 'Sketchy'; choose one of {', '.join(styles)}")):
        RaceSettings.check(APP.ctx, defaults("emoji", style="Sketchy"))
    with pytest.raises(gr.Error, match=re.escape("unknown style 'Sketchy'")):
        RaceSettings.check(APP.ctx, defaults("emoji", condition=f"{names[-1]} · Sketchy"))


@needs_emoji
def test_the_shipped_emoji_says_a_typo_it_reads_and_lists_the_nearest_names():
    """"rockit" races rocket and says so; markup sent as a name gets the names most like it, one line."""
    from coolsd.models.conditions import name_notice

    settings = RaceSettings.check(APP.ctx, defaults("emoji", condition="rockit"))
    conditions = APP.ctx.for_model(settings.model).model.conditions
    assert settings.condition == "rocket"
    assert name_notice(conditions, "rockit", settings.condition) == "rockit: showing rocket"
    names, _ = emoji_names()
    with pytest.raises(gr.Error) as err:
        RaceSettings.check(APP.ctx, defaults("emoji", condition="<script>alert(1)</script>"))
    message = str(err.value.message)
    listed = [n for n in names if f"'{n}'" in message]
    assert "closest names" in message and "<" not in message and len(listed) == 3, message
    assert not set(listed) & set(names[:3]), message


@needs_emoji
def test_each_recorded_race_shows_only_for_its_own_model():
    emoji = APP.ctx.for_model("emoji")
    found = RACE.recordings.of(emoji)
    if found is None:
        pytest.skip("no current emoji recording (assets/traces/): run python -m coolsd.app.recorded")
    trace, label, _ = found
    assert trace.model == emoji.model.name and trace.settings.model == "emoji" and "Recorded race" in label
    assert RACE.recordings.of(APP.ctx) is None  # the tiny model has none: its page opens empty
    view, _ = RACE.model_view("emoji")  # picked with the default racers: the emoji recording, the trace cleared
    assert "Recorded race" in view.stats_md and view.stats["model"] == emoji.model.name
    assert view.trace is None and view.snapshot["model"] == "emoji"
    assert RACE.recordings.trace_or_recorded(None, "emoji") is trace
    assert RACE.recordings.trace_or_recorded(None) is None


def test_a_text_model_beside_a_class_model_shares_one_condition_box(tmp_path_factory):
    """LlamaGen (prompts) first in the picker, the tiny class model second: the condition is a dropdown that takes
    any text; a pick sets its choices, and a race with LlamaGen's defaults on the class model races its own."""
    from test_app import tiny_llamagen_app

    from coolsd.models.llamagen import EXAMPLE_PROMPTS

    demo = tiny_llamagen_app(tmp_path_factory, picker=["tiny"])
    ctx = demo.ctx
    condition = demo.page.controls["condition"]
    assert isinstance(condition, gr.Dropdown) and condition.allow_custom_value and condition.value == EXAMPLE_PROMPTS[0]
    tiny = ctx.for_model("tiny")
    updates = controls.model_updates(ctx, tiny)
    assert isinstance(updates["condition"], gr.Dropdown) and updates["condition"].label == "Digit"
    assert [v for _, v in updates["condition"].choices] == tiny.model.class_names
    assert updates["resolution"].visible is False and controls.model_updates(ctx, ctx)["resolution"].visible
    last = list(RaceAPI(demo).race(**(RaceSettings.defaults(ctx).as_dict() | {"model": "tiny", "seed": 1})))[-1]
    settings = last.stats["settings"]
    assert last.stats["finished"] and settings["model"] == "tiny" and settings["condition"] == "3"
    assert settings["resolution"] == "tiny" and last.stats["model"] == tiny.model.name


@needs_emoji
def test_the_lab_on_emoji_judges_each_class_and_the_tour_reveals_it():
    from coolsd.app import tour

    lab = APP.page.lab.panel
    frames = list(lab.grid("cool-sd", 8.0, 2, 0, None, "emoji"))
    _, text, _, stats = frames[-1]
    assert stats["finished"] and stats["model"] == APP.ctx.for_model("emoji").model.name
    names, styles = emoji_names()  # two samples: classes spread over the model's, the styles in turn
    assert {s["condition"] for s in stats["samples"]} == {0, (len(names) // 2) * len(styles) + 1 % len(styles)}
    assert all(r["accuracy"] is not None for r in stats["decoders"]) and "held-out" in text
    step = next(s for s in tour.STEPS if s.lab and s.lab["rule"] == "cool-sd")
    shown = tour.reveal_markdown(step, 50, stats)
    assert "Measured just now" in shown and "does not measure" not in shown
