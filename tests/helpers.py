"""Helpers the tests share, written once (the fixtures are in conftest.py): pointer input on figures, rich text
as the user reads it, waiting on the worker, holding a function at its n-th call, a result bundle as the
worker sends it, the command line run in this process, export folders, and a model folder's weights and config
read and edited. No test module imports another test module."""
from __future__ import annotations

import threading
from contextlib import contextmanager

WAIT_MS = 120_000  # the longest a test waits for the worker (a load or an analysis on a busy machine)
TEXT = "The cat sat on the mat because it was tired. The cat sat on the mat."
#: ChatML, the chat template of Qwen2.5-Instruct and SmolLM2-Instruct (without their default system turn): the
#: template of conftest's chat_model_dir.
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


# ----------------------------------------------------------------------------- figures and labels
def double_click(qtbot, widget, pos):
    """A real double-click: press, release, double-click, release (pyqtgraph sends its click on release)."""
    from PySide6 import QtCore

    left = QtCore.Qt.MouseButton.LeftButton
    qtbot.mousePress(widget, left, pos=pos)
    qtbot.mouseRelease(widget, left, pos=pos)
    qtbot.mouseDClick(widget, left, pos=pos)
    qtbot.mouseRelease(widget, left, pos=pos)


def view_point(fig, x, y):
    """The widget point of data point (x, y) of a figure's plot."""
    from PySide6 import QtCore

    return fig.mapFromScene(fig.plot.vb.mapViewToScene(QtCore.QPointF(x, y)))


def plain(rich) -> str:
    """Rich text (a string, or a widget's ``text()``) as the user reads it."""
    from PySide6 import QtGui

    doc = QtGui.QTextDocument()
    doc.setHtml(rich if isinstance(rich, str) else rich.text())
    return doc.toPlainText()


# ----------------------------------------------------------------------------- the worker
def analyse(qtbot, worker, text, bos=True):
    """The worker's AnalysisBundle for ``text``, waited for."""
    with qtbot.waitSignal(worker.analysis_ready, timeout=WAIT_MS) as blocker:
        worker.analyse(text, bos=bos)
    return blocker.args[0]


def worker_with(source: str):
    """A real worker thread with ``source`` loaded through it (on the CPU), for a module-scoped fixture: the caller
    yields it and calls ``stop()`` after."""
    from PySide6 import QtCore

    from gui.qt import ensure_qapp
    from gui.state.worker import Worker

    ensure_qapp()
    w = Worker()
    loaded = []
    w.model_loaded.connect(lambda *args: loaded.append(args))
    w.load(source, "cpu")
    deadline = QtCore.QDeadlineTimer(WAIT_MS)
    while not loaded and not deadline.hasExpired():
        QtCore.QCoreApplication.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
    assert loaded
    return w


@contextmanager
def worker_held(worker):
    """The worker busy on a task that waits: requests made meanwhile queue behind it."""
    go, started = threading.Event(), threading.Event()
    worker.submit("hold", lambda loaded: (started.set(), go.wait(30)))
    assert started.wait(10)
    try:
        yield
    finally:
        go.set()


def hold_at_call(monkeypatch, owner, name: str, n: int):
    """Patch ``owner.name`` so that its ``n``-th call sets ``reached`` and waits until the test sets ``go``
    (at most 30 s) before it runs; returns (calls, reached, go), ``calls`` one entry per call."""
    calls, reached, go = [], threading.Event(), threading.Event()
    original = getattr(owner, name)

    def held(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            reached.set()
            go.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, held)
    return calls, reached, go


def shown_tab(qtbot, tab_class, worker, width: int, height: int):
    """A tab (the protocol of gui/tabs/protocol.py) on a fresh ViewState (``tab.state``), shown at that size; qtbot
    closes it at the end."""
    from gui.qt import ensure_qapp
    from gui.state.view_state import ViewState

    ensure_qapp()
    tab = tab_class(ViewState(), worker)
    qtbot.addWidget(tab)
    tab.resize(width, height)
    tab.show()
    return tab


def bundle(result, scores=None, request_id: int = 1):
    """What the worker's ``analysis_ready`` carries, made here: ``result`` with its ``scores`` (None: none yet)."""
    from gui.state.worker import AnalysisBundle

    return AnalysisBundle(request_id, result, scores, 0.0)


def synthetic_scan(n_layer: int, n_head: int, n_texts: int = 3, seed: int = 0, label: str = "synthetic"):
    """A decoder's ``ScanResult`` of random scores (0 … 1) over ``n_texts`` texts, for a model of ``n_layer`` ×
    ``n_head`` heads (e.g. SmolLM2's 30 × 9) that no test needs to load."""
    import numpy as np

    from analysis.measures.head_scores import SCORE_NAMES, applicable_scores
    from analysis.measures.scan import ScanResult

    applicable = applicable_scores(True)
    per_text = np.random.default_rng(seed).random((n_texts, len(SCORE_NAMES), n_layer, n_head))
    per_text[:, [k for k, name in enumerate(SCORE_NAMES) if name not in applicable]] = np.nan
    return ScanResult(tuple(SCORE_NAMES), applicable, per_text, per_text.mean(axis=0), per_text.std(axis=0),
                      np.full(len(SCORE_NAMES), n_texts), (8,) * n_texts, (False,) * n_texts, False, 1, 0.5, label,
                      texts=("a text",) * n_texts, chars=(6,) * n_texts)


# ----------------------------------------------------------------------------- the command line
def run_main(capsys, *args):
    """``main.main`` in this process: (exit code, stdout, stderr)."""
    import main

    try:
        code = main.main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    """The one ``attnscope: error:`` line of ``err``; fails on a traceback, colour codes or "unexpected"."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnscope: error:"), err
    assert "Traceback" not in err and "\x1b" not in err and "unexpected" not in err.lower()
    return lines[0]


# ----------------------------------------------------------------------------- export folders
def folder_files(folder):
    """Every file under ``folder`` (hidden ones too) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def hidden_leftovers(parent):
    """The hidden names an export may leave beside its folder (staging, moved-aside, lock)."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".attnscope"))


def folder_writer(files: dict):
    """A folder writer for ``write_folder_atomically``: {relative name: text}."""
    def write(folder):
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
    return write


# ----------------------------------------------------------------------------- model folders
def tensors(folder):
    """The tensors of ``folder``'s model.safetensors, by name."""
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def save(folder, state):
    """Write ``state`` (name → tensor) as ``folder``'s model.safetensors."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors")


def edit_config(folder, **changes):
    """Change fields of ``folder``'s config.json."""
    import json

    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def make_window(qtbot, settings, model_dir):
    """A shown main window with its own ``settings``, ``model_dir`` loaded."""
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    ensure_qapp()
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(model_dir))
    return window


def exporter_on(qtbot, worker, settings, shown, layer: int, head: int):
    """(an Exporter on a state of its own showing the bundle ``shown`` with head ``layer``.``head`` selected, the
    list its ``failed`` messages go to): the window's export path without a window."""
    from PySide6 import QtWidgets

    from gui.export.exporting import Exporter
    from gui.state.view_state import ViewState

    state = ViewState()
    state.set_bundle(shown)
    state.select(layer, head)
    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    exporter = Exporter(state, worker, settings, parent)
    failed = []
    exporter.failed.connect(failed.append)
    return exporter, failed


def run(qtbot, window, text, bos=False):
    """Run ``text`` in ``window`` (BOS as given) and return the result once it is on screen."""
    window.text_input.set_bos(bos)
    window.set_text(text)
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        window.run_text()
    return window.bundle.result


# ----------------------------------------------------------------------------- the import graph (the layer tests)
def package_modules(root, package: str) -> dict:
    """Every module of ``package`` under ``root`` by dotted name (a package by its own name) → its file."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path, known: dict, packages_count: bool = True) -> set:
    """The modules of ``known`` that module ``name`` (file ``path``) imports, anywhere in its file: top level,
    inside functions, under TYPE_CHECKING (read with ``ast``: a deferred import is still a dependency).
    Importing ``a.b.c`` from outside ``a.b`` also runs ``a.b``'s ``__init__``: with ``packages_count`` the
    packages on the way down count as imported too; without, a package (its docstring only) is no dependency."""
    import ast

    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set = set()
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
        for k in range(1, len(parts) + 1):
            dep = ".".join(parts[:k])
            inside = name == dep or name.startswith(dep + ".")  # a submodule does not "import" its own package
            if dep in known and not inside and (packages_count or known[dep].name != "__init__.py"):
                deps.add(dep)
    return deps


def import_cycles(g: dict) -> list:
    """Every cycle a depth-first walk of the import graph ``g`` (module → the modules it imports) meets."""
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


def layer_violations(g: dict, unit_of) -> list:
    """Every import in ``g`` of a module by one in a lower layer, or by a same-layer peer (the base layer's, layer
    0, may import each other). ``unit_of(module)`` is (layer, unit) or None (a module outside the table)."""
    bad = []
    for m in sorted(g):
        here = unit_of(m)
        for d in sorted(g[m]):
            there = unit_of(d)
            if here is None or there is None or here[1] == there[1]:
                continue
            if there[0] > here[0] or (there[0] == here[0] and here[0] > 0):
                bad.append(f"{m} imports {d}")
    return bad

