"""The files the app serves, bounded by count and age (Gradio's own sweep misses sessions' copies): after each event
`ServedFiles` deletes the oldest while over `max_files` or last served over `max_age_s` ago, never one served in the
last `min_age_s` or a component's own. `cache_writes_in_place`: no served file is rewritten or seen half written."""

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
    """The paths of the file objects (str "path" and "meta") in an event's output, in order (at most `limit` items)."""
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
    """The files an app served, oldest first, bounded by count and age (module doc); `deleted` counts by reason."""

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

    def paths(self) -> list[str]:  # oldest first
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
        """Delete the oldest files over the bounds (module doc), also from Gradio's sets -> the deleted paths."""
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


def _cache(data: bytes, cache_dir: str, name: str) -> str:
    """Gradio's cache path for `data` (`<cache_dir>/<hash>/<name>`): touched when there (ages go by file times), else
    written aside and renamed into place."""
    folder = Path(cache_dir) / processing_utils.hash_bytes(data)
    folder.mkdir(exist_ok=True, parents=True)
    path = (folder / name).resolve()
    try:
        os.utime(path)
        return str(path)
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
    return str(path)


def _save_pil_to_cache(img, cache_dir: str, name: str = "image", format: str = "webp") -> str:
    """gradio.processing_utils.save_pil_to_cache, via `_cache` (same path, same bytes)."""
    return _cache(processing_utils.encode_pil_to_bytes(img, format), cache_dir, f"{name}.{format}")


def _save_bytes_to_cache(data: bytes, file_name: str, cache_dir: str) -> str:
    """gradio.processing_utils.save_bytes_to_cache, via `_cache` (same path, same bytes)."""
    suffix = "" if Path(file_name).suffix else processing_utils.detect_audio_format(data)
    return _cache(data, cache_dir, Path(file_name + suffix).name)


def cache_writes_in_place() -> None:
    """Gradio's cache writers made to never rewrite a served file (module doc); idempotent."""
    processing_utils.save_pil_to_cache = _save_pil_to_cache
    processing_utils.save_bytes_to_cache = _save_bytes_to_cache
