"""Figures to files: PNG (a width in pixels), SVG and PDF of any figure widget, drawn like the PNG.

- :func:`save_figure`: the format by the file's extension. The file is drawn and encoded in memory
  (:func:`figure_bytes`) and written by Python, so a full disk is an OSError that says so, never a stray
  "libpng error" line. SVG and PDF go through Qt's own paint devices (pyqtgraph 0.14's SVGExporter fails
  on Qt 6.11's path data, and it has no PDF exporter).
- PDF images are lossless (``LosslessImageRendering``: Qt writes JPEG otherwise) and SVG images are
  enlarged by pixel repetition (:func:`svg_with_crisp_images`): every viewer draws sharp cells in the
  PNG's colours. SVG text falls back to common fonts (:func:`svg_with_font_fallback`).
"""
from __future__ import annotations

import base64
import contextlib
import math
import re
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (registers the exporters)
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.errors import ExportError
from analysis.export.formats import IMAGE_FORMATS

#: What an SVG's text falls back to in viewers without Qt's font (Qt writes its own alias, "Sans Serif",
#: which is no CSS family: a browser would draw serif text).
SVG_FALLBACK_FAMILIES = ("DejaVu Sans", "Arial", "Helvetica")
SVG_FONT_FALLBACK = ", ".join(f"'{name}'" for name in SVG_FALLBACK_FAMILIES) + ", sans-serif"
QT_FONT_ALIASES = {"sans serif", "sans", "sansserif", "sans-serif"}


PDF_POINTS_A_PIXEL = 72 / 96  # a PDF page's points per logical pixel of the scene (72 and 96 an inch)


def settle_layout() -> None:
    """Let pending layout requests run: a change of axis text can re-lay out the figure twice."""
    for _ in range(3):
        QtWidgets.QApplication.processEvents()


def svg_with_font_fallback(text: str) -> str:
    """SVG text whose every ``font-family`` ends in generic CSS fallbacks (:data:`SVG_FONT_FALLBACK`); Qt's own
    alias ("Sans Serif") is dropped, a real family is kept in front."""
    def fallback(match: re.Match) -> str:
        names = [n.strip().strip("'\"") for n in match.group(1).split(",")]
        kept = [n for n in names if n and n.lower() not in QT_FONT_ALIASES and n not in SVG_FALLBACK_FAMILIES]
        return 'font-family="' + ", ".join([f"'{n}'" for n in kept] + [SVG_FONT_FALLBACK]) + '"'

    return re.sub(r'font-family="([^"]*)"', fallback, text)


#: An SVG's embedded images (heatmap, colour bar) are enlarged by nearest neighbour to at least this many pixels
#: per data cell, and to at least :data:`SVG_IMAGE_OVERSAMPLE` pixels per figure pixel that a cell covers ...
SVG_IMAGE_MIN_UPSCALE = 16
SVG_IMAGE_OVERSAMPLE = 1
#: ... but never past this many pixels per image (4096²: a 1024-token head gets 4 pixels a cell, a 128-token head
#: 16; measured ~0.5 s and ~0.3 MB for 128 tokens). Renderers that smooth embedded images (rsvg-convert and
#: ImageMagick ignore image-rendering) then blur only within a fraction of a cell, so cells and the causal
#: mask's edge stay crisp.
SVG_IMAGE_MAX_PIXELS = 4096 * 4096
_SVG_PNG_IMAGE = re.compile(r'<image\b(?P<attrs>[^>]*?)\s*xlink:href="data:image/png;base64,(?P<data>[^"]*)"')
_SVG_MATRIX = re.compile(r'transform="matrix\(([^)]*)\)"')


def svg_image_upscale(width: int, height: int, drawn_x: float = 1.0, drawn_y: float = 1.0) -> tuple[int, int]:
    """Integer (x, y) factors by which an SVG's ``width`` × ``height`` image is enlarged (nearest neighbour):
    per axis max(:data:`SVG_IMAGE_MIN_UPSCALE`, ⌈:data:`SVG_IMAGE_OVERSAMPLE` · drawn⌉), ``drawn`` being the
    figure pixels one image pixel covers; both shrunk together (never below 1) so that the enlarged image has at
    most :data:`SVG_IMAGE_MAX_PIXELS` pixels, unless the image alone is larger."""
    fx = max(SVG_IMAGE_MIN_UPSCALE, math.ceil(SVG_IMAGE_OVERSAMPLE * abs(drawn_x) - 1e-9))
    fy = max(SVG_IMAGE_MIN_UPSCALE, math.ceil(SVG_IMAGE_OVERSAMPLE * abs(drawn_y) - 1e-9))
    pixels = width * height * fx * fy
    if pixels > SVG_IMAGE_MAX_PIXELS:
        shrink = math.sqrt(SVG_IMAGE_MAX_PIXELS / pixels)
        fx, fy = max(1, math.floor(fx * shrink)), max(1, math.floor(fy * shrink))
    return fx, fy


def upscaled_png(image: QtGui.QImage, fx: int, fy: int) -> bytes:
    """``image`` as PNG with every pixel repeated ``fx`` times across and ``fy`` times down (colours and alpha
    kept exactly)."""
    image = image.convertToFormat(QtGui.QImage.Format.Format_ARGB32)
    w, h = image.width(), image.height()
    pixels = np.frombuffer(image.constBits(), np.uint8).reshape(h, image.bytesPerLine())[:, : 4 * w]
    pixels = np.repeat(np.repeat(pixels.reshape(h, w, 4), fy, axis=0), fx, axis=1)  # (h·fy, w·fx, BGRA)
    pixels = np.ascontiguousarray(pixels)
    big = QtGui.QImage(pixels.data, w * fx, h * fy, 4 * w * fx, QtGui.QImage.Format.Format_ARGB32)
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    big.save(buffer, "PNG")
    return bytes(buffer.data())


def svg_with_crisp_images(text: str) -> str:
    """SVG text whose embedded PNG images are enlarged by :func:`svg_image_upscale` (drawn at the same place and
    size) and ask for pixelated drawing (``style="image-rendering:pixelated"`` for browsers; the SVG 1.1
    ``optimizeSpeed`` attribute stays for the rest), so that a heatmap's cells have sharp edges even in a renderer
    that smooths images. Qt writes each image right after a group whose ``matrix(a,b,c,d,e,f)`` places it."""
    def crisp(match: re.Match) -> str:
        data = base64.b64decode(match.group("data"))
        image = QtGui.QImage.fromData(data, "PNG")
        if image.isNull():
            return match.group(0)
        matrix = _SVG_MATRIX.findall(text, 0, match.start())
        drawn_x = drawn_y = 1.0
        if matrix:
            try:
                a, b, c, d = (float(v) for v in matrix[-1].split(",")[:4])
                drawn_x, drawn_y = math.hypot(a, b), math.hypot(c, d)
            except ValueError:
                pass
        fx, fy = svg_image_upscale(image.width(), image.height(), drawn_x, drawn_y)
        attrs = match.group("attrs")
        if "style=" not in attrs:
            attrs += ' style="image-rendering:pixelated"'
        encoded = base64.b64encode(upscaled_png(image, fx, fy)).decode("ascii")
        return f'<image{attrs} xlink:href="data:image/png;base64,{encoded}"'

    return _SVG_PNG_IMAGE.sub(crisp, text)


@contextlib.contextmanager
def _nothing():
    yield


@contextlib.contextmanager
def enlarged_images(scene: QtWidgets.QGraphicsScene):
    """While drawing a PDF: every pyqtgraph image of ``scene`` paints its QImage enlarged by pixel repetition
    (:func:`svg_image_upscale` factors, as the SVG's), drawn at the same place and size, so that a PDF viewer which
    smooths small images (most do: a 25 × 25 image has no /Interpolate false) blurs within a fraction of a cell.
    Each image's own QImage is back afterwards."""
    swapped = []
    for item in scene.items():
        if not isinstance(item, pg.ImageItem) or item.image is None:
            continue
        if item._renderRequired:
            item.render()
        image = item.qimage
        if image is None or image.isNull():
            continue
        fx, fy = svg_image_upscale(image.width(), image.height())
        big = QtGui.QImage.fromData(upscaled_png(image, fx, fy), "PNG")
        swapped.append((item, image))
        item.qimage = big
    try:
        yield
    finally:
        for item, image in swapped:
            item.qimage = image


def figure_background(widget: QtWidgets.QGraphicsView) -> QtGui.QColor:
    """The colour behind a figure (the theme's, see plot_items.apply_theme); white when the view has none."""
    color = QtGui.QColor(widget.backgroundBrush().color())
    if widget.backgroundBrush().style() == QtCore.Qt.BrushStyle.NoBrush or color.alpha() == 0:
        return QtGui.QColor("#ffffff")
    return color


def _buffer() -> QtCore.QBuffer:
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    return buffer


def figure_bytes(widget: pg.GraphicsLayoutWidget, fmt: str, width_px: int | None = None) -> bytes:
    """The figure as the bytes of a PNG (``width_px`` wide), SVG or PDF file, drawn and encoded in memory.

    Nothing here touches the disk: Qt's encoders never see a full disk (libpng would print its own
    "libpng error: Write Error" line, and Qt gives no reason), so the file is written by Python, whose
    OSError says why. PDF: images are Flate-compressed (QPainter's LosslessImageRendering hint; without it
    QPdfEngine stores colour images as JPEG, whose colours drift). SVG: see :func:`svg_with_crisp_images`
    and :func:`svg_with_font_fallback`."""
    if fmt not in IMAGE_FORMATS:
        raise ExportError(f"Unknown image format '{fmt}'; use {', '.join(IMAGE_FORMATS[:-1])} or {IMAGE_FORMATS[-1]}.")
    settle_layout()
    buffer = _buffer()
    if fmt == "png":
        exporter = pg.exporters.ImageExporter(widget.scene())
        if width_px:
            exporter.parameters()["width"] = int(width_px)
        exporter.parameters()["antialias"] = True
        image = exporter.export(toBytes=True)
        if image is None or image.isNull() or not image.save(buffer, "PNG"):
            raise ExportError("The figure could not be drawn as a PNG image (is it too large?).")
        return bytes(buffer.data())
    # Vector output through Qt's own paint devices: pyqtgraph 0.14's SVGExporter fails on
    # Qt 6.11's path data ("not enough values to unpack"), and it has no PDF exporter.
    scene = widget.scene()
    source = widget.mapToScene(widget.viewport().rect()).boundingRect()
    if fmt == "svg":
        from PySide6.QtSvg import QSvgGenerator

        device = QSvgGenerator()
        device.setOutputDevice(buffer)
        device.setSize(source.size().toSize())
        # the scene is laid out at 96 logical dpi; the generator's default 72 would draw text and
        # axes at 0.75 of their size around a full-size heatmap (the misaligned SVG of issue 11)
        device.setResolution(96)
        device.setViewBox(QtCore.QRectF(0, 0, source.width(), source.height()))
        device.setTitle(widget.windowTitle() or "AttnScope figure")
    else:
        device = QtGui.QPdfWriter(buffer)
        device.setResolution(96)
        # the page is the figure's size on paper: the scene's logical pixels at 96 an inch, 72 points an inch (a
        # figure laid out 3.3 in wide is a 3.3 in page, its text at its point size; a pixel a point made it 1⅓ larger)
        device.setPageSize(QtGui.QPageSize(QtCore.QSizeF(source.width() * PDF_POINTS_A_PIXEL,
                                                         source.height() * PDF_POINTS_A_PIXEL),
                                           QtGui.QPageSize.Unit.Point))
        device.setPageMargins(QtCore.QMarginsF(0, 0, 0, 0))
    painter = QtGui.QPainter()
    if not painter.begin(device):
        raise ExportError(f"The figure could not be drawn as {fmt.upper()}.")
    painter.setRenderHint(QtGui.QPainter.RenderHint.LosslessImageRendering, True)
    if fmt == "svg":  # an SVG is transparent where nothing is drawn: paint the figure's background, as
        painter.fillRect(QtCore.QRectF(0, 0, source.width(), source.height()),  # PNG and PDF have it
                         figure_background(widget))
    with enlarged_images(scene) if fmt == "pdf" else _nothing():
        scene.render(painter, QtCore.QRectF(0, 0, source.width(), source.height()) if fmt == "svg"
                     else QtCore.QRectF(painter.viewport()), source)
    painter.end()
    del painter, device  # finish the document now
    data = bytes(buffer.data())
    if fmt == "svg":
        data = svg_with_crisp_images(svg_with_font_fallback(data.decode("utf-8"))).encode("utf-8")
    return data


def save_figure(widget: pg.GraphicsLayoutWidget, path: Path, width_px: int | None = None) -> Path:
    """Write the figure as PNG (``width_px`` wide), SVG or PDF, chosen by the file's extension
    (:func:`figure_bytes`).

    A figure that cannot be drawn is an ExportError; a file that cannot be written (a full disk, no
    permission) is the OSError itself, for the caller to name the place the user chose (the path here is
    often a hidden staging file)."""
    path = Path(path)
    data = figure_bytes(widget, path.suffix.lower().lstrip("."), width_px)
    if not data:
        raise ExportError(f"The figure {path.name} came out empty.")
    with open(path, "wb") as f:
        f.write(data)
    return path
