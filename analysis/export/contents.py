"""What an export holds: the one definition the command line (``main.py export``, ``main.py scan``) and the
window's Export… both call, so that both write the same files with the same bytes.

An export folder of one result (:func:`export_contents`, then :func:`write_export`) holds attention.npz
(every head's weights, with ``rollout`` and ``value_norms``), scores.csv, scores_tl.csv, parity.json, the
figures when an image writer is given (:func:`figure_files` names them), and summary.json. Figures are Qt
widgets, drawn by the GUI's figure code: the caller passes in the writer that draws them, so this module
stays free of Qt.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import ExportError
from ..measures.head_scores import HeadScores
from ..measures.lenses import SINK_EPSILON, rollout as attention_rollout, value_norms
from ..measures.parity import ParityReport, parity_report
from ..measures.scan import ScanResult
from ..run.inference import AttentionResult
from . import writers
from .folders import Written, write_folder_atomically

ImageWriter = Callable[[Path], list[Path]]  # draws images into a folder, returns the files written


def figure_files(n_layer: int, n_head: int, fmt: str,
                 heads_folder: str = "heads/") -> list[tuple[str, int | None, int | None]]:
    """(file name relative to the export, layer, head) of every figure of an export, in the order drawn:
    ``grid.<fmt>`` (layer and head None), then ``<heads_folder>L<layer>H<head>.<fmt>`` for every head."""
    return [(f"grid.{fmt}", None, None)] + [(f"{heads_folder}L{l}H{h}.{fmt}", l, h)
                                            for l in range(n_layer) for h in range(n_head)]


@dataclass(frozen=True)
class ExportContents:
    """What the export folder of one result holds, computed before anything is written (parity and the
    value norms need the model)."""

    result: AttentionResult
    scores: HeadScores
    parity: ParityReport
    # float32 (layer, head, query, key): lenses.value_norms, A[i, j] · ‖f_h(x_j)‖; None: attention.npz has none
    value_norms: np.ndarray | None = None
    sink_epsilon: float = SINK_EPSILON  # summary.json's sink rate counts first-token scores above it
    tl_options: dict | None = None  # scores_tl.csv's options: write_tl_scores_csv's keywords (None: TL's defaults)
    value_norms_s: float = 0.0  # seconds the value norms took

    @property
    def timings(self) -> dict[str, float]:
        """How long the parts computed here took, for summary.json's ``timings``."""
        return {"parity_s": self.parity.seconds, "value_norms_s": self.value_norms_s}


def export_contents(loaded, result: AttentionResult, scores: HeadScores, *, parity_dtype: str = "float32",
                    sink_epsilon: float = SINK_EPSILON, tl_options: dict | None = None) -> ExportContents:
    """The export of ``result`` (run on ``loaded``, a LoadedModel): its ``scores``, parity of every layer
    (``parity_report`` through ``loaded.attention_weights``, recomputed in ``parity_dtype``) and the value
    norms (``lenses.value_norms``). ExportError when ``loaded`` is no longer the model ``result`` came from."""
    if (loaded.source.label != result.model_label or loaded.n_layer != result.n_layer or loaded.n_head != result.n_head
            or loaded.d_model != result.layer_inputs.shape[-1]):
        raise ExportError("The model changed since this result was computed: run the text again, then export.")
    parity = parity_report(result, [loaded.attention_weights(l) for l in range(loaded.n_layer)], parity_dtype)
    started = time.perf_counter()
    norms = value_norms(loaded, result).value_norms
    return ExportContents(result, scores, parity, norms, sink_epsilon, tl_options, time.perf_counter() - started)


def write_export(out_dir: Path, contents: ExportContents, image_writer: ImageWriter | None = None,
                 timings: dict | None = None, check: Callable[[], None] | None = None) -> Written:
    """The export folder of ``contents``: attention.npz (with ``rollout``, and ``value_norms`` when there),
    scores.csv, scores_tl.csv (TransformerLens-style scores with ``contents.tl_options``), parity.json, the
    images (if an ``image_writer`` is given) and summary.json (with the sink rate at ``contents.sink_epsilon`` and
    ``timings``), written with :func:`write_folder_atomically` — the folder holds the whole new export or is
    left as it was. ``check()`` is called between files."""
    result = contents.result

    def step():
        if check is not None:
            check()

    def write(folder: Path) -> None:
        writers.write_attention_npz(result, folder / "attention.npz", value_norms=contents.value_norms,
                                    rollout=attention_rollout(result.attentions))
        step()
        writers.write_scores_csv(contents.scores, folder / "scores.csv")
        writers.write_tl_scores_csv(result, folder / "scores_tl.csv", **(contents.tl_options or {}))
        writers.write_json(contents.parity.to_dict(), folder / "parity.json")
        step()
        if image_writer is not None:
            image_writer(folder)
            step()
        writers.write_json(writers.summary(result, timings, contents.sink_epsilon), folder / "summary.json")

    return write_folder_atomically(out_dir, write, check)


# ----------------------------------------------------------------------------- scans over many texts
SCAN_FILES = ("scores_mean.csv", "scores_std.csv", "scores_per_text.csv", "texts.csv", "summary.json")


def write_scan(scan: ScanResult, out_dir: Path, sink_epsilon: float = SINK_EPSILON,
               check: Callable[[], None] | None = None) -> Written:
    """The scan folder (:data:`SCAN_FILES`), written with :func:`write_folder_atomically`: the whole new
    scan or nothing; an earlier AttnScope folder there is replaced as a whole. ``check()`` between files."""
    def write(folder: Path) -> None:
        writers.write_scan_table(scan, folder / "scores_mean.csv", "mean")
        writers.write_scan_table(scan, folder / "scores_std.csv", "std")
        if check is not None:
            check()
        writers.write_scan_per_text_csv(scan, folder / "scores_per_text.csv")
        writers.write_scan_texts_csv(scan, folder / "texts.csv")
        writers.write_json(scan.summary(sink_epsilon), folder / "summary.json")

    return write_folder_atomically(out_dir, write, check)
