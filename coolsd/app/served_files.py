"""The image and download files the app serves, bounded by count and age.

Every image an event returns (each streamed race frame's changed slots, every replay step, the microscope's views,
the overlay, the PNG strip, the trace download) is written by Gradio into its cache folder, one file per distinct
content (`<cache>/<hash of the bytes>/image.webp`), and remembered, as a path string, in the `temp_files` set of
the component that showed it (gradio 6.31: `Block.async_move_resource_to_block_cache`). Gradio reads those sets
only to delete files: serving a file asks whether it lies in the cache folder and exists, not whether a set
holds it. Gradio's `delete_cache=(frequency, age)` sweep (every `frequency` s, in a worker thread) deletes the
files older than `age` s (by ctime) and forgets their paths; a path whose file is already gone stays in its set,
and a session's own copy of a component (made for an update) is never swept (`coolsd.app.sessions.LeanSession`
keeps no copy that changes nothing, so the race's images stay with the page's components). So the paths pile up
with every race for `age` s (2 h here: about 39 files a race on the emoji model, about 190 bytes of path string
and set slot each) and the files with them.

`ServedFiles` keeps its own record of the files served, in the order they were last served, and after each event
(`ServedBlocks.postprocess_data`, `coolsd.app.serving`) deletes the oldest, from disk and from every set Gradio
keeps, while more than `max_files` are kept or the oldest was last served more than `max_age_s` ago. A file
served in the last `min_age_s` seconds is never deleted (a browser may not have fetched it yet), so the count
can pass `max_files` by what a burst serves in that time. A file served again (same content: same path) starts
afresh. A component's own files (its default value, examples: Gradio's `keep_in_cache`) are never deleted.
Gradio's `delete_cache` sweep stays, for anything served outside an event and for the time the app is idle.

Gradio writes an image again whenever an event returns equal content (the blank checkerboard of every race, a
picture of the same race replayed), and it writes in place (`Path.write_bytes`: the file is emptied, then
filled): a client still downloading the earlier copy then gets fewer bytes than the Content-Length it was sent
(h11: "Too little data for declared Content-Length", a server traceback; seen with gradio_client, which downloads
every file, and a fresh cache folder, where a race's files are all new). `cache_writes_in_place` replaces those
two writers (`gradio.processing_utils.save_pil_to_cache`, `save_bytes_to_cache`; Gradio's own
`save_file_to_cache` already does the same): a file that exists keeps its bytes (its name is the hash of its
content) and is only touched, and a new file is written under a temporary name and renamed into place, so no
served file is ever rewritten or seen half written.

What a deleted file costs a visitor: nothing while the browser holds the image; a page that asks for it again
(after `max_files` newer files, or `max_age_s`) gets an HTTP 403 from Gradio, as after Gradio's own sweep.
A replay step, the overlay and the microscope draw new files from the session's trace, so they keep working.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path

from gradio import processing_utils
from gradio.utils import get_upload_folder

from coolsd.util.env import env_int

SERVED_FILES_MAX = 10_000  # files kept at most ($COOLSD_SERVED_FILES overrides): about 250 races' frames
SERVED_FILES_MAX_AGE_S = 7200  # a file last served this long ago goes (Gradio's delete_cache age, below)
SERVED_FILES_MIN_AGE_S = 60  # a file served this recently stays, whatever the count
SERVED_FILES_SWEEP_S = 3600  # Gradio's own delete_cache sweep: every this many seconds
DELETE_CACHE = (SERVED_FILES_SWEEP_S, SERVED_FILES_MAX_AGE_S)  # the app's `gr.Blocks(delete_cache=...)`
WALK_LIMIT = 100_000  # items of an event's output looked at, at most

log = logging.getLogger("coolsd.app")


def max_files_from_env() -> int:
    """$COOLSD_SERVED_FILES (files the app keeps served at most; default SERVED_FILES_MAX)."""
    return env_int("COOLSD_SERVED_FILES", SERVED_FILES_MAX)


def file_paths(value, limit: int = WALK_LIMIT) -> list[str]:
    """The paths of the file objects (dicts with a str "path" and "meta", Gradio's FileData) in an event's output
    values, in order, at any depth (walked without recursion; at most `limit` items looked at)."""
    todo, seen, paths = [value], 0, []
    while todo and seen < limit:
        item = todo.pop()
        seen += 1
        if isinstance(item, dict):
            if isinstance(item.get("path"), str) and "meta" in item:
                paths.append(item["path"])
            else:
                todo.extend(reversed(item.values()))
        elif isinstance(item, (list, tuple)):
            todo.extend(reversed(item))
    return paths


class ServedFiles:
    """The files an app served, oldest first, bounded by count and age (see the module's doc).

    `served(blocks, output)` records the files of one event's output and trims; `trim(blocks)` deletes what is over
    the bounds. `kept` is the number of files recorded, `deleted` counts the files deleted, by reason."""

    def __init__(self, max_files: int | None = None, max_age_s: float = SERVED_FILES_MAX_AGE_S,
                 min_age_s: float = SERVED_FILES_MIN_AGE_S, folder: str | None = None) -> None:
        self.max_files = max_files_from_env() if max_files is None else int(max_files)
        self.max_age_s, self.min_age_s = max_age_s, min_age_s
        self.folder = os.path.realpath(folder or get_upload_folder())  # Gradio's cache folder
        self._when: dict[str, float] = {}  # path -> when last served (time.time()), oldest first
        self.deleted = {"count": 0, "age": 0}
        self._lock = threading.Lock()

    @property
    def kept(self) -> int:
        return len(self._when)

    def paths(self) -> list[str]:
        """The recorded paths, oldest first."""
        return list(self._when)

    def served(self, blocks, output, now: float | None = None) -> None:
        """Record the files in `output` (one event's postprocessed values) as served `now`, then trim."""
        inside = self.folder + os.sep
        now = time.time() if now is None else now
        with self._lock:
            for path in file_paths(output):
                if path.startswith(inside):
                    self._when.pop(path, None)  # served again: it starts afresh, at the end
                    self._when[path] = now
        self.trim(blocks, now)

    def trim(self, blocks, now: float | None = None) -> list[str]:
        """Delete the oldest files while more than `max_files` are kept or the oldest was served more than
        `max_age_s` ago, none served in the last `min_age_s`; forget them in Gradio's sets -> the deleted paths."""
        now = time.time() if now is None else now
        gone: list[str] = []
        keep = None
        with self._lock:
            while self._when:
                path, when = next(iter(self._when.items()))
                age = now - when
                reason = "count" if len(self._when) > self.max_files else "age" if age > self.max_age_s else None
                if reason is None or age <= self.min_age_s:
                    break
                del self._when[path]
                if keep is None:  # (looked up once per trim that deletes something)
                    keep = set().union(*(getattr(b, "keep_in_cache", ()) for b in blocks.blocks.values()))
                if path in keep:  # a component's default value or example: Gradio keeps it, and so do we
                    continue
                try:
                    if os.stat(path).st_mtime > when:  # written again since (an equal image, being served now)
                        self._when[path] = now
                        continue
                    os.remove(path)
                except FileNotFoundError:  # (Gradio's sweep took it already)
                    pass
                except OSError as err:
                    log.warning("served files: could not delete %s: %s", path, err)
                gone.append(path)
                self.deleted[reason] += 1
        if gone:
            for paths in getattr(blocks, "temp_file_sets", ()):
                paths.difference_update(gone)
        return gone


def write_once(path: Path, data: bytes) -> None:
    """Put `data` at `path`, a name made of the hash of `data`: kept (touched: Gradio's sweep and `ServedFiles`
    age files by their times) when it is there, else written under a temporary name and renamed into place."""
    try:
        os.utime(path)
        return
    except FileNotFoundError:
        pass
    fd, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def _save_pil_to_cache(img, cache_dir: str, name: str = "image", format: str = "webp") -> str:
    """gradio.processing_utils.save_pil_to_cache, writing with `write_once` (same path, same bytes)."""
    data = processing_utils.encode_pil_to_bytes(img, format)
    folder = Path(cache_dir) / processing_utils.hash_bytes(data)
    folder.mkdir(exist_ok=True, parents=True)
    path = (folder / f"{name}.{format}").resolve()
    write_once(path, data)
    return str(path)


def _save_bytes_to_cache(data: bytes, file_name: str, cache_dir: str) -> str:
    """gradio.processing_utils.save_bytes_to_cache, writing with `write_once` (same path, same bytes)."""
    folder = Path(cache_dir) / processing_utils.hash_bytes(data)
    folder.mkdir(exist_ok=True, parents=True)
    if not Path(file_name).suffix:
        file_name = file_name + processing_utils.detect_audio_format(data)
    path = folder / Path(file_name).name
    write_once(path, data)
    return str(path.resolve())


def cache_writes_in_place() -> None:
    """Make Gradio's image and bytes cache writers never rewrite a file a client may be fetching (the module's
    doc); idempotent. `ServedBlocks` calls it when the app is built."""
    processing_utils.save_pil_to_cache = _save_pil_to_cache
    processing_utils.save_bytes_to_cache = _save_bytes_to_cache
