"""One story: every figure the README, docs/*.md, the model cards and the How tab quote from a shipped file is
that file's, read here from the file (as tests/app/test_true_sentences.py does for the Race, Cost and Lab tabs).

In the Markdown, a block that quotes a file says so: `<!-- figures from: PATH[, PATH] -->` (invisible on a rendered
page), and the block runs from there to the next blank line (a paragraph, list item or table) or to an
`<!-- /figures -->`, whichever comes first. Every decimal figure
in it ("1.62", "0.87x") must be one of the file's numbers at the precision shown (either rounding of the last digit),
and every percentage ("88 %") one of its shares (or percentages) rounded half up, as `coolsd.util.format.percent`
rounds them on the page. Code spans and other comments are left out. Tables of measured speed and quality in the
README and the model cards must carry a marker (a table quoted from no file says `<!-- figures from: nowhere:
why -->` instead). The How tab's sentences and tables are built from the same files and checked the same way.

After a model's assets are made again (benchmark, delta sweep, metrics), this test names every sentence whose
figure the new files no longer hold."""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from coolsd.app import how

ROOT = Path(__file__).resolve().parents[2]
SURFACES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "assets").glob("*/README.md"))]
MARKER = re.compile(r"<!--\s*figures from:\s*(.*?)\s*-->", re.S)
# tables that quote measurements must name their file: a header naming one of these columns
MEASURED_COLUMNS = ("tau", "speed-up", "FID", "NLL", "recognised")
MUST_MARK = [ROOT / "README.md", *sorted((ROOT / "assets").glob("*/README.md"))]


def numbers_in(value) -> list[float]:
    """Every number (not a bool) in a JSON value, at any depth."""
    out, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, (int, float)):
            out.append(float(item))
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return out


def source_numbers(path: Path) -> list[float]:
    """The numbers of a shipped file: every number of a .json / .jsonl value, every figure of a .md report (one
    that a command writes, such as a benchmark's results.md)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return [float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", text)] + \
            [float(x) / 100 for x in re.findall(r"(\d+(?:\.\d+)?)\s?%", text)]
    if path.suffix == ".jsonl":
        return [v for line in text.splitlines() if line.strip() for v in numbers_in(json.loads(line))]
    return numbers_in(json.loads(text))


def blocks(text: str) -> list[tuple[int, list[str], str]]:
    """(line, source paths, the block's text) of every marker in `text`."""
    out = []
    for m in MARKER.finditer(text):
        rest = text[m.end():]
        end = re.search(r"\n\s*\n|<!--\s*/figures\s*-->", rest)
        block = rest[: end.start() if end else len(rest)]
        paths = [p.strip() for p in re.split(r"[,\s]+", m.group(1)) if p.strip()]
        out.append((text[: m.start()].count("\n") + 1, paths, block))
    return out


def figures(block: str) -> tuple[list[str], list[str]]:
    """(decimal figures, percentages) a block quotes, code spans, comments and link targets left out."""
    block = re.sub(r"<!--.*?-->", " ", block, flags=re.S)
    block = re.sub(r"`[^`]*`", " ", block)
    block = re.sub(r"\]\([^)]*\)", "]", block)
    shares = re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s?%", block)
    without = re.sub(r"(?<![\w.])\d+(?:\.\d+)?\s?%", " ", block)
    decimals = re.findall(r"(?<![\w.])(\d+\.\d+)(?![\d.]*\d)", without)
    return decimals, shares


def holds_decimal(values: list[float], shown: str) -> bool:
    digits = len(shown.split(".")[1])
    half = 0.5 * 10 ** -digits + 1e-9
    target = float(shown)
    return any(abs(abs(v) - target) <= half for v in values)  # (a sign is not read: "2.71-2.77" is a range)


def half_up(value: float, scale: int, digits: int) -> Decimal:
    return (Decimal(repr(value)) * scale).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)


def holds_share(values: list[float], shown: str) -> bool:
    digits = len(shown.split(".")[1]) if "." in shown else 0
    target = Decimal(shown)
    return any(half_up(v, 100, digits) == target or half_up(v, 1, digits) == target for v in values)


def check(where: str, paths: list[str], block: str) -> list[str]:
    """What in one marked block its files do not hold (empty: every figure is theirs)."""
    if paths and paths[0].startswith("nowhere"):
        return []
    missing = [p for p in paths if not (ROOT / p).is_file()]
    if missing:
        return [f"{where}: names {missing}, not shipped"]
    values = [v for p in paths for v in source_numbers(ROOT / p)]
    decimals, shares = figures(block)
    if not decimals and not shares:
        return [f"{where}: a marker over a block that quotes no figure"]
    wrong = [d for d in decimals if not holds_decimal(values, d)] + \
        [f"{s} %" for s in shares if not holds_share(values, s)]
    if wrong:
        return [f"{where}: {', '.join(wrong)} not in {', '.join(paths)} (block: {block.strip()[:160]!r})"]
    return one_record_per_row(where, paths, block)


def one_record_per_row(where: str, paths: list[str], block: str) -> list[str]:
    """A table quoting a .jsonl (a benchmark's results, one record per setting): each of its rows quotes one
    record, every figure of the row from the same record (no row mixes two settings or two runs)."""
    records = [numbers_in(json.loads(line)) for p in paths if p.endswith(".jsonl")
               for line in (ROOT / p).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [line for line in block.splitlines() if line.startswith("|")][2:]  # (header and rule left out)
    if not records or not rows or not all(p.endswith(".jsonl") for p in paths):  # (a table of several files)
        return []
    out = []
    for row in rows:
        decimals, shares = figures(row)
        if not any(all(holds_decimal(r, d) for d in decimals) and all(holds_share(r, s) for s in shares)
                   for r in records):
            out.append(f"{where}: no one record of {', '.join(paths)} holds every figure of {row[:120]!r}")
    return out


def marked() -> list:
    out = []
    for path in SURFACES:
        for line, paths, block in blocks(path.read_text(encoding="utf-8")):
            out.append(pytest.param(paths, block, id=f"{path.relative_to(ROOT)}:{line}"))
    return out


def test_the_docs_mark_what_they_quote():
    ids = {p.id.split(":")[0] for p in marked()}
    assert {"README.md", "docs/rules-and-theory.md", "docs/benchmark.md"} <= ids, ids


@pytest.mark.parametrize("paths, block", marked())
def test_a_marked_block_quotes_its_files(paths, block, request):
    problems = check(request.node.callspec.id, paths, block)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", MUST_MARK, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_measured_table_names_its_file(path):
    """A table whose header names a measured column (tau, speed-up, FID, NLL, recognised) sits right under a
    marker, so a table of numbers cannot drift from the run it reports unnoticed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    unmarked = []
    for i, line in enumerate(lines):
        is_header = line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1])
        if is_header and any(c in line for c in MEASURED_COLUMNS) and (i == 0 or "figures from:" not in lines[i - 1]):
            unmarked.append(f"{path.relative_to(ROOT)}:{i + 1}: {line[:80]}")
    assert not unmarked, "\n".join(unmarked)


def test_the_checker_catches_a_wrong_figure_and_a_wrong_rounding(tmp_path):
    """The check itself: a figure off by one in its last digit fails, and so does a share rounded down."""
    source = tmp_path / "r.json"
    source.write_text(json.dumps({"tau": 1.616, "acc": 0.885}))
    rel = str(source)
    values = source_numbers(source)
    assert holds_decimal(values, "1.62") and holds_decimal(values, "1.6") and not holds_decimal(values, "1.63")
    assert holds_share(values, "89") and not holds_share(values, "88")  # half up, as the page rounds
    assert figures("tau 1.62 (`x 9.99`), 89 % <!-- 7.77 --> [a](b/1.5.png)") == (["1.62"], ["89"])
    assert check("t", [rel], "tau 1.63") and not check("t", [rel], "tau 1.62, 89 %")
    rows = tmp_path / "r.jsonl"
    rows.write_text('{"tau": 1.62, "speedup": 0.87}\n{"tau": 1.84, "speedup": 0.96}\n')
    table = "| decoder | tau | speed-up |\n|---|---:|---:|\n| a | 1.62 | 0.87x |\n| b | 1.84 | {} |"
    assert not check("t", [str(rows)], table.format("0.96x"))
    assert check("t", [str(rows)], table.format("0.87x"))  # both numbers are in the file, not in one record


# ---------------------------------------------------------------- the How tab, built from the same files
def test_why_floored_quotes_the_exact_comparison_file():
    text = how.why_floored()
    assert "assets/floor_vs_eagle.json" in text and "2.83" not in text
    sentence = text[text.index("on "):]
    problems = check("How tab: why floored", ["assets/floor_vs_eagle.json"], sentence)
    assert not problems, problems
    head = text[: text.index("on ")]  # the paper's accept lengths, from its table
    assert set(figures(head)[0]) <= {f"{tau:.2f}" for *_, tau, _, _, _ in how.PAPER} | {"1.1"}


@pytest.mark.parametrize("kind", sorted(how.BENCHES))
def test_the_paper_beside_us_quotes_the_benchmark_file(kind):
    folder = how.BENCHES[kind][0]
    if not (folder / "results.jsonl").is_file():
        pytest.skip(f"no benchmark for {kind}")
    text = how.paper_beside_us(kind)
    ours = text[text.index("**Ours"):]
    table = "\n".join(line for line in ours.splitlines() if line.startswith("| ") and "method" not in line)
    rel = str((folder / "results.jsonl").relative_to(ROOT))
    problems = check(f"How tab ({kind})", [rel], table.replace("×", "x"))
    assert not problems, problems
