"""What the server keeps per visitor: `LeanSession`s (states and changed component copies only), evicted least
recently used first by `LeanStateHolder`: beyond `capacity`, idle over `max_idle_s`, or over `budget_bytes`."""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
import os
import sys
import threading
import time
from collections import ChainMap

import numpy as np
import torch
from gradio.blocks import Block, BlocksConfig
from gradio.components import State
from gradio.state_holder import SessionState, StateHolder
from PIL import Image

from coolsd.util.env import env_int

STATE_BUDGET_MB = 64  # all sessions' states together (traces, images on show, microscope caches), in MB
SESSION_IDLE_S = 3 * 3600  # a session not used for this long goes, whatever its states' own time to live
SESSION_BASE_BYTES = 6_000  # a session before any state: LeanSession ~1.1 KB, Gradio's queue ~3.5 KB, event records
TRIM_EVERY_S = 30.0  # at most one malloc_trim per this many seconds


def budget_from_env() -> int:
    """$COOLSD_STATE_BUDGET_MB (default STATE_BUDGET_MB) in bytes."""
    return env_int("COOLSD_STATE_BUDGET_MB", STATE_BUDGET_MB) * 2**20


def state_bytes(value, limit: int = 200_000) -> int:
    """Estimated bytes of a state value (at most `limit` objects walked); the page's shared objects not counted."""
    seen: set[int] = set()
    todo, total = [value], 0
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (Block, type, type(sys), type(state_bytes))):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            total += sys.getsizeof(obj) + obj.untyped_storage().nbytes()
        elif isinstance(obj, np.ndarray):  # (getsizeof counts the data of an array that owns it)
            total += sys.getsizeof(obj) + (obj.nbytes if obj.base is not None else 0)
        elif isinstance(obj, Image.Image):
            total += sys.getsizeof(obj) + obj.width * obj.height * len(obj.getbands())
        elif isinstance(obj, dict):
            total += sys.getsizeof(obj)
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            total += sys.getsizeof(obj)
            todo.extend(obj)
        else:  # (str, bytes, numbers, array.array with its buffer: their size alone)
            total += sys.getsizeof(obj)
            if hasattr(obj, "__dict__"):
                todo.append(vars(obj))
            for name in getattr(type(obj), "__slots__", ()):
                todo.append(getattr(obj, name, None))
    return total


IGNORED_ARGS = ("value", "render")  # what a copy may differ in and still change nothing a lean session keeps


def same_props(page, copy) -> bool:
    """Whether a session's copy of a component has the page component's arguments (value and `render` aside)."""
    if copy is page:
        return True
    if type(copy) is not type(page):
        return False
    mine = {k: v for k, v in copy.constructor_args.items() if k not in IGNORED_ARGS}
    theirs = {k: v for k, v in page.constructor_args.items() if k not in IGNORED_ARGS}
    try:
        return bool(mine == theirs)
    except Exception:  # noqa: BLE001 (an argument without a plain ==, e.g. an array: keep the copy)
        return False


def session_config(page: BlocksConfig) -> BlocksConfig:
    """The page's configuration read through (`ChainMap`) where Gradio copies it (~11 KB) per session."""
    config = BlocksConfig(page.root_block)
    config.blocks = ChainMap({}, page.blocks)
    config.fns = ChainMap({}, page.fns)
    config.fn_id = page.fn_id
    config.renderables = list(page.renderables)
    return config


class LeanSession(SessionState):
    """A Gradio session without the per-session configuration of every component (see the module's doc)."""

    def __init__(self, blocks, holder: LeanStateHolder | None = None) -> None:  # (no super().__init__: it builds it)
        self.blocks_config = session_config(blocks.default_config)
        self.page_blocks = blocks.default_config.blocks  # the page's own components (shared, not copied)
        self.state_data: dict[int, object] = {}
        self._state_ttl: dict[int, tuple[float, datetime.datetime]] = {}
        self.is_closed = False
        self.STATE_TTL_WHEN_CLOSED = 1 if os.getenv("GRADIO_IS_E2E_TEST", None) else 3600
        self.holder = holder
        self.nbytes = 0  # estimated bytes of this session's states (LeanStateHolder's budget reads it)

    def __setitem__(self, key: int, value) -> None:
        block = self.blocks_config.blocks.get(key)
        if isinstance(block, State):
            self._state_ttl[key] = (block.time_to_live, datetime.datetime.now())
            self.state_data[key] = value
            self.measure()
        else:  # a component copy (an update): the page's own where it changes nothing (gr.skip())
            page = self.page_blocks.get(key)
            if page is None and getattr(value, "_id", None) == key and self.holds(value):
                return  # Gradio files a copy it holds under the page's id again under the copy's own id: not kept
            self.blocks_config.blocks[key] = page if page is not None and same_props(page, value) else value

    def holds(self, block) -> bool:
        """Whether this very component is one of the session's blocks (the page's own or a copy)."""
        return any(kept is block for kept in self.blocks_config.blocks.values())

    def measure(self) -> None:  # (and tell the holder)
        before, self.nbytes = self.nbytes, sum(state_bytes(v) for v in self.state_data.values())
        if self.holder is not None:
            self.holder.resized(self.nbytes - before)

    def _update_config(self, key: int) -> None:  # the configuration is built on demand only
        pass

    def _update_value_in_config(self, key: int, value) -> None:  # the last output values are not kept
        pass

    @property
    def config_values(self) -> dict:
        """The page's component configurations, with this session's own copies (built when asked: deep links)."""
        config = self.blocks_config
        return {k: config.config_for_block(k, [], block) for k, block in config.blocks.items()
                if not isinstance(block, State)}


class LeanStateHolder(StateHolder):
    """Gradio's session store with LeanSessions and eviction (module doc); `evicted` counts evictions by reason."""

    def __init__(self, budget_bytes: int | None = None, max_idle_s: float = SESSION_IDLE_S) -> None:
        super().__init__()
        self._lean(budget_bytes, max_idle_s)

    def _lean(self, budget_bytes: int | None, max_idle_s: float) -> None:
        self.budget_bytes = budget_from_env() if budget_bytes is None else int(budget_bytes)
        self.max_idle_s = max_idle_s
        self.state_total = 0  # sum of the kept sessions' `nbytes`
        self.evicted = {"count": 0, "age": 0, "budget": 0}
        self._size_lock = threading.Lock()
        self._last_trim = float("-inf")  # (the first request trims, whatever the clock)

    @classmethod
    def adopt(cls, holder: StateHolder, budget_bytes: int | None = None,
              max_idle_s: float = SESSION_IDLE_S) -> LeanStateHolder:
        """Gradio's holder (server and Blocks share it) made a LeanStateHolder in place, sessions and capacity kept."""
        if not isinstance(holder, cls):
            holder.__class__ = cls
            holder._lean(budget_bytes, max_idle_s)
        return holder

    def __getitem__(self, session_id: str) -> SessionState:
        if session_id not in self.session_data:
            self.session_data[session_id] = LeanSession(self.blocks, self)
        self.update(session_id)
        self.time_last_used[session_id] = datetime.datetime.now()
        return self.session_data[session_id]

    def resized(self, delta: int) -> None:
        with self._size_lock:
            self.state_total += delta

    def kept_bytes(self) -> int:
        """Estimated bytes of the kept sessions: their states and SESSION_BASE_BYTES each."""
        return self.state_total + SESSION_BASE_BYTES * len(self.session_data)

    def update(self, session_id: str) -> None:
        with self.lock:
            if session_id in self.session_data:
                self.session_data.move_to_end(session_id)
            now = datetime.datetime.now()
            while len(self.session_data) > 1:
                oldest = next(iter(self.session_data))
                if oldest == session_id:
                    break
                if len(self.session_data) > self.capacity:
                    reason = "count"
                elif (now - self.time_last_used.get(oldest, now)).total_seconds() > self.max_idle_s:
                    reason = "age"
                elif self.kept_bytes() > self.budget_bytes:
                    reason = "budget"
                else:
                    break
                self._evict(oldest)
                self.evicted[reason] += 1
        self.trim()  # (at most once per TRIM_EVERY_S: a race's freed buffers go back while sessions are still kept)

    def _evict(self, session_id: str) -> None:
        session = self.session_data.pop(session_id)
        self.time_last_used.pop(session_id, None)
        for component, value, _ in list(session.state_components):
            try:
                component.delete_callback(value)
            except Exception:  # noqa: BLE001 (a callback's failure must not stop the eviction)
                pass
        session.state_data.clear()
        self.resized(-getattr(session, "nbytes", 0))
        if isinstance(session, LeanSession):
            session.holder, session.nbytes = None, 0
        forget_queue(getattr(self, "blocks", None), session_id)

    def delete_state(self, session_id: str, expired_only: bool = False) -> None:
        """Gradio's expiry (every second) and close; the session's size is estimated again."""
        before = len(self.session_data[session_id].state_data) if session_id in self.session_data else 0
        super().delete_state(session_id, expired_only)
        session = self.session_data.get(session_id)
        if isinstance(session, LeanSession) and len(session.state_data) != before:
            session.measure()

    def trim(self, force: bool = False) -> bool:
        """Ask glibc to return freed heap pages to the system (at most once per TRIM_EVERY_S unless `force`)."""
        now = time.monotonic()
        if not force and now - self._last_trim < TRIM_EVERY_S:
            return False
        self._last_trim = now
        return trim_heap()


def forget_queue(blocks, session_id: str) -> bool:
    """Drop an idle session's Gradio queue records (~4 KB, kept for 2,000 sessions); whether they went."""
    queue = getattr(blocks, "_queue", None)
    if queue is None or queue.pending_event_ids_session.get(session_id):
        return False
    queue.pending_messages_per_session.pop(session_id, None)
    queue.pending_event_ids_session.pop(session_id, None)
    return True


_LIBC = None


def trim_heap() -> bool:
    """glibc's malloc_trim(0): freed memory of every arena back to the system. False where there is no glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 (musl, macOS: no such symbol)
        except (OSError, AttributeError):
            _LIBC = False
    return bool(_LIBC and _LIBC.malloc_trim(0))


def limit_arenas(arenas: int = 2) -> bool:
    """glibc: at most `arenas` malloc arenas (else 8 per core) before threads start, unless $MALLOC_ARENA_MAX."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-8, int(arenas)))  # M_ARENA_MAX
    except (OSError, AttributeError):
        return False
