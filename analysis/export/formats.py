"""The export formats, in one table: the CLI's choices and the GUI's dialog and exports read it.

Adding a data format is one :class:`DataFormat` in :data:`DATA_FORMATS` (plus its test): its name is
the file extension the window accepts, and its two writers say what a file of one head and a file of
every head hold. Images are drawn by the GUI's figure code (gui/export/figure_files.py ``save_figure``,
by the file's extension), so an image format is a name here and a way to draw it there.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..measures.head_scores import HeadScores
from ..run.inference import AttentionResult
from . import writers

IMAGE_FORMATS = ("png", "svg", "pdf")


@dataclass(frozen=True)
class DataFormat:
    """A data file of one result, as the window exports it to one file."""

    name: str  # the file extension, without the dot
    head: Callable[[AttentionResult, Path, int, int], object]  # (result, path, layer, head): one head's map
    grid: Callable[[AttentionResult, HeadScores, Path], object]  # (result, scores, path): every head
    # offered for the grid in the Export dialog: the grid is a picture of every head, and its data
    # counterpart is every head's weights (npz), not a table
    for_grid: bool = False


#: name → format, in the order the Export dialog lists them
DATA_FORMATS: dict[str, DataFormat] = {f.name: f for f in (
    DataFormat("npz", head=lambda r, path, layer, head: writers.write_attention_npz(r, path, layer, head),
               grid=lambda r, scores, path: writers.write_attention_npz(r, path), for_grid=True),
    # as a table, every head is its scores
    DataFormat("csv", head=lambda r, path, layer, head: writers.write_head_csv(r, path, layer, head),
               grid=lambda r, scores, path: writers.write_scores_csv(scores, path)),
    DataFormat("json", head=lambda r, path, layer, head: writers.write_result_json(r, path, layer=layer, head=head),
               grid=lambda r, scores, path: writers.write_result_json(r, path, scores)),
)}
