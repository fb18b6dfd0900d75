"""Shared fixtures: small GPT-2-config models and one tiny model of each family saved with save_pretrained (no
network anywhere), loaded and run once a session, a worker with the tiny model loaded, figures shown on screen,
widgets disposed at the end, a model load that fails the test. Shared helpers that are not fixtures:
tests/helpers.py."""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach for the network
if not os.environ.get("ATTNSCOPE_TEST_KEEP_CACHE"):  # converted GGUFs, files found: never the user's own cache
    import tempfile

    os.environ["ATTNSCOPE_CACHE"] = tempfile.mkdtemp(prefix="attnscope-test-cache-")
os.environ["ATTNSCOPE_SCAN_HOME"] = str(Path(__file__).parent / "no-home")  # the GGUF scan: never the user's files
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    from analysis.model.synthetic import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """3 layers × 4 heads × d 64, context 64, random weights."""
    from analysis.model.synthetic import save_random_gpt2

    return save_random_gpt2(tmp_path_factory.mktemp("tiny"), n_layer=3, n_head=4, d_model=64, n_positions=64,
                            tokenizer=tokenizer, seed=1)


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory) -> Path:
    """The tiny GPT-2's shape (3 layers × 4 heads × d 64, context 64, random weights) with an instruct model's
    tokenizer: ChatML's ``<|im_start|>`` and ``<|im_end|>`` as special tokens and helpers.CHATML as its chat
    template (saved as chat_template.jinja, as save_pretrained writes it)."""
    from analysis.model.synthetic import save_random_gpt2, tiny_tokenizer

    from helpers import CHATML

    chat_tokenizer = tiny_tokenizer()
    chat_tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    chat_tokenizer.chat_template = CHATML
    return save_random_gpt2(tmp_path_factory.mktemp("chat"), n_layer=3, n_head=4, d_model=64, n_positions=64,
                            tokenizer=chat_tokenizer, seed=1)


@pytest.fixture(scope="session")
def chat_model(chat_model_dir):
    from analysis.model.loading import load_model

    return load_model(str(chat_model_dir), device="cpu")


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from analysis.model.loading import load_model

    return load_model(str(tiny_model_dir), device="cpu")


@pytest.fixture(scope="session")
def tiny_result(tiny_model):
    from analysis.run.inference import run_text

    from helpers import TEXT

    return run_text(tiny_model, TEXT, bos=True)


@pytest.fixture(scope="session")
def family_folder(tmp_path_factory, tokenizer):
    """``family_folder(model_type)``: a tiny random model of that family (analysis.model.synthetic.
    save_random_family, seed 3; GPT-2 and GPT-NeoX with the session's byte-level tokenizer), saved once a session."""
    from analysis.model.synthetic import save_random_family

    root, saved = tmp_path_factory.mktemp("families"), {}

    def get(model_type: str) -> Path:
        if model_type not in saved:
            byte_level = tokenizer if model_type in ("gpt2", "gpt_neox") else None
            saved[model_type] = save_random_family(root / model_type, model_type, seed=3, tokenizer=byte_level)
        return saved[model_type]

    return get


@pytest.fixture(scope="session")
def family_run(family_folder):
    """``family_run(model_type)``: (its model through load_model, run_text of helpers.TEXT), once a session."""
    from analysis.model.loading import load_model
    from analysis.run.inference import run_text

    from helpers import TEXT

    runs = {}

    def get(model_type: str):
        if model_type not in runs:
            loaded = load_model(str(family_folder(model_type)), device="cpu")
            runs[model_type] = (loaded, run_text(loaded, TEXT))
        return runs[model_type]

    return get


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    """A real worker thread with the tiny model loaded through it, one per test module (loading costs seconds).
    A test that needs a fresh worker of its own takes ``loaded_worker``."""
    from helpers import worker_with

    w = worker_with(str(tiny_model_dir))
    yield w
    w.stop()


@pytest.fixture
def loaded_worker(qtbot, tiny_model):
    """A real worker thread holding the session's tiny model as after a load (no load through it: that costs
    seconds), one per test; stopped at the end. For tests that ask the worker for lenses or scores."""
    from gui.qt import ensure_qapp
    from gui.state.worker import Worker

    ensure_qapp()
    w = Worker()
    w._loaded = tiny_model
    yield w
    w.stop()


@pytest.fixture
def shown_figure(qtbot):
    """``shown_figure(make, width, height)``: ``make()``'s figure at that size, shown and exposed; disposed at the
    end (gui.plots.figures.dispose_figure, not qtbot's close: closing a pyqtgraph view crashes Qt 6.11)."""
    from gui.plots.figures import dispose_figure
    from gui.qt import ensure_qapp

    ensure_qapp()
    figures = []

    def show(make, width: int, height: int):
        fig = make()
        figures.append(fig)
        fig.resize(width, height)
        fig.show()
        qtbot.waitExposed(fig)
        return fig

    yield show
    for fig in figures:
        dispose_figure(fig)


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a model fails the test: whatever is checked must be checked before."""
    import analysis.model.loading

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(analysis.model.loading, "load_model", refuse)


@pytest.fixture
def disposed(qtbot):
    """Widgets holding pyqtgraph figures, disposed at the end (gui.plots.figures.dispose_figure), not closed by qtbot."""
    from gui.plots.figures import dispose_figure
    from gui.qt import ensure_qapp

    ensure_qapp()
    widgets = []
    yield widgets.append
    for widget in widgets:
        widget.hide()
        dispose_figure(widget) if hasattr(widget, "scene") else widget.deleteLater()
    qtbot.wait(10)


# ----------------------------------------------------------------------------- the window (tests/gui)
@pytest.fixture
def settings(tmp_path):
    from PySide6 import QtCore

    return QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)


@pytest.fixture(scope="module")
def shared_window(tmp_path_factory, tiny_model_dir):
    """One window for the module's tests (creating one costs seconds): each test gets it reset (``window``)."""
    from PySide6 import QtCore

    from gui.chrome.window import MainWindow
    from gui.qt import ensure_qapp

    ensure_qapp()
    settings = QtCore.QSettings(str(tmp_path_factory.mktemp("shared") / "settings.ini"),
                                QtCore.QSettings.Format.IniFormat)
    w = MainWindow(settings)
    w.resize(1400, 900)
    w.show()
    yield w
    w.close()
    w.deleteLater()


@pytest.fixture
def window(qtbot, shared_window, tiny_model_dir):
    """The shared window, reset to a fresh start on the tiny model."""
    from helpers import WAIT_MS

    from gui.export import exporting
    from gui.input import model_bar

    w = shared_window
    w.exporter.ask_overwrite, w.model_bar.ask = exporting.ask_overwrite, model_bar.ask
    bar = w.model_bar
    for index in reversed(range(bar.device_choice.count())):
        if bar.device_choice.itemText(index) not in ("auto", "cpu"):
            bar.device_choice.removeItem(index)
    bar.device_choice.setCurrentText("auto")
    if w.model_info is None or w.model_info.folder != str(tiny_model_dir):
        with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
            w.load_model(str(tiny_model_dir))
    w.text_input.auto_box.setChecked(True)
    w.settings.remove("texts/recent")
    w.text_input._refresh_recent_menu()
    w.text_input.set_bos(False)
    state = w.state
    state.set_colormap("viridis"), state.set_scale("linear"), state.set_hide_first(False), state.set_badge_score(None)
    state.set_rollout_skip_first(False)
    if state.result is not None:
        state.select(0, 0)
    w.tabs.setCurrentWidget(w.head_tab)
    w.error.hide(), w.note.hide()
    return w


@pytest.fixture
def text_input(qtbot, tmp_path):
    """The text input alone (its own view state and settings file), shown, Auto off."""
    from PySide6 import QtCore

    from gui.input.text_input import TextInput
    from gui.state.view_state import ViewState

    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    widget = TextInput(ViewState(), settings)
    qtbot.addWidget(widget)
    widget.auto_box.setChecked(False)
    widget.show()
    qtbot.waitExposed(widget)
    return widget
