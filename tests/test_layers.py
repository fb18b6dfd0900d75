"""The layers of analysis/: no import cycle, and families/ at the bottom.

Every import of every module is read with ``ast`` (top level, inside functions, under TYPE_CHECKING: a
deferred import is still a dependency), so a cycle hidden by a late import fails here too."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "analysis"
FAMILIES = "analysis.families"
#: what families/ may import from outside itself: modules that import nothing of analysis/
BELOW_FAMILIES = frozenset({"analysis.errors", "analysis.tokens"})


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The analysis modules ``name`` imports, anywhere in its file. Importing ``a.b.c`` from outside
    ``a.b`` also runs ``a.b``'s ``__init__``: that package counts as imported too."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{source}.{alias.name}"
                targets.add(full if full in known else source)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    deps = set()
    for target in targets:
        parts = target.split(".")
        for k in range(2, len(parts) + 1):  # the packages on the way down, and the module itself
            dep = ".".join(parts[:k])
            inside = name == dep or name.startswith(dep + ".")  # a submodule does not "import" its own package
            if dep in known and dep != name and not inside:
                deps.add(dep)
    return deps


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(g.get(u, ())):
            if state.get(v) == "open":
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for u in sorted(g):
        if u not in state:
            visit(u)
    return found


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    def inside(m):
        return m == FAMILIES or m.startswith(FAMILIES + ".")

    bad = [f"{m} imports {d}" for m in sorted(g) if inside(m) for d in sorted(g[m])
           if not inside(d) and d not in BELOW_FAMILIES]
    bad += [f"{m} (below families/) imports {d}" for m in sorted(BELOW_FAMILIES) for d in sorted(g.get(m, ()))]
    return bad


def test_analysis_has_no_import_cycle():
    assert cycles(graph()) == []


def test_families_is_the_bottom_layer():
    assert upward_imports(graph()) == []


def test_the_checks_catch_a_planted_upward_import_and_cycle(tmp_path):
    """A copy of analysis/ with one deferred upward import planted in families/base.py: both checks fail."""
    import shutil

    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    base = tmp_path / PACKAGE / "families" / "base.py"
    base.write_text(base.read_text(encoding="utf-8") + "\n\ndef _planted():\n    from ..parity import parity_report\n",
                    encoding="utf-8")
    g = graph(tmp_path)
    assert "analysis.families.base imports analysis.parity" in upward_imports(g)
    assert any("analysis.parity" in cycle and "analysis.families.base" in cycle for cycle in cycles(g))
