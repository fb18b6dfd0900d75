"""The app's *Chat format* switch: held in the view state and remembered, sent with each run (the worker runs the
text as one user turn of the model's chat template), disabled with the reason as its tooltip while the loaded model
has no chat template, BOS disabled while it is used; the strip shows the template's tokens; ``--chat`` at launch."""
import argparse

import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import WAIT_MS, make_window, run  # noqa: E402

TEXT = "The cat sat on the mat"


def template_ids(loaded, text):
    return loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)


# ----------------------------------------------------------------------------- the view state
def test_the_switch_is_validated_saved_and_emits_only_on_a_change(tmp_path):
    from gui.state.view_state import ViewState

    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    state = ViewState(settings)
    assert state.chat is False and state.chat_problem is None and not state.chat_used
    seen, problems = [], []
    state.chat_changed.connect(seen.append)
    state.chat_problem_changed.connect(problems.append)
    state.set_chat(True)
    state.set_chat(True)
    assert seen == [True] and state.chat_used
    state.set_chat_problem("The model x has no chat template.")
    state.set_chat_problem("The model x has no chat template.")
    assert problems == ["The model x has no chat template."] and state.chat and not state.chat_used
    state.set_chat_problem(None)
    assert problems[-1] is None and state.chat_used
    state.save_settings()
    assert settings.value("view/chat") == "true" and ViewState(settings).chat is True
    settings.setValue("view/chat", "nonsense")
    assert ViewState(settings).chat is False


# ----------------------------------------------------------------------------- the run row
def test_the_box_writes_the_state_and_runs_and_bos_gives_way(qtbot, text_input):
    state, box, bos = text_input.state, text_input.chat_box, text_input.bos_box
    text_input.set_text(TEXT)
    asked = []
    text_input.run_requested.connect(lambda *args: asked.append(args))
    assert box.isEnabled() and not box.isChecked() and bos.isEnabled()
    qtbot.mouseClick(box, QtCore.Qt.MouseButton.LeftButton)
    assert state.chat is True and asked == [(TEXT, bos.isChecked(), False)]  # a toggle runs, as BOS does
    assert not bos.isEnabled() and "chat template decides the special tokens" in bos.toolTip()
    state.set_chat(False)  # the state is what the box shows
    assert not box.isChecked() and bos.isEnabled() and len(asked) == 1


def test_the_box_is_disabled_with_the_reason_while_the_model_has_no_template(text_input):
    state, box = text_input.state, text_input.chat_box
    state.set_chat(True)
    state.set_chat_problem("The model /m has no chat template.")
    assert not box.isEnabled() and box.isChecked() and box.toolTip() == "The model /m has no chat template."
    assert text_input.bos_box.isEnabled()  # the chat format is not used: BOS is the user's again
    state.set_chat_problem(None)
    assert box.isEnabled() and "one user turn of the model's chat template" in box.toolTip()


# ----------------------------------------------------------------------------- the worker
def test_the_worker_says_whether_a_model_has_a_chat_format_before_it_says_loaded(qtbot, chat_model_dir,
                                                                                  tiny_model_dir, chat_model):
    from gui.qt import ensure_qapp
    from gui.state.worker import Worker

    ensure_qapp()
    worker = Worker()
    heard = []
    worker.chat_format_checked.connect(lambda rid, problem: heard.append(("chat", rid, problem)))
    worker.model_loaded.connect(lambda rid, _info: heard.append(("loaded", rid)))
    try:
        for folder in (tiny_model_dir, chat_model_dir):
            with qtbot.waitSignal(worker.model_loaded, timeout=WAIT_MS):
                rid = worker.load(str(folder), "cpu")
            assert heard[-2:][1] == ("loaded", rid) and heard[-2][:2] == ("chat", rid)
        assert heard[0][2] == f"The model {tiny_model_dir} has no chat template." and heard[2][2] is None
        with qtbot.waitSignal(worker.analysis_ready, timeout=WAIT_MS) as ready:
            worker.analyse(TEXT, bos=True, chat=True)
        result = ready.args[0].result
        assert result.chat and result.token_ids.tolist() == template_ids(chat_model, TEXT)
    finally:
        worker.stop()


# ----------------------------------------------------------------------------- the window
@pytest.mark.slow  # two model loads and four runs in a window (~4 s)
def test_the_window_runs_the_chat_format_and_the_strip_shows_the_template(qtbot, settings, chat_model_dir,
                                                                          tiny_model_dir, chat_model):
    from gui.chrome.focus_order import takes_tab

    window = make_window(qtbot, settings, chat_model_dir)
    text_input, strip = window.text_input, window.text_input.token_strip
    text_input.auto_box.setChecked(False)
    assert text_input.chat_box.isEnabled()
    assert run(qtbot, window, TEXT).chat is False
    text_input.set_text(TEXT)
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        qtbot.mouseClick(text_input.chat_box, QtCore.Qt.MouseButton.LeftButton)
    result = window.bundle.result
    assert result.chat and result.token_ids.tolist() == template_ids(chat_model, TEXT)
    labels = [strip.label(i).split("\n", 1)[1] for i in range(strip.count())]
    assert labels == list(result.tokens) and labels[0] == "<|im_start|>" and "<|im_end|>" in labels
    assert labels.count("\u21b5") == 3  # the newlines of the template (after user, after <|im_end|>, after assistant)
    assert not text_input.bos_box.isEnabled()

    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))  # no chat template: the switch stays on but cannot be used
    qtbot.waitUntil(lambda: window.bundle is not None and window.bundle.result.model_label == str(tiny_model_dir),
                    timeout=WAIT_MS)
    assert window.state.chat and not text_input.chat_box.isEnabled()
    assert text_input.chat_box.toolTip() == f"The model {tiny_model_dir} has no chat template."
    assert not takes_tab(text_input.chat_box, window)  # Tab skips the disabled switch
    assert window.bundle.result.chat is False and text_input.bos_box.isEnabled()
    window.close()
    assert settings.value("view/chat") == "true"  # remembered for the next model that has a template


@pytest.mark.slow  # a window and a model load (~1.5 s)
def test_chat_at_launch_on_a_model_without_a_template_says_so(qtbot, settings, tiny_model_dir):
    from gui import app as app_module
    from gui.chrome.window import MainWindow

    window = MainWindow(settings)
    qtbot.addWidget(window)
    args = argparse.Namespace(model=str(tiny_model_dir), device="cpu", text=TEXT, chat=True)
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as shown:
        app_module.start(window, args, None, None, lambda code: None, {"code": 0})
    assert shown.args[0] == (f"--chat: The model {tiny_model_dir} has no chat template. The text ran without the "
                             "chat format.")
    assert window.state.chat and window.bundle.result.chat is False
    window.close()


# ----------------------------------------------------------------------------- the tabs that run the text again
@pytest.fixture
def chat_worker(qtbot, chat_model):
    """A real worker thread holding the session's chat model as after a load."""
    from gui.qt import ensure_qapp
    from gui.state.worker import Worker

    ensure_qapp()
    worker = Worker()
    worker._loaded = chat_model
    yield worker
    worker.stop()


def chat_bundle(qtbot, worker, text):
    with qtbot.waitSignal(worker.analysis_ready, timeout=WAIT_MS) as ready:
        worker.analyse(text, bos=None, chat=True)
    return ready.args[0]


def test_the_ablation_tab_ablates_the_chat_run_of_the_text_on_screen(qtbot, chat_worker, chat_model):
    from analysis.measures.ablation import ablate
    from gui.tabs.ablation.ablation_tab import AblationTab
    from helpers import shown_tab

    tab = shown_tab(qtbot, AblationTab, chat_worker, 1100, 600)
    tab.state.set_bundle(chat_bundle(qtbot, chat_worker, TEXT))
    tab.heads_edit.setText("1.2")
    with qtbot.waitSignal(tab.ablation_shown, timeout=WAIT_MS) as shown:
        tab.ablate()
    expected, plain = ablate(chat_model, TEXT, [(1, 2)], chat=True), ablate(chat_model, TEXT, [(1, 2)])
    assert shown.args[0].n_tokens == len(template_ids(chat_model, TEXT)) == expected.n_tokens
    assert shown.args[0].baseline.loss == pytest.approx(expected.baseline.loss, abs=1e-9)
    assert shown.args[0].baseline.loss != pytest.approx(plain.baseline.loss, abs=1e-9)


def test_a_scan_from_the_scores_tab_wraps_each_text_as_the_text_on_screen(qtbot, chat_worker, chat_model, tmp_path):
    from analysis.measures.scan import scan_texts
    from gui.tabs.scores.scores_tab import ScoresTab
    from helpers import shown_tab

    texts = ["The cat sat on the mat", "Hello world"]
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    tab = shown_tab(qtbot, ScoresTab, chat_worker, 1000, 600)
    tab.state.set_bundle(chat_bundle(qtbot, chat_worker, TEXT))
    dialog = tab.open_scan_dialog()
    assert dialog.chat and "chat template" in dialog.bos_label.text()
    dialog.set_path(str(path))
    with qtbot.waitSignal(dialog.scan_ready, timeout=WAIT_MS) as ready:
        dialog.start()
    scan = ready.args[0]
    assert scan.chat and scan.n_tokens == tuple(len(template_ids(chat_model, t)) for t in texts)
    assert scan.n_tokens == scan_texts(chat_model, texts, chat=True).n_tokens
    import shiboken6

    # a finished scan closes its dialog (deleted on close, once events run: when depends on the machine's load)
    assert not shiboken6.isValid(dialog) or not dialog.isVisible()
