"""Exported figures are faithful to the PNG: a PDF's heatmap and colour bar are stored lossless (Flate, never
JPEG: JPEG shifted a channel by up to 18/255, 0.019 in weight read back through viridis) and every cell has the
PNG's exact colour; an SVG's images are embedded enlarged by nearest neighbour, so that renderers which smooth
images (rsvg-convert, ImageMagick) still draw each cell in one colour with a sharp edge. A figure onto a
full disk raises the disk's own error. The Export dialog offers the formats of the format table."""
import errno
import os
import re
import shutil
import subprocess
import zlib

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui  # noqa: E402

N = 14  # tokens: cells of ~35 px in the exported head figure


def causal(n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((n, n)).astype(np.float32) * np.tri(n, dtype=np.float32)
    return w / w.sum(-1, keepdims=True)


class Result:
    n_layer, n_head = 2, 2
    attentions = np.stack([np.stack([causal(N, seed=2 * layer + head) for head in range(2)]) for layer in range(2)])
    thumbnails, tokens, n_tokens, model_label, causal = None, tuple(f"t{i}" for i in range(N)), N, "m", True
    head_map = staticmethod(lambda layer, head: Result.attentions[layer, head])


@pytest.fixture
def head_export(qtbot, tmp_path):
    """The head figure of layer 1, head 0 saved as PNG, PDF and SVG, and where its map lies (x, y, width, height
    in figure pixels, which are PNG pixels and PDF points)."""
    from gui.plots.figures import dispose_figure, offscreen_head_figure
    from gui.export.figure_files import save_figure

    fig = offscreen_head_figure(Result, 1, 0)
    try:
        paths = {fmt: save_figure(fig, tmp_path / f"head.{fmt}") for fmt in ("png", "pdf", "svg")}
        origin = fig.mapToScene(fig.viewport().rect()).boundingRect().topLeft()
        rect = fig.image.mapRectToScene(fig.image.boundingRect()).translated(-origin)
    finally:
        dispose_figure(fig)
    return paths, (rect.x(), rect.y(), rect.width(), rect.height())


def rgb(path) -> np.ndarray:
    """(height, width, 3) int RGB of an image file (transparent pixels as stored: render onto white first)."""
    image = QtGui.QImage(str(path)).convertToFormat(QtGui.QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    return pixels[:, : image.width(), 2::-1].astype(int)  # BGRA in memory → RGB


def cell_edges(rect, n=N):
    """Pixel-column and pixel-row boundaries of the n × n cells (floats)."""
    x, y, w, h = rect
    return x + np.arange(n + 1) * w / n, y + np.arange(n + 1) * h / n


def centres(rect, n=N):
    xs, ys = cell_edges(rect, n)
    return ((xs[:-1] + xs[1:]) / 2).astype(int), ((ys[:-1] + ys[1:]) / 2).astype(int)


def pdf_images(data: bytes) -> list[dict]:
    """Every image XObject of an uncompressed-object PDF (as Qt writes it): its dictionary entries and stream."""
    found = []
    for match in re.finditer(rb"<<\s*/Type /XObject\s*/Subtype /Image(.*?)>>\s*stream\r?\n", data, re.S):
        entries = dict(re.findall(rb"/(\w+) ([^\n/]*(?:/\w+)?)", match.group(1)))
        entries = {k.decode(): v.strip().decode() for k, v in entries.items()}
        length = re.search(rb"/Length (\d+)( 0 R)?", match.group(1))
        if length.group(2):  # an indirect length: "12 0 R" → object 12 holds the number
            length = int(re.search(rb"\n%s 0 obj\s*(\d+)" % length.group(1), data).group(1))
        else:
            length = int(length.group(1))
        entries["stream"] = data[match.end(): match.end() + length]
        found.append(entries)
    return found


def test_pdf_images_are_flate_not_jpeg(qtbot, tmp_path, head_export):
    from gui.plots.figures import dispose_figure, offscreen_grid_figure
    from gui.export.figure_files import save_figure

    grid = offscreen_grid_figure(Result)
    try:
        grid_pdf = save_figure(grid, tmp_path / "grid.pdf")
    finally:
        dispose_figure(grid)
    for path in (head_export[0]["pdf"], grid_pdf):
        data = path.read_bytes()
        images = pdf_images(data)
        assert len([i for i in images if i.get("ImageMask") != "true"]) >= 2, images  # the map and the colour bar
        assert all(image.get("Filter") == "/FlateDecode" for image in images), [i.get("Filter") for i in images]
        assert b"DCTDecode" not in data
        if shutil.which("pdfimages"):
            listing = subprocess.run(["pdfimages", "-list", str(path)], capture_output=True, text=True, check=True)
            rows = [line.split() for line in listing.stdout.splitlines()[2:] if line.strip()]
            assert rows and all(row[8] != "jpeg" for row in rows), listing.stdout  # column "enc"


def test_the_pdf_stores_the_png_colour_of_every_cell(qtbot, head_export):
    """Read back without any renderer: the map's embedded n × n RGB stream holds, for every visible cell, the
    PNG's colour, and that is viridis at the weight (one step of pyqtgraph's 256-colour table: measured ≤ 2;
    JPEG was 18 off)."""
    from gui.plots.plot_items import colormap

    paths, rect = head_export
    from gui.export.figure_files import svg_image_upscale

    f, _ = svg_image_upscale(N, N)  # the PDF's image is enlarged by pixel repetition, as the SVG's
    (heatmap,) = [i for i in pdf_images(paths["pdf"].read_bytes()) if i.get("Width") == str(N * f)
                  and i.get("ColorSpace") == "/DeviceRGB"]
    assert heatmap["Filter"] == "/FlateDecode"
    big = np.frombuffer(zlib.decompress(heatmap["stream"]), np.uint8).reshape(N * f, N * f, 3).astype(int)
    stored = big[f // 2:: f, f // 2:: f]  # one pixel of each cell ...
    np.testing.assert_array_equal(big, np.repeat(np.repeat(stored, f, 0), f, 1))  # ... repeated over the cell
    png = rgb(paths["png"])
    cx, cy = centres(rect)
    weights = Result.attentions[1, 0]
    expected = colormap("viridis").map(weights.reshape(-1), mode="byte")[:, :3].reshape(N, N, 3).astype(int)
    visible = np.tri(N, dtype=bool)  # the future keys are masked (transparent in the image)
    png_cells = png[cy[:, None], cx[None, :]]
    np.testing.assert_array_equal(stored[visible], png_cells[visible])
    assert np.abs(png_cells[visible] - expected[visible]).max() <= 3


@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="pdftoppm (poppler-utils) is not installed")
def test_the_pdf_renders_every_cell_in_the_png_colour(qtbot, head_export, tmp_path):
    """Rendered at 96 dpi (the page is the figure at 96 pixels an inch: a rendered pixel is a figure pixel), each
    cell's centre, masked ones included, is the PNG's pixel exactly."""
    paths, rect = head_export
    subprocess.run(["pdftoppm", "-r", "96", "-png", "-singlefile", str(paths["pdf"]), str(tmp_path / "pdf")],
                   check=True, capture_output=True)
    drawn, png = rgb(tmp_path / "pdf.png"), rgb(paths["png"])
    cx, cy = centres(rect)
    np.testing.assert_array_equal(drawn[cy[:, None], cx[None, :]], png[cy[:, None], cx[None, :]])


@pytest.mark.parametrize("renderer", ["pdftoppm", "mutool"])
def test_the_pdf_cells_render_sharp_when_enlarged(qtbot, head_export, tmp_path, renderer):
    """Rendered at 4 × the figure's size (384 dpi), the inside of every cell is one colour, in two renderers: the
    enlarged image is drawn in place and nothing smooths it. (pdftoppm and mutool draw an n × n image sharp too; the
    test that fails on an unenlarged image is test_the_pdf_stores_the_png_colour_of_every_cell.)"""
    if shutil.which(renderer) is None:
        pytest.skip(f"{renderer} is not installed")
    paths, (x, y, w, h) = head_export
    zoom = 4
    out = tmp_path / "r.png"
    if renderer == "pdftoppm":
        subprocess.run(["pdftoppm", "-r", str(96 * zoom), "-png", "-singlefile", str(paths["pdf"]),
                        str(tmp_path / "r")], check=True, capture_output=True)
    else:
        subprocess.run(["mutool", "draw", "-r", str(96 * zoom), "-o", str(out), str(paths["pdf"])],
                       check=True, capture_output=True)
    drawn = rgb(out)
    cw, ch = w / N * zoom, h / N * zoom
    spread = 0
    for q in range(N):
        for k in range(N):
            x0, y0 = x * zoom + k * cw, y * zoom + q * ch
            inner = drawn[int(y0 + 0.2 * ch): int(y0 + 0.8 * ch), int(x0 + 0.2 * cw): int(x0 + 0.8 * cw)]
            spread = max(spread, int(np.ptp(inner.reshape(-1, 3), axis=0).max()))
    assert spread <= 2, spread


def svg_images(text: str):
    """(attributes, PNG image) of every image embedded in an SVG."""
    import base64

    out = []
    for attrs, data in re.findall(r'<image\b([^>]*?)\s*xlink:href="data:image/png;base64,([^"]*)"', text):
        out.append((attrs, QtGui.QImage.fromData(base64.b64decode(data), "PNG")))
    return out


def test_svg_images_are_embedded_enlarged_and_ask_for_pixelated_drawing(qtbot, head_export):
    from gui.export.figure_files import SVG_IMAGE_MIN_UPSCALE

    paths, rect = head_export
    images = svg_images(paths["svg"].read_text(encoding="utf-8"))
    assert len(images) == 2  # the map and the colour bar
    for attrs, image in images:
        assert 'style="image-rendering:pixelated"' in attrs and 'image-rendering="optimizeSpeed"' in attrs
    (attrs, image), = [(a, i) for a, i in images if 'width="14"' in a]
    assert 'height="14"' in attrs  # drawn at the same place and size: 14 × 14 user units, scaled by its group
    cell_px = rect[2] / N, rect[3] / N  # ~35 figure pixels a cell: at least as many image pixels a cell
    assert image.width() % N == 0 and image.height() % N == 0
    assert image.width() // N >= max(SVG_IMAGE_MIN_UPSCALE, cell_px[0])
    assert image.height() // N >= max(SVG_IMAGE_MIN_UPSCALE, cell_px[1])


@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="rsvg-convert (librsvg2-bin) is not installed")
def test_rsvg_draws_crisp_cells_in_the_png_colours(qtbot, head_export, tmp_path):
    """rsvg-convert smooths embedded images (it ignores image-rendering): each cell's centre is still the PNG's
    colour, and the first whole pixel inside each edge a cell shares with another cell (the causal mask's edge
    included) equals the centre (measured with the n × n image Qt embeds: up to 253/255 off, cells ran together)."""
    paths, rect = head_export
    subprocess.run(["rsvg-convert", "-b", "white", "-o", str(tmp_path / "svg.png"), str(paths["svg"])],
                   check=True, capture_output=True)
    drawn, png = rgb(tmp_path / "svg.png"), rgb(paths["png"])
    xs, ys = cell_edges(rect)
    cx, cy = centres(rect)
    np.testing.assert_array_equal(drawn[cy[:, None], cx[None, :]], png[cy[:, None], cx[None, :]])
    for q in range(N):
        for k in range(N):
            centre = drawn[cy[q], cx[k]]
            left, right = int(np.ceil(xs[k])), int(np.floor(xs[k + 1])) - 1  # whole pixels inside the cell
            top, bottom = int(np.ceil(ys[q])), int(np.floor(ys[q + 1])) - 1
            inside = [(left, cy[q]) if k > 0 else None, (right, cy[q]) if k < N - 1 else None,
                      (cx[k], top) if q > 0 else None, (cx[k], bottom) if q < N - 1 else None]
            for x, y in filter(None, inside):  # the map's outer edges lie under the axes: edges between cells
                assert (drawn[y, x] == centre).all(), (q, k, x, y, drawn[y, x], centre)


def test_svg_image_upscale_factors_and_their_cap():
    from gui.export.figure_files import SVG_IMAGE_MAX_PIXELS, SVG_IMAGE_MIN_UPSCALE, svg_image_upscale

    assert SVG_IMAGE_MIN_UPSCALE == 16 and SVG_IMAGE_MAX_PIXELS == 4096 ** 2
    assert svg_image_upscale(14, 14, 35.4, 37.1) == (36, 38)  # at least a pixel per figure pixel
    assert svg_image_upscale(14, 14) == (16, 16)  # at least SVG_IMAGE_MIN_UPSCALE a cell
    assert svg_image_upscale(1, 256, 14, -1.89) == (16, 16)  # a colour bar (Qt flips it: a negative scale)
    fx, fy = svg_image_upscale(1024, 1024, 2.34, 2.34)  # a 1024-token head: capped, still 4 pixels a cell
    assert (fx, fy) == (4, 4) and 1024 * 1024 * fx * fy <= SVG_IMAGE_MAX_PIXELS
    fx, fy = svg_image_upscale(300, 100, 20, 60)
    assert 300 * 100 * fx * fy <= SVG_IMAGE_MAX_PIXELS and fy > fx >= 1  # shrunk together
    assert svg_image_upscale(5000, 5000) == (1, 1)  # an image already past the cap is kept as it is


def test_upscaled_png_repeats_every_pixel_exactly(qtbot):
    from gui.export.figure_files import upscaled_png

    image = QtGui.QImage(3, 2, QtGui.QImage.Format.Format_ARGB32)
    colours = [[QtGui.QColor(10, 20, 30), QtGui.QColor(200, 0, 7, 128), QtGui.QColor(0, 0, 0, 0)],
               [QtGui.QColor(255, 255, 255), QtGui.QColor(1, 2, 3), QtGui.QColor(68, 1, 84)]]
    for y, row in enumerate(colours):
        for x, colour in enumerate(row):
            image.setPixelColor(x, y, colour)
    big = QtGui.QImage.fromData(upscaled_png(image, 4, 5), "PNG").convertToFormat(QtGui.QImage.Format.Format_ARGB32)
    assert (big.width(), big.height()) == (12, 10)
    for y in range(10):
        for x in range(12):
            want = colours[y // 5][x // 4]
            if want.alpha() == 0:
                assert big.pixelColor(x, y).alpha() == 0
            else:
                assert big.pixelColor(x, y) == want, (x, y)


def test_svg_with_crisp_images_keeps_the_rest_of_the_svg(qtbot):
    import base64

    from gui.export.figure_files import svg_with_crisp_images

    tiny = QtGui.QImage(2, 2, QtGui.QImage.Format.Format_RGB32)
    tiny.fill(QtGui.QColor("red"))
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    tiny.save(buffer, "PNG")
    data = base64.b64encode(bytes(buffer.data())).decode()
    text = ('<svg><g transform="matrix(40,0,0,20,5,6)">\n<image x="0" y="0" width="2" height="2" '
            f'preserveAspectRatio="none" image-rendering="optimizeSpeed" xlink:href="data:image/png;base64,{data}"'
            ' />\n</g><text>x</text></svg>')
    out = svg_with_crisp_images(text)
    (attrs, image), = svg_images(out)
    assert (image.width(), image.height()) == (2 * 40, 2 * 20)  # 40 × 20 figure pixels an image pixel
    assert out.startswith('<svg><g transform="matrix(40,0,0,20,5,6)">')
    assert out.endswith(' />\n</g><text>x</text></svg>')
    assert 'width="2" height="2"' in attrs


# ----------------------------------------------------------------------------- a full disk says so
@pytest.fixture
def head_figure(tiny_result):
    from gui.plots.figures import dispose_figure, offscreen_head_figure
    from gui.qt import ensure_qapp

    ensure_qapp()
    fig = offscreen_head_figure(tiny_result, 0, 0)
    yield fig
    dispose_figure(fig)


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_a_figure_onto_a_full_disk_raises_the_disks_own_error_and_libpng_says_nothing(head_figure, tmp_path, capfd,
                                                                                      fmt):
    """/dev/full is a disk that is always full. Qt wrote the files itself: libpng printed "libpng error: Write
    Error" on stderr and the error gave no reason, under the path of what was often a hidden staging file."""
    from gui.export.figure_files import save_figure

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    target = tmp_path / f"head.{fmt}"
    target.symlink_to("/dev/full")  # writing there is writing onto a full disk
    with pytest.raises(OSError) as caught:
        save_figure(head_figure, target)
    assert caught.value.errno == errno.ENOSPC
    assert "libpng" not in capfd.readouterr().err
    ok = save_figure(head_figure, tmp_path / f"fine.{fmt}")
    assert ok.stat().st_size > 0


# ----------------------------------------------------------------------------- the dialog reads the format table
def test_the_export_dialog_offers_the_formats_of_the_format_table(qtbot, tmp_path):
    from analysis.export.formats import DATA_FORMATS, IMAGE_FORMATS
    from gui.export.export_dialog import ExportDialog

    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)
    dialog = ExportDialog(None, settings)
    qtbot.addWidget(dialog)
    offered = {}
    for index in range(dialog.what_choice.count()):
        dialog.what_choice.setCurrentIndex(index)
        offered[dialog.what()] = tuple(dialog.format_choice.itemText(i) for i in range(dialog.format_choice.count()))
    assert offered["head"] == IMAGE_FORMATS + tuple(DATA_FORMATS)
    assert offered["grid"] == IMAGE_FORMATS + tuple(name for name, fmt in DATA_FORMATS.items() if fmt.for_grid)
    assert offered["heads"] == offered["everything"] == IMAGE_FORMATS and offered["data"] == ()


def test_an_image_format_not_in_the_format_table_is_refused_in_a_sentence(head_figure, tmp_path):
    from analysis.errors import ExportError
    from gui.export.figure_files import save_figure

    with pytest.raises(ExportError, match=r"^Unknown image format 'gif'; use png, svg or pdf\.$"):
        save_figure(head_figure, tmp_path / "head.gif")
    assert not (tmp_path / "head.gif").exists()


def test_the_pdf_page_is_the_figures_size_on_paper(qtbot, head_figure):
    """The scene is laid out at 96 logical pixels an inch; the PDF page is that size at 72 points an inch (a figure
    laid out 3.3 in wide is a 3.3 in page), not a point per pixel (1⅓ times larger)."""
    import re

    from gui.export.figure_files import figure_bytes

    data = figure_bytes(head_figure, "pdf")
    box = [float(v) for v in re.search(rb"/MediaBox\s*\[\s*([\d.\s]+)\]", data).group(1).split()]
    source = head_figure.mapToScene(head_figure.viewport().rect()).boundingRect()
    assert box[2] - box[0] == pytest.approx(source.width() * 72 / 96, abs=1)
    assert box[3] - box[1] == pytest.approx(source.height() * 72 / 96, abs=1)
