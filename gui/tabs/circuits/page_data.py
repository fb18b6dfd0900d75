"""A page's map as a file: CSV (comment lines of metadata, a header of column labels, one row per layer) or JSON
(the analysis result's own ``to_dict`` with the labels and the metadata beside it). No Qt."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

import numpy as np


def write_map(path: Path, values: np.ndarray, rows: Sequence[str], columns: Sequence[str], corner: str,
              data: dict, meta: dict | None = None) -> Path:
    """``values`` (rows × columns) to ``path``: .csv as a table (NaN left empty) after one ``# key: value`` line per
    item of ``meta`` (the model, the text or prompts, the metric; each value JSON, so a prompt's quotes and
    newlines stay on its line: ``pandas.read_csv(path, comment="#")`` reads the table), .json as ``data`` plus
    ``rows``/``columns``/``values`` and ``meta`` under "metadata"."""
    from analysis.export.writers import write_json

    path = Path(path)
    values = np.asarray(values, dtype=np.float64)
    meta = dict(meta or {})
    if path.suffix.lower() == ".json":
        return write_json({**data, "metadata": meta, "rows": list(rows), "columns": list(columns),
                           "values": values.tolist()}, path)
    with path.open("w", newline="", encoding="utf-8") as f:
        for key, value in meta.items():
            f.write(f"# {key}: {json.dumps(value, ensure_ascii=False)}\n")
        writer = csv.writer(f)
        writer.writerow([corner, *columns])
        for label, row in zip(rows, values):
            writer.writerow([label, *("" if not np.isfinite(v) else f"{v:.6g}" for v in row)])
    return path
