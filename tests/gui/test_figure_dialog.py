"""The Figure… dialog (gui/export/figure_dialog.py), driven offscreen with the tiny test model: its fields say the
FigureOptions expected, it starts from the view on screen, refusals are one sentence and write nothing, Save writes
the figure and its JSON (which reads back to the same options), and a refusal from the figure code is a message."""
import json

import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtGui  # noqa: E402

from helpers import WAIT_MS, run  # noqa: E402

from analysis.export.figure_options import FigureOptions, sidecar  # noqa: E402

TEXT = "The cat sat on the mat because it was tired."


@pytest.fixture
def dialog(qtbot, window):
    from gui.export.figure_dialog import FigureDialog

    run(qtbot, window, TEXT)
    window.state.select(1, 2)
    window.state.set_colormap("magma")
    window.state.set_scale("log")
    d = FigureDialog(window, window.state, window.worker, window.settings, "tiny-source")
    qtbot.addWidget(d)
    return d


def saved(qtbot, dialog, path):
    """Save to ``path`` and wait for the one line it ends with."""
    dialog.save(path)
    qtbot.waitUntil(lambda: not dialog.saver.busy, timeout=WAIT_MS)
    return dialog.message.text()


def test_starts_from_the_view_on_screen(dialog, window):
    o = dialog.options()
    r = window.state.result
    assert o.heads == ((1, 2),) and o.cmap == "magma" and o.scale == "log"
    assert (o.model, o.text, o.bos) == ("tiny-source", r.text, r.bos)
    assert dialog.form.head_list.text() == "L1H2"
    assert dialog.form.what.currentData() == "head"
    assert o.hide_first is False and not dialog.form.hide_first.isChecked()


def test_hide_first_follows_the_view_and_the_box(qtbot, window):
    from gui.export.figure_dialog import FigureDialog

    run(qtbot, window, TEXT)
    window.state.set_hide_first(True)
    try:
        d = FigureDialog(window, window.state, window.worker, window.settings, "tiny-source")
        qtbot.addWidget(d)
        assert d.options().hide_first and d.form.hide_first.isChecked()
        d.form.hide_first.setChecked(False)
        assert not d.options().hide_first
    finally:
        window.state.set_hide_first(False)


def test_the_fields_say_the_options(dialog):
    f = dialog.form
    f.title.setText("Previous-token heads")
    f.unit.setCurrentIndex(f.unit.findData("px"))
    f.width_spin.setValue(1000)
    f.dpi.setValue(200)
    f.tokens.setText("2:7")
    f.renormalise.setChecked(True)
    f.labels.setCurrentIndex(f.labels.findData("plain"))
    f.label_chars.setValue(6)
    o = dialog.options()
    assert o.title == "Previous-token heads"
    assert (o.width_px, o.width_in, o.dpi, o.pixels) == (1000, None, 200, 1000)
    assert o.tokens == (2, 7) and o.renormalise
    assert (o.labels, o.label_chars) == ("plain", 6)
    f.unit.setCurrentIndex(f.unit.findData("in"))  # the same width in inches at the DPI: 1000 / 200
    assert dialog.options().width_in == pytest.approx(5.0) and dialog.options().pixels == 1000
    f.what.setCurrentIndex(f.what.findData("heads"))
    f.head_list.setText("L0H1, L2H3,1.0")
    f.columns.setValue(2)
    f.scores.setText("previous_token")
    o = dialog.options()
    assert o.heads == ((0, 1), (2, 3), (1, 0)) and o.columns == 2 and o.scores == ("previous_token",)
    f.what.setCurrentIndex(f.what.findData("grid"))
    f.layers.setText("0,2")
    f.grid_heads.setText("1-3")
    o = dialog.options()
    assert o.heads == () and o.layers == (0, 2) and o.grid_heads == (1, 2, 3) and o.tokens is None


@pytest.mark.parametrize("field,text,words", [("head_list", "L1H2, banana", "banana"),
                                              ("head_list", "L9H0", "L9H0"),
                                              ("tokens", "5:5", "empty"),
                                              ("tokens", "0:999", "past the text")])
def test_a_bad_field_is_refused_in_one_sentence_and_nothing_is_written(qtbot, dialog, tmp_path, field, text, words):
    getattr(dialog.form, field).setText(text)
    dialog.preview.draw_now()
    message = dialog.message.text()
    assert words in message and "\n" not in message and "Traceback" not in message
    assert not dialog.save(tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == []


def test_the_preview_draws_the_figure(dialog):
    dialog.preview.draw_now()
    pixmap = dialog.preview.pixmap()
    assert not pixmap.isNull() and pixmap.width() > 100
    assert dialog.message.text() == ""
    assert dialog.preview.options == dialog.options()


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_save_writes_the_figure_and_its_options(qtbot, dialog, tmp_path, fmt):
    f = dialog.form
    f.title.setText("My head")
    f.unit.setCurrentIndex(f.unit.findData("px"))
    f.width_spin.setValue(640)
    f.tokens.setText("1:6")
    path = tmp_path / f"fig.{fmt}"
    line = saved(qtbot, dialog, path)
    assert line == f"Wrote {path} and fig.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"fig.{fmt}", "fig.json"])
    back = FigureOptions.read(sidecar(path))
    assert back == dialog.options().with_(fmt=fmt)
    assert json.loads(sidecar(path).read_text())["token_range"] == [1, 6]
    if fmt == "png":
        assert QtGui.QImage(str(path)).width() == 640
    if fmt == "svg":
        assert "My head" in path.read_text()


def test_load_options_reads_a_json_into_the_fields(qtbot, dialog, tmp_path):
    o = dialog.options().with_(title="Loaded", width_in=10.0, dpi=150, tokens=(0, 4), cmap="inferno",
                               label_chars=8)
    (tmp_path / "o.json").write_text(o.to_json(), encoding="utf-8")
    assert dialog.load(tmp_path / "o.json")
    assert dialog.options() == o
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    assert not dialog.load(tmp_path / "bad.json")
    assert "not an AttnScope figure" in dialog.message.text()


def test_a_refusal_of_the_figure_code_shows_as_a_message(qtbot, dialog, tmp_path, monkeypatch):
    from analysis.errors import InputError
    from gui.plots import figure_make

    def refuse(result, options, key_norms=None):
        raise InputError("A figure of several heads is not made yet.")

    monkeypatch.setattr(figure_make, "make_figure", refuse)
    dialog.preview.draw_now()
    assert dialog.message.text() == "A figure of several heads is not made yet."
    assert not dialog.save(tmp_path / "f.png")
    assert dialog.message.text() == "A figure of several heads is not made yet."
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_written_leaves_nothing(qtbot, dialog, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = saved(qtbot, dialog, blocker / "f.png")
    assert "\n" not in line and line and not line.startswith("Wrote")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_file_menu_offers_the_dialog(window):
    texts = [a.text() for a in window.menuBar().actions()[0].menu().actions()]
    assert "Figure…" in texts



def test_the_font_size_is_the_figures_own_and_leaves_the_apps_alone(qtbot, dialog, tmp_path):
    """The Font field is on, reaches the options, the preview and the saved SVG's text (its labels at 14 pt: 14 · 96
    / 72 px), a JSON's font size reads back into it, and the application's font is the same after."""
    import html
    import re

    app_font = QtGui.QGuiApplication.font().toString()
    assert dialog.form.font_pt.isEnabled()
    dialog.form.title.setText("T")
    dialog.preview.request(dialog.options)
    dialog.preview.draw_now()
    small = dialog.preview.pixmap().toImage()
    dialog.form.font_pt.setValue(14)
    assert dialog.options().font_pt == 14
    dialog.preview.request(dialog.options)
    dialog.preview.draw_now()
    assert dialog.preview.options.font_pt == 14 and dialog.preview.pixmap().toImage() != small
    assert "Wrote" in saved(qtbot, dialog, tmp_path / "f.svg")
    svg = (tmp_path / "f.svg").read_text()
    label = html.escape(json.loads((tmp_path / "f.json").read_text())["labels"][0], quote=False)  # always drawn
    sizes = re.findall(r'font-size="([\d.]+)"[^>]*>\s*' + re.escape(label) + "</text>", svg)
    assert sizes and float(sizes[0]) == pytest.approx(14 * 96 / 72, abs=0.01)
    assert json.loads((tmp_path / "f.json").read_text())["options"]["font_pt"] == 14
    (tmp_path / "o.json").write_text(dialog.options().with_(font_pt=11.0).to_json(), encoding="utf-8")
    assert dialog.load(tmp_path / "o.json") and dialog.options().font_pt == 11.0
    assert dialog.form.font_pt.value() == 11.0 and "pt" not in dialog.message.text()
    assert QtGui.QGuiApplication.font().toString() == app_font


def test_the_head_tab_button_opens_the_dialog_of_the_head_on_screen(qtbot, window, monkeypatch):
    from gui.export import figure_dialog

    run(qtbot, window, TEXT)
    window.state.select(2, 1)
    seen = []
    monkeypatch.setattr(figure_dialog.FigureDialog, "exec", lambda self: seen.append(self.options().heads))
    window.head_tab.figure_button.click()
    assert seen == [((2, 1),)]
