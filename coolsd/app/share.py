"""Take a race away: trace (JSON), images (PNG strip), share link (`?seed=3&racers=eagle-1,cool-sd&tab=`) setting
every control named (a bad value keeps its default). API: share_link, share_restore, trace, trace_file, strip_file."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

import gradio as gr

from coolsd.app.context import Context, bad, named, user_errors
from coolsd.app.controls import model_updates
from coolsd.app.plots import image_strip
from coolsd.app.racers import SLOTS, slot_keys
from coolsd.app.settings import RaceSettings, Spec, check_values, follow_model, specs
from coolsd.compare.trace import RaceTrace
from coolsd.util.checks import show

KEEP_FILES = 64  # trace / strip files kept on disk (the oldest go first)
MAX_QUERY_CHARS = 4000
_DIR: list[str] = []  # the folder of this process's files, made on first use


def _file(name: str, suffix: str) -> str:
    """A fresh path in this process's folder; prunes it to the newest KEEP_FILES files."""
    if not _DIR:
        _DIR.append(tempfile.mkdtemp(prefix="coolsd-share-"))
    folder = _DIR[0]
    files = sorted((os.path.join(folder, f) for f in os.listdir(folder)), key=os.path.getmtime)
    for old in files[: max(0, len(files) - KEEP_FILES + 1)]:
        os.remove(old)
    return os.path.join(folder, f"coolsd-{name}-{uuid.uuid4().hex[:8]}{suffix}")


def _encode(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _decode(spec: Spec, text: str):
    """The query text as `spec`'s type (unparsable stays text, for the check to name)."""
    if spec.widget == "checkboxgroup":
        return [v for v in text.split(",") if v]
    if spec.kind == "bool":
        return {"true": True, "1": True, "false": False, "0": False}.get(text.strip().lower(), text)
    if spec.kind in ("number", "int"):
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() else number
    return text


def check_shared(ctx: Context, values: Mapping) -> dict:
    """name -> checked value of share-link controls: a link is refused (one gr.Error) exactly when its race would be."""
    table = specs(ctx)
    unknown = [name for name in values if name not in table]
    if unknown:
        raise bad(f"unknown setting {show(unknown[0])}")
    race = {name: v for name, v in values.items() if name in RaceSettings.names()}
    settings = RaceSettings.check(ctx, race)
    settings.plan(ctx)
    others = check_values(table, {name: v for name, v in values.items() if name not in race})
    names = [*values, *(["style"] if "condition" in values and "style" not in values else [])]  # a label's style
    return {name: getattr(settings, name) if name in RaceSettings.names() else others[name] for name in names}


def share_query(ctx: Context, values: Mapping) -> str:
    """"?name=value&..." for the given control values (checked as the race checks them; at most MAX_QUERY_CHARS)."""
    query = "?" + urlencode({name: _encode(v) for name, v in check_shared(ctx, values).items()})
    if len(query) > MAX_QUERY_CHARS:
        raise bad(f"these settings make a share link of {len(query)} characters, more than it may hold "
                  f"({MAX_QUERY_CHARS}); shorten the prompt or the custom omega list")
    return query


def parse_query(ctx: Context, params: Mapping[str, str], panel_ids=()) -> tuple[dict, list[str]]:
    """Query parameters -> ({name: checked value}, [a message per bad one]), for the model the link names."""
    values, errors, picked, model_ok = {}, [], ctx, True
    if "model" in params:
        try:
            picked = ctx.for_model(params["model"])
        except gr.Error as err:
            errors.append(str(err.message))
            model_ok = False
    table = specs(picked)
    raw = {}
    for name, text in params.items():
        if name == "tab":
            if text in panel_ids:
                values["tab"] = text
            else:
                errors.append(f"unknown tab {show(text)}; choose one of {', '.join(panel_ids)}")
        elif name not in table:
            errors.append(f"unknown setting {show(name)}")
        elif name != "model" or model_ok:
            raw[name] = _decode(table[name], text)
    for name, value in follow_model(ctx, picked, raw).items():
        try:
            values[name] = check_values(table, {name: value})[name]
        except gr.Error as err:
            errors.append(str(err.message))
    if not errors:
        try:
            check_shared(ctx, {k: v for k, v in values.items() if k != "tab"})
        except gr.Error as err:
            errors.append(str(err.message))
    return values, errors


def _params(query) -> dict:
    if not isinstance(query, str):
        raise bad(f"the query must be text such as '?seed=3&delta=2', got {show(query)}")
    if len(query) > MAX_QUERY_CHARS:
        raise bad(f"the query is too long: {len(query)} characters (at most {MAX_QUERY_CHARS})")
    return dict(parse_qsl(query.lstrip("?"), keep_blank_values=True))


class TakeAway:
    """The take-away row under the race: trace, strip and share link buttons, and their handlers."""

    def __init__(self, ctx: Context, controls, after, snapshot: gr.State, trace: gr.State) -> None:
        self.ctx, self.controls, self.after, self.snapshot, self.trace = ctx, controls, after, snapshot, trace
        with gr.Row(equal_height=True):
            self.trace_btn = gr.Button("Download the trace (JSON)", size="sm", elem_id="trace-btn")
            self.strip_btn = gr.Button("Download the images (PNG strip)", size="sm", elem_id="strip-btn")
            self.link_btn = gr.Button("Share link", size="sm", elem_id="link-btn")
        with gr.Row(equal_height=True):
            self.file = gr.File(label="download", interactive=False, elem_id="download", height=100)
            self.link = gr.Textbox(label="share link (restores every control)", interactive=False, buttons=["copy"],
                                   elem_id="share-link")
        self.trace_view = gr.JSON(visible=False)
        self.trace_api = gr.Button(visible=False)

    def trace_file(self, trace) -> str:
        """The last race's trace as a .json file (settings, model, every event)."""
        data = self.after.trace_json(trace)
        path = _file(f"trace-seed{trace.settings.seed}", ".json")
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def strip_file(self, snapshot, overlay, trace) -> str:
        """The images on show (last race or replayed step) side by side in one .png, labelled."""
        with user_errors():  # (every argument is checked, also before a race)
            overlay = specs(self.ctx)["overlay"].check(overlay)
        if not isinstance(trace, RaceTrace) or not (snapshot or {}).get("images"):
            raise bad("no images yet: run a race first")
        labels = dict(trace.racers)
        keys = slot_keys([k for k, _ in trace.racers[:-1]])
        images, ctx = snapshot["images"], self.after.view_context(snapshot)
        shown = [slot for slot in range(SLOTS) if slot in images and keys[slot] is not None]
        strip = image_strip([ctx.render(*images[slot], overlay) for slot in shown],
                            [labels[keys[slot]] for slot in shown])
        path = _file(f"images-seed{trace.settings.seed}", ".png")
        strip.save(path)
        return path

    def share_link(self, **values) -> str:
        """The query string ("?seed=3&...") that restores these settings; the page prefixes its own URL."""
        return share_query(self.ctx, values)

    def wire(self) -> None:
        controls = self.controls.inputs
        self.trace_btn.click(self.trace_file, self.trace, self.file, api_name="trace_file")
        self.strip_btn.click(self.strip_file, [self.snapshot, self.controls["overlay"], self.trace], self.file,
                             api_name="strip_file", preprocess=False)
        self.link_btn.click(named(self.share_link, RaceSettings.names()), controls, self.link, api_name="share_link",
                            preprocess=False).then(
            None, self.link, self.link, js="(q) => q && q.startsWith('?') ? "
            "window.location.origin + window.location.pathname + q : q", api_visibility="private")
        self.trace_api.click(self.after.trace_json, self.trace, self.trace_view, api_name="trace")


def wire_restore(ctx: Context, controls, blocks: gr.Blocks, tabs: gr.Tabs, panel_ids: list[str]):
    """The page load event setting every control the URL's query names; call inside the Blocks after every panel."""
    controls = controls.settings

    def restore(request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        params = {k: v for k, v in params.items() if k not in ("__theme", "view")}  # Gradio's own parameters
        if not params:
            return tuple(gr.skip() for _ in range(len(controls) + 1))
        values, errors = parse_query(ctx, params, panel_ids)
        if errors:
            gr.Warning("share link: " + "; ".join(errors[:3]) + (" ..." if len(errors) > 3 else "")
                       + " (kept the default)")
        updates = {name: values[name] if name in values else gr.skip() for name in controls}
        if "model" in values:
            updates |= model_updates(ctx, ctx.for_model(values["model"]), values)
        return (*updates.values(), gr.Tabs(selected=values["tab"]) if "tab" in values else gr.skip())

    def share_restore(query: str) -> dict:
        """The settings a share link's query restores; a bad value is one clear error."""
        values, errors = parse_query(ctx, _params(query), panel_ids)
        if errors:
            raise bad("share link: " + errors[0])
        return values

    gr.api(share_restore, api_name="share_restore")
    # queued: a warning reaches the page as a toast only through the queue
    return blocks.load(restore, None, [*controls.values(), tabs], api_visibility="private", concurrency_limit=None)
