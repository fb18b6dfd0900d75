"""Writing results to disk: NPZ, CSV and JSON, and whole export folders written atomically.

The CLI and the GUI both call these writers; image files are drawn by the GUI's figure code
and handed in as a callback, so this module stays free of Qt.
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import ExportError
from .head_scores import SCORE_NAMES, HeadScores
from .inference import AttentionResult
from .parity import ParityReport

IMAGE_FORMATS = ("png", "svg", "pdf")
DATA_FORMATS = ("npz", "csv", "json")


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
    path.write_text(json.dumps(_json_safe(data), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def write_attention_npz(result: AttentionResult, path: Path, layer: int | None = None, head: int | None = None) -> Path:
    """``attentions`` float32 (layer, head, query, key) — or one head's (query, key) — with ``tokens`` and ``token_ids``."""
    attentions = result.attentions
    if layer is not None and head is not None:
        attentions = attentions[layer, head]
    with path.open("wb") as f:
        np.savez_compressed(f, attentions=np.asarray(attentions, dtype=np.float32),
                            tokens=np.array(result.tokens, dtype=str), token_ids=result.token_ids.astype(np.int64))
    return path


def write_head_csv(result: AttentionResult, path: Path, layer: int, head: int) -> Path:
    """One head's attention as a table: a header of key tokens, one row per query token."""
    a = result.attentions[layer, head]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["query \\ key"] + [f"{i}:{t}" for i, t in enumerate(result.tokens)])
        for i, token in enumerate(result.tokens):
            writer.writerow([f"{i}:{token}"] + [f"{x:.6g}" for x in a[i]])
    return path


def write_scores_csv(scores: HeadScores, path: Path) -> Path:
    """Header ``layer,head,<every score>``, one row per head; NaN written as ``nan``."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *SCORE_NAMES])
        for row in scores.rows():
            writer.writerow([row["layer"], row["head"], *(f"{row[k]:.6g}" for k in SCORE_NAMES)])
    return path


def write_result_json(result: AttentionResult, path: Path, scores: HeadScores | None = None,
                      layer: int | None = None, head: int | None = None) -> Path:
    """The tokens, predictions and (one head's or every head's) attention as JSON."""
    attentions = result.attentions if layer is None else result.attentions[layer, head]
    data = {"text": result.text, "tokens": list(result.tokens), "token_ids": result.token_ids.tolist(),
            "bos": result.bos, "truncated": result.truncated, "model": result.model_label,
            "axes": "(query, key)" if layer is not None else "(layer, head, query, key)",
            "layer": layer, "head": head,
            "attentions": np.round(attentions.astype(np.float64), 7).tolist(),
            "predictions": [{"token": p.token, "token_id": p.token_id, "probability": p.probability}
                            for p in result.predictions]}
    if scores is not None:
        data["scores"] = scores.rows()
    return write_json(data, path)


def summary(result: AttentionResult, timings: dict | None = None) -> dict:
    return {"model": result.model_label, "device": result.device, "dtype": result.dtype,
            "n_layer": result.n_layer, "n_head": result.n_head, "n_tokens": result.n_tokens,
            "n_tokens_text": result.n_tokens_text, "context_length": result.context_length,
            "bos": result.bos, "truncated": result.truncated, "warnings": list(result.warnings),
            "predictions": [{"token": p.token, "token_id": p.token_id, "probability": p.probability}
                            for p in result.predictions],
            "timings": {**result.timings, **(timings or {})}}


def check_writable_dir(out_dir: Path) -> Path:
    """Create ``out_dir`` if needed and prove a file can be written there; ExportError otherwise."""
    out_dir = Path(out_dir).expanduser()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out_dir, prefix=".attnscope-write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise ExportError(f"Cannot write to {out_dir}: {exc.strerror or exc}.") from None
    return out_dir


ImageWriter = Callable[[Path], list[Path]]  # draws images into a folder, returns the files written


def export_bundle(out_dir: Path, result: AttentionResult, scores: HeadScores, parity: ParityReport,
                  image_writer: ImageWriter | None = None, timings: dict | None = None) -> list[Path]:
    """Write the whole export folder; files appear in ``out_dir`` only when everything succeeded.

    Everything is first written to a hidden staging folder next to the destination and then
    moved in, ``summary.json`` last: a folder with a ``summary.json`` is a complete export.
    """
    out_dir = check_writable_dir(out_dir)
    staging = Path(tempfile.mkdtemp(prefix=".attnscope-export-", dir=out_dir))
    try:
        try:
            write_attention_npz(result, staging / "attention.npz")
            write_scores_csv(scores, staging / "scores.csv")
            write_json(parity.to_dict(), staging / "parity.json")
            if image_writer is not None:
                image_writer(staging)
            write_json(summary(result, timings), staging / "summary.json")
        except OSError as exc:
            raise ExportError(f"Cannot write the export to {out_dir}: {exc.strerror or exc}.") from None
        written = []
        names = sorted((p for p in staging.rglob("*") if p.is_file()), key=lambda p: p.name == "summary.json")
        for src in names:
            dest = out_dir / src.relative_to(staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
            written.append(dest)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
