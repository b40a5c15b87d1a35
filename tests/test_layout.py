"""The architecture rules of issue 18, kept true by a fast static scan of `coolsd/` (no import of it).

- no function longer than MAX_FUNCTION_LINES lines (def line to last line, docstring included);
- no private `_name` of one coolsd module used by another (imported, or read as `module._name`);
- no import cycle between coolsd modules, counting lazy imports (inside functions) as edges too, so a
  lazy import cannot hide a cycle;
- a lazy import of a coolsd module only where it defers a heavy optional dependency (HEAVY) that the
  importing module does not load anyway (so `import coolsd` and a CLI's `--help` stay light);
- one bundle type: a single class of coolsd/ holds a model's target, drafter and tokenizer (`ModelBundle`);
- the app's panels are wired explicitly (issue 26): no `panels` registry, no attribute set on another object
  (`panel.outputs = ...`: what a builder shares, it returns in a frozen handle), a frozen `Context`;
- the rules are their own settings (issue 26): no module under coolsd/decoding/ mentions the race's names for
  rule settings (`lantern_lambda`, `uniform_delta`, `custom_omegas`, ...: the RaceSettings fields of
  coolsd/app/settings.py made by `rule_knob` / `rule_setting` whose name is no rule dataclass field's);
- no block of DUP_LINES lines repeated within coolsd/ (lines compared after stripping; docstrings, imports,
  blank, comment and one-word lines such as `)` or `else:` skipped). The `duplicates` tool of the dev
  machine also finds same-shape blocks; this test keeps the exact repeats out.

Run `python tests/test_layout.py` to print what each scan finds.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "coolsd"
MAX_FUNCTION_LINES = 60
DUP_LINES = 6

# What a lazy import may defer: packages that take seconds to import or that only some entry points need.
HEAVY = {"diffusers", "transformers", "gradio", "gradio_client", "plotly", "matplotlib", "scipy", "playwright",
         "spaces"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """{dotted name: path} of every module of the package."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def parse(path: Path) -> ast.Module:
    return parse_text(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def parse_text(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename=filename)


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """'module:function (N lines)' for each function (or method) longer than `limit` lines."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{name}:{node.name} ({lines} lines, line {node.lineno})")
    return found


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module name a `from ... import` statement reads from."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def coolsd_aliases(name: str, path: Path, tree: ast.Module):
    """(source module, imported name or None for `import m`, local name, node) per alias imported from coolsd."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "coolsd":
                    yield alias.name, None, alias.asname or alias.name, node
        elif isinstance(node, ast.ImportFrom):
            source = resolve(name, path.name == "__init__.py", node)
            if source.split(".")[0] == "coolsd":
                for alias in node.names:
                    yield source, alias.name, alias.asname or alias.name, node


def imports(known: dict[str, Path]) -> list[tuple[str, str, bool, ast.AST]]:
    """(importer, imported coolsd module, lazy, node) for every import of a coolsd module.

    `from pkg import name` counts as an import of `pkg.name` when that is a module, else of `pkg`.
    lazy: the statement sits inside a function (runs when called, not when the module is imported).
    """
    edges = []
    for name, path in known.items():
        tree = parse(path)
        lazy_nodes = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f)}
        for source, attr, _, node in coolsd_aliases(name, path, tree):
            target = source if attr is None or f"{source}.{attr}" not in known else f"{source}.{attr}"
            edges.append((name, target, id(node) in lazy_nodes, node))
    return edges


def private_uses() -> list[str]:
    """'module: name from other' for each `_name` (not dunder) of a coolsd module used by another module."""
    known = modules()
    found = []
    for name, path in known.items():
        tree = parse(path)
        aliases: dict[str, str] = {}  # local name -> coolsd module it is bound to
        for source, attr, local, _ in coolsd_aliases(name, path, tree):
            if attr is None or f"{source}.{attr}" in known:
                aliases[local] = source if attr is None else f"{source}.{attr}"
            elif private(attr) and source != name:
                found.append(f"{name}: {attr} from {source}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name)
                    and aliases.get(node.value.id, name) != name):
                found.append(f"{name}: {node.attr} from {aliases[node.value.id]}")
    return sorted(set(found))


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def cycles() -> list[list[str]]:
    """Strongly connected groups (of more than one module, or a module importing itself) of the import graph."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b, _, _ in imports(modules()):
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                groups.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return groups


def lazy_coolsd_imports() -> set[tuple[str, str]]:
    """(importer, imported) for each coolsd module imported inside a function of another."""
    return {(a, b) for a, b, lazy, _ in imports(modules()) if lazy and a != b}


def loaded_at_import() -> dict[str, set[str]]:
    """{module: top-level packages outside coolsd that importing it loads}, through its top-level coolsd
    imports and its parent packages' (`coolsd.a.b` runs `coolsd/__init__` and `coolsd/a/__init__` first)."""
    known = modules()
    direct: dict[str, set[str]] = defaultdict(set)
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        tree = parse(path)
        for node in tree.body + [n for top in tree.body if isinstance(top, (ast.If, ast.Try)) for n in ast.walk(top)]:
            if isinstance(node, ast.Import):
                direct[name] |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                direct[name].add(node.module.split(".")[0])
        parts = name.split(".")
        edges[name] |= {".".join(parts[:i]) for i in range(1, len(parts))} & set(known)
    for a, b, lazy, _ in imports(known):
        if not lazy:
            edges[a].add(b)
    loaded = {}
    for name in known:
        seen, todo = set(), [name]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += edges[m]
        loaded[name] = set().union(*(direct[m] for m in seen)) - {"coolsd"}
    return loaded


def needless_lazy_imports() -> list[str]:
    """'a -> b' for each lazy import of coolsd module b in a that defers no HEAVY package (b loads nothing
    heavy that a does not load already): such an import belongs at the top of the module."""
    loaded = loaded_at_import()
    return sorted(f"{a} -> {b}" for a, b in lazy_coolsd_imports() if not (loaded[b] - loaded[a]) & HEAVY)


TRIVIAL = re.compile(r"^[\W_]*\w*[\W_]*$")  # at most one word: ")", "else:", "return x", "pass"


def repeated_blocks(n: int = DUP_LINES) -> list[str]:
    """'a.py:L ~ b.py:M' for each run of `n` significant lines that stands twice in coolsd/."""
    seen: dict[tuple[str, ...], tuple[str, int]] = {}
    found = []
    for name, path in modules().items():
        lines = []
        in_doc = False
        for no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            text = raw.strip()
            quotes = text.count('"""') + text.count("'''")
            if in_doc or quotes:
                in_doc = in_doc ^ (quotes % 2 == 1)
                continue  # docstrings are prose
            if text and not text.startswith(("#", "import ", "from ")) and not TRIVIAL.match(text):
                lines.append((no, text))
        last_hit = -n
        for i in range(len(lines) - n + 1):
            key = tuple(t for _, t in lines[i:i + n])
            where = (name, lines[i][0])
            first = seen.setdefault(key, where)
            if first != where and (first[0] != name or where[1] - first[1] >= n):
                if i - last_hit >= n:  # one row per run of overlapping windows
                    found.append(f"{first[0]}:{first[1]} ~ {name}:{where[1]}")
                last_hit = i
    return found


BUNDLE_FIELDS = {"target", "drafter", "tokenizer"}


def bundle_types() -> list[str]:
    """'module:Class' for each class whose annotated fields include a model's target, drafter and tokenizer."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ClassDef):
                annotated = {b.target.id for b in node.body if isinstance(b, ast.AnnAssign)
                             and isinstance(b.target, ast.Name)}
                if BUNDLE_FIELDS <= annotated:
                    found.append(f"{name}:{node.name}")
    return found


# attribute writes that are not wiring: a race closes its own trace's status; the lab loads its classifier on first use
OWN_STATE = {"trace.status", "lab.classifier"}


def foreign_attribute_writes(package: str = "coolsd.app") -> list[str]:
    """'module:line name.attr' for each assignment to an attribute of an object other than `self` / `cls` in
    the panel modules of `package` (those with a top-level build / build_demo / wire: a panel setting what
    others then read off it; dunders such as a handler's `__signature__` and OWN_STATE aside), and each use
    of a `panels` attribute there."""
    found = []
    for name, path in modules().items():
        if not (name == package or name.startswith(package + ".")):
            continue
        tree = parse(path)
        builds = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} & {"build", "build_demo", "wire"}
        for node in ast.walk(tree):
            if not builds:  # (only panel modules, which build and wire components; serving code keeps its own state)
                break
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in (e for target in targets for e in (target.elts if isinstance(target, ast.Tuple) else [target])):
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id not in ("self", "cls")
                        and not t.attr.startswith("__") and f"{t.value.id}.{t.attr}" not in OWN_STATE):
                    found.append(f"{name}:{node.lineno} {t.value.id}.{t.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "panels":
                found.append(f"{name}:{node.lineno} .panels")
    return found


def race_rule_names() -> set[str]:
    """The race's own names for rule settings: RaceSettings fields (coolsd/app/settings.py) made by `rule_knob` or
    `rule_setting`, less the field names of the rule dataclasses (coolsd/decoding/rules.py: `delta` is COOL-SD's)."""
    settings, rules = modules()["coolsd.app.settings"], modules()["coolsd.decoding.rules"]
    names = {b.target.id for node in ast.walk(parse(settings)) if isinstance(node, ast.ClassDef)
             and node.name == "RaceSettings" for b in node.body if isinstance(b, ast.AnnAssign)
             and isinstance(b.value, ast.Call) and getattr(b.value.func, "id", "") in ("rule_knob", "rule_setting")}
    fields = {b.target.id for node in ast.walk(parse(rules)) if isinstance(node, ast.ClassDef)
              for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)}
    return names - fields


def race_names_in_decoding() -> list[str]:
    """'module:line name' for each mention of a race rule-setting name (`race_rule_names`) in coolsd.decoding."""
    words = race_rule_names()
    pattern = re.compile(r"\b(" + "|".join(sorted(words)) + r")\b") if words else None
    found = []
    for name, path in modules().items():
        if pattern and (name == "coolsd.decoding" or name.startswith("coolsd.decoding.")):
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                found += [f"{name}:{no} {m}" for m in pattern.findall(line)]
    return found


def frozen_dataclasses(module: str, classes: tuple[str, ...]) -> dict[str, bool]:
    """class name -> whether it is declared `@dataclass(frozen=True)` in `module`."""
    out = {}
    for node in ast.walk(parse(modules()[module])):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            out[node.name] = any(isinstance(d, ast.Call) and any(k.arg == "frozen" and getattr(k.value, "value", 0)
                                                                 for k in d.keywords) for d in node.decorator_list)
    return out


def test_one_bundle_type():
    assert bundle_types() == ["coolsd.models.bundle:ModelBundle"]


def test_panels_are_wired_explicitly():
    """No panel reads another panel's attributes: a builder returns a frozen handle of what others may read,
    and nothing is set on a shared object after it is made."""
    assert foreign_attribute_writes() == []
    assert frozen_dataclasses("coolsd.app.context", ("Context",)) == {"Context": True}
    assert frozen_dataclasses("coolsd.app.race", ("RaceHandle",)) == {"RaceHandle": True}
    assert frozen_dataclasses("coolsd.app.controls", ("Controls",)) == {"Controls": True}


def test_the_decoding_layer_knows_no_race_setting_names():
    """The rules are their own settings: the flat race form (`lantern_lambda` for LANTERN++'s `lam`) is the app's."""
    assert {"lantern_lambda", "uniform_delta", "linear_slope", "custom_omegas", "mean_omega"} <= race_rule_names()
    assert race_names_in_decoding() == []


def test_no_long_functions():
    assert long_functions() == []


def test_no_private_names_across_modules():
    assert private_uses() == []


def test_no_import_cycles_even_through_lazy_imports():
    assert cycles() == []


def test_lazy_imports_only_defer_heavy_packages():
    assert needless_lazy_imports() == []


def test_no_repeated_blocks():
    assert repeated_blocks() == []


def test_scans_see_what_they_look_for(tmp_path, monkeypatch):
    """Each scan flags a planted offender (so an empty list above is not a scan that sees nothing)."""
    pkg = tmp_path / "coolsd"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    body = "\n".join(f"    total = total + {i} * value_{i % 7}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "sub" / "a.py").write_text(f"from coolsd.sub.b import _hidden\n\n\ndef long(value_0):\n{body}\n")
    (pkg / "sub" / "b.py").write_text("def _hidden():\n    from coolsd.sub import a\n    return a.long\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    assert [f.split(" ")[0] for f in long_functions()] == ["coolsd.sub.a:long"]
    assert private_uses() == ["coolsd.sub.a: _hidden from coolsd.sub.b"]
    assert cycles() == [["coolsd.sub.a", "coolsd.sub.b"]]
    assert lazy_coolsd_imports() == {("coolsd.sub.b", "coolsd.sub.a")}
    assert needless_lazy_imports() == ["coolsd.sub.b -> coolsd.sub.a"]  # a loads nothing heavy
    (pkg / "sub" / "a.py").write_text(f"import transformers\n\n\ndef long(value_0):\n{body}\n")
    assert needless_lazy_imports() == []  # now b's lazy import defers transformers
    assert repeated_blocks() == []  # one function: every run of lines differs from the next by its numbers
    (pkg / "sub" / "c.py").write_text(f"def again(value_0):\n{body}\n")
    assert repeated_blocks() == ["coolsd.sub.a:5 ~ coolsd.sub.c:2"]
    (pkg / "sub" / "d.py").write_text("class Two:\n    target: int\n    drafter: int\n    tokenizer: int\n\n\n"
                                      "def build(panel, ctx):\n    panel.outputs = 1\n    return ctx.panels\n")
    (pkg / "sub" / "e.py").write_text("def serve(session):\n    session.holder = 1\n")  # not a panel module
    assert bundle_types() == ["coolsd.sub.d:Two"]
    assert foreign_attribute_writes("coolsd.sub") == ["coolsd.sub.d:8 panel.outputs", "coolsd.sub.d:9 .panels"]
    (pkg / "app").mkdir()
    (pkg / "decoding").mkdir()
    (pkg / "app" / "settings.py").write_text("class RaceSettings:\n    delta: float = rule_knob(Rule, 'delta')\n"
                                             "    wide_delta: float = rule_knob(Rule, 'delta')\n    seed: int = 0\n")
    (pkg / "decoding" / "rules.py").write_text("class Rule:\n    delta: float = 1.0\n")
    (pkg / "decoding" / "variants.py").write_text("STRENGTH = 'wide_delta'  # not 'delta' nor the seed\n")
    assert race_rule_names() == {"wide_delta"}
    assert race_names_in_decoding() == ["coolsd.decoding.variants:1 wide_delta"]


if __name__ == "__main__":
    print("long functions:", *long_functions(), sep="\n  ")
    print("private names across modules:", *private_uses(), sep="\n  ")
    print("import cycles:", *cycles(), sep="\n  ")
    loaded = loaded_at_import()
    print("lazy coolsd imports (what each defers):",
          *(f"{a} -> {b}: {sorted((loaded[b] - loaded[a]) & HEAVY)}" for a, b in sorted(lazy_coolsd_imports())),
          sep="\n  ")
    print("needless lazy imports:", *needless_lazy_imports(), sep="\n  ")
    print("repeated blocks:", *repeated_blocks(), sep="\n  ")
    print("race setting names in coolsd.decoding:", *race_names_in_decoding(), sep="\n  ")
