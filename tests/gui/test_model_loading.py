"""Loading models in the window, offscreen with a small test model: failed loads keep the previous model,
the Model list (what is downloaded, families, sizes, minilm), the offline GPT-2 download, the loading state
and the bundled model's notes."""
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import WAIT_MS, make_window, run, worker_held  # noqa: E402


def test_failed_loads_keep_the_previous_model_and_offer_load_anyway(qtbot, window, tmp_path, tokenizer):
    info = window.model_info
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.load_model(str(tmp_path / "missing-model"))
    assert "not found" in blocker.args[0] and "Still using" in blocker.args[0]
    assert window.model_info is info
    assert run(qtbot, window, "still works").text == "still works"
    assert not window.error.isVisible()  # a later successful run clears the banner
    # pickle weights: refused, then loaded after the explicit opt-in button
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "pickle", tokenizer=tokenizer, safetensors=False)
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.load_model(str(folder))
    assert "pickle" in blocker.args[0]
    buttons = [b for b in window.error.action_buttons() if "Load anyway" in b.text()]
    assert buttons
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        buttons[0].click()
    assert window.model_info.n_layer == 2 and not window.error.isVisible()


def test_a_folder_that_is_not_a_model_is_not_added_to_the_model_list(qtbot, window, tmp_path):
    choice = window.model_bar.model_choice
    before = [choice.itemData(i) for i in range(choice.count())]
    (tmp_path / "notes").mkdir()
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS):
        window.load_model(str(tmp_path / "notes"))
    assert [choice.itemData(i) for i in range(choice.count())] == before
    assert choice.currentData() == window.model_bar.loaded_source


def test_model_list_says_what_is_downloaded_and_asks_before_a_download(qtbot, window):
    from analysis.model.hub import is_cached

    choice, bar = window.model_bar.model_choice, window.model_bar
    labels = {choice.itemData(i): choice.itemText(i) for i in range(choice.count())}
    for name, size in (("gpt2", "124 M"), ("distilgpt2", "82 M"), ("gpt2-medium", "355 M"), ("gpt2-large", "774 M"),
                       ("gpt2-xl", "1.5 B")):
        assert size in labels[name] and ("not downloaded" in labels[name]) == (not is_cached(name))
    uncached = next(name for name in ("gpt2-xl", "gpt2-large") if not is_cached(name))
    asked = []
    bar.ask = lambda _parent, _title, text: asked.append(text) or False
    load_id = window.latest_load_id
    bar.model_choice.setCurrentIndex(choice.findData(uncached))
    bar._model_chosen(choice.findData(uncached))
    assert asked and uncached in asked[0] and window.latest_load_id == load_id  # declined: nothing loads
    assert choice.currentData() == bar.loaded_source
    bar.device_choice.addItem("cuda:9")
    bar.device_choice.setCurrentText("cuda:9")
    assert "Load" in bar.progress_label.text()


def test_offline_gpt2_download_says_what_to_do_and_offers_retry(qtbot, window):
    """HF_HUB_OFFLINE is set for the tests: the download fails fast, the model stays, Retry is offered."""
    from analysis.model.hub import is_cached
    from gui.chrome.downloads import offer_gpt2_download

    if is_cached("gpt2"):
        pytest.skip("GPT-2 is in this machine's cache")
    info = window.model_info
    assert window.download_action.isVisible()
    offer_gpt2_download(window)
    assert window.note.isVisible() and "not downloaded yet" in window.note.text()
    assert "4-layer × 4-head" in window.note.text()
    button = [b for b in window.note.action_buttons() if b.text() == "Download GPT-2"][0]
    with qtbot.waitSignal(window.error_shown, timeout=30_000) as blocker:
        button.click()
    message = blocker.args[0]
    assert "&#" not in window.error.label.text() and "--" not in message  # plain text, no command-line flags
    assert window.model_info is info and window.model_bar.model_choice.currentData() == str(info.folder)
    assert [b.text() for b in window.error.action_buttons()] == ["Retry"]
    assert window.download_action.isVisible()


@pytest.mark.slow
def test_bundled_model_is_explained_in_the_status_bar(qtbot, settings):
    w = make_window(qtbot, settings, "bundled")
    assert "4,096-token vocabulary" in w.status_model.toolTip() and "256-token context" in w.status_model.toolTip()
    w.close()


def test_model_list_is_grouped_by_family_with_sizes_and_explains_minilm(qtbot, window, monkeypatch):
    """Headers per family, a size for every entry (never "? params"), a minilm entry that says how to install it."""
    from analysis.model.catalogue import HUB_MODEL_TABLE, MINILM_MISSING
    from gui.input import model_bar

    bar = window.model_bar
    choice = bar.model_choice
    texts = [choice.itemText(i) for i in range(choice.count())]
    assert not any("?" in t for t in texts)
    headers = [choice.itemText(i) for i in range(choice.count())
               if choice.itemData(i) is None and choice.model().item(i).font().bold()]
    assert headers == ["GPT-2", "Llama-style decoder", "GPT-NeoX", "BERT-style encoder", model_bar.GGUF_GROUP]
    for i in range(choice.count()):
        if choice.itemData(i) is None and choice.itemText(i):
            assert not choice.model().item(i).isEnabled()  # a header cannot be chosen
    for model in HUB_MODEL_TABLE:
        index = choice.findData(model.name)
        header = max(i for i in range(index) if choice.itemText(i) in headers)
        assert choice.itemText(header) == model.group and f"{model.parameters} params" in choice.itemText(index)
    assert "BERT" in choice.itemText(max(i for i in range(choice.findData("minilm")) if choice.itemText(i) in headers))
    monkeypatch.setattr(model_bar, "minilm_installed", lambda: False)
    bar.refresh_cached()
    index = choice.findData("minilm")
    assert "make minilm" in choice.itemText(index)
    assert choice.itemData(index, QtCore.Qt.ItemDataRole.ToolTipRole) == MINILM_MISSING
    told, load_id = [], window.latest_load_id
    bar.ask = lambda _parent, title, text, info=False: told.append((text, info)) or True
    bar._model_chosen(index)
    assert told == [(MINILM_MISSING, True)] and window.latest_load_id == load_id  # explained, nothing loads
    assert choice.currentData() == bar.loaded_source
    monkeypatch.undo()
    bar.refresh_cached()


def test_smollm2_is_first_among_the_llama_style_decoders_and_says_how_to_install_it(qtbot, window, monkeypatch):
    from analysis.model.catalogue import SMOLLM2_MISSING
    from gui.input import model_bar

    bar, choice = window.model_bar, window.model_bar.model_choice
    index = choice.findData("smollm2")
    assert choice.itemText(index - 1) == "Llama-style decoder"
    monkeypatch.setattr(model_bar, "smollm2_installed", lambda: True)
    bar.refresh_cached()
    assert choice.itemText(index) == "smollm2 · SmolLM2-135M-Instruct (offline) · 135 M params · installed"
    assert "dequantized to float32" in choice.itemData(index, QtCore.Qt.ItemDataRole.ToolTipRole)
    monkeypatch.setattr(model_bar, "smollm2_installed", lambda: False)
    bar.refresh_cached()
    assert "make smollm2" in choice.itemText(index)
    told, load_id = [], window.latest_load_id
    bar.ask = lambda _parent, title, text, info=False: told.append((text, info)) or True
    bar._model_chosen(index)
    assert told == [(SMOLLM2_MISSING, True)] and window.latest_load_id == load_id  # explained, nothing loads
    monkeypatch.undo()
    bar.refresh_cached()


@pytest.mark.slow
def test_loading_says_so_and_a_run_says_what_its_attention_takes(qtbot, settings, tiny_model_dir):
    """"loading …" in the status bar and over the grid instead of empty axes; the token line
    says what the attention takes (layers × heads × tokens² × 4 bytes); the token cap is a setting."""
    from gui.qt import ensure_qapp
    from gui.chrome.window import LOADING_NOTE, MainWindow
    from analysis.display import format_bytes

    ensure_qapp()
    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
        w.load_model(str(tiny_model_dir))
        assert w.status_model.text() == f"loading {tiny_model_dir.name}…"
        assert w.grid_panel.stack.currentWidget() is w.grid_panel.placeholder
        assert w.grid_panel.placeholder.text() == LOADING_NOTE == w.state.placeholder
    sized = []
    w.worker.analysis_sized.connect(lambda rid, n, size: sized.append((n, size)))
    w.set_text("The cat sat on the mat")
    assert w.grid_panel.placeholder.text() == "Type a text to see its attention"
    with worker_held(w.worker):  # the first run, nothing on screen yet: the empty grid says what is coming
        w.run_text()
        assert w.grid_panel.stack.currentWidget() is w.grid_panel.placeholder
        assert w.grid_panel.placeholder.text().startswith("running the text")
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        pass
    r = w.bundle.result
    assert w.grid_panel.stack.currentWidget() is w.grid_panel.plot and w.state.placeholder is None
    need = 3 * 4 * r.n_tokens ** 2 * 4  # float32 (layer, head, query, key) of the tiny model
    (n, plan), = sized
    assert n == r.n_tokens and plan.keeps_maps and plan.need_bytes == need == r.attentions.nbytes
    assert w.status_tokens.text() == f"{r.n_tokens} tokens · attention {format_bytes(need)}"
    assert format_bytes(604 * 2**20) == "604.00 MiB" and format_bytes(1.25 * 2**30) == "1.25 GiB"
    assert w.max_tokens_action.text() == "Token limit (64: the model's context; your cap 2,048)…"  # what applies
    w.set_max_tokens(4)
    assert "(4)" in w.max_tokens_action.text()
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        w.run_text()
    assert w.bundle.result.n_tokens == 4 and w.bundle.result.truncated
    assert "truncated" in w.status_tokens.text() and "Token limit" in w.status_tokens.toolTip()
    w.close()


@pytest.mark.slow
def test_the_bundled_models_note_goes_when_another_model_is_loaded(qtbot, settings, tiny_model_dir):
    """The note about the bundled model ("Using the bundled model, a 4-layer × 4-head …") goes when another
    model is loaded; a note about the model being loaded stays."""
    from gui.chrome.downloads import offer_gpt2_download

    window = make_window(qtbot, settings, tiny_model_dir)  # its own window: loads twice

    offer_gpt2_download(window, about=str(tiny_model_dir))  # a note about the model being loaded stays
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
    assert window.note.isVisible()
    offer_gpt2_download(window)  # about the bundled model
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
    assert not window.note.isVisible()
    window.close()


def test_open_folder_and_about_name_every_family_not_gpt2_alone(qtbot, window, monkeypatch):
    """The folder chooser's title names the models of every family it opens, the GGUF chooser every architecture,
    and About names each family AttnScope reads."""
    from PySide6 import QtWidgets

    from analysis.families import FAMILIES
    from gui.chrome.help import ABOUT

    from analysis.model.gguf_file import ARCHITECTURES

    titles = []
    monkeypatch.setattr(QtWidgets.QFileDialog, "getExistingDirectory", lambda parent, title, *a: titles.append(title) or "")
    monkeypatch.setattr(QtWidgets.QFileDialog, "getOpenFileName",
                        lambda parent, title, *a: titles.append(title) or ("", ""))
    window.open_folder()
    window.model_files.open_gguf_file()
    folder, gguf = titles
    assert folder.startswith("Open a model folder (GPT-2, Llama, Qwen2, Mistral, GPT-NeoX") and "GPT-2 model" not in folder
    for name in ("BERT", "RoBERTa", "DistilBERT", "safetensors"):
        assert name in folder
    assert all(family.models in folder for family in FAMILIES)
    assert gguf.startswith("Open a GGUF model file") and all(arch in gguf for arch in ARCHITECTURES)
    assert all(family.title in ABOUT for family in FAMILIES) and "GPT-2-family" not in ABOUT


def test_cancel_and_the_progress_bar_show_while_a_model_loads(qtbot, window):
    """A toolbar shows a widget through its action: the widget's own show() after a hide() did nothing, so a load
    (SmolLM2's first open: 20 s) showed neither Cancel nor a progress bar."""
    bar = window.model_bar
    assert not bar.cancel_button.isVisible() and not bar.progress.isVisible()
    bar.loading("smollm2")
    qtbot.waitUntil(lambda: bar.cancel_button.isVisible() and bar.progress.isVisible())
    assert bar.model_choice.currentData() == "smollm2"  # the list says what is loading
    bar.show_progress("dequantizing Q4_1 weights (once; kept in the cache)", 0, -1)
    assert bar.progress_label.text().startswith("dequantizing")
    bar.load_failed()
    qtbot.waitUntil(lambda: not bar.cancel_button.isVisible() and not bar.progress.isVisible())
    assert bar.model_choice.currentData() == bar.loaded_source
