"""The layers of gui/: no import cycle, and each part imports only the layers below it.

    base      qt (the QApplication), export/figure_files (a figure into a file)  (import nothing of gui/)
    state     the view state, the worker thread, jobs, the lenses on the worker  (imports no view)
    widgets   small generic widgets (focus ring, arrow keys, eliding labels)
    plots     the figures, the grid, the head map as the state says  │ peers: neither imports
    input     the model bar, the text box, the notes, the token limit │ the other
    tabs      one package per tab (gui/tabs/<name>/), each a peer of the others: no tab imports another;
              export (the export path and dialog) is their peer too: it imports no tab
    chrome    the window's assembly, layout, menus, status bar: the only part that assembles the tabs
    app       starting the app and its --screenshot

Every import of every module is read with ``ast`` (top level, inside functions, under TYPE_CHECKING), so a
cycle hidden by a late import fails here too. The graph is built as tests/analysis/test_layers.py builds
analysis/'s, except that a package (whose ``__init__.py`` holds only its docstring, checked here) is no
dependency of a module imported from it. A tab's unit is its own package (gui.tabs.head, gui.tabs.scores, …),
found from the folder, so a new tab needs no line here. The planted violations change one module of the real
graph (its file copied, the line appended) and check again."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

from helpers import import_cycles, imports_of, layer_violations, package_modules

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "gui"
TABS = "gui.tabs"
#: bottom to top; a module may import its own unit and the layers below (same-layer peers: no, but in the base)
LAYERS = (
    ("gui.qt", "gui.export.figure_files"),
    ("gui.state",),
    ("gui.widgets",),
    ("gui.plots", "gui.input"),
    (TABS, "gui.export"),
    ("gui.chrome",),
    ("gui.app",),
)


@functools.cache
def modules() -> dict[str, Path]:
    return package_modules(ROOT, PACKAGE)


def packages() -> set[str]:
    return {name for name, path in modules().items() if path.name == "__init__.py"}


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    known = modules()
    return {name: frozenset(imports_of(name, path, known, packages_count=False)) for name, path in known.items()}


def graph() -> dict[str, set[str]]:
    return {name: set(deps) for name, deps in _graph().items()}


def unit_of(module: str) -> tuple[int, str] | None:
    """(layer, unit) of a gui module: the entry of LAYERS it is or lies in, and under gui/tabs/ its tab's own
    package (gui.tabs.head) or module (gui.tabs.protocol); None for a package (its docstring only)."""
    if module in packages():
        return None
    for level, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                if unit == TABS:
                    unit = ".".join(module.split(".")[:3])
                return level, unit
    return None


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    """Every import of a module by one in a lower layer, or by a same-layer peer (the base layer's may)."""
    return layer_violations(g, unit_of)


def tab_importers(g: dict[str, set[str]]) -> list[str]:
    """Modules outside gui/tabs/ and chrome/ (and the app's start) that import a tab."""
    assemblers = ("gui.chrome", "gui.app")
    return [f"{m} imports {d}" for m in sorted(g) for d in sorted(g[m])
            if d.startswith(TABS + ".") and not m.startswith(TABS + ".")
            and not any(m == a or m.startswith(a + ".") for a in assemblers)]


def test_every_module_has_a_layer():
    assert [m for m in graph() if m not in packages() and unit_of(m) is None] == []


def test_every_package_holds_only_its_docstring():
    for name in sorted(packages()):
        body = ast.parse(modules()[name].read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), name


def test_gui_has_no_import_cycle():
    assert import_cycles(graph()) == []


def test_no_module_imports_a_layer_above_it_or_a_peer():
    """The state imports no view, plots and input import no tab, no tab imports another tab, export no tab."""
    assert upward_imports(graph()) == []


def test_only_the_chrome_assembles_the_tabs():
    assert tab_importers(graph()) == []


def planted(tmp_path: Path, *plants: tuple[str, str]) -> dict[str, set[str]]:
    """The real graph with each (module, line) planted: the module's file copied to ``tmp_path``, ``line``
    appended there inside a function (a deferred import), and its imports read again."""
    g, known = graph(), modules()
    for module, line in plants:
        copy = tmp_path / known[module].name
        copy.write_text(known[module].read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {line}\n",
                        encoding="utf-8")
        g[module] = imports_of(module, copy, known, packages_count=False)
    return g


def test_the_checks_catch_a_planted_view_import_in_the_state_and_its_cycle(tmp_path):
    """The view state reaching up to the Head tab (a deferred import): an upward import, a tab imported outside
    the chrome, and a cycle (the Head tab imports the view state)."""
    g = planted(tmp_path, ("gui.state.view_state", "from ..tabs.head.head_tab import HeadTab"))
    assert "gui.state.view_state imports gui.tabs.head.head_tab" in upward_imports(g)
    assert "gui.state.view_state imports gui.tabs.head.head_tab" in tab_importers(g)
    assert any("gui.state.view_state" in cycle and "gui.tabs.head.head_tab" in cycle for cycle in import_cycles(g))


def test_the_check_catches_a_tab_importing_another_tab(tmp_path):
    g = planted(tmp_path, ("gui.tabs.rollout.rollout_tab", "from ..head.head_tab import HeadTab"))
    assert upward_imports(g) == ["gui.tabs.rollout.rollout_tab imports gui.tabs.head.head_tab"]


def test_the_check_catches_plots_importing_a_tab_and_input_importing_plots(tmp_path):
    g = planted(tmp_path, ("gui.plots.grid_panel", "from ..tabs.head.head_tab import HeadTab"),
                ("gui.input.text_input", "from ..plots.figures import HeadPlot"))
    assert upward_imports(g) == ["gui.input.text_input imports gui.plots.figures",
                                 "gui.plots.grid_panel imports gui.tabs.head.head_tab"]
