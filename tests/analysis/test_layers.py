"""The layers of analysis/: no import cycle, and each package imports only the layers below it.

    base       errors, tokens, textfiles, display   (import nothing of analysis/ but each other)
    families   the adapters and the step-by-step recompute
    model      catalogue, hub, checks, the loaded model
    run        tokenizing, the memory check, the forward and its capture
    measures   head scores, TL-style scores, lenses, ablation, scan, parity  │ peers: neither imports
    lessons    the hand-written GPT-2 attention, the calculator, the lab      │ the other
    export     writers, atomic folders, what an export holds

Every import of every module is read with ``ast`` (top level, inside functions, under TYPE_CHECKING: a
deferred import is still a dependency), so a cycle hidden by a late import fails here too."""
from __future__ import annotations

from pathlib import Path

from helpers import import_cycles, imports_of, layer_violations, package_modules

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "analysis"
#: bottom to top; a module may import its own package and the layers below (same-layer peers: no)
LAYERS = (
    ("analysis.errors", "analysis.tokens", "analysis.textfiles", "analysis.display"),
    ("analysis.families",),
    ("analysis.model",),
    ("analysis.run",),
    ("analysis.measures", "analysis.lessons"),
    ("analysis.export",),
)


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = package_modules(root, PACKAGE)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def unit_of(module: str) -> tuple[int, str] | None:
    """(layer, package) of an analysis module: the entry of LAYERS it is or lies in; None for analysis/__init__."""
    for level, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                return level, unit
    return None


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    """Every import of a module by one in a lower layer, or by a same-layer peer package."""
    return layer_violations(g, unit_of)


def test_every_module_has_a_layer():
    assert [m for m in graph() if m != PACKAGE and unit_of(m) is None] == []


def test_analysis_has_no_import_cycle():
    assert import_cycles(graph()) == []


def test_no_module_imports_a_layer_above_it_or_a_peer():
    assert upward_imports(graph()) == []


def test_the_checks_catch_a_planted_upward_import_and_cycle(tmp_path):
    """A copy of analysis/ with one deferred upward import planted in families/family.py: both checks fail."""
    import shutil

    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    base = tmp_path / PACKAGE / "families" / "family.py"
    base.write_text(base.read_text(encoding="utf-8") + "\n\ndef _planted():\n    from ..measures.parity import parity_report\n",
                    encoding="utf-8")
    g = graph(tmp_path)
    assert "analysis.families.family imports analysis.measures.parity" in upward_imports(g)
    assert any("analysis.measures.parity" in cycle and "analysis.families.family" in cycle for cycle in import_cycles(g))


def test_the_check_catches_a_peer_import(tmp_path):
    """lessons/ reaching into measures/ (same layer) fails; the base layer's files may use each other."""
    import shutil

    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    lab = tmp_path / PACKAGE / "lessons" / "lab.py"
    lab.write_text(lab.read_text(encoding="utf-8") + "\n\nfrom ..measures import lenses\n", encoding="utf-8")
    assert "analysis.lessons.lab imports analysis.measures.lenses" in upward_imports(graph(tmp_path))
