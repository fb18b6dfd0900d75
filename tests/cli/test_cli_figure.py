"""``attnscope figure``: the options reach the files (title, size at the DPI, label texts, head and token range,
colour bar label), the options file beside the figure, ``--from`` drawing the same PNG byte for byte, and the PDF's
cells sharp in a renderer (tests/gui/test_figure_files.py)."""
import json
import re

import numpy as np

from helpers import run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"


def rgb(path) -> np.ndarray:
    from PySide6 import QtGui

    image = QtGui.QImage(str(path)).convertToFormat(QtGui.QImage.Format.Format_RGB888)
    w, h = image.width(), image.height()
    return np.frombuffer(image.constBits(), np.uint8).reshape(h, image.bytesPerLine())[:, : 3 * w].reshape(h, w, 3)


def figure(capsys, model, out, *options):
    code, _, err = run(capsys, "figure", "--model", model, "--text", TEXT, "--out", out, *options)
    assert code == 0, err
    return out


def test_title_size_labels_and_token_range_reach_the_svg_and_the_png(tiny_model_dir, tmp_path, capsys):
    svg = figure(capsys, tiny_model_dir, tmp_path / "h.svg", "--head", "L1H2", "--tokens", "2:9", "--labels", "plain",
                 "--title", "Fig. 3: a head", "--bar-label", "attention weight")
    text = svg.read_text()
    drawn = {html_unescape(t).strip() for t in re.findall(r">([^<>]+)</text>", text)}
    side = json.loads((tmp_path / "h.json").read_text())
    assert side["head"] == "L1H2" and side["token_range"] == [2, 9] and len(side["tokens"]) == 7
    assert "Fig. 3: a head" in drawn and "attention weight" in drawn
    labels = side["labels"]
    assert all("␣" not in label and "[" not in label for label in labels)  # plain: no marker, no index
    assert set(labels) <= drawn and not any("␣" in t for t in drawn)
    assert not any(t.endswith("…") for t in drawn)  # whole on both axes
    png = figure(capsys, tiny_model_dir, tmp_path / "h.png", "--head", "1.2", "--width-in", "3.3", "--dpi", "200")
    assert rgb(png).shape[1] == 660  # 3.3 in at 200 dpi
    side = json.loads((tmp_path / "h.json").read_text())
    assert side["labels"][1].startswith("␣") or "[1]" in side["labels"][1]  # marked: "[index]" on every label
    assert all(label.endswith(f"[{i}]") for i, label in enumerate(side["labels"]))


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_the_default_title_is_the_models_name_never_its_path(tiny_model_dir, tmp_path, capsys):
    svg = figure(capsys, tiny_model_dir, tmp_path / "g.svg")  # no --head: the grid
    texts = re.findall(r">([^<>]+)</text>", svg.read_text())
    titles = [t for t in texts if "all heads" in t]
    assert titles and all(str(tiny_model_dir) not in t and "/" not in t for t in titles), titles
    assert titles[0].startswith(tiny_model_dir.name)


def test_from_the_options_file_draws_the_same_png_byte_for_byte(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "a").mkdir()
    first = figure(capsys, tiny_model_dir, tmp_path / "a" / "L0H1.png", "--head", "L0H1", "--tokens", "1:8",
                   "--width-px", "500", "--cmap", "magma", "--scale", "power")
    code, _, err = run(capsys, "figure", "--from", tmp_path / "a" / "L0H1.json", "--out", tmp_path / "again.png")
    assert code == 0, err
    assert (tmp_path / "again.png").read_bytes() == first.read_bytes()
    assert rgb(first).shape[1] == 500
    other = figure(capsys, tiny_model_dir, tmp_path / "other.png", "--head", "L0H1", "--tokens", "1:8",
                   "--width-px", "500", "--cmap", "viridis", "--scale", "power")
    assert other.read_bytes() != first.read_bytes()  # the options file's colormap was what drew it


def test_a_bad_options_file_is_one_sentence(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")
    code, _, err = run(capsys, "figure", "--from", tmp_path / "x.json", "--out", tmp_path / "x.png")
    assert code == 2 and "figure's options" in err and "Traceback" not in err


def test_the_grid_badges_say_which_score_and_rule_in_a_legend(tiny_model_dir, tmp_path, capsys):
    from analysis.measures.head_scores import SCORE_NAMES

    svg = figure(capsys, tiny_model_dir, tmp_path / "g.svg", "--badges", "previous_token")
    texts = [html_unescape(t).strip() for t in re.findall(r">([^<>]+)</text>", svg.read_text())]
    legend = [t for t in texts if "previous_token" in t]
    assert legend and "≥ 0.3" in " ".join(legend) and "median" in " ".join(legend), texts
    plain = figure(capsys, tiny_model_dir, tmp_path / "p.svg")  # no badges by default: no legend
    assert "previous_token" not in plain.read_text() and "median head" not in plain.read_text()
    code, _, err = run(capsys, "figure", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x.png",
                       "--badges", "prev")
    assert code == 2 and "Traceback" not in err and all(name in err for name in SCORE_NAMES)


def test_the_grid_from_its_options_file_is_the_same_png_and_shows_the_layers_chosen(tiny_model_dir, tmp_path, capsys):
    first = figure(capsys, tiny_model_dir, tmp_path / "g.png", "--layers", "2,0", "--grid-heads", "1-3",
                   "--width-in", "3.3", "--badges", "sink")
    side = json.loads((tmp_path / "g.json").read_text())
    assert side["layers"] == [2, 0] and side["grid_heads"] == [1, 2, 3]
    assert rgb(first).shape[1] == 990  # 3.3 in at 300 dpi
    code, _, err = run(capsys, "figure", "--from", tmp_path / "g.json", "--out", tmp_path / "again.png")
    assert code == 0, err
    assert (tmp_path / "again.png").read_bytes() == first.read_bytes()


def test_an_exports_grid_and_head_are_drawn_again_byte_for_byte(tiny_model_dir, tmp_path, capsys):
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x", "--bos")
    assert code == 0, err
    for name in ("grid", "heads/L1H2"):
        code, _, err = run(capsys, "figure", "--from", tmp_path / "x" / f"{name}.json", "--out", tmp_path / "again.png")
        assert code == 0, err
        assert (tmp_path / "again.png").read_bytes() == (tmp_path / "x" / f"{name}.png").read_bytes(), name
