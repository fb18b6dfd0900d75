"""A page's map as a file: CSV (a header of column labels, one row per layer) or JSON (the analysis result's own
``to_dict`` with the labels beside it). No Qt."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np


def write_map(path: Path, values: np.ndarray, rows: Sequence[str], columns: Sequence[str], corner: str,
              data: dict) -> Path:
    """``values`` (rows × columns) to ``path``: .csv as a table (NaN left empty), .json as ``data`` plus
    ``rows``/``columns``/``values``."""
    from analysis.export.writers import write_json

    path = Path(path)
    values = np.asarray(values, dtype=np.float64)
    if path.suffix.lower() == ".json":
        return write_json({**data, "rows": list(rows), "columns": list(columns), "values": values.tolist()}, path)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([corner, *columns])
        for label, row in zip(rows, values):
            writer.writerow([label, *("" if not np.isfinite(v) else f"{v:.6g}" for v in row)])
    return path
