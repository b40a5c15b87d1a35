"""What the server keeps per visitor (issue 27): lean sessions, evicted by count, idle age and a memory budget; the
microscope cache's time to live; a race's kept state within 0.4 MB on the shipped default model. No server, no
timing: the session store is driven the way Gradio drives it (holder[session] per request, state[key] = value)."""

from __future__ import annotations

import datetime
import sys
import tracemalloc
from array import array
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import torch
from gradio.state_holder import StateHolder
from PIL import Image

from coolsd.app import sessions
from coolsd.app.serving import MICROSCOPE_TTL_S, STATE_TTL_S, ServedBlocks
from coolsd.app.sessions import LeanSession, LeanStateHolder, state_bytes

KB = 1024


def small_page():
    """A page with one state (its delete callback records what it released) and one slider."""
    released = []
    with ServedBlocks() as blocks:
        state = gr.State(None, time_to_live=60, delete_callback=released.append)
        slider = gr.Slider(0, 10, value=3)
        gr.Dropdown(choices=[f"emoji {i}" for i in range(600)], value="emoji 1")  # a long picker, as emoji's
    return blocks, state, slider, released


def served_holder(capacity: int = 100, budget_bytes: int = 10**9, max_idle_s: float = 3600) -> tuple:
    """The holder as Gradio's server makes it (StateHolder().set_blocks), turned lean by ServedBlocks."""
    blocks, state, slider, released = small_page()
    blocks.state_session_capacity = capacity
    holder = StateHolder()
    holder.set_blocks(blocks)
    assert blocks.state_holder is holder and isinstance(holder, LeanStateHolder)  # one object, shared with the server
    holder.budget_bytes, holder.max_idle_s = budget_bytes, max_idle_s
    return holder, state, slider, released


def test_served_blocks_make_lean_sessions_that_keep_states_and_component_copies():
    holder, state, slider, _ = served_holder()
    session = holder["a"]
    assert isinstance(session, LeanSession)
    session[state._id] = {"x": torch.zeros(1000, dtype=torch.uint8)}
    session[slider._id] = gr.Slider(0, 99, value=7, render=False)  # a handler's update: the session's own copy
    session._update_value_in_config(slider._id, 7)  # Gradio stores output values here: a lean session keeps none
    assert session[state._id]["x"].numel() == 1000 and session[slider._id].maximum == 99
    assert session.nbytes >= 1000 and holder.state_total == session.nbytes
    configs = session.config_values  # built on demand (deep links), with the session's copy
    assert configs[slider._id]["props"]["maximum"] == 99
    assert not hasattr(session, "__dict__") or "config_values" not in vars(session)


def test_a_lean_session_holds_far_less_than_gradios_own():
    """Gradio's session builds every component's configuration at once (the long picker's choices included)."""
    from gradio.state_holder import SessionState

    holder, *_ = served_holder()
    lean = holder["a"]
    gradio_own = state_bytes(SessionState(holder.blocks).config_values)
    assert gradio_own > 20 * KB and state_bytes(lean.state_data) + state_bytes(lean._state_ttl) < KB


def test_sessions_go_by_count_oldest_first_and_their_states_are_released():
    holder, state, _, released = served_holder(capacity=3)
    for name in "abcde":
        holder[name][state._id] = name
    assert list(holder.session_data) == ["c", "d", "e"]
    assert sorted(released) == ["a", "b"] and holder.evicted["count"] == 2


def test_sessions_go_when_idle_too_long():
    holder, state, _, released = served_holder(max_idle_s=600)
    for name in "abc":
        holder[name][state._id] = name
    holder.time_last_used["a"] -= datetime.timedelta(seconds=601)
    holder.time_last_used["b"] -= datetime.timedelta(seconds=599)
    holder["d"]
    assert list(holder.session_data) == ["b", "c", "d"] and released == ["a"] and holder.evicted["age"] == 1


def test_sessions_go_oldest_first_when_their_states_pass_the_budget():
    blob = 200 * KB
    budget = 3 * (blob + sessions.SESSION_BASE_BYTES) + 100 * KB  # room for three sessions holding a blob each
    holder, state, _, released = served_holder(budget_bytes=budget)
    for name in "abcd":
        holder[name][state._id] = torch.zeros(blob, dtype=torch.uint8)
    holder["a2"]  # the next request: the budget is checked, the oldest goes
    assert "a" not in holder.session_data and holder.evicted["budget"] >= 1
    assert holder.kept_bytes() <= budget
    assert {"b", "c", "d"} <= set(holder.session_data)
    assert holder.state_total == sum(s.nbytes for s in holder.session_data.values())


def test_a_session_in_use_is_never_pushed_out_by_the_budget():
    holder, state, _, _ = served_holder(budget_bytes=1)
    holder["only"][state._id] = torch.zeros(10_000, dtype=torch.uint8)
    holder["only"]
    assert list(holder.session_data) == ["only"] and holder.evicted["budget"] == 0


def test_expired_states_leave_the_budget():
    holder, state, _, released = served_holder()
    holder["a"][state._id] = torch.zeros(50_000, dtype=torch.uint8)
    assert holder.state_total >= 50_000
    ttl, set_at = holder["a"]._state_ttl[state._id]
    holder["a"]._state_ttl[state._id] = (ttl, set_at - datetime.timedelta(seconds=ttl + 1))
    holder.delete_all_expired_state()  # what Gradio runs every second
    assert len(released) == 1 and holder.state_total == 0


def test_state_bytes_counts_storage_not_the_shared_page():
    t = torch.zeros(4096, dtype=torch.float32)
    assert 16 * KB <= state_bytes({"t": t, "again": t}) < 17 * KB  # a tensor once, by its storage
    blocks, *_ = small_page()
    assert state_bytes({"component": blocks.blocks[next(iter(blocks.blocks))]}) < KB  # components are the page's


def test_the_microscope_cache_and_the_race_states_expire():
    from demo_app import tiny_demo

    app = tiny_demo()
    ttls = sorted(b.time_to_live for b in app.blocks.blocks.values() if isinstance(b, gr.State))
    assert MICROSCOPE_TTL_S in ttls and MICROSCOPE_TTL_S < STATE_TTL_S
    assert all(ttl <= STATE_TTL_S for ttl in ttls)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
def test_a_default_race_on_the_shipped_model_keeps_under_400_kb():
    """One default race (the app's default racers and settings) on the shipped default model: its trace and the
    images on show, as a session keeps them, take under 0.4 MB (the issue's bound per kept race)."""
    from coolsd.app.demo import make_demo
    from coolsd.app.settings import RaceSettings
    from coolsd.models import registry

    if not registry.available():
        pytest.skip("no shipped model here")
    key = registry.default_key() if registry.default_key() != "llamagen" else "emoji"
    app = make_demo(key)
    frames = list(app.page.race.stream.race(**RaceSettings.defaults(app.ctx).as_dict()))
    last = frames[-1]
    trace, snapshot = last.trace, last.snapshot
    assert trace.status == "finished" and len(trace) > 0
    kept = state_bytes(trace) + state_bytes(snapshot)
    assert kept < 400 * KB, f"{key}: a race keeps {kept / KB:.0f} KB"


def wide_page(n: int = 200) -> ServedBlocks:
    """A page with many components and events (the emoji page has about 250 and 60)."""
    with ServedBlocks() as blocks:
        for i in range(n):
            gr.Slider(0, 10, value=i % 10).change(lambda: None, None, None)
    return blocks


def test_a_new_session_reads_the_page_configuration_and_keeps_only_its_own_copies():
    holder, _, slider, _ = served_holder()
    a, b = holder["a"], holder["b"]
    page = holder.blocks.default_config
    assert a.blocks_config.blocks[slider._id] is slider and a.blocks_config.fns.keys() == page.fns.keys()
    a[slider._id] = gr.Slider(0, 99, value=7, render=False)  # a's update
    assert a.blocks_config.blocks[slider._id].maximum == 99
    assert page.blocks[slider._id] is slider and b.blocks_config.blocks[slider._id] is slider  # page and b unchanged
    assert len(a.blocks_config.blocks) == len(page.blocks)


def test_a_session_that_only_looks_costs_a_small_fraction_of_a_copied_configuration():
    from copy import copy

    blocks = wide_page()
    holder = StateHolder()
    holder.set_blocks(blocks)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(50):
            holder[f"s{i}"]
        per_session = (tracemalloc.get_traced_memory()[0] - before) / 50
        before = tracemalloc.get_traced_memory()[0]
        copies = [copy(blocks.default_config) for _ in range(50)]
        per_copy = (tracemalloc.get_traced_memory()[0] - before) / 50
    finally:
        tracemalloc.stop()
    assert len(copies) == 50 and per_copy > 8 * KB and per_session < per_copy / 4, (per_session, per_copy)


def test_an_evicted_session_leaves_no_gradio_queue_records_unless_an_event_is_pending():
    holder, state, _, _ = served_holder(capacity=2)
    queue = holder.blocks._queue
    for name, pending in (("idle", set()), ("busy", {"event-1"})):
        holder[name][state._id] = name
        queue.pending_messages_per_session[name] = object()
        queue.pending_event_ids_session[name] = pending
    holder["c"], holder["d"]  # both pushed out by count
    assert {"idle", "busy"}.isdisjoint(holder.session_data)
    assert "idle" not in queue.pending_messages_per_session and "idle" not in queue.pending_event_ids_session
    assert "busy" in queue.pending_messages_per_session and queue.pending_event_ids_session["busy"] == {"event-1"}


def test_the_heap_is_trimmed_on_requests_at_most_once_per_interval(monkeypatch):
    holder, *_ = served_holder()
    calls, clock = [], [1000.0]
    monkeypatch.setattr(sessions, "trim_heap", lambda: calls.append(clock[0]) or True)
    monkeypatch.setattr(sessions.time, "monotonic", lambda: clock[0])
    holder._last_trim = 0.0
    for _ in range(5):
        holder["a"]  # no session is pushed out: trimming does not wait for evictions
    assert calls == [1000.0]
    clock[0] += sessions.TRIM_EVERY_S - 1
    holder["b"]
    assert len(calls) == 1
    clock[0] += 2
    holder["a"]
    assert calls == [1000.0, 1000.0 + sessions.TRIM_EVERY_S + 1]


# ---------------------------------------------------------------- exact checks (the mutation run's survivors)
class Plain:
    def __init__(self) -> None:
        self.name, self.values = "plain text", [7, 8]


class Slotted:
    __slots__ = ("text", "unset")

    def __init__(self) -> None:
        self.text = "slotted text"  # `unset` stays unset


def test_state_bytes_is_exact_for_each_kind_of_value():
    pad = "padding"
    owner = np.zeros(50, dtype=np.int64)
    t, view, img = torch.zeros(100, dtype=torch.float32), owner[10:30], Image.new("RGB", (7, 3))
    arr = array("i", range(9))
    plain, slotted = Plain(), Slotted()
    expected = {
        id(t): sys.getsizeof(t) + 400,  # storage bytes
        id(owner): sys.getsizeof(owner),  # an owning array: getsizeof holds its data
        id(view): sys.getsizeof(view) + 160,  # a view: its own bytes added
        id(img): sys.getsizeof(img) + 7 * 3 * 3,
        id(arr): sys.getsizeof(arr),
        id(plain): sys.getsizeof(plain) + sys.getsizeof(vars(plain)) + sum(map(sys.getsizeof, (
            "name", "values", "plain text", plain.values, 7, 8))),
        id(slotted): sys.getsizeof(slotted) + sys.getsizeof("slotted text"),
    }
    for value in (t, owner, view, img, arr, plain, slotted):
        # last in the list, so it is measured first: a total it overwrote would lose the list and the padding
        assert state_bytes([pad, value]) == sys.getsizeof([pad, value]) + sys.getsizeof(pad) + expected[id(value)]
    assert state_bytes({"k": t}) == sys.getsizeof({"k": t}) + sys.getsizeof("k") + expected[id(t)]
    assert state_bytes([t, t]) == sys.getsizeof([t, t]) + expected[id(t)]  # each object once


def test_state_bytes_visits_at_most_limit_objects():
    items = ["first item", "second item", "third item"]
    assert state_bytes(items, limit=2) == sys.getsizeof(items) + sys.getsizeof("third item")  # (popped from the end)
    assert state_bytes(items, limit=1) == sys.getsizeof(items)
    assert state_bytes(items) == sys.getsizeof(items) + sum(map(sys.getsizeof, items))


def test_the_state_budget_is_read_from_the_environment_in_mb(monkeypatch):
    monkeypatch.delenv("COOLSD_STATE_BUDGET_MB", raising=False)
    assert sessions.budget_from_env() == sessions.STATE_BUDGET_MB * 2**20 == LeanStateHolder().budget_bytes
    for text, mb in (("3", 3), ("1", 1), ("", sessions.STATE_BUDGET_MB)):
        monkeypatch.setenv("COOLSD_STATE_BUDGET_MB", text)
        assert sessions.budget_from_env() == mb * 2**20
    for bad in ("0", "-2", "1.5", "lots"):
        monkeypatch.setenv("COOLSD_STATE_BUDGET_MB", bad)
        with pytest.raises(SystemExit, match="COOLSD_STATE_BUDGET_MB must be an integer >= 1"):
            sessions.budget_from_env()


def test_a_holder_takes_its_budget_and_idle_age_and_adopt_keeps_them(monkeypatch):
    monkeypatch.setenv("COOLSD_STATE_BUDGET_MB", "5")
    assert (LeanStateHolder(budget_bytes=123, max_idle_s=5).budget_bytes, LeanStateHolder(max_idle_s=5).max_idle_s) \
        == (123, 5)
    assert LeanStateHolder().budget_bytes == 5 * 2**20
    adopted = LeanStateHolder.adopt(StateHolder(), budget_bytes=77, max_idle_s=9)
    assert isinstance(adopted, LeanStateHolder) and (adopted.budget_bytes, adopted.max_idle_s) == (77, 9)


def test_the_least_recently_used_session_goes_first_down_to_a_capacity_of_one():
    holder, state, _, released = served_holder(capacity=2)
    for name in ("a", "b", "a", "c"):  # a was used again after b
        holder[name][state._id] = name
    assert list(holder.session_data) == ["a", "c"] and released == ["b"]
    holder.capacity = 1
    holder["d"]
    assert list(holder.session_data) == ["d"] and set(holder.time_last_used) == {"d"}


def test_kept_bytes_counts_every_session_and_the_budget_bound_is_inclusive():
    holder, state, _, _ = served_holder()
    holder["a"][state._id] = torch.zeros(1000, dtype=torch.uint8)
    holder["b"]
    assert holder.kept_bytes() == holder["a"].nbytes + 2 * sessions.SESSION_BASE_BYTES
    holder.budget_bytes = holder.kept_bytes() + sessions.SESSION_BASE_BYTES  # exactly room for a third session
    holder["c"]
    assert set(holder.session_data) == {"a", "b", "c"} and holder.evicted["budget"] == 0


def test_a_session_idle_exactly_the_limit_stays(monkeypatch):
    now = datetime.datetime(2026, 12, 2, 12, 0, 0)

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    monkeypatch.setattr(sessions.datetime, "datetime", Clock)
    holder, *_ = served_holder(max_idle_s=600)
    holder["a"], holder["b"]
    holder.time_last_used["a"] = now - datetime.timedelta(seconds=600)
    holder["c"]
    assert "a" in holder.session_data
    holder.time_last_used["a"] = now - datetime.timedelta(seconds=601)
    holder["c"]
    assert "a" not in holder.session_data and holder.evicted["age"] == 1


def test_an_evicted_session_leaves_nothing_behind_even_in_a_holder_without_a_page():
    holder, state, _, _ = served_holder(capacity=1)
    holder["a"][state._id] = torch.zeros(500, dtype=torch.uint8)
    evicted = holder["a"]
    holder["b"]
    assert evicted.nbytes == 0 and evicted.holder is None and holder.state_total == 0
    assert "a" not in holder.time_last_used
    bare = LeanStateHolder(budget_bytes=10**9)  # never given a page (no `blocks`), sessions not measured
    bare.capacity = 1
    bare.session_data["old"] = SimpleNamespace(state_components=[], state_data={})
    bare.session_data["new"] = SimpleNamespace(state_components=[], state_data={})
    bare.update("new")
    assert list(bare.session_data) == ["new"] and bare.state_total == 0


def test_delete_state_keeps_fresh_states_when_asked_for_expired_ones_and_ignores_unknown_sessions():
    holder, state, _, released = served_holder()
    holder["a"][state._id] = torch.zeros(800, dtype=torch.uint8)
    holder.delete_state("a", expired_only=True)
    assert released == [] and holder.state_total == holder["a"].nbytes >= 800
    holder.delete_state("nobody")
    holder.delete_state("a")
    assert len(released) == 1 and holder.state_total == 0 == holder["a"].nbytes


def test_trimming_waits_exactly_the_interval_and_says_when_it_did_not_trim(monkeypatch):
    holder, *_ = served_holder()
    calls, clock = [], [0.0]  # (a fresh holder trims at its first request, whatever the clock)
    monkeypatch.setattr(sessions, "trim_heap", lambda: calls.append(clock[0]) or True)
    monkeypatch.setattr(sessions.time, "monotonic", lambda: clock[0])
    holder["a"], holder["b"], holder["a"]
    assert calls == [0.0] and holder.trim() is False
    clock[0] = sessions.TRIM_EVERY_S / 2
    holder["b"]  # two sessions: the eviction loop runs and stops, the trim still comes when due
    assert calls == [0.0]
    clock[0] = 2 * sessions.TRIM_EVERY_S
    holder["a"]
    assert calls == [0.0, 2 * sessions.TRIM_EVERY_S]
    clock[0] = 2 * sessions.TRIM_EVERY_S + 1
    assert holder.trim() is False
    clock[0] = 3 * sessions.TRIM_EVERY_S  # exactly the interval after the last trim
    assert holder.trim() is True and calls[-1] == 3 * sessions.TRIM_EVERY_S
    assert holder.trim(force=True) is True and len(calls) == 4


def test_a_sessions_configuration_writes_stay_its_own():
    holder = StateHolder()
    holder.set_blocks(wide_page(3))  # a page with events
    page = holder.blocks.default_config
    config = holder["a"].blocks_config
    assert config.fn_id == page.fn_id and config.renderables == page.renderables
    assert dict(config.fns) == page.fns and len(page.fns) == 3 and dict(config.blocks) == page.blocks
    assert config.renderables is not page.renderables
    config.fns[10**6] = "a session's event"
    config.blocks[10**6] = "a session's block"
    assert 10**6 not in page.fns and 10**6 not in page.blocks and 10**6 not in holder["b"].blocks_config.fns


def test_a_lean_session_closes_as_gradios_does(monkeypatch):
    from gradio.state_holder import SessionState

    holder, *_ = served_holder()
    for e2e in (None, "1"):
        if e2e:
            monkeypatch.setenv("GRADIO_IS_E2E_TEST", e2e)
        else:
            monkeypatch.delenv("GRADIO_IS_E2E_TEST", raising=False)
        lean, theirs = LeanSession(holder.blocks), SessionState(holder.blocks)
        assert lean.is_closed is False and lean.STATE_TTL_WHEN_CLOSED == theirs.STATE_TTL_WHEN_CLOSED
    assert theirs.STATE_TTL_WHEN_CLOSED == 1


def test_a_session_keeps_blocks_the_page_does_not_have_and_a_copy_under_a_second_id():
    holder, _, slider, _ = served_holder()
    session = holder["a"]
    extra = gr.Slider(0, 5, render=False)
    session[10**6] = extra  # not a page id (e.g. a block a handler made)
    session[10**6 + 1] = "not a component"
    assert session.blocks_config.blocks[10**6] is extra and session.blocks_config.blocks[10**6 + 1] == "not a component"
    moved = gr.Slider(0, 99, value=7, render=False)
    session[slider._id] = moved
    other = next(k for k, b in holder.blocks.blocks.items() if k != slider._id and not isinstance(b, gr.State))
    session[other] = moved  # held already, but under another page id: kept there too
    assert session.blocks_config.blocks[other] is moved
    assert session.holds(moved) and session.holds(slider) is False and session.holds(extra)


def test_same_props_refuses_another_type_and_arguments_without_a_plain_equality():
    assert not sessions.same_props(gr.Slider(0, 10, render=False), gr.Number(render=False))

    class Odd:
        def __init__(self) -> None:
            self.constructor_args = {"table": np.arange(3)}

    assert sessions.same_props(Odd(), Odd()) is False  # (== of two arrays is not a bool: the copy is kept)


def test_forget_queue_answers_whether_the_records_went():
    assert sessions.forget_queue(None, "a") is False and sessions.forget_queue(object(), "a") is False
    holder, *_ = served_holder()
    queue = holder.blocks._queue
    queue.pending_messages_per_session["idle"] = object()
    queue.pending_event_ids_session["idle"] = set()
    queue.pending_event_ids_session["busy"] = {"event"}
    assert sessions.forget_queue(holder.blocks, "idle") is True
    assert sessions.forget_queue(holder.blocks, "busy") is False


def test_trim_heap_calls_malloc_trim_with_no_padding_and_loads_libc_once(monkeypatch):
    calls = []
    fake = SimpleNamespace(malloc_trim=lambda pad: calls.append(pad) or 1)
    monkeypatch.setattr(sessions, "_LIBC", fake)
    assert sessions.trim_heap() is True and calls == [0]
    monkeypatch.setattr(sessions, "_LIBC", False)  # no glibc here
    assert sessions.trim_heap() is False and calls == [0]

    def no_libc(name):
        raise OSError("no such library")

    monkeypatch.setattr(sessions, "_LIBC", None)
    monkeypatch.setattr(sessions.ctypes, "CDLL", no_libc)
    assert sessions.trim_heap() is False and sessions._LIBC is False  # looked for once, then remembered as absent
    monkeypatch.undo()
    if not sys.platform.startswith("linux"):
        return
    monkeypatch.setattr(sessions, "_LIBC", None)
    sessions.trim_heap()
    assert sessions._LIBC not in (None, False) and hasattr(sessions._LIBC, "malloc_trim")


def test_limit_arenas_sets_glibcs_arena_maximum_unless_the_environment_does(monkeypatch):
    calls = []

    class Libc:
        def __init__(self, name) -> None:
            self.name = name

        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(sessions.ctypes, "CDLL", Libc)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert sessions.limit_arenas() is False and calls == []
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert sessions.limit_arenas(3) is True and calls == [(-8, 3)]  # M_ARENA_MAX
    assert sessions.limit_arenas() is True and calls[-1] == (-8, 2)

    def no_libc(name):
        raise OSError("no such library")

    monkeypatch.setattr(sessions.ctypes, "CDLL", no_libc)
    assert sessions.limit_arenas() is False
