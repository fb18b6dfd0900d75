"""What an export holds: the one definition the command line (``main.py export``, ``main.py scan``) and the
window's Export… both call, so that both write the same files with the same bytes.

An export folder of one result (:func:`export_contents`, then :func:`write_export`) holds attention.npz
(every head's weights, with the arrays of the lenses in analysis/measures/lenses.py's ``LENSES``: ``value_norms``
and ``rollout``, each when it fits the export budget; the heads asked for; layout.py's table says what at each
length), with ``--all-maps`` every map as .npy files (arrays.py), scores.csv, scores_tl.csv, parity.json, the
figures when an image writer is given (:func:`figure_files` names them), and summary.json (with the lenses'
entries: the sink rate; ``rollout_skip_first``: whether every rollout array is R or lenses.rollout_skip_first of it,
the first input hidden (NaN) and each row renormalised; and what was left out, layout.ExportLayout.summary_fields). Figures are Qt widgets, drawn
by the GUI's figure code: the caller passes in the writer that draws them, so this module stays free of Qt.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..display import head_name
from ..errors import ExportError
from ..measures.head_scores import HeadScores
from ..measures.lenses import (LENSES, SINK_EPSILON, LensInputs, compute_lenses, key_norms_of, npz_arrays,
                               summary_fields)
from ..measures.parity import ParityReport, parity_report
from ..measures.scan import ScanResult
from ..run.inference import AttentionResult, same_model
from . import writers
from .arrays import write_export_npz, write_npy_maps
from .folders import Written, write_folder_atomically
from .layout import ExportLayout, check_free_disk, layout_of

ImageWriter = Callable[[Path], list[Path]]  # draws images into a folder, returns the files written


def figure_files(n_layer: int, n_head: int, fmt: str, heads_folder: str = "heads/",
                 heads=None) -> list[tuple[str, int | None, int | None]]:
    """(file name relative to the export, layer, head) of every figure of an export, in the order drawn:
    ``grid.<fmt>`` (layer and head None), then ``<heads_folder>L<layer>H<head>.<fmt>`` for every head (``heads``
    None) or for the (layer, head) pairs of ``heads`` (``ExportLayout.image_heads``)."""
    heads = [(l, h) for l in range(n_layer) for h in range(n_head)] if heads is None else heads
    return [(f"grid.{fmt}", None, None)] + [(f"{heads_folder}{head_name(l, h)}.{fmt}", l, h) for l, h in heads]


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
    layout: ExportLayout | None = None  # which arrays go where (None: layout.layout_of(result), the default budget)
    # (L, H, n) float64 ‖f_h(x_j)‖ (lenses.key_norms_of) when the layout streams value norms; None: not needed
    key_norms: Any = None
    # every rollout array written is lenses.rollout_skip_first of R (export --rollout-skip-first, the Rollout tab's
    # Hide first token, renormalise); summary.json says which
    rollout_skip_first: bool = False

    @property
    def timings(self) -> dict[str, float]:
        """How long the parts computed here took, for summary.json's ``timings`` (the model's lenses under
        ``value_norms_s``, the key summary.json has always had: value norms are the one lens that needs the model)."""
        return {"parity_s": self.parity.seconds, "value_norms_s": self.model_lenses_s}


def export_contents(loaded, result: AttentionResult, scores: HeadScores, *, parity_dtype: str = "float32",
                    sink_epsilon: float = SINK_EPSILON, tl_options: dict | None = None,
                    layout: ExportLayout | None = None, rollout_skip_first: bool = False) -> ExportContents:
    """The export of ``result`` (run on ``loaded``, a LoadedModel): its ``scores``, parity of every layer
    (``parity_report`` through ``loaded.attention_weights``, recomputed in ``parity_dtype``; on a long text a stated
    sample of query rows) and what of the lenses needs the model: the value norms (``lenses.LENSES``'
    ``needs_model``) of a result that kept its maps, when ``layout`` (None: the default budget, layout.layout_of)
    holds them in attention.npz, else the key norms ‖f_h(x_j)‖ the value norms are streamed with;
    ``rollout_skip_first``: the rollout written is lenses.rollout_skip_first of R. ExportError when
    ``loaded`` is no longer the model ``result`` came from (``inference.same_model``)."""
    if not same_model(loaded, result):
        raise ExportError("The model changed since this result was computed: run the text again, then export.")
    layout = layout_of(result) if layout is None else layout
    parity = parity_report(result, [loaded.attention_weights(l) for l in range(loaded.n_layer)], parity_dtype)
    started = time.perf_counter()
    in_memory = [l for l in LENSES if l.needs_model and _in_memory(l.name, result, layout)]
    model_lenses = compute_lenses(LensInputs(result, loaded, sink_epsilon), in_memory)
    streams_norms = bool(layout.heads) or bool(layout.in_npy) or (
        "value_norms" in layout.in_npz and "value_norms" not in model_lenses)
    key_norms = (np.stack([key_norms_of(loaded, result, l) for l in range(result.n_layer)]) if streams_norms
                 else None)  # (L, H, n)
    return ExportContents(result, scores, parity, model_lenses, sink_epsilon, tl_options,
                          time.perf_counter() - started, layout, key_norms, bool(rollout_skip_first))


def _in_memory(name: str, result: AttentionResult, layout: ExportLayout) -> bool:
    """Whether the lens ``name`` is computed whole in memory: it has no array (the sink rate), or its array goes
    into attention.npz whole from a result that kept its maps (as exports always computed it). Otherwise its array
    is streamed (arrays.py) or not written."""
    lens = next(l for l in LENSES if l.name == name)
    if lens.npz_array is None:
        return True
    return result.attentions is not None and name in layout.in_npz


def write_export(out_dir: Path, contents: ExportContents, image_writer: ImageWriter | None = None,
                 timings: dict | None = None, check: Callable[[], None] | None = None) -> Written:
    """The export folder of ``contents``: attention.npz as ``contents.layout`` says (arrays.write_export_npz: the
    maps and the lenses' arrays, ``value_norms`` and ``rollout``, that fit the export budget; a result that kept
    its maps writes them from memory, byte for byte as always, an on-demand one streams them; the --heads arrays),
    with --all-maps the .npy files (arrays.write_npy_maps, after layout.check_free_disk: an export that would not
    fit is refused with nothing written), scores.csv, scores_tl.csv (TransformerLens-style scores with
    ``contents.tl_options``), parity.json, the images (if an ``image_writer`` is given) and summary.json (with the
    lenses' entries, ``lenses.summary_fields``: the sink rate at ``contents.sink_epsilon``; ``rollout_skip_first``,
    whether the rollout arrays are lenses.rollout_skip_first of R (``contents.rollout_skip_first``); the layout's ``export``
    entry when something is left out or asked for, and ``timings`` with the seconds the arrays and the figures
    took, ``arrays_s`` and ``figures_s``), written with :func:`write_folder_atomically`
    — the folder holds the whole new export or is left as it was. ``check()`` is called between files."""
    result = contents.result
    layout = layout_of(result) if contents.layout is None else contents.layout
    check_free_disk(layout, out_dir)  # an --all-maps export that cannot fit is refused before anything is written
    skip_first = contents.rollout_skip_first
    inputs = LensInputs(result, sink_epsilon=contents.sink_epsilon, rollout_skip_first=skip_first)
    lenses = {**compute_lenses(inputs, [l for l in LENSES if not l.needs_model and _in_memory(l.name, result, layout)]),
              **contents.model_lenses}

    def step():
        if check is not None:
            check()

    spent = {}  # summary.json's timings of the writing: arrays_s (attention.npz, the .npy files), figures_s

    def write(folder: Path) -> None:
        started = time.perf_counter()
        kept = {} if result.attentions is None else {"attentions": result.attentions, **npz_arrays(lenses)}
        write_export_npz(folder / "attention.npz", result, layout, kept, contents.key_norms, step, skip_first)
        if layout.in_npy:
            write_npy_maps(folder, result, contents.key_norms, step, skip_first)
        spent["arrays_s"] = time.perf_counter() - started
        step()
        writers.write_scores_csv(contents.scores, folder / "scores.csv")
        writers.write_tl_scores_csv(result, folder / "scores_tl.csv", **(contents.tl_options or {}))
        writers.write_json(contents.parity.to_dict(), folder / "parity.json")
        step()
        if image_writer is not None:
            started = time.perf_counter()
            image_writer(folder)
            spent["figures_s"] = time.perf_counter() - started
            step()
        fields = {**summary_fields(lenses), "rollout_skip_first": skip_first, **layout.summary_fields()}
        writers.write_json(writers.summary(result, {**(timings or {}), **spent}, fields), folder / "summary.json")

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
