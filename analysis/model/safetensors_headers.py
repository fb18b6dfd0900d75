"""The tensors a folder's safetensors files hold, read from their headers: no weights are loaded."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def safetensors_shapes(folder: Path) -> dict[str, tuple[int, ...]] | None:
    """Every tensor's shape in the folder's safetensors files, read from their headers (no weights loaded);
    None when a header cannot be read (from_pretrained then says the file is corrupt)."""
    import json
    import struct

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        files = [folder / name for name in sorted(names)]
    else:
        files = [folder / "model.safetensors"]
    shapes = {}
    for path in files:
        try:
            with open(path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                if size > 100_000_000:
                    return None
                header = json.loads(f.read(size))
            for name, entry in header.items():
                if name != "__metadata__":
                    shapes[name] = tuple(int(d) for d in entry["shape"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
            return None
    return shapes


def safetensors_names(folder: Path) -> frozenset[str] | None:
    """Tensor names in the folder's safetensors files: the index's weight map when the weights are sharded,
    else the single file's header (:func:`safetensors_shapes`); None when neither can be read."""
    import json

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            return frozenset(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
        except (OSError, ValueError, KeyError):
            return None
    if not (folder / "model.safetensors").is_file():
        return None
    shapes = safetensors_shapes(folder)
    return None if shapes is None else frozenset(shapes)


def safetensors_elements(folder: Path) -> int | None:
    """How many numbers the folder's safetensors files hold (:func:`safetensors_shapes`); None when a
    header cannot be read."""
    shapes = safetensors_shapes(folder)
    return None if shapes is None else sum(int(np.prod(shape, dtype=np.int64)) for shape in shapes.values())
