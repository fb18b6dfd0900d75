"""Run → Token limit: the menu shows the limit that applies, a new cap applies to the result on screen (run again
with Auto on, a note with Auto off), the dialog accepts no cap without room for a token of text beside the
model's special tokens, and its text holds whatever number is typed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from helpers import WAIT_MS  # noqa: E402

LONG_TEXT = " ".join(["the cat sat on the mat"] * 6)  # more tokens than the caps below


def settings_in(tmp_path) -> QtCore.QSettings:
    return QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)


# ----------------------------------------------------------------------------- the dialog
@pytest.fixture(scope="module")
def family_models(tmp_path_factory, tokenizer):
    """Every family's tiny random model, loaded (analysis.model.synthetic), by model type."""
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    root = tmp_path_factory.mktemp("families")
    cache = {}

    def get(model_type):
        if model_type not in cache:
            folder = save_random_family(root / model_type, model_type, seed=3,
                                        tokenizer=tokenizer if model_type in ("gpt2", "gpt_neox") else None)
            cache[model_type] = load_model(str(folder), device="cpu")
        return cache[model_type]

    return get


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "qwen2", "mistral", "gpt_neox", "bert", "distilbert"])
def test_the_dialogs_minimum_leaves_exactly_one_text_token_beside_the_special_tokens(qtbot, tmp_path, family_models,
                                                                                    model_type):
    from analysis.errors import InputError
    from analysis.run.tokenize import tokenize
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    loaded = family_models(model_type)
    limit = TokenLimit(settings_in(tmp_path), QtGui.QAction())
    limit.set_context(loaded.info)
    minimum = limit.minimum()
    dialog = limit.dialog(None)
    qtbot.addWidget(dialog)
    assert dialog.intMinimum() == minimum
    # the engine itself says what fits: at the minimum, one token of text; one fewer, none (was: 1 accepted)
    ids, _n_text, truncated = tokenize(loaded, LONG_TEXT, True, minimum)
    assert truncated and len(ids) - len(loaded.special_ids([], special=True)) == 1
    if minimum > 1:
        with pytest.raises(InputError):
            tokenize(loaded, LONG_TEXT, True, minimum - 1)


def test_before_a_model_the_dialog_asks_for_at_least_two_tokens(qtbot, tmp_path):
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    limit = TokenLimit(settings_in(tmp_path), QtGui.QAction())
    limit.set(1)  # an old setting below the minimum: the dialog starts at the minimum
    dialog = limit.dialog(None)
    qtbot.addWidget(dialog)
    assert (dialog.intMinimum(), dialog.intValue()) == (2, 2)


@pytest.mark.parametrize("cap", [10, 100, 5000])
def test_the_dialog_text_is_true_for_whatever_is_typed(qtbot, tmp_path, cap):
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    limit = TokenLimit(settings_in(tmp_path), QtGui.QAction())
    limit.set(cap)
    limit.set_context(SimpleNamespace(context_length=256, bos_token="<|endoftext|>", causal=True,
                                      n_special=1))  # a ModelInfo (BOS in front)
    dialog = limit.dialog(None)
    qtbot.addWidget(dialog)
    text = dialog.labelText()
    assert dialog.intValue() == cap
    # it names the model's context and the rule, not a number that only the cap saved now gives
    assert "context holds 256 tokens" in text and "the smaller of the two" in text
    assert f"{cap:,}" not in text  # was: "so a run analyses at most 10", the cap saved before typing
    assert "At least 2: room for the model's 1 special token (BOS on)" in text  # singular, not "1 special tokens"


def test_the_dialog_saves_what_is_typed_and_nothing_when_cancelled(qtbot, tmp_path):
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    limit = TokenLimit(settings_in(tmp_path), QtGui.QAction())
    changes = []
    limit.changed.connect(changes.append)

    def answer(value, accept):
        def act():
            dialog = QtWidgets.QApplication.activeModalWidget()
            dialog.setIntValue(value)
            dialog.accept() if accept else dialog.reject()
        QtCore.QTimer.singleShot(0, act)

    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    answer(40, accept=True)
    limit.ask(parent)
    assert limit.value() == 40 and changes == [40]
    answer(7, accept=False)
    limit.ask(parent)
    assert limit.value() == 40 and changes == [40]
    limit.set(40)  # the same cap again: no change to announce
    assert changes == [40]


def test_a_launch_cap_holds_for_the_session_only_and_the_dialog_replaces_it(qtbot, tmp_path):
    """main.py --max-tokens N: the cap for this session, said in the menu, never saved; a cap set in the dialog
    afterwards is saved and replaces it."""
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    settings = settings_in(tmp_path)
    limit = TokenLimit(settings, QtGui.QAction())
    limit.set(300)
    changes = []
    limit.changed.connect(changes.append)
    limit.use_for_session(8192)
    assert limit.value() == 8192 and limit.applies() == 8192 and changes == [8192]
    assert "--max-tokens" in limit.action.text() and "8,192" in limit.action.text()
    assert int(settings.value("run/max_tokens")) == 300  # not saved
    assert TokenLimit(settings, QtGui.QAction()).value() == 300  # the next launch has the saved cap
    limit.set(500)
    assert limit.value() == 500 and int(settings.value("run/max_tokens")) == 500 and changes == [8192, 500]
    assert "--max-tokens" not in limit.action.text()
    with pytest.raises(ValueError):
        limit.use_for_session(0)


@pytest.mark.slow
def test_the_launch_option_caps_the_first_run(qtbot, tmp_path, tiny_model_dir):
    """start() with --max-tokens: the text of the launch runs cut at that many tokens."""
    import argparse

    from gui.qt import ensure_qapp
    from gui.app import start
    from gui.chrome.window import MainWindow

    ensure_qapp()
    w = MainWindow(settings_in(tmp_path))
    qtbot.addWidget(w)
    args = argparse.Namespace(model=str(tiny_model_dir), device="cpu", text=LONG_TEXT, select=None, chat=False,
                              max_tokens=9)
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        start(w, args, None, None, leave=lambda code: None, status={"code": 0})
    assert w.state.result.n_tokens == 9 and w.state.result.truncated
    assert int(w.settings.value("run/max_tokens", 2048)) != 9


# ----------------------------------------------------------------------------- the result on screen
@pytest.fixture
def window(qtbot, tmp_path, tiny_model_dir):
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    ensure_qapp()
    w = MainWindow(settings_in(tmp_path))
    qtbot.addWidget(w)
    w.resize(1366, 740)
    w.show()
    with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
        w.load_model(str(tiny_model_dir))
    w.set_text(LONG_TEXT)
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        w.run_text()
    return w


@pytest.mark.slow  # a whole window with a model loaded (~0.9 s)
def test_with_auto_on_a_new_cap_runs_the_text_again(qtbot, window):
    before = window.bundle.result
    assert before.n_tokens > 10 and window.text_input.auto_box.isChecked()
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        window.set_max_tokens(10)  # was: the old result stayed up until Ctrl+Enter
    r = window.bundle.result
    assert (r.n_tokens, r.truncated, r.max_tokens, r.text) == (10, True, 10, LONG_TEXT)
    assert not window.cap_note.isVisible()


@pytest.mark.slow  # a whole window with a model loaded (~0.9 s)
def test_with_auto_off_a_new_cap_says_the_result_was_analysed_under_the_old_one(qtbot, window):
    window.text_input.auto_box.setChecked(False)
    old = window.bundle.result
    sent = []
    window.worker.analysis_started.connect(sent.append)
    window.set_max_tokens(10)
    qtbot.wait(200)
    assert sent == [] and window.bundle.result is old  # nothing ran …
    assert window.cap_note.isVisible()  # … and the screen says so
    assert (f"old token limit of {old.max_tokens:,} tokens" in window.cap_note.text()
            and "the limit is now 10." in window.cap_note.text())
    window.set_max_tokens(4096)  # back above what the result used and it was not cut: it is current again
    assert old.n_tokens <= window.token_limit.applies() and not old.truncated
    assert not window.cap_note.isVisible()
    window.set_max_tokens(10)
    run_again, = window.cap_note.action_buttons()
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        qtbot.mouseClick(run_again, QtCore.Qt.MouseButton.LeftButton)
    assert window.bundle.result.n_tokens == 10 and not window.cap_note.isVisible()


@pytest.mark.slow  # a whole window with a model loaded (~0.9 s)
def test_a_cap_that_does_not_change_the_result_runs_nothing(qtbot, window):
    r = window.bundle.result
    assert not r.truncated
    sent = []
    window.worker.analysis_started.connect(sent.append)
    window.set_max_tokens(r.n_tokens)  # everything still fits
    qtbot.wait(200)
    assert sent == [] and window.bundle.result is r and not window.cap_note.isVisible()


@pytest.mark.parametrize("n_tokens,truncated,ran_under,applies,same", [
    (35, False, 256, 10, False),  # fewer tokens now fit
    (35, False, 256, 35, True),  # all still fit
    (35, False, 256, 1000, True),
    (10, True, 10, 10, True),  # cut at the same limit
    (10, True, 10, 20, False),  # cut, and more would fit now
    (10, True, 10, 5, False),
])
def test_analysed_as_now(n_tokens, truncated, ran_under, applies, same):
    from gui.chrome.window import analysed_as_now

    result = SimpleNamespace(n_tokens=n_tokens, truncated=truncated, max_tokens=ran_under)
    assert analysed_as_now(result, applies) is same


@pytest.mark.parametrize("cap,context", [(2048, 256), (2048, 4096), (100, 256), (256, 256)])
def test_the_token_limit_shows_the_limit_that_applies(qtbot, tmp_path, cap, context):
    from analysis.run.tokenize import token_limit
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    action = QtGui.QAction()
    limit = TokenLimit(settings, action)
    limit.set(cap)
    assert action.text() == f"Token limit ({cap:,})…"  # no model yet: the cap
    limit.set_context(SimpleNamespace(context_length=context, bos_token="<|endoftext|>", causal=True,
                                      n_special=1))  # a ModelInfo (BOS in front)
    applies = token_limit(SimpleNamespace(context_length=context), cap)  # what a run analyses
    assert limit.applies() == applies
    assert action.text().startswith(f"Token limit ({applies:,}")
    if context < cap:
        assert action.text() == f"Token limit ({context:,}: the model's context; your cap {cap:,})…"
    else:
        assert action.text() == f"Token limit ({cap:,})…"
    assert f"({cap:,})" in action.toolTip() and f"({context:,})" in action.toolTip()
