"""The window's File › Export draws its figures with ``main.py figure``'s routines and writes their options beside each
image: ``main.py figure --from <its json>`` makes the same PNG again, byte for byte (a head, the grid with badges, a
value-weighted head and grid, a head with the first key hidden), and a "heads" folder holds a JSON beside each image."""
import json

import pytest

pytest.importorskip("pytestqt")

from helpers import TEXT, WAIT_MS, analyse, exporter_on, run_main  # noqa: E402


@pytest.fixture
def exporter(qtbot, worker, settings):
    exporter, failed = exporter_on(qtbot, worker, settings, analyse(qtbot, worker, TEXT), 1, 2)
    yield exporter
    assert failed == []


def exported(qtbot, exporter, what, path, png_width=600):
    with qtbot.waitSignal(exporter.finished, timeout=WAIT_MS) as blocker:
        assert exporter.start(what, path, "png", png_width)
    return blocker.args[0]


def redrawn(capsys, side, out):
    """``main.py figure --from side --out out``: the bytes it wrote."""
    code, _, err = run_main(capsys, "figure", "--from", side, "--out", out)
    assert code == 0, err
    return out.read_bytes()


def value_norms_shown(qtbot, exporter, worker):
    from gui.state.lens_data import VALUE_NORMS, LensData

    exporter.lenses = LensData.for_state(exporter.state, worker)  # kept: it asks the worker for the norms
    exporter.state.set_attention_view("value-weighted")
    qtbot.waitUntil(lambda: exporter.state.lens(VALUE_NORMS) is not None, timeout=WAIT_MS)


@pytest.mark.parametrize("view", ["weights", "value-weighted", "hide-first"])
def test_an_app_export_of_a_head_and_the_grid_is_drawn_again_byte_for_byte(qtbot, exporter, worker, tmp_path, capsys,
                                                                           view):
    if view == "value-weighted":
        value_norms_shown(qtbot, exporter, worker)
    if view == "hide-first":
        exporter.state.set_hide_first(True)
    exporter.state.set_badge_score("previous_token")
    png, side = exported(qtbot, exporter, "head", tmp_path / "head.png")
    assert (png, side) == (tmp_path / "head.png", tmp_path / "head.json")
    options = json.loads(side.read_text())["options"]
    assert options["heads"] == [[1, 2]] and options["weighting"] == ("value" if view == "value-weighted" else "attention")
    assert options["hide_first"] is (view == "hide-first") and options["width_px"] == 600
    assert redrawn(capsys, side, tmp_path / "again.png") == png.read_bytes()
    grid, grid_side = exported(qtbot, exporter, "grid", tmp_path / "grid.png")
    shown = json.loads(grid_side.read_text())
    assert shown["options"]["badges"] == "previous_token" and shown["options"]["heads"] == []
    assert redrawn(capsys, grid_side, tmp_path / "again-grid.png") == grid.read_bytes()
    if view != "weights":  # the option changed the figure: the byte test above can fail
        exporter.state.set_hide_first(False)
        exporter.state.set_attention_view("weights")
        plain, _ = exported(qtbot, exporter, "head", tmp_path / "plain.png")
        assert plain.read_bytes() != png.read_bytes()


@pytest.mark.parametrize("view", ["weights", "value-weighted"])
def test_a_heads_folder_has_each_images_options_beside_it(qtbot, exporter, worker, tmp_path, capsys, view):
    """Each image's options beside it; every head (drawn into one figure after another, figure_make.FigureCache) the
    same bytes as its figure drawn anew from those options."""
    from analysis.export.figure_options import FigureOptions
    from gui.plots.figure_make import write_figure

    if view == "value-weighted":
        value_norms_shown(qtbot, exporter, worker)
    written = exported(qtbot, exporter, "heads", tmp_path / "heads", png_width=300)
    images = sorted(p.relative_to(tmp_path / "heads").as_posix() for p in written if p.suffix == ".png")
    assert images == sorted(["grid.png", *(f"L{l}H{h}.png" for l in range(3) for h in range(4))])
    for image in images:
        side = json.loads((tmp_path / "heads" / image.replace(".png", ".json")).read_text())
        assert side["head"] == (None if image == "grid.png" else image[:-4])
        options = FigureOptions.from_json(json.dumps(side))
        assert options.weighting == ("value" if view == "value-weighted" else "attention")
        values = exporter.state.lens("value_norms")
        write_figure(exporter.state.result, options, tmp_path / "anew.png",
                     values.key_norms if view == "value-weighted" else None)
        assert (tmp_path / "anew.png").read_bytes() == (tmp_path / "heads" / image).read_bytes(), image
    assert redrawn(capsys, tmp_path / "heads" / "L2H3.json", tmp_path / "again.png") == (
        tmp_path / "heads" / "L2H3.png").read_bytes()


def test_an_images_options_file_never_replaces_another_json(qtbot, exporter, worker, settings, tmp_path):
    """results.png beside the user's own results.json: refused in one sentence, nothing written; an earlier figure's
    options file of that name is replaced with the image."""
    from gui.export.exporting import Exporter

    theirs = tmp_path / "results.json"
    theirs.write_text('{"accuracy": 0.9}\n')
    other = Exporter(exporter.state, worker, settings, exporter.parent())  # (the fixture's refuses any failure)
    failed = []
    other.failed.connect(failed.append)
    with qtbot.waitSignal(other.failed, timeout=WAIT_MS):
        assert other.start("head", tmp_path / "results.png", "png", 400)
    assert failed == ["results.json exists beside the image and is not an AttnScope figure's options file, which the "
                      "export would write there; choose another name."]
    assert theirs.read_text() == '{"accuracy": 0.9}\n' and not (tmp_path / "results.png").exists()
    exporter.ask_overwrite = lambda *_: True  # "Replace?" answered yes
    _, side = exported(qtbot, exporter, "head", tmp_path / "fig.png")
    before = side.read_text()
    exporter.state.select(0, 1)
    _, side = exported(qtbot, exporter, "head", tmp_path / "fig.png")  # the same name again: replaced
    assert side.read_text() != before and json.loads(side.read_text())["options"]["heads"] == [[0, 1]]
