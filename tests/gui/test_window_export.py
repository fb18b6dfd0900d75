"""The window's exports, driven offscreen with a small test model: files and formats, the same bytes as the
command line, a full disk, unwritable and protected paths, overwriting, the Export dialog's names, Copy
figure, and exports that follow the view on screen."""
import errno
import json
import os

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtGui, QtWidgets  # noqa: E402

from helpers import WAIT_MS, run  # noqa: E402


def export(qtbot, window, what, path, fmt=None, png_width=None):
    """Run an export to the end; returns the files written."""
    with qtbot.waitSignal(window.exporter.finished, timeout=WAIT_MS) as blocker:
        assert window.exporter.start(what, path, fmt, png_width)
    return blocker.args[0]


@pytest.mark.parametrize("what,name", [("head", "h.png"), ("head", "h.svg"), ("head", "h.pdf"), ("head", "h.csv"),
                                       ("head", "h.npz"), ("grid", "g.png"), ("grid", "g.json")])
def test_export_files(qtbot, window, tmp_path, what, name):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    r = run(qtbot, window, "The cat sat on the mat")
    image = name.rsplit(".", 1)[1] in ("png", "svg", "pdf")
    side = [tmp_path / (name.rsplit(".", 1)[0] + ".json")] if image else []  # an image's options beside it
    assert export(qtbot, window, what, tmp_path / name, png_width=900) == [tmp_path / name, *side]
    assert (tmp_path / name).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, *(p.name for p in side)])  # nothing else
    if name.endswith(".png"):
        assert QtGui.QImage(str(tmp_path / name)).width() == 900
    if name == "h.npz":
        with np.load(tmp_path / name) as data:
            np.testing.assert_array_equal(data["attentions"], r.attentions[window.state.layer, window.state.head])
    if name == "g.json":
        data = json.loads((tmp_path / name).read_text())
        assert np.array(data["attentions"]).shape == r.attentions.shape


@pytest.mark.slow
def test_every_head_export_honours_the_png_width_in_one_folder(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    written = export(qtbot, window, "heads", tmp_path / "heads", "png", png_width=500)
    images = [p for p in written if p.suffix == ".png"]
    assert len(images) == 13 and (tmp_path / "heads" / "L2H3.png").exists()
    assert sorted(p for p in written if p.suffix == ".json") == sorted(p.with_suffix(".json") for p in images)
    assert not (tmp_path / "heads" / "heads").exists()
    assert {QtGui.QImage(str(p)).width() for p in images} == {500}


def test_gui_and_cli_data_exports_are_the_same_bytes(qtbot, window, tmp_path, tiny_model_dir):
    import main

    text = "The cat sat on the mat because it was tired."
    run(qtbot, window, text, bos=False)
    written = export(qtbot, window, "data", tmp_path / "gui")
    assert {"attention.npz", "scores.csv", "parity.json"} <= {p.name for p in written}
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--out", str(tmp_path / "cli")]) == 0
    for name in ("attention.npz", "scores.csv", "scores_tl.csv"):
        assert (tmp_path / "gui" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    gui_parity, cli_parity = (json.loads((tmp_path / d / "parity.json").read_text()) for d in ("gui", "cli"))
    gui_parity.pop("seconds"), cli_parity.pop("seconds")  # how long it took is the one field that may differ
    assert gui_parity == cli_parity


def test_a_data_export_writes_the_tl_scores_the_scores_tab_shows(qtbot, window, tmp_path, tiny_model_dir):
    """scores_tl.csv of the app's data export is computed with the TL options chosen in the Head scores tab, and
    equals the command line's with the same options, byte for byte."""
    import main
    from gui.tabs.scores.scores_tab import ScoresTab

    text = "The cat sat on the mat because the cat was tired."
    run(qtbot, window, text, bos=False)
    panel = window.tab(ScoresTab)
    panel.measure_choice.setCurrentIndex(panel.measure_choice.findData("abs"))
    panel.exclude_bos_box.setChecked(True)
    try:
        assert window.state.tl_options == {"error_measure": "abs", "exclude_bos": True, "exclude_current_token": False}
        export(qtbot, window, "data", tmp_path / "gui")
    finally:
        panel.measure_choice.setCurrentIndex(panel.measure_choice.findData("mul"))
        panel.exclude_bos_box.setChecked(False)
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--tl-measure", "abs", "--tl-exclude-bos", "--out", str(tmp_path / "cli")]) == 0
    gui, cli = ((tmp_path / d / "scores_tl.csv").read_bytes() for d in ("gui", "cli"))
    assert gui == cli and b",abs,true,false" in gui


def test_a_data_export_writes_the_rollout_the_rollout_tab_shows(qtbot, window, tmp_path, tiny_model_dir):
    """With the Rollout tab's Hide first token, renormalise ticked, the data export's rollout is the command line's
    --rollout-skip-first, byte for byte, and summary.json says so; unticked, the plain rollout."""
    import main
    from analysis.measures.lenses import rollout, rollout_skip_first
    from gui.tabs.rollout.rollout_tab import RolloutTab

    text = "The cat sat on the mat because the cat was tired."
    r = run(qtbot, window, text, bos=False)
    box = window.tab(RolloutTab).skip_first_box
    export(qtbot, window, "data", tmp_path / "plain")
    box.click()
    try:
        assert window.state.rollout_skip_first
        export(qtbot, window, "data", tmp_path / "gui")
    finally:
        box.click()
    assert not window.state.rollout_skip_first
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--rollout-skip-first", "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "gui" / "attention.npz").read_bytes() == (tmp_path / "cli" / "attention.npz").read_bytes()
    summaries = {d: json.loads((tmp_path / d / "summary.json").read_text()) for d in ("plain", "gui", "cli")}
    assert [summaries[d]["rollout_skip_first"] for d in ("plain", "gui", "cli")] == [False, True, True]
    with np.load(tmp_path / "gui" / "attention.npz") as gui, np.load(tmp_path / "plain" / "attention.npz") as plain:
        np.testing.assert_array_equal(gui["rollout"], rollout_skip_first(rollout(r.attentions)))
        np.testing.assert_array_equal(plain["rollout"], rollout(r.attentions))


def test_a_full_disk_leaves_no_partial_files_and_says_so_in_one_sentence(qtbot, window, tmp_path, monkeypatch):
    from analysis.export import writers as writers

    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    run(qtbot, window, "The cat sat on the mat")

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writers, "write_scores_csv", full)
    for what, path in (("data", tmp_path / "data"), ("grid", tmp_path / "scores.csv")):
        with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
            window.exporter.start(what, path)
        message = blocker.args[0]
        assert "space" in message.lower() and "\n" not in message and "Errno" not in message
        assert not path.exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder, no partial file


def test_an_unwritable_export_path_shows_a_message(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    (tmp_path / "file").write_text("")
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.exporter.start("head", tmp_path / "file" / "x.png")
    assert window.error.isVisible() and "\n" not in blocker.args[0]


def test_an_export_never_replaces_a_file_of_the_model_it_came_from(qtbot, window, tmp_path, tiny_model_dir):
    """The command line's rule in the app too: a data export named over one of the model's files (here a hard
    link to its config.json, so that the old code's rename would not harm the shared model) is refused."""
    import os

    run(qtbot, window, "The cat sat on the mat")
    target = tmp_path / "scores.json"
    os.link(tiny_model_dir / "config.json", target)
    window.exporter.ask_overwrite = lambda _parent, path: True
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.exporter.start("grid", target)
    assert "config.json" in blocker.args[0] and blocker.args[0].endswith("choose another place for the export.")
    assert os.path.samefile(target, tiny_model_dir / "config.json")


def test_what_an_export_left_behind_is_said_in_the_status_bar(qtbot, window, tmp_path, monkeypatch):
    from analysis.export import contents, folders

    run(qtbot, window, "The cat sat on the mat")
    said = "The new export is in X, but the earlier one could not be deleted wholly: Y is left."
    monkeypatch.setattr(contents, "write_export", lambda out, *a, **k: folders.Written([out / "a.csv"], [said]))
    with qtbot.waitSignal(window.exporter.warned, timeout=WAIT_MS):
        window.exporter.start("data", tmp_path / "out")
    assert window.statusBar().currentMessage() == said


def test_overwriting_asks_first(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    target = tmp_path / "L0H0.png"
    target.write_bytes(b"mine")
    asked = []
    window.exporter.ask_overwrite = lambda _parent, path: asked.append(path) or False
    assert not window.exporter.start("head", target)
    assert asked == [target] and target.read_bytes() == b"mine"
    window.exporter.ask_overwrite = lambda _parent, path: True
    export(qtbot, window, "head", target)
    assert target.read_bytes()[:4] == b"\x89PNG"


def test_export_dialog_names_say_what_they_hold_and_the_folder_stays(qtbot, window, tmp_path, settings):
    from gui.export.export_dialog import ExportDialog

    settings.setValue("export/folder", str(tmp_path))
    dialog = ExportDialog(window, settings, layer=2, head=1)
    qtbot.addWidget(dialog)
    assert dialog.path() == str(tmp_path / "L2H1.png")
    names = []
    for _ in range(3):
        for index in range(dialog.what_choice.count()):
            dialog.what_choice.setCurrentIndex(index)
            names.append(os.path.basename(dialog.path()))
            for fmt_index in range(dialog.format_choice.count()):
                dialog.format_choice.setCurrentIndex(fmt_index)
                assert os.path.dirname(dialog.path()) == str(tmp_path)
                names.append(os.path.basename(dialog.path()))
    assert {"L2H1.svg", "grid.pdf", "attnscope-heads", "attnscope-data", "attnscope-export"} <= set(names)


@pytest.mark.slow
def test_copy_figure_copies_the_clean_figure_of_the_view_in_front_at_the_export_width(qtbot, window, tmp_path):
    from gui.export.export_dialog import DEFAULT_PNG_WIDTH
    from gui.plots.figures import dispose_figure

    window.settings.remove("export/png_width")
    run(qtbot, window, "The cat sat")
    clipboard = QtWidgets.QApplication.clipboard()
    window.tabs.setCurrentWidget(window.head_tab)
    window.text_input.setFocus()
    window.copy_figure()
    copied = clipboard.image()
    reference = window.head_tab.offscreen_figure()
    # the export figure, at the export's default PNG width (not a grab of the screen at the figure's own size)
    assert copied.width() == DEFAULT_PNG_WIDTH == 1600
    assert abs(copied.height() / copied.width() - reference.height() / reference.width()) < 0.01
    dispose_figure(reference)
    png, _ = export(qtbot, window, "head", tmp_path / "head.png", png_width=DEFAULT_PNG_WIDTH)
    assert QtGui.QImage(str(png)).width() == copied.width()  # as wide as the PNG export (that is main.py figure's)
    window.grid_panel.plot.setFocus()
    qtbot.waitUntil(window.grid_panel.plot.hasFocus)
    window.settings.setValue("export/png_width", 700)  # what the Export dialog last used
    window.copy_figure()
    reference = window.grid_panel.offscreen_figure()
    assert clipboard.image().width() == 700
    assert abs(clipboard.image().height() / 700 - reference.height() / reference.width()) < 0.01
    dispose_figure(reference)
    window.settings.remove("export/png_width")


@pytest.mark.slow
def test_gui_exports_follow_the_value_weighted_view_and_the_sink_epsilon(qtbot, window, tmp_path, tiny_model_dir):
    """What is visible exports: the head and grid PNGs in the value-weighted view are value-weighted (their options
    say so, and differ from the weights'; tests/gui/test_export_redraw.py draws them again with main.py figure); the
    data export's summary has the sink rate at the Scores panel's ε, like `main.py export --sink-epsilon`."""
    import main
    from gui.state.lens_data import VALUE_NORMS
    from gui.tabs.scores.scores_tab import ScoresTab

    text = "The cat sat on the mat because it was tired."
    run(qtbot, window, text)
    weights_png, _ = export(qtbot, window, "head", tmp_path / "weights.png", png_width=600)
    window.state.set_attention_view("value-weighted")
    qtbot.waitUntil(lambda: window.state.lens(VALUE_NORMS) is not None, timeout=WAIT_MS)
    for what in ("head", "grid"):
        png, side = export(qtbot, window, what, tmp_path / f"values-{what}.png", png_width=600)
        assert json.loads(side.read_text())["options"]["weighting"] == "value"
    assert QtGui.QImage(str(tmp_path / "values-head.png")) != QtGui.QImage(str(weights_png))
    window.state.set_attention_view("weights")
    scores = window.tab(ScoresTab)
    scores.epsilon_spin.setValue(0.05)  # the user sets ε in the Scores tab
    assert window.state.sink_epsilon == 0.05
    written = export(qtbot, window, "data", tmp_path / "gui")
    window.state.set_sink_epsilon(0.3)
    assert scores.epsilon_spin.value() == 0.3
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--sink-epsilon", "0.05", "--out", str(tmp_path / "cli")]) == 0
    gui_summary, cli_summary = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("gui", "cli"))
    assert gui_summary["sink_epsilon"] == cli_summary["sink_epsilon"] == 0.05
    assert gui_summary["sink_rate"] == cli_summary["sink_rate"]
    with np.load(tmp_path / "gui" / "attention.npz") as data:
        assert {"attentions", "value_norms", "rollout"} <= set(data.files)
    assert any(p.name == "summary.json" for p in written)
