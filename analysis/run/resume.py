"""Re-running a decoder from the middle: the residual stream of one run, cached, and the blocks after a layer.

An intervention at layer l (ablating or patching a head, replacing a layer's residual stream) changes nothing
before block l. So instead of a whole forward per intervention, :func:`cache_stream` runs the text once and
keeps, per block, its input ``x_l`` (1, n, d) and the other arguments the model called it with (the causal
mask of its layer's kind, the rotary cos/sin, the position ids); :func:`resume` then runs only

    x_l → block_l → … → block_{L−1} → final norm → unembedding

from any layer, on a batch of B edited streams at once (the cached arguments have batch 1 and broadcast), with
per-layer edits of what W_O is given (the heads' outputs side by side, as ``capture.forward``'s ``edits``).
``resume(stream, 0, stream.inputs[0])`` is the model's own forward: tested equal to its logits for every
decoder family, and an ablation through it equal to a whole edited forward.

Decoders only (the unembedding is the model's language-model head); nothing is cached with gradients.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from ..model.loaded import LoadedModel

Edit = Callable[[object], object]  # (B, n, h·dk) the heads' outputs side by side → what W_O gets instead


@dataclass(frozen=True)
class Stream:
    """One run of ``ids``: per block its input (torch (1, n, d)) and call arguments, and the run's logits (1, n, V)."""

    ids: tuple[int, ...]
    inputs: tuple  # per layer, the residual stream entering the block, (1, n, d)
    calls: tuple  # per layer, (args after the hidden states, kwargs) exactly as the model called the block
    logits: object  # (1, n, vocab) the run's own logits, every position

    @property
    def n_layer(self) -> int:
        return len(self.inputs)


def cache_stream(loaded: LoadedModel, ids: list[int], edits: dict[int, Edit] | None = None,
                 head_inputs: dict | None = None, attention_outputs: dict | None = None,
                 final: dict | None = None) -> Stream:
    """Run ``ids`` once (sdpa when the model allows) and keep each block's input and call arguments.

    ``edits``: per layer, what W_O is given instead (an ablated or patched run to resume from). Dicts filled when
    given (for patching): ``head_inputs`` with each layer's W_O input (1, n, h·dk), the heads' outputs z side by
    side; ``attention_outputs`` with each layer's W_O output (1, n, d); ``final["out"]``: the last block's output."""
    import torch

    from .capture import _fast_kernel

    family, model = loaded.family, loaded.model
    inputs: dict[int, object] = {}
    calls: dict[int, tuple] = {}
    handles = []

    def pre(layer):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            inputs[layer] = hidden.detach().clone()
            rest = {k: v for k, v in kwargs.items() if k != "hidden_states"}
            calls[layer] = (tuple(args[1:]), rest)
        return hook

    def z(layer):
        def hook(module, args):
            head_inputs[layer] = args[0].detach().clone()
        return hook

    def edit(fn):
        def hook(module, args, kwargs):
            return (fn(args[0]), *args[1:]), kwargs
        return hook

    def out(store, key):
        def hook(module, args, output):
            store[key] = (output[0] if isinstance(output, tuple) else output).detach().clone()
        return hook

    try:
        blocks = family.blocks(model)
        if final is not None:
            handles.append(blocks[-1].register_forward_hook(out(final, "out")))
        for layer, block in enumerate(blocks):
            handles.append(block.register_forward_pre_hook(pre(layer), with_kwargs=True))
            if edits and layer in edits:  # before the z hook: the recorded z is what W_O was given
                handles.append(family.output_module(block).register_forward_pre_hook(edit(edits[layer]),
                                                                                      with_kwargs=True))
            if head_inputs is not None:
                handles.append(family.output_module(block).register_forward_pre_hook(z(layer)))
            if attention_outputs is not None:
                handles.append(family.output_module(block).register_forward_hook(out(attention_outputs, layer)))
        with torch.inference_mode(), _fast_kernel(model, True):
            logits = model(input_ids=torch.tensor([list(ids)], device=loaded.device),
                           **family.forward_kwargs()).logits
    finally:
        for handle in handles:
            handle.remove()
    L = loaded.n_layer
    if len(inputs) != L:
        raise RuntimeError(f"residual stream: captured for {len(inputs)} of {L} layers only")
    return Stream(tuple(ids), tuple(inputs[l] for l in range(L)), tuple(calls[l] for l in range(L)), logits)


@contextmanager
def edited(loaded: LoadedModel, edits: dict[int, Edit] | None = None, outputs: dict[int, Callable] | None = None):
    """Within it, the blocks run with ``edits`` (per layer: what W_O is given instead of the heads' outputs) and
    ``outputs`` (per layer: a function of W_O's output (B, n, d) returning what the block adds instead), under
    inference mode and the kernel :func:`cache_stream` ran with; the hooks are removed on the way out."""
    import torch

    from .capture import _fast_kernel

    family = loaded.family
    blocks = family.blocks(loaded.model)
    handles = []

    def edit(fn):
        def hook(module, args, kwargs):
            return (fn(args[0]), *args[1:]), kwargs
        return hook

    def replace(fn):
        def hook(module, args, output):
            if isinstance(output, tuple):
                return (fn(output[0]), *output[1:])
            return fn(output)
        return hook

    try:
        for l, fn in (edits or {}).items():
            handles.append(family.output_module(blocks[l]).register_forward_pre_hook(edit(fn), with_kwargs=True))
        for l, fn in (outputs or {}).items():
            handles.append(family.output_module(blocks[l]).register_forward_hook(replace(fn)))
        with torch.inference_mode(), _fast_kernel(loaded.model, True):
            yield
    finally:
        for handle in handles:
            handle.remove()


def run_block(loaded: LoadedModel, stream: Stream, layer: int, x):
    """Block ``layer`` on the residual stream ``x`` (B, n, d), called as the cached run called it (inside
    :func:`edited`)."""
    args, kwargs = stream.calls[layer]
    out = loaded.family.blocks(loaded.model)[layer](x, *args, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def decode(loaded: LoadedModel, x):
    """The logits (B, n, vocab) of the residual stream after the last block: the final norm, then the unembedding."""
    model = loaded.model
    return model.get_output_embeddings()(loaded.family.final_norm(model)(x))


def resume(loaded: LoadedModel, stream: Stream, layer: int, hidden=None, edits: dict[int, Edit] | None = None,
           outputs: dict[int, Callable] | None = None):
    """The logits (B, n, vocab) of blocks ``layer`` … L−1, the final norm and the unembedding run on ``hidden``
    (B, n, d; default the cached input of ``layer``), with ``edits`` and ``outputs`` as :func:`edited` applies them
    (only layers ≥ ``layer`` can act). ``layer`` = L runs no block: the decoding of ``hidden`` alone."""
    L = stream.n_layer
    if not 0 <= layer <= L:
        raise ValueError(f"layer {layer} is outside 0 … {L}")
    x = stream.inputs[layer] if hidden is None and layer < L else hidden
    if x is None:
        raise ValueError("resume from after the last block needs the hidden states to decode")
    with edited(loaded, {l: f for l, f in (edits or {}).items() if l >= layer},
                {l: f for l, f in (outputs or {}).items() if l >= layer}):
        for l in range(layer, L):
            x = run_block(loaded, stream, l, x)
        return decode(loaded, x)
