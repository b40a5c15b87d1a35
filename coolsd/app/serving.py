"""Serving many visitors: bounded memory (`sessions`, `served_files`), one line for bad input, 404 for bad names."""

from __future__ import annotations

import inspect
import json
import re

import gradio as gr

from coolsd.app.context import bad, log
from coolsd.app.served_files import ServedFiles, cache_writes_in_place
from coolsd.app.sessions import LeanStateHolder
from coolsd.util.checks import one_line
from coolsd.util.env import env_int

SESSION_CAPACITY = 1000
STATE_TTL_S = 3600
MICROSCOPE_TTL_S = 600  # the microscope's per-session cache of re-decoded rounds
_CALL = re.compile(r"/gradio_api/call/(?:v2/)?([^/]+)/?$")


def session_capacity_from_env() -> int:  # sessions whose state the server keeps
    return env_int("COOLSD_SESSION_CAPACITY", SESSION_CAPACITY)


# components that take a file value (the app has none as an event input today; a panel that adds one keeps uploads)
FILE_INPUTS = (gr.File, gr.Image, gr.Audio, gr.Video, gr.Gallery, gr.UploadButton, gr.Model3D, gr.ImageEditor)


class ServedBlocks(gr.Blocks):
    """The app's Blocks: bad input is one line (`bad`), sessions are lean, served files bounded (`served_files`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.served_files = ServedFiles()  # (reads $COOLSD_SERVED_FILES: a bad value stops the build, not an event)
        cache_writes_in_place()  # Gradio's cache writers never rewrite a file a client may be fetching

    @property
    def state_holder(self):
        return self.__dict__.get("state_holder")

    @state_holder.setter
    def state_holder(self, holder) -> None:  # Gradio's server hands its holder to the Blocks when it starts
        self.__dict__["state_holder"] = LeanStateHolder.adopt(holder)

    async def postprocess_data(self, block_fn, predictions, state):
        """Gradio's postprocessing (writes the output's files), then `served_files` records and trims (never fails)."""
        output = await super().postprocess_data(block_fn, predictions, state)
        try:
            self.served_files.served(self, output)
        except Exception as err:  # noqa: BLE001 (bookkeeping must not fail a race frame)
            log.warning("served files: %s", one_line(f"{type(err).__name__}: {err}"))
        return output

    def validate_inputs(self, block_fn, inputs) -> None:
        if len(inputs) < len(block_fn.inputs):
            names = [name for name, block in zip(parameter_names(block_fn), block_fn.inputs) if not block.skip_api]
            sent = len(inputs)  # (an API call leaves the session's states out: Gradio adds them when none is missing)
            missing = f": the first one missing is {names[sent]}" if sent < len(names) else ""
            raise bad(f"/{block_fn.api_name} takes {len(names)} values ({_listed(names)}), got {sent}{missing}")

    async def preprocess_data(self, block_fn, inputs, state, explicit_call: bool = False):
        self.validate_inputs(block_fn, inputs)
        names = parameter_names(block_fn)
        for name, block, value in zip(names, block_fn.inputs, inputs):
            if not isinstance(block, FILE_INPUTS) and holds_file(value):
                raise bad(f"/{block_fn.api_name}: {name} takes no file, got a file value")
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except gr.Error as err:  # a component's own check (e.g. a dropdown value not among its choices)
            if not err.print_exception:
                raise
            message = err.message
        except Exception as err:  # Gradio's processing of a value (a path, a data model)
            message = f"{type(err).__name__}: {err}"
        log.info("/%s: input refused: %s", block_fn.api_name, one_line(message))
        raise bad(f"/{block_fn.api_name}: bad input: {message}")


def parameter_names(block_fn) -> list[str]:
    """Each input's name: the handler's parameters (request and event data aside), else the components' labels."""
    labels = [str(getattr(block, "label", None) or f"input {i}") for i, block in enumerate(block_fn.inputs)]
    try:
        params = [p for p in inspect.signature(block_fn.fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and not (isinstance(p.annotation, type) and issubclass(p.annotation, (gr.Request, gr.EventData)))
                  and p.annotation not in ("gr.Request", "gr.SelectData", "gr.EventData")]
    except (TypeError, ValueError):  # no Python handler, or one without a signature
        return labels
    return [p.name for p in params] if len(params) >= len(labels) else labels


def _listed(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {', '.join(names[-2:])}"


def holds_file(value, limit: int = 100_000) -> bool:
    """Whether a JSON value holds a file object (a dict with "path" and "meta") at any depth (at most `limit` items)."""
    todo, seen = [value], 0
    while todo and seen < limit:
        item = todo.pop()
        seen += 1
        if isinstance(item, dict):
            if "path" in item and "meta" in item:
                return True
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return False


class UnknownEndpoint:
    """ASGI middleware: `POST .../gradio_api/call/[v2/]<name>` for an unknown name gets 404 and one JSON line."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        match = _CALL.search(scope.get("path", "")) if scope["type"] == "http" and scope["method"] == "POST" else None
        if match is not None:
            names = _api_names(scope.get("app"))
            if names is not None and match.group(1) not in names:
                await _answer_404(send, match.group(1), sorted(n for n, public in names.items() if public))
                return
        await self.app(scope, receive, send)


def _api_names(app) -> dict[str, bool] | None:
    """api_name -> whether its API is public, of every event the app serves (None before it serves Blocks)."""
    blocks = getattr(app, "blocks", None)
    if blocks is None:
        return None
    return {fn.api_name: getattr(fn, "api_visibility", "public") == "public" for fn in blocks.fns.values()
            if fn.api_name}


async def _answer_404(send, name: str, names: list[str]) -> None:
    shown = name if len(name) <= 40 else name[:37] + "..."
    body = json.dumps({"error": f"unknown api_name {shown!r}; this app serves: {', '.join(names)}"}).encode()
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
