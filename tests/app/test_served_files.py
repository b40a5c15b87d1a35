"""The files the app serves, and the paths Gradio remembers for them, bounded by count and age (issue 27;
`coolsd.app.served_files`), and a session that keeps no copy of a component Gradio made for `gr.skip()`
(`coolsd.app.sessions.LeanSession`). First the bookkeeping alone (files in a temporary folder, no server, a given
clock), then the launched app on the tiny model: races past a small bound leave at most that many files and paths,
the racing session holds no copies of its image slots, and what is on show still loads, as do a replay, the overlay,
the microscope, the PNG strip and a share link."""

from __future__ import annotations

import io
import os
import time
from types import SimpleNamespace

import gradio as gr
import httpx
import numpy as np
import pytest
from demo_app import served, tiny_demo
from gradio.state_holder import StateHolder
from PIL import Image

from coolsd.app.microscope import MicroscopePanel
from coolsd.app.served_files import (
    DELETE_CACHE,
    SERVED_FILES_MAX,
    SERVED_FILES_MAX_AGE_S,
    ServedFiles,
    file_paths,
    max_files_from_env,
)
from coolsd.app.serving import ServedBlocks
from coolsd.app.sessions import LeanSession
from coolsd.app.settings import RaceSettings

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
LATER = time.time() + 1000  # the given clock runs after the files' own times (a file written since is spared)


def page():
    """A page with one image component (whose `temp_files` is one of the sets Gradio remembers paths in)."""
    with ServedBlocks() as blocks:
        image = gr.Image(type="pil", label="shown")
    return blocks, image


def make(folder, *names) -> list[str]:
    """Files in Gradio's layout (<folder>/<name>/image.webp) -> their paths."""
    paths = []
    for name in names:
        os.makedirs(folder / name, exist_ok=True)
        path = str(folder / name / "image.webp")
        with open(path, "wb") as f:
            f.write(b"RIFF....WEBP")
        paths.append(path)
    return paths


def serve(files: ServedFiles, blocks, image, paths, now: float) -> None:
    """What Gradio and ServedBlocks do for an event that returns these files: remember each path in the
    component's set, then hand the postprocessed output to the bookkeeping."""
    image.temp_files.update(paths)
    output = [{"path": p, "url": f"/gradio_api/file={p}", "meta": {"_type": "gradio.FileData"}} for p in paths]
    files.served(blocks, output, now=now)


def bookkeeping(tmp_path, **bounds) -> tuple[ServedFiles, object, object]:
    blocks, image = page()
    return ServedFiles(folder=str(tmp_path), **{"min_age_s": 0, **bounds}), blocks, image


# ---------------------------------------------------------------- the bookkeeping alone
def test_the_oldest_files_go_beyond_the_count_from_disk_and_from_gradios_sets(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=3)
    paths = make(tmp_path, *"abcde")
    for i, path in enumerate(paths):
        serve(files, blocks, image, [path], LATER + i)
        assert files.kept <= 3
    assert files.paths() == paths[2:] and files.deleted == {"count": 2, "age": 0}
    assert [os.path.exists(p) for p in paths] == [False, False, True, True, True]
    assert image.temp_files == set(paths[2:])  # Gradio forgets them too
    assert any(paths is image.temp_files for paths in blocks.temp_file_sets)  # (the sets Gradio's sweep reads)


def test_files_served_longer_ago_than_the_age_go_even_under_the_count(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=100, max_age_s=10)
    old, new = make(tmp_path, "old", "new")
    serve(files, blocks, image, [old], LATER)
    serve(files, blocks, image, [new], LATER + 5)
    assert files.trim(blocks, now=LATER + 9) == []
    assert files.trim(blocks, now=LATER + 12) == [old]
    assert not os.path.exists(old) and os.path.exists(new) and files.paths() == [new]
    assert files.deleted == {"count": 0, "age": 1} and image.temp_files == {new}


def test_a_file_served_again_starts_afresh(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=3)
    a, b, c, d = make(tmp_path, *"abcd")
    for i, path in enumerate([a, b, c, a, d]):  # the same image again (Gradio names a file by its bytes)
        serve(files, blocks, image, [path], LATER + i)
    assert files.paths() == [c, a, d] and not os.path.exists(b) and os.path.exists(a)


def test_files_served_within_the_minimum_age_stay_whatever_the_count(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=2, min_age_s=60)
    paths = make(tmp_path, *"abcde")
    for i, path in enumerate(paths):  # a burst: five files within five seconds
        serve(files, blocks, image, [path], LATER + i)
    assert files.kept == 5 and all(map(os.path.exists, paths))
    files.trim(blocks, now=LATER + 100)
    assert files.paths() == paths[3:] and files.deleted["count"] == 3


def test_a_components_own_file_and_a_file_written_again_are_not_deleted(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=1)
    default, rewritten, other, last = make(tmp_path, "default", "rewritten", "other", "last")
    image.keep_in_cache.add(default)  # Gradio's own: a component's default value (the page's first images)
    serve(files, blocks, image, [default, rewritten], LATER)
    os.utime(rewritten, (LATER + 5, LATER + 5))  # an equal image written again, by an event still under way
    serve(files, blocks, image, [other], LATER + 10)
    assert os.path.exists(default) and default in image.temp_files
    assert os.path.exists(rewritten) and files.paths() == [other, rewritten]
    serve(files, blocks, image, [last], LATER + 20)  # its turn comes again, and then it goes
    assert not os.path.exists(rewritten) and not os.path.exists(other) and files.paths() == [last]


def test_only_file_objects_in_gradios_cache_folder_are_recorded(tmp_path):
    files, blocks, _ = bookkeeping(tmp_path, max_files=10)
    inside, = make(tmp_path, "inside")
    nested = {"__type__": "update", "value": {"path": inside, "meta": {"_type": "gradio.FileData"}}}
    output = [nested, {"path": "/etc/hostname", "meta": {}}, {"path": inside}, {"stats": [1, 2, {"x": "y"}]}, None]
    assert file_paths(output) == [inside, "/etc/hostname"]
    files.served(blocks, output, now=LATER)
    assert files.paths() == [inside]


def test_the_count_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("COOLSD_SERVED_FILES", "250")
    assert max_files_from_env() == 250 and ServedBlocks().served_files.max_files == 250
    for bad in ("0", "-3", "many", "²"):
        monkeypatch.setenv("COOLSD_SERVED_FILES", bad)
        with pytest.raises(SystemExit, match="COOLSD_SERVED_FILES"):
            max_files_from_env()
    monkeypatch.delenv("COOLSD_SERVED_FILES")
    assert max_files_from_env() == SERVED_FILES_MAX


def test_a_count_of_one_is_allowed(monkeypatch):
    monkeypatch.setenv("COOLSD_SERVED_FILES", "1")
    assert max_files_from_env() == 1


def test_the_walk_looks_at_exactly_limit_items():
    """A flat list is looked at first, then its items in order: with limit n, the first n - 1 files."""
    paths = [f"/cache/{i}/image.webp" for i in range(5)]
    output = [{"path": p, "meta": {}} for p in paths]
    assert file_paths(output, limit=1) == []
    assert file_paths(output, limit=3) == paths[:2]
    assert file_paths(output, limit=5) == paths[:4]
    assert file_paths(output, limit=6) == paths


def old_file(folder, name) -> str:
    """A file written 2000 s ago (the real clock's past, not LATER)."""
    path, = make(folder, name)
    os.utime(path, (time.time() - 2000, time.time() - 2000))
    return path


def test_without_a_given_clock_files_are_served_at_the_real_time(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=1, min_age_s=60)
    old, news = old_file(tmp_path, "old"), make(tmp_path, "new", "newer")
    serve(files, blocks, image, [old], time.time() - 1000)
    files.served(blocks, [{"path": p, "meta": {}} for p in news])  # just now: over the count, within the minimum age
    assert files.paths() == news and not os.path.exists(old) and all(map(os.path.exists, news))


def test_without_a_given_clock_files_are_trimmed_at_the_real_time(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=100, max_age_s=1000, min_age_s=60)
    old, recent = old_file(tmp_path, "old"), old_file(tmp_path, "recent")
    start = time.time()
    serve(files, blocks, image, [old], start - 1500)
    serve(files, blocks, image, [recent], start - 600)  # (its own trim: the old one's age is 900)
    assert files.trim(blocks) == [old] and files.paths() == [recent] and os.path.exists(recent)


def test_a_file_served_exactly_the_age_ago_stays(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=100, max_age_s=10)
    path, = make(tmp_path, "a")
    serve(files, blocks, image, [path], LATER)
    assert files.trim(blocks, now=LATER + 10) == [] and os.path.exists(path)
    assert files.trim(blocks, now=LATER + 11) == [path]


def test_a_file_written_just_when_it_was_served_goes(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=100, max_age_s=10)
    path, = make(tmp_path, "a")
    os.utime(path, (LATER, LATER))
    serve(files, blocks, image, [path], LATER)
    assert files.trim(blocks, now=LATER + 20) == [path] and not os.path.exists(path) and files.kept == 0


def test_after_a_file_written_again_the_next_old_file_still_goes(tmp_path):
    files, blocks, image = bookkeeping(tmp_path, max_files=100, max_age_s=10)
    rewritten, old = make(tmp_path, "rewritten", "old")
    serve(files, blocks, image, [rewritten], LATER)
    serve(files, blocks, image, [old], LATER + 1)
    os.utime(rewritten, (LATER + 5, LATER + 5))
    assert files.trim(blocks, now=LATER + 20) == [old]
    assert not os.path.exists(old) and os.path.exists(rewritten) and files.paths() == [rewritten]


def test_blocks_without_gradios_cache_attributes_still_trim(tmp_path):
    """A block with no `keep_in_cache`, a page with no `temp_file_sets`: nothing to keep, nothing to forget."""
    files = ServedFiles(folder=str(tmp_path), max_files=1, min_age_s=0)
    a, b = make(tmp_path, "a", "b")
    shown = set()
    with_sets = SimpleNamespace(blocks={1: object()}, temp_file_sets=[shown])
    for i, path in enumerate([a, b]):
        shown.add(path)
        files.served(with_sets, [{"path": path, "meta": {}}], now=LATER + i)
    assert not os.path.exists(a) and shown == {b}
    c, = make(tmp_path, "c")
    files.served(SimpleNamespace(blocks={}), [{"path": c, "meta": {}}], now=LATER + 2)
    assert not os.path.exists(b) and files.paths() == [c]


def test_a_file_that_cannot_be_deleted_is_logged_and_the_trim_goes_on(tmp_path, monkeypatch, caplog):
    files, blocks, image = bookkeeping(tmp_path, max_files=100, max_age_s=10)
    stuck, old = make(tmp_path, "stuck", "old")
    remove = os.remove

    def refuse(path):
        if path == stuck:
            raise PermissionError("read-only")
        remove(path)

    monkeypatch.setattr(os, "remove", refuse)
    serve(files, blocks, image, [stuck, old], LATER)
    with caplog.at_level("WARNING", logger="coolsd.app"):
        assert files.trim(blocks, now=LATER + 20) == [stuck, old]
    assert caplog.messages == [f"served files: could not delete {stuck}: read-only"]
    assert os.path.exists(stuck) and not os.path.exists(old) and files.kept == 0


def test_gradios_cache_writers_never_rewrite_a_served_file(tmp_path):
    """An image or bytes returned again (equal content: the same path) leaves the file a client may be fetching as
    it is (Gradio's own writers empty it and fill it again: a download then ends short of its Content-Length);
    a new one appears whole, by a rename, with no temporary file left behind."""
    from gradio import processing_utils

    from coolsd.app.served_files import cache_writes_in_place

    ServedBlocks()  # the app's Blocks put the writers in place
    assert processing_utils.save_pil_to_cache.__module__ == "coolsd.app.served_files"
    cache_writes_in_place()  # (twice is the same)
    picture = Image.new("RGB", (8, 8), (200, 30, 30))
    for write in (lambda: processing_utils.save_pil_to_cache(picture, str(tmp_path)),
                  lambda: processing_utils.save_bytes_to_cache(b"trace bytes", "trace.json", str(tmp_path)),
                  lambda: processing_utils.save_img_array_to_cache(np.asarray(picture), str(tmp_path))):
        path = write()
        first = open(path, "rb").read()
        assert first and os.path.isfile(path)
        with open(path, "r+b") as f:  # a marker: was the file written again?
            f.write(b"X")
        inode, before = os.stat(path).st_ino, time.time()
        os.utime(path, (before - 100, before - 100))
        assert write() == path
        assert open(path, "rb").read() == b"X" + first[1:] and os.stat(path).st_ino == inode  # not rewritten
        assert os.stat(path).st_mtime >= before - 1  # touched: the sweeps see it served now
    leftovers = [p for p in tmp_path.rglob(".*")]
    assert not leftovers, leftovers


def test_the_app_bounds_its_files_as_documented():
    blocks = tiny_demo().blocks
    assert isinstance(blocks, ServedBlocks) and blocks.served_files.max_files == SERVED_FILES_MAX
    assert blocks.delete_cache == DELETE_CACHE and DELETE_CACHE[1] == SERVED_FILES_MAX_AGE_S
    assert blocks.served_files.folder == os.path.realpath(gr.utils.get_upload_folder())


def test_a_session_keeps_no_copy_that_changes_nothing():
    """What Gradio does with an output update: a copy of the component (render=False) filed under the page's id,
    and, when a value follows, the copy filed again under its own id."""
    with ServedBlocks() as blocks:
        image = gr.Image(type="pil", label="shown", format="png")
        slider = gr.Slider(0, 10, value=3)
    holder = StateHolder()
    holder.set_blocks(blocks)
    session = holder["a"]
    assert isinstance(session, LeanSession)

    def copy(block, **changes):
        return type(block)(**{**block.constructor_args, **changes, "render": False})

    skipped = copy(image, value=None)  # gr.skip(): the same arguments
    session[image._id] = skipped
    assert session[image._id] is image and image._id in session
    moved = copy(slider, maximum=99)  # a real update: the session's own copy
    session[slider._id] = moved
    session[moved._id] = moved  # (Gradio: `if block._id not in state: state[block._id] = block`)
    assert session[slider._id] is moved and moved._id not in session.blocks_config.blocks
    assert {k for k, v in session.blocks_config.blocks.items() if v is not blocks.blocks.get(k)} == {slider._id}
    session[slider._id] = copy(slider)  # back to the page's arguments: the page's own again
    assert session[slider._id] is slider


# ---------------------------------------------------------------- the launched app on the tiny model
APP = tiny_demo()
BOUND = 12  # files the test server keeps (the app's default is far larger)


@pytest.fixture(scope="module")
def server():
    """The app with a small bound and no minimum age, streaming every round (many files a race)."""
    blocks = APP.blocks
    before = blocks.served_files
    blocks.served_files = ServedFiles(max_files=BOUND, min_age_s=0)
    # the demo is shared (`tiny_demo` is cached): forget what earlier test modules' races left in Gradio's sets, so
    # that what the test counts is what this module serves under the new bound
    for paths in blocks.temp_file_sets:
        paths.difference_update(paths - set().union(*(getattr(b, "keep_in_cache", ()) for b in blocks.blocks.values())))
    try:
        with served(blocks, {"IMAGE_EVERY_S": 0.0, "FRAME_SHARE": 1.0}) as url:
            yield url.rstrip("/")
    finally:
        blocks.served_files = before


def remembered() -> set[str]:
    """The paths Gradio remembers for the app's components, less the components' own (default values)."""
    blocks = APP.blocks
    keep = set().union(*(getattr(b, "keep_in_cache", ()) for b in blocks.blocks.values()))
    return set().union(*blocks.temp_file_sets) - keep


def images(values) -> list[dict]:
    """The image files among API output values (a skipped output is an update without a path)."""
    return [item for item in values if isinstance(item, dict) and item.get("path")]


def loads(item) -> bool:
    """Whether an image the API returned is served (HTTP 200, an image)."""
    reply = httpx.get(item["url"], timeout=30)
    if reply.status_code != 200:
        return False
    with Image.open(io.BytesIO(reply.content)) as img:
        return img.width > 0


def test_races_keep_at_most_the_bound_and_what_is_on_show_still_loads(server):
    from gradio_client import Client

    files = APP.blocks.served_files
    client = Client(server, verbose=False, download_files=False, analytics_enabled=False)
    values = RaceSettings.defaults(APP.ctx).as_dict()
    served_paths: set[str] = set()
    for seed in range(3):
        job = client.submit(**values | {"seed": seed}, api_name="/race")
        final = job.result()
        served_paths |= {item["path"] for frame in job.outputs() for item in images(frame[:5])}
        assert files.kept <= BOUND and len(remembered()) <= BOUND
        assert all(map(os.path.exists, files.paths()))
    assert len(served_paths) > 2 * BOUND and files.deleted["count"] > BOUND  # the bound was what held them down
    page = APP.blocks.blocks
    session = APP.blocks.state_holder[client.session_hash]
    own = {k: v for k, v in session.blocks_config.blocks.items() if v is not page.get(k)}
    assert set(own) <= set(page) and not [v for v in own.values() if isinstance(v, (gr.Image, gr.Plot))], own
    shown = images(final[:5])
    assert len(shown) == 4 and all(map(loads, shown))  # the last race's images (3 racers, vanilla AR) display

    replayed = client.predict(step=3, overlay=False, api_name="/replay")[:5]
    tinted = client.predict(overlay=True, api_name="/overlay")
    looked = client.predict(key="eagle-1", round_no=1, api_name="/microscope")[:2]
    assert len(images(replayed)) >= 4 and len(images(tinted)) >= 4 and len(images(looked)) == 2
    assert all(map(loads, images([*replayed, *tinted, *looked])))
    strip = client.predict(overlay=True, api_name="/strip_file")
    assert os.path.exists(strip["path"])
    query = client.predict(**values | {"seed": 2}, api_name="/share_link")
    assert client.predict(query=query, api_name="/share_restore")["seed"] == 2
    assert files.kept <= BOUND and len(remembered()) <= BOUND


def test_the_microscope_keeps_one_decoders_rerun_per_session():
    """Its cache (a gr.State with a time to live, `MICROSCOPE_TTL_S`) holds the last decoder looked at, not all."""
    trace = list(APP.page.race.stream.race(**RaceSettings.defaults(APP.ctx).as_dict() | {"seed": 1}))[-1].trace
    panel = MicroscopePanel(APP.ctx, APP.page.race.after.recordings)
    cache: dict = {}
    for key in ("eagle-1", "lantern++", "cool-sd", "eagle-1"):
        events, _, cache = panel.events(trace, key, cache)
        assert set(cache) == {"sig", "events", "matches"} and cache["sig"][2] == key and cache["events"] is events
