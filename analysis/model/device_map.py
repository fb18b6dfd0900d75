"""A model split across devices and disk (accelerate's big-model inference, ``--device-map auto``).

``device_map="auto"`` lets accelerate place each block where it fits, in order: the GPUs, then the CPU, then the
disk (``max_memory`` caps each; what does not fit is written to an offload folder and read back block by block
during the forward). AttnScope's hooks copy what they capture to the CPU whatever device a layer ran on, so the
capture is the same; reading a layer's weights for the recomputation (``LoadedModel.attention_weights``) brings an
offloaded block's tensors in for the copy and lets them go again (:func:`onloaded`).
"""
from __future__ import annotations

import re
from contextlib import ExitStack, contextmanager
from typing import Any

from ..errors import DeviceError

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
MEMORY_ITEM = re.compile(r"^\s*(cpu|disk|mps|\d+)\s*=\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB|TB|TiB)?\s*$",
                         re.IGNORECASE)
UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
         "tib": 2**40}


def parse_max_memory(text: str | None) -> dict | None:
    """``"0=10GiB,cpu=20GiB"`` → ``{0: 10737418240, "cpu": 21474836480}`` (a device: a GPU's number, cpu or mps; a
    size with an optional unit, bytes without one); None for None or blank. DeviceError (one sentence) otherwise."""
    if text is None or not text.strip():
        return None
    limits: dict[Any, int] = {}
    for item in text.split(","):
        match = MEMORY_ITEM.match(item)
        if not match:
            raise DeviceError(f"'{item.strip()}' is not a memory limit; write DEVICE=SIZE items such as "
                              "0=10GiB,cpu=20GiB (a GPU's number, cpu or mps).")
        device, number, unit = match[1].lower(), float(match[2]), (match[3] or "B").lower()
        limits[int(device) if device.isdigit() else device] = int(number * UNITS[unit])
    return limits


def check_device_map(device_map: str | None) -> str | None:
    if device_map is None:
        return None
    if device_map not in DEVICE_MAPS:
        raise DeviceError(f"--device-map takes {', '.join(DEVICE_MAPS)} (got '{device_map}').")
    return device_map


def execution_device(model) -> str:
    """Where a split model takes its input: the device of its first placed module (``disk`` and ``cpu`` → cpu)."""
    placed = getattr(model, "hf_device_map", None) or {}
    first = next(iter(placed.values()), "cpu")
    if isinstance(first, int):
        return f"cuda:{first}"
    return "cpu" if str(first) in ("cpu", "disk") else str(first)


def placement(model) -> dict[str, int]:
    """How many of the model's placed modules sit on each device (``{"cuda:0": 20, "cpu": 8, "disk": 2}``)."""
    counts: dict[str, int] = {}
    for where in (getattr(model, "hf_device_map", None) or {}).values():
        name = f"cuda:{where}" if isinstance(where, int) else str(where)
        counts[name] = counts.get(name, 0) + 1
    return counts


@contextmanager
def onloaded(module):
    """Within the block, every tensor of ``module`` (and below) that accelerate offloaded is real, on the CPU."""
    try:
        from accelerate.utils import has_offloaded_params
        from accelerate.utils.modeling import align_module_device
    except ImportError:  # no accelerate: nothing can be offloaded
        yield module
        return
    with ExitStack() as stack:
        for sub in module.modules():
            if has_offloaded_params(sub):
                stack.enter_context(align_module_device(sub, "cpu"))
        yield module
