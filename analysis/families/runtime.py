"""Family-blind model plumbing: load a folder with eager attention, and capture what attention saw.

``capture_attention`` puts three hooks on every layer, found through the family adapter:
    block pre-hook            → block_inputs      (layer, n, d)    the residual stream entering the block
    attention module hook     → attention_inputs  (layer, n, d)    what enters attention (the normed stream)
                              → attentions        (layer, h, n, n) the model's own attention weights
    output-projection hook    → attention_outputs (layer, n, d)    the attention output before the residual
Copying in the hooks keeps one layer's tensors alive at a time (transformers is not asked to
collect ``output_attentions``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ModelLoadError, WeightsMismatchError
from .family import Family
from .weights import _freeze_fields


def load_pretrained(family: Family, folder, dtype=None, use_safetensors: bool = True):
    """``from_pretrained`` with eager attention, local files only, never remote code.

    Returns (model in eval mode without gradients, transformers' loading info: missing/unexpected keys).
    Raises WeightsMismatchError when the weights lack tensors the model needs."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    folder = Path(folder)
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelLoadError(f"{folder} has no readable model configuration: {first}") from None
    if config.model_type not in family.model_types:
        raise ModelLoadError(f"{folder} holds a '{config.model_type}' model, not a {family.title} model.")
    family.check(config)
    weight_names = safetensors_names(folder) if use_safetensors else None
    cls = family.model_class(config, weight_names)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # 'unused weights' chatter is not for the user
    hf_logging.disable_progress_bar()
    try:
        model, info = cls.from_pretrained(folder, config=config, attn_implementation="eager",
                                          use_safetensors=use_safetensors, dtype=dtype, local_files_only=True,
                                          trust_remote_code=False, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as exc:  # corrupt or foreign weights: one line for the user
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelLoadError(f"{folder} could not be loaded (corrupt or incomplete?): {first}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    if info.get("missing_keys"):
        missing = sorted(info["missing_keys"])
        raise WeightsMismatchError(
            f"{folder}: the weights lack {len(missing)} tensor(s) the {family.title} model needs "
            f"(e.g. {missing[0]}); the folder is incomplete or holds another architecture.")
    model.eval()
    model.requires_grad_(False)
    return model, info


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


@dataclass(frozen=True)
class Capture:
    """What each layer's attention saw and produced on one sequence. float32, read-only."""

    token_ids: np.ndarray  # (n,)
    block_inputs: np.ndarray  # (layer, n, d) the residual stream entering each block
    attention_inputs: np.ndarray  # (layer, n, d) what entered attention (normed for pre-LN; = block input for post-LN)
    attentions: np.ndarray  # (layer, head, query, key)
    attention_outputs: np.ndarray  # (layer, n, d) the attention sub-layer's output after W_O, before the residual

    def __post_init__(self):
        _freeze_fields(self)


def capture_attention(model, family: Family, token_ids: Sequence[int]) -> Capture:
    """Run one sequence through ``model``'s base model with hooks; return the frozen :class:`Capture`."""
    import torch

    blocks = list(family.blocks(model))
    shape = family.shape(model.config)
    L, H, n, d = len(blocks), shape.n_head, len(token_ids), shape.d_model
    block_inputs = np.empty((L, n, d), dtype=np.float32)
    attention_inputs = np.empty((L, n, d), dtype=np.float32)
    attentions = np.empty((L, H, n, n), dtype=np.float32)
    attention_outputs = np.empty((L, n, d), dtype=np.float32)
    seen = np.zeros((3, L), dtype=bool)

    def first_tensor(args, kwargs):
        return args[0] if args else kwargs["hidden_states"]

    def on_block(layer):
        def hook(module, args, kwargs):
            block_inputs[layer] = first_tensor(args, kwargs)[0].detach().float().cpu().numpy()
            seen[0, layer] = True
        return hook

    def on_attention(layer):
        def hook(module, args, kwargs, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                raise RuntimeError("the model returned no attention weights (is attn_implementation 'eager'?)")
            attention_inputs[layer] = first_tensor(args, kwargs)[0].detach().float().cpu().numpy()
            attentions[layer] = weights[0].detach().float().cpu().numpy()
            seen[1, layer] = True
        return hook

    def on_output(layer):
        def hook(module, args, output):
            attention_outputs[layer] = output[0].detach().float().cpu().numpy()
            seen[2, layer] = True
        return hook

    handles = []
    try:
        for layer, block in enumerate(blocks):
            handles.append(block.register_forward_pre_hook(on_block(layer), with_kwargs=True))
            handles.append(family.attention_module(block).register_forward_hook(on_attention(layer), with_kwargs=True))
            handles.append(family.output_module(block).register_forward_hook(on_output(layer)))
        device = next(model.parameters()).device
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
        with torch.inference_mode():
            model.base_model(input_ids=ids, **family.forward_kwargs())
    finally:
        for handle in handles:
            handle.remove()
    if not seen.all():
        raise ModelLoadError(f"The {family.title} model did not run every layer's attention "
                             f"({int(seen[1].sum())} of {L} seen); it cannot be analysed.")
    return Capture(np.array(token_ids, dtype=np.int64), block_inputs, attention_inputs, attentions, attention_outputs)
