"""Every shell command a newcomer can read in a ```bash block of README.md, docs/*.md or a model card
(assets/*/README.md) is accounted for here: it runs to its end, shortened (fewer samples, a temporary --out), on
this machine as the README's command 1 sets it up (no browser needed: a figure that needs one is skipped in one
line), or it says why it cannot run in a test (a download, the training data, a GPU, the suite itself). A command
added to the docs with no entry below fails `test_every_documented_command_is_accounted_for`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from coolsd.models import registry

ROOT = Path(__file__).resolve().parents[2]
SURFACES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "assets").glob("*/README.md"))]
BASH = re.compile(r"```bash\n(.*?)```", re.S)
OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
# app.py up to its launch (the model loaded, the page built): what a command that starts the app does before it serves
BUILD_APP = "import runpy; runpy.run_path('app.py'); print('app built')"
SHIPPED = registry.available()


def documented() -> list[tuple[str, str]]:
    """(where, command) of every command in a bash block: continuation lines joined, comments left out."""
    out = []
    for path in SURFACES:
        text = path.read_text(encoding="utf-8")
        for m in BASH.finditer(text):
            line_no = text[: m.start()].count("\n") + 2
            body = re.sub(r"\\\n\s*", " ", m.group(1))  # a continuation (a comment line after it ends the command)
            for i, line in enumerate(body.splitlines()):
                command = re.sub(r"(^|\s)#.*$", "", line).strip()
                if command:
                    out.append((f"{path.relative_to(ROOT)}:{line_no + i}", command))
    return out


# (pattern a documented command matches, what the test does with it): ("run", argv builder taking a temporary
# folder, expected exit status), or ("skip", why it cannot run here), or ("covered", the test that runs it).
def app_build(model: str | None):
    return lambda tmp: ({**({"COOLSD_MODEL": model} if model else {})}, [sys.executable, "-c", BUILD_APP])


def delta_sweep(model: str):
    return lambda tmp: ({}, [sys.executable, "-m", "coolsd.bench.delta_sweep", "--model", model, "--samples", "2",
                             "--deltas", "2", "--keep", "1", "--fid-bootstrap", "2", "--warmup", "0", "--quiet",
                             "--out", str(tmp / "sweep.json")])


def emoji_benchmark(tmp):
    """The model card's torchrun command, one process, two pairs: vanilla, the chain rows and one no-drafter row."""
    return {}, ["torchrun" if not (Path(sys.executable).parent / "torchrun").exists()
                else str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "1",
                "-m", "coolsd.bench", "--model", "emoji", "--classes", "0,5", "--seeds", "1", "--draft-len", "2",
                "--lantern-k", "10", "--lantern-lam", "20", "--no-lantern-gstar", "--uniform-delta", "",
                "--cool-delta", "2", "--cool-unclipped-delta", "", "--jacobi-window", "4", "--no-sjd-reuse",
                "--no-drafter", "cool-sd:delta=2", "--extra", "--only", "vanilla,eagle,cool-sd",
                "--fid-bootstrap", "2", "--out", str(tmp / "bench"), "--quiet"]


def likeness_calibration(tmp):
    return {}, [sys.executable, "tools/likeness_calibration.py", "--sheets", str(tmp / "sheets")]


def fetch_dry_run(tmp):
    return {}, [sys.executable, "-m", "coolsd.fetch", "llamagen", "--resolution", "512", "--dry-run"]


TRAINING = "training: needs requirements-train.txt and the training data, downloaded (minutes to hours of CPU)"
RECIPES = [
    (r"^python3 -m venv \.venv && \.venv/bin/pip install -r requirements\.txt -e \. && \.venv/bin/python app\.py$",
     ("covered", "tests/app/test_downloading_client.py launches app.py as installed and races it")),
    (r"^tools/test\.sh( |$)", ("skip", "the test suite itself")),
    (r"tools/memory_run\.py ", ("skip", "2,000 sessions against a server: minutes of both cores")),
    (r"tools/planted_bugs\.py", ("skip", "runs the suite against each planted bug (its --dry-run is not run here)")),
    (r"^\.venv/bin/python app\.py$", ("run", app_build(None), 0)),
    (r"^COOLSD_MODEL=mnist \.venv/bin/python app\.py$", ("run", app_build("mnist"), 0)),
    (r"^COOLSD_MODEL=tiny \.venv/bin/python app\.py$", ("run", app_build("tiny"), 0)),
    (r"^(COOLSD_LLAMAGEN_DIR=\S+ )?COOLSD_MODEL=llamagen (COOLSD_LLAMAGEN_DIR=\S+ )?\.venv/bin/python app\.py$",
     ("skip", "LlamaGen's weights (13-15 GB) and a GPU; without them the app falls back to MNIST "
              "(tests/app/test_every_model.py)")),
    (r"^python -m coolsd\.fetch llamagen .*--dry-run$", ("run", fetch_dry_run, 1)),  # offline: one line, status 1
    (r"^python -m coolsd\.fetch llamagen ", ("skip", "downloads 13-15 GB from the Hugging Face hub")),
    (r"^export COOLSD_LLAMAGEN_DIR=", ("skip", "sets a variable for the next commands")),
    (r"^python -m coolsd\.bench\.delta_sweep --model emoji ", ("run", delta_sweep("emoji"), 0)),
    (r"^python -m coolsd\.bench\.delta_sweep --model mnist ", ("run", delta_sweep("mnist"), 0)),
    (r"^torchrun .* -m coolsd\.bench --model emoji ", ("run", emoji_benchmark, 0)),
    (r"^python tools/likeness_calibration\.py( --sheets \S+)?$", ("run", likeness_calibration, 0)),
    (r"mutmut run", ("skip", "mutation testing: 45 minutes of both cores")),
    (r"^\.venv/bin/python tools/mutation_report\.py ", ("skip", "reads a finished mutmut run")),
    (r"^(apt-get install|pip install)", ("skip", "installs the training extras (network)")),
    (r"^python -m coolsd\.train\.emoji_data$", ("skip", TRAINING)),
    (r"^python -m coolsd\.train(\.acceptance)? ", ("skip", TRAINING)),
    (r"^cp -r runs/", ("skip", TRAINING)),
]


def recipe(command: str):
    found = [how for pattern, how in RECIPES if re.search(pattern, command)]
    return found[0] if found else None


def test_every_documented_command_is_accounted_for():
    missing = [f"{where}: {command}" for where, command in documented() if recipe(command) is None]
    assert not missing, "documented commands with no entry in RECIPES:\n" + "\n".join(missing)
    assert len(documented()) >= 20  # (the parser finds the blocks)


RUNS = [pytest.param(command, id=where) for where, command in documented()
        if (recipe(command) or ("",))[0] == "run"]


@pytest.mark.parametrize("command", RUNS)
def test_a_documented_command_runs_to_its_end_shortened(command, tmp_path):
    _, build, expected = recipe(command)
    if "emoji" in command and "emoji" not in SHIPPED or "mnist" in command and "mnist" not in SHIPPED:
        pytest.skip("that model is not shipped here")
    env, argv = build(tmp_path)
    done = subprocess.run(argv, cwd=ROOT, env=os.environ | OFFLINE | env | {"GRADIO_TEMP_DIR": str(tmp_path / "g")},
                          capture_output=True, text=True, timeout=900)
    said = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == expected, f"{shlex.join(argv)}: status {done.returncode}\n{said}"
    assert "Traceback" not in done.stderr, said
    if expected:  # a refusal is one clear line on stderr
        assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, said
    if "coolsd.bench" in argv and "delta_sweep" not in " ".join(argv):
        out = tmp_path / "bench"
        for name in ("results.md", "results.jsonl", "claims.json", "pareto.html", "config.json"):
            assert (out / name).is_file(), name
        # the figure that needs a browser: written, or skipped in one line that says why
        assert (out / "pareto.png").is_file() or "pareto.png skipped:" in done.stderr, said


# ---------------------------------------------------------------- the pictures of the page
def test_every_picture_of_the_page_in_the_docs_is_made_by_one_command():
    """Each screenshot the README and docs show is one `tools/page_pictures.py` writes, and the docs name it."""
    sys.path.insert(0, str(ROOT / "tools"))
    from page_pictures import PICTURES

    shown = set()
    for path in SURFACES:
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", path.read_text(encoding="utf-8")):
            name = (path.parent / target).resolve().relative_to(ROOT).as_posix()
            if "screenshot" in name:
                shown.add(name)
    assert shown and shown <= {f"assets/{p}" for p in PICTURES.values()}, shown
    assert "tools/page_pictures.py" in (ROOT / "docs" / "app-and-api.md").read_text(encoding="utf-8")


def test_page_pictures_writes_a_picture_of_the_current_page(tmp_path):
    import shutil

    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    done = subprocess.run([sys.executable, "tools/page_pictures.py", "--only", "phone,schedule", "--out",
                           str(tmp_path)], cwd=ROOT, env=os.environ | OFFLINE, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    for name in ("screenshots/phone.png", "schedule_screenshot.png"):
        assert (tmp_path / name).stat().st_size > 10_000 and f"wrote {tmp_path / name}" in done.stdout
    assert not list(tmp_path.rglob(".*partial*"))
    bad = subprocess.run([sys.executable, "tools/page_pictures.py", "--only", "banner"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--only takes screenshot, phone, lab, schedule" in bad.stderr
