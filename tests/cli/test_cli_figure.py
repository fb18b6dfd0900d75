"""``attnscope figure``: the options reach the files (title, size at the DPI, label texts, head and token range,
colour bar label), the options file beside the figure, ``--from`` drawing the same PNG byte for byte, and the PDF's
cells sharp in a renderer (tests/gui/test_figure_files.py)."""
import json
import re

import numpy as np
import pytest

from helpers import run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"


def rgb(path) -> np.ndarray:
    from PySide6 import QtGui

    image = QtGui.QImage(str(path)).convertToFormat(QtGui.QImage.Format.Format_RGB888)
    w, h = image.width(), image.height()
    pixels = np.frombuffer(image.constBits(), np.uint8).reshape(h, image.bytesPerLine())[:, : 3 * w].reshape(h, w, 3)
    return pixels.copy()  # a view would outlive ``image``, whose memory is freed when this returns


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


def test_an_exports_figures_with_the_first_key_hidden_are_drawn_again_byte_for_byte(tiny_model_dir, tmp_path, capsys):
    """The GUI's export with "Hide first token" writes hide_first into each figure's options, and --from draws the
    same PNG again; the figure differs from the one with the first key shown."""
    from analysis.measures.measured import run_measured
    from analysis.model.loading import load_model
    from gui.plots.result_images import write_result_images

    result = run_measured(load_model(str(tiny_model_dir), device="cpu"), TEXT, bos=True)
    for hide, folder in ((True, tmp_path / "hidden"), (False, tmp_path / "shown")):
        folder.mkdir()
        write_result_images(result, folder, heads=[(1, 2)], hide_first=hide)
    for name in ("grid", "heads/L1H2"):
        side = json.loads((tmp_path / "hidden" / f"{name}.json").read_text())
        assert side["options"]["hide_first"] is True
        code, _, err = run(capsys, "figure", "--from", tmp_path / "hidden" / f"{name}.json", "--out",
                           tmp_path / "again.png")
        assert code == 0, err
        hidden = (tmp_path / "hidden" / f"{name}.png").read_bytes()
        assert (tmp_path / "again.png").read_bytes() == hidden, name
        assert hidden != (tmp_path / "shown" / f"{name}.png").read_bytes(), name


def svg_texts(path) -> list[str]:
    return [html_unescape(t).strip() for t in re.findall(r">([^<>]+)</text>", path.read_text())]


def test_panels_titles_and_scores_reach_the_svg(tiny_model_dir, tmp_path, capsys):
    from analysis.display import format_score
    from analysis.measures.head_scores import previous_token
    from analysis.model.loading import load_model
    from analysis.measures.measured import run_measured

    svg = figure(capsys, tiny_model_dir, tmp_path / "p.svg", "--head", "L1H0,L2H3,L0H1", "--scores",
                 "previous_token", "--width-in", "10", "--dpi", "100", "--title", "Previous-token heads")
    drawn = svg_texts(svg)
    assert {"L1H0", "L2H3", "L0H1", "Previous-token heads"} <= set(drawn)
    result = run_measured(load_model(str(tiny_model_dir), device="cpu"), TEXT)
    prev = previous_token(result.attentions)  # the score computed here from the maps, not by the figure
    scores = [t for t in drawn if t.startswith("previous_token ")]
    assert scores == [f"previous_token {format_score(prev[l, h])}" for l, h in ((1, 0), (2, 3), (0, 1))]
    side = json.loads((tmp_path / "p.json").read_text())
    assert side["heads"] == ["L1H0", "L2H3", "L0H1"] and side["options"]["scores"] == ["previous_token"]
    assert sum(t == "weight" for t in drawn) == 1 and sum(t == "0" for t in drawn) == 1  # one colour bar, one 0
    own = svg_texts(figure(capsys, tiny_model_dir, tmp_path / "o.svg", "--head", "L1H0,L2H3,L0H1", "--own-scales",
                           "--width-in", "10", "--dpi", "100"))
    assert sum(t == "0" for t in own) == 3  # a bar a panel (each starts at 0) ...
    assert sum(t == "weight" for t in own) == 2  # ... labelled once a row (3 panels: 2 a row, 2 rows)


def test_an_unknown_score_is_refused_in_one_sentence(tiny_model_dir, tmp_path, capsys):
    code, _, err = run(capsys, "figure", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x.png",
                       "--head", "L1H0,L2H3", "--scores", "previous")
    assert code == 2 and "Unknown score 'previous'" in err and "previous_token" in err and "Traceback" not in err


def test_own_scales_with_lines_are_refused_in_one_sentence(tiny_model_dir, tmp_path, capsys):
    code, _, err = run(capsys, "figure", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x.png",
                       "--head", "L1H0,L2H3", "--drawing", "lines", "--own-scales")
    assert code == 2 and "--own-scales" in err and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()


def test_a_panel_figure_from_its_options_file_is_the_same_png(tiny_model_dir, tmp_path, capsys):
    first = figure(capsys, tiny_model_dir, tmp_path / "p.png", "--head", "L1H0,L2H3,L0H1,L2H2", "--columns", "4",
                   "--tokens", "2:14", "--renormalise", "--scores", "previous_token,sink", "--width-in", "3.3",
                   "--cmap", "magma")
    assert rgb(first).shape[1] == 990  # 3.3 in at 300 dpi
    code, _, err = run(capsys, "figure", "--from", tmp_path / "p.json", "--out", tmp_path / "again.png")
    assert code == 0, err
    assert (tmp_path / "again.png").read_bytes() == first.read_bytes()
    other = figure(capsys, tiny_model_dir, tmp_path / "q.png", "--head", "L1H0,L2H3,L0H1,L2H2", "--columns", "2",
                   "--tokens", "2:14", "--renormalise", "--scores", "previous_token,sink", "--width-in", "3.3",
                   "--cmap", "magma")
    assert rgb(other).shape[0] > rgb(first).shape[0]  # 2 × 2 is taller than 1 × 4 at the same width


def test_lines_drawing_of_panels_and_of_a_head(tiny_model_dir, tmp_path, capsys):
    drawn = svg_texts(figure(capsys, tiny_model_dir, tmp_path / "l.svg", "--head", "L1H0,L2H3", "--drawing", "lines",
                             "--tokens", "0:10"))
    assert "━ L1H0" in drawn and "━ L2H3" in drawn  # the legend: one colour a head
    one = figure(capsys, tiny_model_dir, tmp_path / "l1.png", "--head", "L1H0", "--drawing", "lines")
    assert rgb(one).shape[0] > 100


def font_size_of(path, label: str) -> float:
    sizes = re.findall(r'font-size="([\d.]+)"[^>]*>\s*' + re.escape(label) + r"</text>", path.read_text())
    assert sizes, label
    return float(sizes[0])


def test_font_pt_reaches_the_token_labels(tiny_model_dir, tmp_path, capsys):
    plain = figure(capsys, tiny_model_dir, tmp_path / "a.svg", "--head", "L1H0", "--tokens", "0:6")
    big = figure(capsys, tiny_model_dir, tmp_path / "b.svg", "--head", "L1H0", "--tokens", "0:6", "--font-pt", "14")
    label = json.loads((tmp_path / "b.json").read_text())["labels"][2]
    assert font_size_of(plain, label) == pytest.approx(8.5 * 96 / 72, abs=0.01)  # the axes' own 8.5 pt
    assert font_size_of(big, label) == pytest.approx(14 * 96 / 72, abs=0.01)  # 14 pt at 96 pixels an inch
    panels = figure(capsys, tiny_model_dir, tmp_path / "c.svg", "--head", "L1H0,L0H0", "--tokens", "0:6",
                    "--font-pt", "12", "--width-in", "10")
    assert font_size_of(panels, label) == pytest.approx(12 * 96 / 72, abs=0.01)


def test_font_pt_leaves_the_applications_font_as_it_was_and_a_missing_folder_is_one_sentence(
        tiny_model_dir, tmp_path, capsys):
    from gui.qt import ensure_qapp

    before = ensure_qapp().font().pointSizeF()
    figure(capsys, tiny_model_dir, tmp_path / "f.png", "--head", "L1H0", "--font-pt", str(before + 5))
    assert ensure_qapp().font().pointSizeF() == before
    code, _, err = run(capsys, "figure", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "no" / "x.png")
    assert code == 2 and "does not exist" in err and "Traceback" not in err and not (tmp_path / "no").exists()


def test_a_heads_scores_follow_its_title(tiny_model_dir, tmp_path, capsys):
    from analysis.display import format_score
    from analysis.measures.head_scores import previous_token, sink
    from analysis.measures.measured import run_measured
    from analysis.model.loading import load_model

    svg = figure(capsys, tiny_model_dir, tmp_path / "h.svg", "--head", "L1H0", "--scores", "previous_token,sink",
                 "--title", "T", "--width-in", "10", "--dpi", "100")
    result = run_measured(load_model(str(tiny_model_dir), device="cpu"), TEXT)
    want = (f"T · previous_token {format_score(previous_token(result.attentions)[1, 0])} · "
            f"sink {format_score(sink(result.attentions)[1, 0])}")
    assert want in svg_texts(svg)


LONG_TITLE = "Figure 3: attention of a previous-token head in a small language model, drawn for a paper"


def pdf_page_width_pt(path) -> float:
    box = re.search(rb"/MediaBox\s*\[\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", path.read_bytes())
    assert box, "no MediaBox"
    return float(box.group(3)) - float(box.group(1))


@pytest.mark.parametrize("what", [("--head", "L1H0"), ("--head", "L1H0,L2H3,L0H1", "--scores", "previous_token,sink"),
                                  ("--badges", "previous_token"), ("--head", "L1H0", "--drawing", "lines")],
                         ids=["head", "panels", "grid", "lines"])
def test_a_long_title_keeps_the_width_asked(tiny_model_dir, tmp_path, capsys, what):
    """A paper's column is 3.3 in: the PNG is 3.3 · dpi pixels wide and the PDF's page 3.3 · 72 pt (within one
    logical pixel, 0.75 pt), the long title wrapped onto lines (its words all there, in order) and never cut."""
    png = figure(capsys, tiny_model_dir, tmp_path / "f.png", *what, "--width-in", "3.3", "--dpi", "200",
                 "--title", LONG_TITLE)
    assert rgb(png).shape[1] == 660
    pdf = figure(capsys, tiny_model_dir, tmp_path / "f.pdf", *what, "--width-in", "3.3", "--title", LONG_TITLE)
    assert abs(pdf_page_width_pt(pdf) - 3.3 * 72) <= 0.75
    svg = figure(capsys, tiny_model_dir, tmp_path / "f.svg", *what, "--width-in", "3.3", "--title", LONG_TITLE)
    texts = [html_unescape(t).strip() for t in re.findall(r">([^<>]+)</text>", svg.read_text())]
    words = LONG_TITLE.split()
    lines = [t for t in texts if t and t.split()[0] in words and all(w in words for w in t.split())]
    assert " ".join(lines[:len(lines)]).split()[:len(words)] == words, texts  # wrapped, whole, in order
    assert len([t for t in lines if t.split()[0] == words[0]]) == 1 and len(lines) >= 2


def title_ink_height(path) -> int:
    """The height in pixels of the dark ink of the figure's first line of text from the top (its title)."""
    dark = (rgb(path).min(axis=2) < 128).any(axis=1)
    rows = np.flatnonzero(dark)
    first = rows[0]
    end = first
    while end + 1 < len(dark) and dark[end + 1]:
        end += 1
    return end - first + 1


@pytest.mark.parametrize("what", [("--head", "L1H0"), ("--head", "L1H0,L2H3"), ()], ids=["head", "panels", "grid"])
def test_text_heights_in_the_png_follow_font_pt(tiny_model_dir, tmp_path, capsys, what):
    """The title "HH" is font_pt · 11/8.5 points: its capitals' ink ~0.73 em tall (DejaVu Sans), twice as tall at
    twice the font, at the same width and dpi; and the labels of the SVG are at font_pt (pixels at 96 an inch)."""
    heights = {}
    for pt in (8, 16):
        png = figure(capsys, tiny_model_dir, tmp_path / f"f{pt}.png", *what, "--width-in", "10", "--dpi", "100",
                     "--title", "HH", "--font-pt", str(pt))
        heights[pt] = title_ink_height(png)
        em = pt * 11 / 8.5 * 100 / 72  # the title's em in PNG pixels
        assert 0.6 * em <= heights[pt] <= 0.85 * em, (pt, heights[pt], em)
    assert heights[16] / heights[8] == pytest.approx(2, rel=0.12)
    svg = figure(capsys, tiny_model_dir, tmp_path / "f.svg", *what, "--width-in", "10", "--font-pt", "13")
    sizes = {float(v) for v in re.findall(r'font-size="([\d.]+)"', svg.read_text())}
    assert any(abs(v - 13 * 96 / 72) < 0.01 for v in sizes), sizes  # the labels, the colour bar's numbers
    assert any(abs(v - 13 * 11 / 8.5 * 96 / 72) < 0.05 for v in sizes), sizes  # the title
