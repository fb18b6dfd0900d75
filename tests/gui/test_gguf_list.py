"""The GGUF files on this computer in the Model list: the scan runs on its own thread, after the window shows; the
list shows each file's name, size, quantization and place, greys the ones AttnScope cannot open with the reason
as tooltip; picking one asks for a load of its path; Open GGUF file… and the added folders (remembered, removable).
Every place the scan looks in is under tmp_path (ATTNSCOPE_SCAN_HOME)."""
from __future__ import annotations

import shutil
import threading

import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from analysis.model import gguf_scan  # noqa: E402
from analysis.model.gguf_scan import FoundGguf, Place, ScanResult  # noqa: E402
from helpers import WAIT_MS  # noqa: E402

OK = FoundGguf("llama3.2:1b", "/models/blobs/sha256-aa", 1_321_098_329, "Q8_0", "Ollama", title="Llama 3.2 1B",
               architecture="llama")
HF = FoundGguf("bartowski/SmolLM2-GGUF/SmolLM2-135M-Q4_K_M.gguf", "/hub/snapshots/r/SmolLM2-135M-Q4_K_M.gguf",
               105_000_000, "Q4_K_M", "HF cache", architecture="llama")
GREY = FoundGguf("pub/repo/lora.gguf", "/lmstudio/pub/repo/lora.gguf", 12_000_000, "F16", "LM Studio",
                 problem="lora.gguf is a LoRA adapter, not a model: open the model it adapts.")
FOUND = ScanResult((HF, OK, GREY), (Place("HF cache", gguf_scan.Path("/hub"), "hf"),), 3)


@pytest.fixture
def bar(qtbot, settings):
    from gui.input.model_bar import ModelBar

    bar = ModelBar(settings)
    qtbot.addWidget(bar)
    return bar


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from analysis.model.synthetic_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf-gui") / "tiny.gguf", "qwen2", "Q4_1")


# ----------------------------------------------------------------------------- the scanner's thread
def test_the_scan_runs_on_a_thread_of_its_own_and_only_the_latest_answer_comes(qtbot):
    from gui.state.gguf_scanner import GgufScanner

    threads, go = [], threading.Event()

    def scan(folders, cancel):
        threads.append(threading.get_ident())
        go.wait(10)
        return ScanResult((OK,) if folders == ["first"] else (HF,), (), 0)

    scanner = GgufScanner(scan=scan)
    answers = []
    scanner.finished.connect(answers.append)
    scanner.start(["first"])
    assert scanner.running  # start() returned while the scan waits: the GUI thread is free
    scanner.start(["second"])  # the first is cancelled: its answer is dropped
    with qtbot.waitSignal(scanner.finished, timeout=WAIT_MS):
        go.set()
    assert scanner.wait(10)
    qtbot.wait(50)
    assert [r.files for r in answers] == [(HF,)] and scanner.result is answers[0] and not scanner.running
    assert len(threads) == 2 and threading.get_ident() not in threads


def test_a_stopped_scanner_delivers_nothing_and_a_scan_bug_is_an_empty_answer(qtbot):
    from gui.state.gguf_scanner import GgufScanner

    go = threading.Event()
    scanner = GgufScanner(scan=lambda folders, cancel: go.wait(10) and ScanResult((OK,), (), 0))
    answers = []
    scanner.finished.connect(answers.append)
    scanner.start([])
    scanner.stop()
    go.set()
    assert scanner.wait(10)
    qtbot.wait(50)
    assert answers == [] and scanner.start([]) == 1  # stopped for good (the window closed)
    broken = GgufScanner(scan=lambda folders, cancel: 1 / 0)
    with qtbot.waitSignal(broken.finished, timeout=WAIT_MS) as blocker:
        broken.start([])
    assert blocker.args[0].files == ()


# ----------------------------------------------------------------------------- the list
def test_the_list_shows_each_file_and_greys_the_ones_that_cannot_be_opened_with_the_reason(bar):
    from gui.input.model_bar import ADD_FOLDER, GGUF_GROUP, GGUF_LOOKING, GGUF_NONE, OPEN_FOLDER, OPEN_GGUF

    c = bar.model_choice
    assert [e[0] for e in bar.gguf_entries()] == [GGUF_LOOKING]  # before the first answer
    bar.set_gguf_files(FOUND)
    entries = bar.gguf_entries()
    assert [(text, path, enabled) for text, path, enabled, _ in entries] == [
        ("bartowski/SmolLM2-GGUF/SmolLM2-135M-Q4_K_M.gguf · 100 MiB · Q4_K_M · HF cache", HF.path, True),
        ("llama3.2:1b · 1.23 GiB · Q8_0 · Ollama", "llama3.2:1b", True),  # an Ollama model loads by its name
        ("pub/repo/lora.gguf · 11.4 MiB · F16 · LM Studio · cannot be opened", GREY.path, False),
    ]
    assert entries[2][3].startswith(GREY.problem) and GREY.path in entries[2][3]  # the reason as tooltip
    assert entries[1][3] == "Llama 3.2 1B (llama, Q8_0, 1.23 GiB)\nFound in Ollama's models: /models/blobs/sha256-aa"
    texts = [c.itemText(i) for i in range(c.count())]
    order = [texts.index(t) for t in ("BERT-style encoder", GGUF_GROUP, entries[0][0], entries[2][0], OPEN_GGUF,
                                      ADD_FOLDER, OPEN_FOLDER)]
    assert order == sorted(order)  # the group after the families, before Open folder…
    assert GREY.path not in bar.sources() and HF.path in bar.sources() and OPEN_GGUF not in bar.sources()
    bar.gguf_scanning()
    assert c.itemText(c.findText(f"{GGUF_GROUP} (looking…)")) and len(bar.gguf_entries()) == 3  # the old ones stay
    bar.set_gguf_files(ScanResult((), (), 0))
    assert [e[0] for e in bar.gguf_entries()] == [GGUF_NONE] and c.findText(GGUF_GROUP) >= 0


def test_picking_a_file_asks_for_its_path_and_a_greyed_one_for_nothing(qtbot, bar):
    from gui.input.model_bar import ADD_FOLDER, OPEN_GGUF

    c = bar.model_choice
    bar.set_gguf_files(FOUND)
    with qtbot.waitSignal(bar.load_requested) as blocker:
        c.setCurrentIndex(c.findData(OK.name))
        bar._model_chosen(c.findData(OK.name))
    assert blocker.args == [OK.name]
    bar.loaded(OK.name)
    assert bar.current_source() == OK.name
    with qtbot.assertNotEmitted(bar.load_requested):
        bar._model_chosen(c.findData(GREY.path))
    assert c.currentData() == OK.name  # back on the loaded one
    with qtbot.waitSignal(bar.open_gguf_requested):
        bar._model_chosen(c.findData(OPEN_GGUF))
    with qtbot.waitSignal(bar.add_folder_requested):
        bar._model_chosen(c.findData(ADD_FOLDER))
    assert c.currentData() == OK.name
    bar.set_gguf_files(ScanResult((HF, OK), (), 0))  # a rescan keeps the choice on screen
    assert c.currentData() == OK.name


def test_a_gguf_opened_from_its_file_joins_the_group_once_loaded(bar):
    from gui.input.model_bar import OPEN_FOLDER

    c = bar.model_choice
    bar.set_gguf_files(FOUND)
    bar.loaded("/elsewhere/my-model.gguf")
    assert bar.gguf_entries()[-1][:3] == ("my-model.gguf · opened", "/elsewhere/my-model.gguf", True)
    assert c.currentData() == "/elsewhere/my-model.gguf"
    bar.set_gguf_files(ScanResult((OK,), (), 0))
    assert [e[1] for e in bar.gguf_entries()] == [OK.name, "/elsewhere/my-model.gguf"]
    found_later = FoundGguf("my-model.gguf", "/elsewhere/my-model.gguf", 2048, "Q8_0", "folder")
    bar.set_gguf_files(ScanResult((found_later,), (), 0))
    assert [e[0] for e in bar.gguf_entries()] == ["my-model.gguf · 2.00 KiB · Q8_0 · folder"]  # once, as found
    bar.loaded("/some/folder")
    assert c.itemText(c.findData("/some/folder")) == "folder" and c.findData("/some/folder") < c.findData(OPEN_FOLDER)
    assert "/some/folder" not in [e[1] for e in bar.gguf_entries()]  # a model folder is not a GGUF file


# ----------------------------------------------------------------------------- in the window
def layout_home(tmp_path, monkeypatch, tiny_gguf):
    """A home folder with one GGUF in llama.cpp's cache and a file that is not one, for the scan to find."""
    home = tmp_path / "home"
    cache = home / ".cache" / "llama.cpp"
    cache.mkdir(parents=True)
    shutil.copyfile(tiny_gguf, cache / "tiny-q4_1.gguf")
    (cache / "broken.gguf").write_text("not a model")
    monkeypatch.setenv(gguf_scan.SCAN_HOME, str(home))
    return home


def test_the_window_scans_once_it_shows_never_before(qtbot, tmp_path, monkeypatch, tiny_gguf):
    from gui.chrome.window import MainWindow
    from gui.qt import ensure_qapp

    layout_home(tmp_path, monkeypatch, tiny_gguf)
    ensure_qapp()
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)
    w = MainWindow(settings)
    try:
        scanner, threads = w.model_files.scanner, []
        original = scanner.scan
        scanner.scan = lambda folders, cancel: threads.append(threading.get_ident()) or original(folders, cancel)
        qtbot.wait(100)
        assert not scanner.running and scanner.result is None  # built, not shown: nothing scanned
        with qtbot.waitSignal(scanner.finished, timeout=WAIT_MS):
            w.show()
        assert threads and threading.get_ident() not in threads
        assert [e[0].split(" · ")[0] for e in w.model_bar.gguf_entries()] == ["broken.gguf", "tiny-q4_1.gguf"]
    finally:
        w.close()
        w.deleteLater()


def test_found_files_are_listed_and_added_folders_are_remembered_and_removable(qtbot, window, tmp_path, monkeypatch,
                                                                                 tiny_gguf):
    from gui.chrome import model_files
    from gui.chrome.model_files import FOLDERS_KEY, saved_folders
    from gui.input.model_bar import ADD_FOLDER

    home = layout_home(tmp_path, monkeypatch, tiny_gguf)
    files, bar = window.model_files, window.model_bar
    with qtbot.waitSignal(files.scanner.finished, timeout=WAIT_MS):
        files.scan()
    size = gguf_scan.short_bytes(tiny_gguf.stat().st_size)
    entries = {e[0]: e for e in bar.gguf_entries()}
    assert set(entries) == {"broken.gguf · 11 bytes · llama.cpp · cannot be opened",
                            f"tiny-q4_1.gguf · {size} · Q4_1 · llama.cpp"}
    broken = entries["broken.gguf · 11 bytes · llama.cpp · cannot be opened"]
    assert not broken[2] and broken[3].startswith("broken.gguf is not a GGUF file")
    mine = tmp_path / "mine"
    (mine / "deep").mkdir(parents=True)
    shutil.copyfile(tiny_gguf, mine / "deep" / "mine.gguf")
    monkeypatch.setattr(model_files, "choose_folder", lambda parent, start="": str(mine))
    try:
        with qtbot.waitSignal(files.scanner.finished, timeout=WAIT_MS):
            bar._model_chosen(bar.model_choice.findData(ADD_FOLDER))
        assert saved_folders(window.settings) == [str(mine)]
        window.settings.sync()
        again = QtCore.QSettings(window.settings.fileName(), QtCore.QSettings.Format.IniFormat)
        assert saved_folders(again) == [str(mine)]  # remembered
        assert f"deep/mine.gguf · {size} · Q4_1 · folder" in [e[0] for e in bar.gguf_entries()]
        dialog = files.manage_folders()
        assert [dialog.list.item(i).text() for i in range(dialog.list.count())] == [str(mine)]
        assert not dialog.remove_button.isEnabled()
        dialog.list.item(0).setSelected(True)
        with qtbot.waitSignal(files.scanner.finished, timeout=WAIT_MS):
            dialog.remove_button.click()
        assert saved_folders(window.settings) == [] and dialog.list.count() == 0
        assert not any(e[0].startswith("deep/") for e in bar.gguf_entries())
        dialog.close()
    finally:
        window.settings.remove(FOLDERS_KEY)
    assert home.is_dir()


def test_open_gguf_file_in_the_menu_and_the_list_loads_the_chosen_file(qtbot, window, monkeypatch):
    from gui.chrome import model_files
    from gui.input.model_bar import OPEN_GGUF

    asked = []
    monkeypatch.setattr(model_files, "choose_gguf_file", lambda parent, start="": "/models/chosen.gguf")
    monkeypatch.setattr(window, "load_model", lambda source, *a, **k: asked.append(source))
    actions = {a.text(): a for menu in window.menuBar().actions() for a in menu.menu().actions()}
    actions["Open GGUF file…"].trigger()
    bar = window.model_bar
    bar._model_chosen(bar.model_choice.findData(OPEN_GGUF))
    assert asked == ["/models/chosen.gguf", "/models/chosen.gguf"]
    monkeypatch.setattr(model_files, "choose_gguf_file", lambda parent, start="": None)  # cancelled: nothing loads
    actions["Open GGUF file…"].trigger()
    assert len(asked) == 2
    assert "Model folders…" in actions


def test_the_dialogs_start_where_the_last_pick_was(qtbot, window, monkeypatch, tmp_path):
    from gui.chrome import model_files

    starts, picks = [], [str(tmp_path / "models" / "a.gguf")]
    (tmp_path / "models").mkdir()
    monkeypatch.setattr(model_files, "choose_gguf_file", lambda parent, start="": starts.append(start) or picks[0])
    monkeypatch.setattr(window, "load_model", lambda path: None)
    window.model_files.open_gguf_file()
    window.model_files.open_gguf_file()
    assert starts[1] == str(tmp_path / "models")  # the first starts at home (not the working folder)
