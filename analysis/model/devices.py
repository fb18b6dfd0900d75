"""Which torch devices exist here, and turning a user's choice into one."""
from __future__ import annotations

import re

from ..errors import DeviceError

DTYPES = ("float32", "float16", "bfloat16")


def available_devices() -> list[str]:
    """Devices that exist on this machine, ``"auto"`` first: e.g. ``["auto", "cpu", "cuda"]``."""
    import torch

    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
        found.extend(f"cuda:{i}" for i in range(torch.cuda.device_count()) if torch.cuda.device_count() > 1)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def resolve_device(requested: str = "auto") -> str:
    """``auto`` → cuda, then mps, then cpu; an explicit device must exist or DeviceError is raised."""
    import torch

    requested = (requested or "auto").strip().lower()
    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if requested == "cpu":
        return "cpu"
    if requested.startswith("cuda"):
        if not re.fullmatch(r"cuda(:[0-9]+)?", requested):  # "cudax", "cuda:x", "cuda:-1"
            raise DeviceError(f"'{requested}' is not a device name; use cuda, or cuda:N with N a GPU's number "
                              "(0, 1, …).")
        if not torch.cuda.is_available():
            built = "this torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU was found"
            raise DeviceError(f"Device '{requested}' is not available ({built}); use --device cpu or auto.")
        if ":" in requested:
            index_text = requested.split(":", 1)[1]
            if not index_text.isdigit() or int(index_text) >= torch.cuda.device_count():
                raise DeviceError(
                    f"Device '{requested}' does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)."
                )
        return requested
    if requested == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise DeviceError("Device 'mps' is not available (Apple GPU support not found); use --device cpu or auto.")
        return "mps"
    raise DeviceError(f"Unknown device '{requested}'; choose one of: auto, cpu, cuda, mps.")


def resolve_dtype(requested: str, device: str):
    """Return the torch dtype for ``requested`` on ``device``; half precision is allowed on GPUs only."""
    import torch

    requested = (requested or "float32").strip().lower()
    if requested not in DTYPES:
        raise DeviceError(f"Unknown dtype '{requested}'; choose one of: {', '.join(DTYPES)}.")
    if requested != "float32" and device == "cpu":
        raise DeviceError(f"dtype {requested} is only offered on a GPU; use float32 on the CPU.")
    return getattr(torch, requested)
