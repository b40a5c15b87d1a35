"""Every endpoint on every shipped model (emoji, the default, and MNIST), through the launched app with a default
`gradio_client.Client` (files downloaded, as a visitor's script gets them), with default settings. Names,
styles and sizes are read from the models, never typed here, so the tests hold when a model is retrained."""

from __future__ import annotations

import json

import pytest
from gradio_client import Client

from coolsd.app import microscope
from coolsd.app.race_view import API_NAMES
from coolsd.app.recorded import Recordings
from coolsd.models import registry

SHIPPED = [key for key in ("emoji", "mnist") if registry.MODELS[key].present()]


@pytest.fixture(scope="module")
def clients(shipped_app):
    """model key -> a default Client (one session per model, so each model's race is its session's)."""
    _, url = shipped_app
    return {key: Client(url, verbose=False) for key in SHIPPED}


@pytest.fixture(scope="module")
def raced(clients):
    """model key -> the final frame of its default race (by output name), raced through the API."""
    out = {}
    for key, client in clients.items():
        job = client.submit(model=key, api_name="/race")
        frames = list(job)
        assert frames, f"the {key} race streamed nothing"
        out[key] = dict(zip(API_NAMES, job.outputs()[-1]))
    return out


@pytest.mark.parametrize("key", SHIPPED)
def test_model_info_names_the_race_outputs_and_the_models_own_conditions(clients, key, shipped_app):
    info = clients[key].predict(model=key, api_name="/model_info")
    bundle = shipped_app[0].ctx.for_model(key).model
    assert info["model_key"] == key and info["race_outputs"] == API_NAMES
    assert info["classes"] == bundle.base_class_names and info["styles"] == bundle.style_names
    assert info["execution"] == bundle.execution and info["defaults"]["condition"] in info["classes"]
    assert info["execution_path"] == bundle.path in ("eager", "fused", "cuda-graphs")  # the path that runs
    assert info["credits"] == bundle.credits  # the artwork's authors and licences, from the model's config


@pytest.mark.parametrize("key", SHIPPED)
def test_the_default_race_finishes_on_every_model(raced, key, shipped_app):
    final = raced[key]
    stats = final["stats"]
    assert stats["finished"] and stats["settings"]["model"] == key
    assert stats["settings"]["execution"] == shipped_app[0].ctx.for_model(key).model.execution
    assert set(stats["decoders"]) == {"eagle-1", "lantern++", "cool-sd", "vanilla"}
    assert all(d["tokens"] == shipped_app[0].ctx.for_model(key).model.num_tokens for d in stats["decoders"].values())
    assert all(isinstance(final[f"image_{i}"], str) for i in (1, 2, 3, 5))  # downloaded image files


@pytest.mark.parametrize("key", SHIPPED)
def test_under_each_picture_the_models_classifier_says_what_it_sees(raced, key, shipped_app):
    """The last frame's lines under the pictures (`seen_1`..`seen_5`) and the stats JSON's `recognised`: a class of
    this model with its probability, for every racer (each finished), "" for the unused slot."""
    final, names = raced[key], shipped_app[0].ctx.for_model(key).model.conditions
    for key_, d in final["stats"]["decoders"].items():
        seen = d["recognised"]
        assert seen["class"] in names.classes and 0 < seen["class_p"] <= 1 and isinstance(seen["class_ok"], bool)
        assert (seen["style"] is None) == (not names.styles), key_
    lines = [final[f"seen_{i}"] for i in range(1, 6)]
    assert lines[3] == "" and all("classifier sees" in line for n, line in enumerate(lines) if n != 3)


@pytest.mark.parametrize("key", SHIPPED)
def test_the_delta_sweep_through_a_default_client(clients, key, shipped_app):
    """/delta_sweep: the model's sweep file's numbers with the race's delta and the nearest swept one, or null where
    the model has no sweep yet; a delta past the slider's end is one clear line."""
    from gradio_client.exceptions import AppError

    from coolsd.app import sweep_view
    from coolsd.app.settings import DELTA_TOP

    got = clients[key].predict(model=key, delta=3.0, api_name="/delta_sweep")
    sweep = sweep_view.load(shipped_app[0].ctx.for_model(key).model.kind)
    if sweep is None:
        assert got is None
    else:
        assert got["rows"] == json.loads(json.dumps(sweep["rows"])) and got["delta"] == 3.0
        assert got["nearest"] == sweep_view.nearest(sweep, 3.0)["delta"] and "kept" not in got
    with pytest.raises(AppError, match=r"delta \(overall relaxation\) must be in"):
        clients[key].predict(model=key, delta=DELTA_TOP + 1, api_name="/delta_sweep")


@pytest.mark.parametrize("key", SHIPPED)
def test_replay_overlay_trace_and_share_link_follow_the_race(clients, raced, key):
    client = clients[key]
    steps = raced[key]["stats"]["steps"]
    frame = dict(zip(API_NAMES, client.predict(step=steps // 2, overlay=True, model=key, api_name="/replay")))
    assert frame["stats"]["replay_step"] == steps // 2 and frame["stats"]["settings"]["model"] == key
    assert len(client.predict(overlay=False, model=key, api_name="/overlay")) == 5
    trace = client.predict(api_name="/trace")
    assert trace["settings"]["model"] == key and len(trace["steps"]) == steps
    query = client.predict(model=key, seed=3, api_name="/share_link")
    restored = client.predict(query=query, api_name="/share_restore")
    assert restored["model"] == key and restored["seed"] == 3


@pytest.mark.parametrize("key", SHIPPED)
def test_microscope_through_the_api_after_a_race(clients, raced, key):
    """Issue 26 #4: every decoder was refused ("not in the list of choices: []")."""
    client = clients[key]
    rounds = None
    for decoder in ("eagle-1", "lantern++", "cool-sd"):
        image, strip, bars, table, header, payload = client.predict(key=decoder, round_no=1, model=key,
                                                                    api_name="/microscope")
        assert payload["decoder"] == decoder and payload["round"] == 1 and "round 1" in header
        rounds = payload["rounds"]
    last = client.predict(key="cool-sd", round_no=rounds - 1, model=key, api_name="/microscope")[-1]
    assert last["round"] == rounds - 1
    with pytest.raises(Exception, match="round must be in"):
        client.predict(key="cool-sd", round_no=rounds, model=key, api_name="/microscope")


@pytest.mark.parametrize("key", SHIPPED)
def test_cost_through_a_default_client(clients, raced, key):
    """Issue 26 #1 and #3: /cost failed on emoji (unknown class) and, through a default Client, with a 403 (its
    payload's "path" was taken for a file)."""
    figure, table, payload = clients[key].predict(memory_bound=False, model=key, api_name="/cost")
    assert "path" not in json.dumps(payload).replace('"execution"', "")  # no key a client would fetch as a file
    assert payload["execution"].startswith("cpu") and payload["step_ms"] > 0
    assert {r["decoder"] for r in payload["racers"]} >= {"Eagle-1 (lossless)", "COOL-SD"}
    assert "One target step" in table


SJD_RACERS = ["eagle-1", "sjd", "sjd-reuse"]


@pytest.fixture(scope="module")
def sjd_raced(shipped_app):
    """model key -> (a client of its own, the final frame of a race of Eagle-1, SJD and SJD + reuse at W = 4)."""
    _, url = shipped_app
    out = {}
    for key in SHIPPED:
        client = Client(url, verbose=False)
        job = client.submit(model=key, racers=SJD_RACERS, sjd_window=4, api_name="/race")
        assert list(job), f"the {key} race with SJD streamed nothing"
        out[key] = (client, dict(zip(API_NAMES, job.outputs()[-1])))
    return out


@pytest.mark.parametrize("key", SHIPPED)
def test_every_panel_with_sjd_racers(sjd_raced, key, shipped_app):
    """Issue 36: SJD races like any racer on every shipped model: race, replay, overlay, trace, share link,
    microscope (an SJD round is one Jacobi iteration) and the cost model (L = W, no drafter)."""
    client, final = sjd_raced[key]
    stats = final["stats"]
    n = shipped_app[0].ctx.for_model(key).model.num_tokens
    assert stats["finished"] and set(stats["decoders"]) == {*SJD_RACERS, "vanilla"}
    assert all(d["tokens"] == n for d in stats["decoders"].values())
    assert stats["decoders"]["sjd"]["draft_forwards"] == 0 == stats["decoders"]["sjd-reuse"]["draft_forwards"]
    assert stats["settings"]["rules"]["sjd"] == {"rule": "eagle-1"}
    assert stats["settings"]["draftings"]["sjd"] == {"drafting": "jacobi", "window": 4, "reuse": False, "init": "last"}
    steps = stats["steps"]
    frame = dict(zip(API_NAMES, client.predict(step=steps // 2, overlay=True, model=key, api_name="/replay")))
    assert frame["stats"]["replay_step"] == steps // 2 and set(frame["stats"]["decoders"]) == set(stats["decoders"])
    assert len(client.predict(overlay=False, model=key, api_name="/overlay")) == 5
    trace = client.predict(api_name="/trace")
    assert [r["key"] for r in trace["racers"]] == [*SJD_RACERS, "vanilla"] and len(trace["steps"]) == steps
    query = client.predict(model=key, racers=SJD_RACERS, sjd_window=4, api_name="/share_link")
    restored = client.predict(query=query, api_name="/share_restore")
    assert restored["racers"] == SJD_RACERS and restored["sjd_window"] == 4 and restored["model"] == key
    for decoder in ("sjd", "sjd-reuse"):
        *_, header, payload = client.predict(key=decoder, round_no=1, model=key, api_name="/microscope")
        assert payload["rule"]["rule"] == "eagle-1" and "jacobi" in str(payload["drafting"])
        assert payload["n_drafted"] == 4 and "last iteration" in header
    _, table, payload = client.predict(memory_bound=False, model=key, api_name="/cost")
    assert payload["sjd_windows"] == {"sjd": 4, "sjd-reuse": 4} and "SJD has no drafter" in table
    assert all(len(r["acceptance"]) == 4 for r in payload["racers"] if r["key"] in ("sjd", "sjd-reuse"))


SAME_RACERS = ["eagle-1", "cool-sd", "sjd"]  # (the panels' order)


@pytest.fixture(scope="module")
def same_raced(shipped_app):
    """model key -> (a client of its own, the final frame of a same-noise race of Eagle-1, COOL-SD and SJD with the
    overlay on)."""
    _, url = shipped_app
    out = {}
    for key in SHIPPED:
        client = Client(url, verbose=False)
        job = client.submit(model=key, racers=SAME_RACERS, noise="same", overlay=True, api_name="/race")
        assert list(job), f"the {key} same-noise race streamed nothing"
        out[key] = (client, dict(zip(API_NAMES, job.outputs()[-1])))
    return out


def trace_tokens(trace: dict) -> dict[str, list[int]]:
    """racer key -> its committed token ids, rebuilt from a /trace answer's events."""
    out = {r["key"]: [-1] * trace["num_tokens"] for r in trace["racers"]}
    for step in trace["steps"]:
        e = step["event"]
        out[step["racer"]][e["start"]:e["start"] + len(e["tokens"])] = e["tokens"]
    return out


@pytest.mark.parametrize("key", SHIPPED)
def test_same_noise_lossless_racers_draw_vanilla_ars_picture(same_raced, key, shipped_app):
    """Same noise on every shipped model: Eagle-1's and SJD's tokens are vanilla AR's (read from /trace), the line
    under each picture counts the tokens that are vanilla AR's (T / T for Eagle-1 and SJD), the overlay tints only
    where a picture left vanilla AR's, the microscope re-runs the race with its noise, a share link carries it."""
    from PIL import Image

    from coolsd.app.racers import slot_keys

    client, final = same_raced[key]
    n = shipped_app[0].ctx.for_model(key).model.num_tokens
    assert final["stats"]["finished"] and final["stats"]["settings"]["noise"] == "same"
    tokens = trace_tokens(client.predict(api_name="/trace"))
    assert tokens["eagle-1"] == tokens["vanilla"] == tokens["sjd"] and -1 not in tokens["vanilla"]
    same = {k: sum(a == b for a, b in zip(tokens[k], tokens["vanilla"])) for k in SAME_RACERS}
    tinted = client.predict(overlay=True, model=key, api_name="/overlay")
    plain = client.predict(overlay=False, model=key, api_name="/overlay")
    for slot, racer in enumerate(slot_keys(SAME_RACERS)):
        if racer not in SAME_RACERS:
            continue
        assert f"same as vanilla AR at {same[racer]} / {n} tokens" in final[f"seen_{slot + 1}"], racer
        assert final["stats"]["decoders"][racer]["same_as_vanilla"] == {"same": same[racer], "compared": n}
        with Image.open(tinted[slot]) as a, Image.open(plain[slot]) as b:
            assert (a.tobytes() == b.tobytes()) == (same[racer] == n), racer  # a tint exactly where it left
    for decoder in ("eagle-1", "cool-sd"):
        *_, header, payload = client.predict(key=decoder, round_no=1, model=key, api_name="/microscope")
        assert payload["matches_race"] and ("coupled" in header) == (decoder == "eagle-1"), header
    query = client.predict(model=key, racers=SAME_RACERS, noise="same", api_name="/share_link")
    restored = client.predict(query=query, api_name="/share_restore")
    assert restored["noise"] == "same" and restored["racers"] == SAME_RACERS and restored["model"] == key


def test_cost_whatif_names_its_parameters(clients):
    client = next(iter(clients.values()))
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/cost_whatif"]
    assert [p["parameter_name"] for p in api["parameters"]] == ["L", *(f"a_{i}" for i in range(1, 9)), "c", "V",
                                                                 "memory_bound"]
    text, out = client.predict(L=2, a_1=0.5, a_2=0.5, c=0.1, V=1.0, api_name="/cost_whatif")
    assert out["expected_tokens"] == pytest.approx(1.75) and out["draft_len"] == 2


@pytest.mark.parametrize("key", SHIPPED)
def test_the_lab_marks_its_run_on_the_models_benchmark(clients, key, shipped_app):
    """Issue 26 #5: the Pareto figure stayed empty on emoji."""
    name = shipped_app[0].ctx.for_model(key).model.base_class_names[0]  # (the page sends the picked model's class)
    job = clients[key].submit(rule="cool-sd", relaxation=2.0, samples=1, seed=0, condition=name, model=key,
                              api_name="/lab_grid")
    grid, text, figure, payload = job.result()
    assert payload["finished"] and figure is not None, "no benchmark figure"
    names = {t.get("name", "") for t in json.loads(figure["plot"])["data"]} if isinstance(figure, dict) else set()
    assert any(n.startswith("lab: ") for n in names) or figure


def test_the_theory_plot_uses_display_names_and_keeps_its_legend_off_the_title(clients):
    """Issue 26 #7."""
    figure = next(iter(clients.values())).predict(delta=2.0, nu=0.7, mu=0.0, mean_omega=True, lantern_k=5,
                                                  lantern_lambda=5.0, api_name="/theory")
    plot = json.loads(figure["plot"])
    names = [t["name"] for t in plot["data"]]
    assert not any(n.split(" ")[0] in ("uniform-rsd", "cool-sd", "lantern++", "eagle-1") for n in names), names
    legend = plot["layout"]["legend"]
    assert legend["orientation"] == "h" and legend["y"] < 0  # under the plot, wrapping, never over the title


def test_the_microscope_opens_on_a_middle_round(shipped_app, raced):
    demo, _ = shipped_app
    panel = microscope.MicroscopePanel(demo.ctx, Recordings(demo.ctx))
    """Issue 26 #8: it opened on round 1 of a slider from 0, on an almost empty picture."""
    key_update, slider, image, strip, bars, table, header, payload, cache = panel.opened(None, 0, None, {})
    rounds = len(cache["events"])
    assert slider.value == rounds // 2 and slider.minimum == 0 and slider.maximum == rounds - 1
    assert payload["round"] == rounds // 2 and f"round {rounds // 2} (rounds 0 to {rounds - 1})" in header
    assert payload["start"] >= demo.ctx.model.num_tokens // 4  # a good part of the picture is drawn
    if "not tested" in table:
        untested = [line for line in table.splitlines() if "not tested" in line]
        assert all(line.count(" – ") >= 2 for line in untested)  # no a_i or u_i for an untested draft


def test_a_preset_leaves_the_race_area_alone_until_generate(shipped_app):
    """Issue 26 #6: a preset click relabelled the image slots (and hid one) while they still showed the last race.
    Only Generate (which starts a race) retitles them; no event of a setting does."""
    demo, _ = shipped_app
    titles = {c._id for c in (*demo.page.race.titles, *demo.page.race.columns)}
    # every setting but the model picker (which shows the picked model's recorded race, titled by its racers)
    settings = {c._id for name, c in demo.page.controls.settings.items() if name != "model"}
    for fn in demo.blocks.fns.values():
        if titles & {c._id for c in fn.outputs}:
            triggers = {block for block, _ in fn.targets}
            assert not triggers & settings, fn.name
    generate = demo.page.controls.generate._id
    assert any((generate, "click") in fn.targets and titles & {c._id for c in fn.outputs}
               for fn in demo.blocks.fns.values())


def test_the_page_speaks_to_a_visitor(shipped_app):
    """The header names the execution path and precision plainly (and the credits of the model's artwork), the
    How tab has no spec sections and shows the paper beside the shown model's own benchmark, and the tour's guess
    box starts empty."""
    from coolsd.app import demo as demo_ui
    from coolsd.app import how, tour

    demo, _ = shipped_app
    header = demo_ui.header_markdown(demo.ctx)
    assert "measured at load" not in header and "median" not in header
    model = demo.ctx.model
    assert f"{model.path} path, {model.execution.split(' ')[0]}" in header  # the path and precision that run
    assert ("Credits: " in header) == bool(demo.ctx.model.credits)  # the model's own credits (issue 25), if any
    assert demo.ctx.model.credits in header
    assert "spec section" not in how.TEXT and "spec section" not in how.paper_beside_us(demo.ctx.model.kind)
    if demo.ctx.model.kind == "emoji":
        assert "assets/emoji/bench/" in how.paper_beside_us("emoji")
    guesses = [b for b in demo.blocks.blocks.values() if (getattr(b, "elem_id", "") or "").startswith("tour-guess")]
    assert guesses and all(b.value in ("", None) for b in guesses)
    assert tour.reveal_markdown(tour.STEPS[0], "", {}).startswith("No guess given.")


def test_loading_a_shipped_model_prints_no_accelerate_warning(capfd, caplog):
    """Issue 26 #8: diffusers warned about `accelerate` at every start (on its own stderr handler)."""
    registry.load(SHIPPED[-1])
    printed = capfd.readouterr()
    assert "accelerate" not in printed.err + printed.out
    assert not [r for r in caplog.records if "accelerate" in r.getMessage()]
