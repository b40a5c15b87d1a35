"""python -m coolsd.fetch llamagen --resolution 256|512 [--dir DIR]: download LlamaGen's parts from the hub.

Only the files `load_llamagen` reads are fetched (`layout.hub_parts`), into the layout it expects
(`coolsd/models/llamagen/layout.py`). The total size is printed first; each file shows a progress
bar; an interrupted run resumes where it stopped (partial files wait in DIR/.partial/). Failures
(offline, gated or missing repo, no disk) end with one line on stderr and exit status 1.

Nothing else in coolsd downloads: the app calls `fetch_on_start()`, which fetches only when the
environment variable `COOLSD_FETCH_LLAMAGEN` asks for it (a Space sets it).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from coolsd.models.llamagen.layout import ENV_VAR, RESOLUTIONS, HubPart, check_resolution, hub_parts

FETCH_ENV = "COOLSD_FETCH_LLAMAGEN"  # e.g. "256" or "256,512": the app fetches these resolutions at start
ORIGINAL_ENV = "COOLSD_FETCH_ORIGINAL"  # "1": LlamaGen's own target .pt instead of LANTERN's conversion
PARTIAL_DIR = ".partial"  # ROOT/.partial/...: files being downloaded (kept across runs, to resume)
DEFAULT_DIR = "weights/llamagen"  # used when neither --dir nor $COOLSD_LLAMAGEN_DIR is given
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # either one switches huggingface_hub off
OFFLINE_MESSAGE = "offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set): unset both to fetch"
DISK_MARGIN = 1.05  # (choice) ask for 5 % more free disk than the files need

log = logging.getLogger(__name__)


class FetchError(Exception):
    """A failure worth one line to the user (offline, gated, missing, no space)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch: `repo_id`/`filename` -> ROOT/`dest`/`filename`, `size` bytes."""

    part: str
    repo_id: str
    filename: str
    size: int
    dest: str


# transport failures of the HTTP clients huggingface_hub has used (httpx, httpx2, requests): by class name
NETWORK_ERRORS = {"TransportError", "NetworkError", "TimeoutException", "ConnectionError", "Timeout", "ConnectError"}


def _is_network_error(err: Exception) -> bool:
    from huggingface_hub import errors

    if isinstance(err, (ConnectionError, TimeoutError, errors.LocalEntryNotFoundError)):
        return True
    return any(cls.__name__ in NETWORK_ERRORS for cls in type(err).__mro__)


def _hub_error(err: Exception, repo_id: str, endpoint: str | None) -> FetchError:
    """One readable line for a huggingface_hub / network exception."""
    from huggingface_hub import errors

    where = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if isinstance(err, errors.OfflineModeIsEnabled):
        return FetchError(OFFLINE_MESSAGE)
    if isinstance(err, errors.GatedRepoError):
        return FetchError(
            f"{repo_id} is gated: accept its terms on {where}/{repo_id}, then log in (hf auth login) or set HF_TOKEN"
        )
    if isinstance(err, errors.RepositoryNotFoundError):
        return FetchError(f"{repo_id} was not found on {where} (or it is private: set HF_TOKEN)")
    if isinstance(err, errors.EntryNotFoundError):
        return FetchError(f"{repo_id}: a file is missing on the hub ({err})".splitlines()[0])
    if isinstance(err, errors.HfHubHTTPError):
        status = err.response.status_code if err.response is not None else "?"
        return FetchError(f"{repo_id}: the hub answered HTTP {status}; try again later")
    if _is_network_error(err):
        return FetchError(f"cannot reach {where} ({type(err).__name__}); check the network, then rerun to resume")
    return FetchError(f"{repo_id}: {type(err).__name__}: {err}".splitlines()[0])


def _select(part: HubPart, sizes: dict[str, int]) -> list[str]:
    """The files of one part among the repo's `sizes` (name -> bytes); FetchError naming what lacks."""

    def matching(pattern: str) -> list[str]:
        return sorted(name for name in sizes if fnmatch.fnmatchcase(name, pattern))

    chosen: list[str] = []
    for pattern in part.files:
        found = matching(pattern)
        if not found:
            raise FetchError(f"{part.repo_id} has no file matching {pattern!r} (needed for the {part.name})")
        chosen += found
    for pattern in part.optional:
        chosen += matching(pattern)
    if part.weights:
        for group in part.weights:
            if all(matching(pattern) for pattern in group):
                chosen += [name for pattern in group for name in matching(pattern)]
                break
        else:
            wanted = " or ".join("+".join(group) for group in part.weights)
            raise FetchError(f"{part.repo_id} has no weights ({wanted}) for the {part.name}")
    return list(dict.fromkeys(chosen))


def plan(resolutions: list[int], original: bool = False, endpoint: str | None = None, token=None) -> list[RemoteFile]:
    """List the files to fetch with their sizes (one hub listing per repo); nothing is downloaded."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    listings: dict[str, dict[str, int]] = {}
    files: dict[tuple[str, str], RemoteFile] = {}
    for resolution in resolutions:
        for part in hub_parts(resolution, original=original):
            if part.repo_id not in listings:
                try:
                    entries = api.list_repo_tree(part.repo_id)
                    listings[part.repo_id] = {e.path: e.size for e in entries if hasattr(e, "size")}
                except Exception as err:  # noqa: BLE001 - every failure becomes one line
                    raise _hub_error(err, part.repo_id, endpoint) from err
            for name in _select(part, listings[part.repo_id]):
                file = RemoteFile(part.name, part.repo_id, name, listings[part.repo_id][name], part.dest)
                files[(file.dest, name)] = file  # the shared T5 / VQ once
    return list(files.values())


def _present(root: Path, file: RemoteFile) -> bool:
    path = root / file.dest / file.filename
    return path.is_file() and path.stat().st_size == file.size


def download(file: RemoteFile, root: Path, endpoint: str | None = None, token=None) -> Path:
    """Fetch one file to ROOT/dest/filename through ROOT/.partial/dest/filename, resuming a partial file.

    huggingface_hub's own `hf_hub_download` retries within a run but deletes its partial file when
    a run fails, so a restarted Space would fetch a 10 GB shard again; here the partial file
    persists and the next run asks only for the missing bytes (an HTTP Range request). The hub's
    metadata (HEAD), auth headers, progress bar and in-run retries are huggingface_hub's.
    A file whose ETag is a SHA-256 (hub LFS files) is checked against it before it is moved in place.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    dest = root / file.dest / file.filename
    partial = root / PARTIAL_DIR / file.dest / file.filename
    partial.parent.mkdir(parents=True, exist_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    meta = get_hf_file_metadata(hf_hub_url(file.repo_id, file.filename, endpoint=endpoint), token=token)
    size = meta.size if meta.size is not None else file.size
    have = partial.stat().st_size if partial.exists() else 0
    if have > size:  # a partial file of another version: start over
        partial.unlink()
        have = 0
    with partial.open("r+b" if have else "wb") as out:
        out.seek(have)
        http_get(
            meta.location,
            out,
            resume_size=have,
            headers=build_hf_headers(token=token),
            expected_size=size,
            displayed_filename=file.filename,
        )
    etag = (meta.etag or "").strip('"')
    if len(etag) == 64 and _sha256(partial) != etag:
        partial.unlink()
        raise FetchError(f"{file.repo_id}/{file.filename}: checksum mismatch; rerun to download it again")
    partial.replace(dest)
    return dest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def free_bytes(path: Path) -> int:
    """Free disk space at `path`, in bytes."""
    return shutil.disk_usage(path).free


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def fetch(
    resolutions: list[int],
    root: str | Path,
    original: bool = False,
    endpoint: str | None = None,
    token=None,
    out=sys.stdout,
) -> Path:
    """Download every part of `resolutions` (e.g. [256]) into `root`; returns `root`.

    Prints the plan and the total size first; files already complete are skipped; partial files
    resume. Raises FetchError with a one-line message on any failure.
    """
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise FetchError(OFFLINE_MESSAGE)
    root = Path(root)
    files = plan(resolutions, original=original, endpoint=endpoint, token=token)
    todo = [f for f in files if not _present(root, f)]
    total, needed = sum(f.size for f in files), sum(f.size for f in todo)
    print(f"LlamaGen {', '.join(f'{r} px' for r in resolutions)} -> {root}", file=out)
    for f in files:
        state = "have" if f not in todo else "get "
        print(f"  {state} {_gb(f.size):>9}  {f.repo_id}/{f.filename} -> {f.dest}/", file=out)
    print(f"total {_gb(total)}; to download {_gb(needed)} in {len(todo)} files", file=out, flush=True)
    root.mkdir(parents=True, exist_ok=True)
    free = free_bytes(root)
    if needed * DISK_MARGIN > free:
        raise FetchError(f"{root} has {_gb(free)} free; the download needs {_gb(needed)}")
    for f in todo:
        try:
            download(f, root, endpoint=endpoint, token=token)
        except FetchError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure becomes one line
            raise _hub_error(err, f.repo_id, endpoint) from err
    print(f"done: export {ENV_VAR}={root.resolve()}", file=out)
    return root


def fetch_on_start(environ=None, timeout_s: float | None = None) -> list[int]:
    """For the app: fetch the resolutions listed in $COOLSD_FETCH_LLAMAGEN (e.g. "256,512"), else nothing.

    The folder is $COOLSD_LLAMAGEN_DIR (set to `DEFAULT_DIR` in `environ` when unset, so the app then
    finds it). $COOLSD_FETCH_ORIGINAL=1 takes LlamaGen's own target checkpoints. The download runs in
    a child process (`python -m coolsd.fetch`) without the offline flags, so the app process itself
    stays offline; the child's progress bars and one-line error go to stderr (the Space log).
    Returns the resolutions fetched; on a failure it logs and returns [], and the app goes on with
    what is on disk. Files already complete are not downloaded again (a restart costs one listing).
    """
    import subprocess

    environ = os.environ if environ is None else environ
    wanted = environ.get(FETCH_ENV, "").strip()
    if not wanted:
        return []
    try:
        resolutions = [check_resolution(int(r)) for r in wanted.replace(" ", "").split(",") if r]
    except ValueError:
        log.error("%s=%r: expected resolutions among %s, e.g. 256 or 256,512", FETCH_ENV, wanted, RESOLUTIONS)
        return []
    environ.setdefault(ENV_VAR, DEFAULT_DIR)
    command = [sys.executable, "-m", "coolsd.fetch", "llamagen", "--dir", environ[ENV_VAR]]
    command += [arg for r in resolutions for arg in ("--resolution", str(r))]
    command += ["--original"] if environ.get(ORIGINAL_ENV, "") == "1" else []
    child_env = {k: v for k, v in environ.items() if k not in OFFLINE_ENV}
    log.info("fetching LlamaGen %s into %s", resolutions, environ[ENV_VAR])
    done = subprocess.run(command, env=child_env, timeout=timeout_s)  # its progress bars and errors: our stderr
    if done.returncode:
        log.error("fetching LlamaGen failed (exit %d; the reason is the coolsd.fetch line above)", done.returncode)
        return []
    return resolutions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coolsd.fetch", description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["llamagen"], help="the model family to fetch")
    parser.add_argument(
        "--resolution",
        type=int,
        choices=RESOLUTIONS,
        action="append",
        help="pixels per side; repeat for both (default 256)",
    )
    parser.add_argument("--dir", help=f"destination folder (default ${ENV_VAR}, else {DEFAULT_DIR})")
    parser.add_argument(
        "--original",
        action="store_true",
        help="LlamaGen's own target checkpoint (peizesun/llamagen_t2i) instead of LANTERN's conversion",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the files and sizes, download nothing")
    parser.add_argument("--endpoint", help="hub URL (default $HF_ENDPOINT or https://huggingface.co)")
    args = parser.parse_args(argv)
    resolutions = args.resolution or [256]
    root = Path(args.dir or os.environ.get(ENV_VAR) or DEFAULT_DIR)
    try:
        if args.dry_run:
            files = plan(resolutions, original=args.original, endpoint=args.endpoint)
            for f in files:
                print(f"{_gb(f.size):>9}  {f.repo_id}/{f.filename} -> {root / f.dest}/")
            print(f"total {_gb(sum(f.size for f in files))}")
        else:
            fetch(resolutions, root, original=args.original, endpoint=args.endpoint)
    except FetchError as err:
        print(f"coolsd.fetch: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("coolsd.fetch: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
