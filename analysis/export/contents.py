"""What an export holds: the one definition the command line (``main.py export``, ``main.py scan``) and the
window's Export… both call, so that both write the same files with the same bytes.

An export folder of one result (:func:`export_contents`, then :func:`write_export`) holds attention.npz
(every head's weights, with the arrays of the lenses in analysis/measures/lenses.py's ``LENSES``: ``value_norms``
and ``rollout``), scores.csv, scores_tl.csv, parity.json, the figures when an image writer is given
(:func:`figure_files` names them), and summary.json (with the lenses' entries: the sink rate). Figures are Qt
widgets, drawn by the GUI's figure code: the caller passes in the writer that draws them, so this module
stays free of Qt.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import ExportError
from ..measures.head_scores import HeadScores
from ..measures.lenses import LENSES, SINK_EPSILON, LensInputs, compute_lenses, npz_arrays, summary_fields
from ..measures.parity import ParityReport, parity_report
from ..measures.scan import ScanResult
from ..run.inference import AttentionResult, same_model
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
    lenses that read the weights need the model; :func:`write_export` computes the other lenses from the result)."""

    result: AttentionResult
    scores: HeadScores
    parity: ParityReport
    # {name: value} of the lenses that need the model (``Lens.needs_model``: value_norms), computed with it;
    # empty: attention.npz has none of them
    model_lenses: Mapping[str, Any] = field(default_factory=dict)
    sink_epsilon: float = SINK_EPSILON  # summary.json's sink rate counts first-token scores above it
    tl_options: dict | None = None  # scores_tl.csv's options: write_tl_scores_csv's keywords (None: TL's defaults)
    model_lenses_s: float = 0.0  # seconds the model's lenses took

    @property
    def timings(self) -> dict[str, float]:
        """How long the parts computed here took, for summary.json's ``timings`` (the model's lenses under
        ``value_norms_s``, the key summary.json has always had: value norms are the one lens that needs the model)."""
        return {"parity_s": self.parity.seconds, "value_norms_s": self.model_lenses_s}


def export_contents(loaded, result: AttentionResult, scores: HeadScores, *, parity_dtype: str = "float32",
                    sink_epsilon: float = SINK_EPSILON, tl_options: dict | None = None) -> ExportContents:
    """The export of ``result`` (run on ``loaded``, a LoadedModel): its ``scores``, parity of every layer
    (``parity_report`` through ``loaded.attention_weights``, recomputed in ``parity_dtype``) and the lenses that
    need the model (``lenses.LENSES``' ``needs_model``: the value norms). ExportError when ``loaded`` is no longer
    the model ``result`` came from (``inference.same_model``)."""
    if not same_model(loaded, result):
        raise ExportError("The model changed since this result was computed: run the text again, then export.")
    parity = parity_report(result, [loaded.attention_weights(l) for l in range(loaded.n_layer)], parity_dtype)
    started = time.perf_counter()
    model_lenses = compute_lenses(LensInputs(result, loaded, sink_epsilon), [l for l in LENSES if l.needs_model])
    return ExportContents(result, scores, parity, model_lenses, sink_epsilon, tl_options,
                          time.perf_counter() - started)


def write_export(out_dir: Path, contents: ExportContents, image_writer: ImageWriter | None = None,
                 timings: dict | None = None, check: Callable[[], None] | None = None) -> Written:
    """The export folder of ``contents``: attention.npz (with the lenses' arrays, ``lenses.npz_arrays``: ``rollout``,
    and ``value_norms`` when ``contents.model_lenses`` has them), scores.csv, scores_tl.csv (TransformerLens-style
    scores with ``contents.tl_options``), parity.json, the images (if an ``image_writer`` is given) and
    summary.json (with the lenses' entries, ``lenses.summary_fields``: the sink rate at ``contents.sink_epsilon``,
    and ``timings``), written with :func:`write_folder_atomically` — the folder holds the whole new export or is
    left as it was. ``check()`` is called between files."""
    result = contents.result
    inputs = LensInputs(result, sink_epsilon=contents.sink_epsilon)
    lenses = {**compute_lenses(inputs, [l for l in LENSES if not l.needs_model]), **contents.model_lenses}

    def step():
        if check is not None:
            check()

    def write(folder: Path) -> None:
        writers.write_attention_npz(result, folder / "attention.npz", lenses=npz_arrays(lenses))
        step()
        writers.write_scores_csv(contents.scores, folder / "scores.csv")
        writers.write_tl_scores_csv(result, folder / "scores_tl.csv", **(contents.tl_options or {}))
        writers.write_json(contents.parity.to_dict(), folder / "parity.json")
        step()
        if image_writer is not None:
            image_writer(folder)
            step()
        writers.write_json(writers.summary(result, timings, summary_fields(lenses)), folder / "summary.json")

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
