"""The data files of a result: NPZ, CSV and JSON — the same result gives the same bytes — and a scan's tables.

The CLI and the GUI both call these writers (through :mod:`analysis.export.contents` and the format
registry :mod:`analysis.export.formats`); each writes one file at the path it is given, and the callers
make that a temporary name that is renamed into place when complete (:mod:`analysis.export.folders`).
"""
from __future__ import annotations

import csv
import io
import json
import math
import zipfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from ..measures.head_scores import SCORE_NAMES, HeadScores
from ..measures.scan import ScanResult
from ..run.inference import AttentionResult
from ..run.memory import attention_memory_bytes
from .names import GENERATOR

#: Zip entries get this fixed time so that the same result gives byte-identical .npz files.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def write_json(data: dict, path: Path) -> Path:
    """UTF-8 JSON; NaN and infinities become ``null`` (they are not JSON)."""
    text = json.dumps(_json_safe(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def _savez_deterministic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like ``np.savez_compressed`` (np.load reads it the same way) but byte-for-byte reproducible:
    numpy stamps the current time into each zip entry; here every entry carries :data:`ZIP_EPOCH`."""
    with NpzWriter(path) as npz:
        for name, array in arrays.items():
            npz.array(name, array)


class NpzWriter:
    """A deterministic NPZ (:func:`_savez_deterministic`'s) written entry by entry (``np.load`` reads it as any
    .npz): :meth:`array` for an array in memory, :meth:`stream` for one given as C-order chunks."""

    def __init__(self, path: Path):
        self.archive = zipfile.ZipFile(path, mode="w", compression=zipfile.ZIP_DEFLATED)

    def __enter__(self) -> "NpzWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.archive.close()

    @staticmethod
    def _info(name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_EPOCH)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        return info

    def array(self, name: str, array: np.ndarray) -> None:
        """One entry from an array in memory (as ``writers._savez_deterministic``)."""
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=False)
        self.archive.writestr(self._info(name), buffer.getvalue())

    def stream(self, name: str, shape: tuple[int, ...], chunks: Iterable[np.ndarray], dtype=np.float32) -> None:
        """One float32 entry of ``shape`` from ``chunks``, its values in C order (any number of rows each): the
        bytes of :meth:`array` of the whole array, one chunk in memory at a time. ValueError when the chunks do not
        add up to the shape."""
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                      "fortran_order": False, "shape": tuple(int(s) for s in shape)})
        data_bytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        info = self._info(name)
        info.file_size = len(header.getvalue()) + data_bytes  # as writestr sets it: zip64 decided from it
        written = 0
        with self.archive.open(info, mode="w") as entry:
            entry.write(header.getvalue())
            for chunk in chunks:
                chunk = np.ascontiguousarray(chunk, dtype=dtype)
                entry.write(memoryview(chunk).cast("B"))
                written += chunk.nbytes
        if written != data_bytes:
            raise ValueError(f"{name}: {written} bytes streamed for a {shape} array of {data_bytes}")


def map_chunks(result, check: Callable[[], None]) -> Iterator[np.ndarray]:
    """Every head's map (n, n) float32 in (layer, head) order: ``attentions`` a head at a time."""
    for layer in range(result.n_layer):
        for head in range(result.n_head):
            check()
            yield result.maps.weights(layer, [head])[0]


def write_attention_npz(result: AttentionResult, path: Path, layer: int | None = None, head: int | None = None,
                        lenses: Mapping[str, np.ndarray] | None = None) -> Path:
    """``attentions`` float32 (layer, head, query, key) — or one head's (query, key) — with ``tokens``
    (display strings, never empty) and ``token_ids`` int64. The same result gives the same bytes.

    ``lenses``: the lens arrays to write after ``attentions`` (every head's export), {name: array} as
    ``lenses.npz_arrays`` gives them — e.g. ``value_norms`` float32 (layer, head, query, key),
    A[i, j] · ‖f_h(x_j)‖, and ``rollout`` float32 (layer, query, key)."""
    one = layer is not None and head is not None
    if not one and result.attentions is None:  # maps on demand: streamed a head at a time, within the budget
        every_map_fits(result)
        L, H, n = result.n_layer, result.n_head, result.n_tokens
        with NpzWriter(Path(path)) as npz:
            npz.stream("attentions", (L, H, n, n), map_chunks(result, lambda: None))
            npz.array("tokens", np.array(result.tokens, dtype=str))
            npz.array("token_ids", result.token_ids.astype(np.int64))
        return Path(path)
    arrays = {"attentions": np.asarray(result.head_map(layer, head) if one else result.attentions, dtype=np.float32)}
    arrays.update(lenses or {})
    arrays.update(tokens=np.array(result.tokens, dtype=str), token_ids=result.token_ids.astype(np.int64))
    _savez_deterministic(Path(path), arrays)
    return Path(path)


def write_head_csv(result: AttentionResult, path: Path, layer: int, head: int) -> Path:
    """One head's attention as a table: a header of key tokens, one row per query token."""
    a = result.head_map(layer, head)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["query \\ key"] + [f"{i}:{t}" for i, t in enumerate(result.tokens)])
        for i, token in enumerate(result.tokens):
            writer.writerow([f"{i}:{token}"] + [f"{x:.6g}" for x in a[i]])
    return path


def every_map_fits(result: AttentionResult) -> None:
    """ExportError (one sentence) when a file of every head's map is asked of a result whose maps are computed on
    demand and take more than the default export budget (layout.DEFAULT_MAX_EXPORT_MB)."""
    from ..errors import ExportError
    from ..display import format_bytes
    from .layout import layout_of

    layout = layout_of(result)
    if result.attentions is None and not layout.fits("attentions"):
        raise ExportError(f"Every head's map of {result.n_tokens:,} tokens takes "
                          f"{format_bytes(layout.array_bytes('attentions'))}, more than an export file holds "
                          f"({format_bytes(layout.budget_bytes)}): export one head, or every map with "
                          "main.py export --all-maps.")


def write_scores_csv(scores: HeadScores, path: Path) -> Path:
    """Header ``layer,head,<every score>``, one row per head; each cell is ``scores.text``: the value
    (``.6g``), ``nan`` when it is undefined for this text, ``n/a`` when the score does not apply to the
    model (an encoder's induction, a decoder's next token)."""
    n_layer, n_head = scores.shape
    names = [k for k in SCORE_NAMES if k in scores.values]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *names])
        for layer in range(n_layer):
            for head in range(n_head):
                writer.writerow([layer, head, *(scores.text(k, layer, head) for k in names)])
    return path


def write_tl_scores_csv(result: AttentionResult, path: Path, error_measure: str = "mul", exclude_bos: bool = False,
                        exclude_current_token: bool = False) -> Path:
    """TransformerLens-style head detector scores of ``result`` (``tl_scores.scores_of_text``, or streamed from maps on demand: ``measured.tl_scores_of_result``), to compare with
    TL's ``detect_head`` on the same text: header ``layer,head,previous_token_head,duplicate_token_head,
    induction_head,error_measure,exclude_bos,exclude_current_token``, one row per head, the last three
    columns saying how every score of the file was computed (TL's argument names and values). Cells
    ``.6g``; ``nan`` for a text under 2 tokens."""
    from ..measures.measured import tl_scores_of_result
    from ..measures.tl_patterns import HEAD_NAMES

    tl = tl_scores_of_result(result, error_measure=error_measure, exclude_bos=exclude_bos,
                             exclude_current_token=exclude_current_token)
    options = [error_measure, str(bool(exclude_bos)).lower(), str(bool(exclude_current_token)).lower()]
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *HEAD_NAMES, "error_measure", "exclude_bos", "exclude_current_token"])
        for layer in range(result.n_layer):
            for head in range(result.n_head):
                writer.writerow([layer, head, *(f"{float(tl[name][layer, head]):.6g}" for name in HEAD_NAMES),
                                 *options])
    return path


def write_result_json(result: AttentionResult, path: Path, scores: HeadScores | None = None,
                      layer: int | None = None, head: int | None = None) -> Path:
    """The tokens, predictions and (one head's or every head's) attention as JSON; every head of an on-demand
    result only when its maps fit the export budget (:func:`every_map_fits`)."""
    if layer is None:
        attentions = result.attentions
        if attentions is None:
            every_map_fits(result)
            attentions = np.stack([result.maps.weights(l) for l in range(result.n_layer)])  # (L, H, n, n)
    else:
        attentions = result.head_map(layer, head)
    data = {"text": result.text, "tokens": list(result.tokens), "token_ids": result.token_ids.tolist(),
            "bos": result.bos, "chat": result.chat, "truncated": result.truncated, "model": result.model_label,
            "family": result.family, "causal": result.causal,
            "axes": "(query, key)" if layer is not None else "(layer, head, query, key)",
            "layer": layer, "head": head,
            "attentions": np.round(attentions.astype(np.float64), 7).tolist(),
            "predictions": [{"token": p.token, "token_id": p.token_id, "probability": p.probability}
                            for p in result.predictions]}
    if result.prediction_note:
        data["prediction_note"] = result.prediction_note
    if scores is not None:
        data["scores"] = scores.rows(na=None)  # a score that does not apply is null, as undefined (NaN) ones are
    return write_json(data, path)


def summary(result: AttentionResult, timings: dict | None = None, lens_fields: Mapping | None = None) -> dict:
    """What ``summary.json`` holds: the ``text`` analysed (whole, even when truncated), the run's model and
    ``weights`` (what its numbers are computed from: a GGUF's weights dequantized to float32 say so),
    shape, tokens counted, warnings, predictions, timings, and ``lens_fields`` before the timings: the lenses'
    entries as ``lenses.summary_fields`` gives them (``sink_rate``: the share of heads whose first-token score
    exceeds ``sink_epsilon``, ``lenses.sink_rate``).
    ``n_tokens_text`` is a lower bound when ``truncated`` (only a prefix of a long text is tokenised); ``chat``:
    the text ran as one user turn of the model's chat template (``bos`` then says whether the template put BOS
    first)."""
    return {"generator": GENERATOR, "text": result.text, "model": result.model_label, "device": result.device, "dtype": result.dtype,
            "weights": result.weights, "n_layer": result.n_layer, "n_head": result.n_head, "n_tokens": result.n_tokens,
            "n_tokens_text": result.n_tokens_text, "context_length": result.context_length,
            "bos": result.bos, "chat": result.chat, "truncated": result.truncated, "warnings": list(result.warnings),
            "family": result.family, "causal": result.causal,
            "max_tokens": result.max_tokens,
            "attention_bytes": attention_memory_bytes(result.n_layer, result.n_head, result.n_tokens),
            "predictions": [{"token": p.token, "token_id": p.token_id, "probability": p.probability}
                            for p in result.predictions],
            "prediction_note": result.prediction_note,
            **(lens_fields or {}),
            "timings": {**result.timings, **(timings or {})}}


# ----------------------------------------------------------------------------- scans over many texts
def write_scan_table(scan: ScanResult, path: Path, which: str = "mean") -> Path:
    """``layer,head,<every score>``, one row per head, the mean (``which="mean"``) or std over texts;
    cells as ``HeadScores.text``: ``n/a`` for a score that does not apply, ``nan`` when no text defines it."""
    scores = {"mean": scan.mean_scores, "std": scan.std_scores}[which]()
    L, H = scores.shape
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *scan.score_names])
        for layer in range(L):
            for head in range(H):
                writer.writerow([layer, head, *(scores.text(name, layer, head) for name in scan.score_names)])
    return Path(path)


def write_scan_per_text_csv(scan: ScanResult, path: Path) -> Path:
    """Long format: ``text,n_tokens,layer,head,<every score>``, one row per text and head.

    ``text`` is the text's 0-based position among the texts scanned (blank lines skipped)."""
    _, _, L, H = scan.per_text.shape
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "n_tokens", "layer", "head", *scan.score_names])
        for t, n in enumerate(scan.n_tokens):
            scores = scan.text_scores(t)
            for layer in range(L):
                for head in range(H):
                    writer.writerow([t, n, layer, head, *(scores.text(name, layer, head) for name in scan.score_names)])
    return Path(path)


def write_scan_texts_csv(scan: ScanResult, path: Path) -> Path:
    """``text,n_tokens,truncated,chars,source,content``: what each ``text`` number of ``scores_per_text.csv`` is.
    ``chars`` is the whole text's length, ``source`` where it came from (a folder's file name, ``line N`` of a
    file, ``sample line N``; empty for texts not read from a file), ``content`` the part analysed (a cut text up
    to its last analysed token)."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "n_tokens", "truncated", "chars", "source", "content"])
        for t, (n, cut, chars, content) in enumerate(zip(scan.n_tokens, scan.truncated, scan.chars, scan.texts)):
            writer.writerow([t, n, int(cut), chars, scan.sources[t] if t < len(scan.sources) else "", content])
    return Path(path)
