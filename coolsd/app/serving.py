"""How the demo is served to many visitors: memory bounded per session, and a clear answer to an unknown endpoint.

Memory (measured with `tools/memory_run.py`, numbers in docs/app-and-api.md):
- Gradio keeps a per-session copy of the page's component configuration for every session it has
  seen, up to `state_session_capacity` sessions (Gradio's default: 10,000), oldest out first.
  SESSION_CAPACITY bounds it ($COOLSD_SESSION_CAPACITY overrides).
- A session's race state (its trace and the images on show) lives at most STATE_TTL_S seconds after
  its last update (`gr.State(time_to_live=...)`); the trace's `release` runs when Gradio deletes it.
- A trace keeps its events compactly (`coolsd.compare.trace.EventStore`), the images on show as uint8.

Unknown endpoints: Gradio answers `POST /gradio_api/call/<name>` for a name it does not serve with an
HTTP 500; `UnknownEndpoint` answers 404 with one JSON line naming the endpoints there are.
"""

from __future__ import annotations

import json
import os
import re

SESSION_CAPACITY = 1000
STATE_TTL_S = 3600
_CALL = re.compile(r"/gradio_api/call/(?:v2/)?([^/]+)/?$")


def session_capacity_from_env() -> int:
    """$COOLSD_SESSION_CAPACITY (sessions whose state the server keeps; default SESSION_CAPACITY)."""
    text = os.environ.get("COOLSD_SESSION_CAPACITY", "") or str(SESSION_CAPACITY)
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:  # (str.isdigit also takes "²", which int() refuses)
        raise SystemExit(f"COOLSD_SESSION_CAPACITY must be an integer >= 1, got {text!r}")
    return int(text)


class UnknownEndpoint:
    """ASGI middleware: a call to an api_name the app does not have gets HTTP 404 and one JSON line.

    Only `POST .../gradio_api/call/<name>` (and `/call/v2/<name>`) is looked at; every other request
    passes through untouched. The names are read from the served Blocks (scope["app"]) per request.
    """

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
