"""docs/app-and-api.md against the app: every endpoint the app serves has a section there and no other; each
section's argument table names the endpoint's arguments in the app's order, and every default it writes out equals
the app's (read from the app's own API description, `Blocks.get_api_info`, on the tiny model, and, where shipped, from
the MNIST model's race settings); the racer table, /race's outputs, /model_info's keys, the environment variables'
defaults, the limits table and the numbers the prose states are the code's; each API example calls an endpoint by
a name it has, with argument names it takes. No server is launched."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest
from demo_app import tiny_demo

from coolsd.app import race as race_ui
from coolsd.app import racers, served_files, serving, sessions, share
from coolsd.app.context import open_context
from coolsd.app.demo import model_info, workers_from_env
from coolsd.app.race_view import API_NAMES
from coolsd.app.settings import RaceSettings, specs
from coolsd.models import registry
from coolsd.util import checks

DOC = (Path(__file__).resolve().parents[2] / "docs" / "app-and-api.md").read_text(encoding="utf-8")
SECTION = re.compile(r"^### `(/\w+)`\n(.*?)(?=^#{2,3} |\Z)", re.M | re.S)
SPAN = re.compile(r"^`(\w+)` … `(\w+)`$")  # "`a_1` … `a_8`": the app's arguments from the first to the last
MODEL_WORDS = ("the model's", "the app's", "as `/race`")  # a default that is not one value for every model


@pytest.fixture(scope="module")
def api() -> dict[str, list[dict]]:
    """endpoint ("/race") -> its parameters as the app describes them (name, has default, default)."""
    info = tiny_demo().blocks.get_api_info()
    return {name: [{"name": p["parameter_name"], "has_default": p["parameter_has_default"],
                    "default": p.get("parameter_default")} for p in e["parameters"]]
            for name, e in info["named_endpoints"].items()}


def sections() -> dict[str, str]:
    return {m.group(1): m.group(2) for m in SECTION.finditer(DOC)}


def table(text: str, header: str) -> list[list[str]]:
    """The rows of the first table in `text` whose header row starts with `header`: each a list of its cells."""
    start = text.index(f"| {header} |")
    body = text[start:].split("\n\n")[0].splitlines()[2:]
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in body]


def names_of(cell: str, known: list[str]) -> list[str]:
    """The argument names a table's first cell stands for: one `name`, or a span of `known`."""
    span = SPAN.match(cell)
    if span:
        return known[known.index(span.group(1)): known.index(span.group(2)) + 1]
    assert re.fullmatch(r"`\w+`", cell), f"an argument cell names one argument or a span: {cell!r}"
    return [cell.strip("`")]


def literal(cell: str):
    """The value a default cell writes out (JSON in backticks), or None when it names no single value."""
    if cell == "required" or cell.startswith(MODEL_WORDS):
        return None
    m = re.fullmatch(r"`(.+)`", cell)
    assert m, f"a default is a value in backticks, 'required' or one of {MODEL_WORDS}: {cell!r}"
    return json.loads(m.group(1))


def same(documented, actual) -> bool:
    """Equal, and a bool only where the app's is a bool (True == 1 in Python, not here)."""
    return documented == actual and isinstance(documented, bool) == isinstance(actual, bool)


def test_every_endpoint_has_a_section_and_no_other(api):
    assert list(sections()) and set(sections()) == set(api)


def test_each_section_lists_the_arguments_in_the_apps_order(api):
    for name, text in sections().items():
        known = [p["name"] for p in api[name]]
        rows = table(text, "argument")
        documented = [n for cell, _, _ in rows for n in names_of(cell, known)]
        assert documented == known, name


def test_every_default_written_out_is_the_apps(api):
    checked = 0
    for name, text in sections().items():
        params = {p["name"]: p for p in api[name]}
        for cell, default, _ in table(text, "argument"):
            for arg in names_of(cell, list(params)):
                p = params[arg]
                assert (default == "required") == (not p["has_default"]), (name, arg, default)
                value = literal(default)
                if value is not None:
                    assert same(value, p["default"]), f"{name} {arg}: the docs say {value!r}, the app {p['default']!r}"
                    checked += 1
    assert checked > 40  # the tables do write defaults out


def test_race_defaults_match_the_race_settings_of_every_model_here(api):
    """The /race defaults written out are each model's (`RaceSettings.defaults`), on tiny and, where shipped, on
    MNIST; `draft_len` among them."""
    rows = {cell.strip("`"): literal(default) for cell, default, _ in table(sections()["/race"], "argument")}
    assert rows["draft_len"] == RaceSettings.defaults(tiny_demo().ctx).draft_len
    contexts = [tiny_demo().ctx]
    if "mnist" in registry.available():
        contexts.append(open_context("mnist", others=[]))
    for ctx in contexts:
        defaults = RaceSettings.defaults(ctx).as_dict()
        for arg, value in rows.items():
            if value is not None:
                assert same(value, defaults[arg]), (ctx.model_key, arg, value, defaults[arg])


def test_race_ranges_written_out_are_the_settings_bounds():
    """A /race row's "from `a` ... to `b`" is its setting's minimum and maximum (`coolsd.app.settings.specs`)."""
    table_specs = specs(tiny_demo().ctx)
    bounds = 0
    for cell, _, values in table(sections()["/race"], "argument"):
        m = re.search(r"from `([-\d.]+)`[^`]*? to `([-\d.]+)`", values)
        if m:
            spec = table_specs[cell.strip("`")]
            assert (float(m.group(1)), float(m.group(2))) == (spec.minimum, spec.maximum), cell
            bounds += 1
    assert bounds >= 4


def test_the_raw_http_example_counts_the_race_arguments(api):
    said = re.search(r"`\{\"data\": \[all (\d+) arguments", DOC)
    assert said and int(said.group(1)) == len(api["/race"]) == len(RaceSettings.names())


def test_the_racer_table_is_the_racer_choice():
    rows = table(DOC, "key")
    assert [key.strip("`") for key, _ in rows] == list(racers.RACERS)
    assert [key.strip("`") for key, what in rows if "(default)" in what] == racers.DEFAULT_RACERS


def test_the_race_outputs_are_named_in_order():
    text = sections()["/race"]
    outputs = text[text.index("Outputs of each frame"):].split("\n\n")[0]
    names = []
    for m in re.finditer(r"`(\w+)_(\d+)` … `\1_(\d+)`|`(\w+)`", outputs):
        if m.group(1):  # `image_1` … `image_5`
            names += [f"{m.group(1)}_{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        elif m.group(4) != "race_outputs":
            names.append(m.group(4))
    assert names == API_NAMES


def test_model_info_keys_are_the_documented_ones():
    text = sections()["/model_info"]
    returns = text[text.index("Returns JSON:"):].split("\n\n")[0]
    documented = set(re.findall(r"`(\w+)`", returns))
    assert documented == set(model_info(tiny_demo().ctx))


def test_environment_defaults(monkeypatch):
    read = {"COOLSD_WORKERS": workers_from_env, "COOLSD_SESSION_CAPACITY": serving.session_capacity_from_env,
            "COOLSD_STATE_BUDGET_MB": lambda: sessions.budget_from_env() // 2**20,
            "COOLSD_SERVED_FILES": served_files.max_files_from_env}
    for name in read:
        monkeypatch.delenv(name, raising=False)
    rows = {var.strip("`"): default for var, default, _ in table(DOC, "variable")}
    assert {k for k, v in rows.items() if v.startswith("`")} == set(read)
    for name, value in read.items():
        assert same(literal(rows[name]), value()), name


def test_the_limits_table_is_the_code():
    for _, value, where in table(DOC, "limit"):
        module, attr = where.strip("`").rsplit(".", 1)
        assert same(literal(value), getattr(importlib.import_module(module), attr)), where


def test_numbers_in_the_prose():
    said = {
        r"a queue of (\d+)": tiny_demo().blocks._queue.max_size,
        r"at most every ([\d.]+) s": race_ui.IMAGE_EVERY_S,
        r"plots every ([\d.]+) s": race_ui.PLOT_EVERY_S,
        r"at most ([\d,]+) characters\.": share.MAX_QUERY_CHARS,
        r"line of at most (\d+) characters": checks.MAX_MESSAGE_CHARS,
        r"up to (\w+) racers and vanilla AR": racers.MAX_RACERS,
    }
    words = {"four": 4}
    for pattern, value in said.items():
        m = re.search(pattern, DOC)
        assert m, pattern
        text = m.group(1).replace(",", "")
        assert float(words.get(text, text)) == value, pattern


def test_api_examples_call_real_endpoints_with_real_arguments(api):
    calls = 0
    for block in re.findall(r"```python\n(.*?)```", DOC, re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("predict", "submit"):
                kwargs = {k.arg: k.value for k in node.keywords}
                endpoint = kwargs.pop("api_name").value
                assert endpoint in api, endpoint
                assert set(kwargs) <= {p["name"] for p in api[endpoint]}, (endpoint, set(kwargs))
                calls += 1
    assert calls >= len(api)  # an example for every endpoint
