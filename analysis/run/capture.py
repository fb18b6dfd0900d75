"""The one forward pass with hooks: every time AttnScope runs the model, it runs :func:`forward`.

``run_text`` runs one text and keeps everything (:func:`forward_with_capture`), ``scan_texts`` runs a padded
batch and keeps each text's attention, ablation keeps nothing but the logits and edits what some heads
write. How attention is captured and stored is decided here, once. The family adapter (``loaded.family``)
says where to hook:

    block pre-hook              → layer_inputs       (layer, n, d)     the residual stream entering the block
    attention module hook       → attentions         (layer, h, n, n)  the model's own weights (+ thumbnails)
    output-projection hook      → attention_outputs  (layer, n, d)     after W_O, before the residual
    output-projection pre-hook  ← edits              (B, n, h·dk)      what W_O is given instead (ablation)

Copying in the hook (instead of asking transformers to collect ``output_attentions``) keeps only one
layer's attention tensor alive at a time. A batch is right-padded and masked (``pad_id``): no real token
sees a pad, and each sequence's arrays hold its own n_b real tokens only. A forward that copies no attention
weights (ablation, the importance map's baseline, a layer-input-only capture) runs transformers' sdpa kernel
instead of eager attention (:func:`_fast_kernel`): no layer's weights are computed at all.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

from ..display import pooled
from ..model.loaded import LoadedModel

THUMBNAIL_PX = 96  # the grid shows each head at most this many pixels a side
#: What a forward can copy, in the order the finite check names them; the sentence's name of each.
PARTS = {"attentions": "attention weights", "layer_inputs": "residual stream", "attention_outputs": "attention output"}
Edit = Callable[[object], object]  # a torch tensor (B, n, h·dk), the heads' outputs side by side → what W_O gets


@dataclass
class Captured:
    """What the hooks copied of one sequence: float32 numpy, filled a layer at a time; None: not asked for."""

    attentions: np.ndarray | None  # (layer, head, n, n)
    thumbnails: np.ndarray | None  # (layer, head, c, c) max-pooled to c = THUMBNAIL_PX; the attentions when n ≤ c
    layer_inputs: np.ndarray | None  # (layer, n, d) the residual stream entering each block
    attention_outputs: np.ndarray | None  # (layer, n, d) the attention sub-layer output, after W_O


class _Hooks:
    """Forward hooks that copy each sequence's tensors into preallocated numpy arrays (:class:`Captured`)."""

    def __init__(self, loaded: LoadedModel, lengths: list[int], parts: Sequence[str], thumbnail_px: int,
                 edits: dict[int, Edit]):
        shape, family = loaded.shape, loaded.family
        L, H, d = shape.n_layer, shape.n_head, shape.d_model
        self.lengths, self.thumbnail_px = lengths, thumbnail_px
        self.sequences = []
        for n in lengths:
            attentions = np.empty((L, H, n, n), dtype=np.float32) if "attentions" in parts else None
            # thumbnails are pooled in the hook from each layer's copy (display.pooled), one layer at a time
            pooled_px = thumbnail_px if attentions is not None and n > thumbnail_px else 0
            self.sequences.append(Captured(
                attentions=attentions,
                thumbnails=np.empty((L, H, pooled_px, pooled_px), dtype=np.float32) if pooled_px else attentions,
                layer_inputs=np.empty((L, n, d), dtype=np.float32) if "layer_inputs" in parts else None,
                attention_outputs=np.empty((L, n, d), dtype=np.float32) if "attention_outputs" in parts else None))
        self.parts = [p for p in PARTS if p in parts]
        self.seen = np.zeros((len(self.parts), L), dtype=bool)  # per part asked for, per layer
        self.handles = []
        try:
            for layer, block in enumerate(family.blocks(loaded.model)):
                if "layer_inputs" in parts:
                    self.handles.append(block.register_forward_pre_hook(self._block_input(layer), with_kwargs=True))
                if "attentions" in parts:
                    self.handles.append(family.attention_module(block).register_forward_hook(self._attention(layer)))
                if "attention_outputs" in parts:
                    self.handles.append(family.output_module(block).register_forward_hook(self._output(layer)))
                if layer in edits:
                    self.handles.append(family.output_module(block).register_forward_pre_hook(
                        self._edit(edits[layer]), with_kwargs=True))
        except BaseException:
            self.close()
            raise

    def _mark(self, part: str, layer: int) -> None:
        self.seen[self.parts.index(part), layer] = True

    def _block_input(self, layer: int):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]  # (B, T, d)
            for b, (captured, n) in enumerate(zip(self.sequences, self.lengths)):
                _copy_into(captured.layer_inputs[layer], hidden[b, :n])
            self._mark("layer_inputs", layer)

        return hook

    def _attention(self, layer: int):
        def hook(module, args, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None  # (B, h, T, T)
            if weights is None:
                raise RuntimeError("the model returned no attention weights (is attn_implementation 'eager'?)")
            batch = weights.detach().float().cpu().numpy()
            for b, (captured, n) in enumerate(zip(self.sequences, self.lengths)):
                captured.attentions[layer] = batch[b, :, :n, :n]  # the sequence's real tokens only
                if captured.thumbnails is not captured.attentions:
                    # the same bins as every other pooled view (hide first token, larger cells): torch's
                    # adaptive pool overlaps its bins, and took 2.5× as long on the CPU at 1024 tokens
                    captured.thumbnails[layer] = pooled(captured.attentions[layer], self.thumbnail_px)  # (h, c, c)
            self._mark("attentions", layer)

        return hook

    def _output(self, layer: int):
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output  # (B, T, d)
            for b, (captured, n) in enumerate(zip(self.sequences, self.lengths)):
                _copy_into(captured.attention_outputs[layer], out[b, :n])
            self._mark("attention_outputs", layer)

        return hook

    @staticmethod
    def _edit(edit: Edit):
        def pre_hook(module, args, kwargs):
            return (edit(args[0]), *args[1:]), kwargs  # args[0]: (B, n, h·dk), the heads' outputs before W_O

        return pre_hook

    def close(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []


def _copy_into(target: np.ndarray, tensor) -> None:
    """target[...] = tensor, for a float32 numpy ``target`` and a tensor of any dtype on any device (converted and
    brought to the CPU as torch's copy_ does), by torch's copy, which splits a large copy over the threads (and the
    first touch of the fresh array's pages with it): numpy's assignment copied on one core."""
    import torch

    with torch.inference_mode():
        torch.from_numpy(target).copy_(tensor.detach())


def forward(loaded: LoadedModel, batch_ids: list[list[int]], parts: Sequence[str] = tuple(PARTS),
            thumbnail_px: int = 0, logits: Literal["last", "all"] | None = None, pad_id: int | None = None,
            edits: dict[int, Edit] | None = None):
    """Run the model once on ``batch_ids`` with hooks; return (one :class:`Captured` per sequence, the logits).

    ``parts``: what to copy (of :data:`PARTS`); ``thumbnail_px``: pool each head's map to at most that many
    pixels a side as it is copied (0: no thumbnails). ``logits``: None runs the base model (no language-model
    head) and returns None; ``"last"`` the torch logits (B, 1, vocab) of the last position, ``"all"`` of every
    position (B, n, vocab). ``pad_id``: right-pad the sequences to the longest with it, under an attention
    mask; None runs them unpadded and unmasked (one sequence, or all of one length). ``edits``: per layer, what
    W_O is given instead of the heads' outputs. Raises RuntimeError when a layer's hooks did not fire, and
    ModelCheckError when what was copied holds NaN or ±inf (:func:`require_finite`)."""
    import torch

    lengths = [len(ids) for ids in batch_ids]
    if pad_id is None:
        input_ids, masked = torch.tensor(batch_ids, dtype=torch.long, device=loaded.device), {}
    else:
        T = max(lengths)
        input_ids = torch.full((len(batch_ids), T), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch_ids), T), dtype=torch.long)
        for b, ids in enumerate(batch_ids):
            input_ids[b, : len(ids)] = torch.tensor(ids)
            mask[b, : len(ids)] = 1
        input_ids, masked = input_ids.to(loaded.device), {"attention_mask": mask.to(loaded.device)}
    hooks = _Hooks(loaded, lengths, parts, thumbnail_px, edits or {})
    kwargs = loaded.family.forward_kwargs()
    try:
        with torch.inference_mode(), _fast_kernel(loaded.model, "attentions" not in parts):
            if logits is None:  # the base model: no language-model head over every position
                loaded.model.base_model(input_ids=input_ids, **masked, **kwargs)
                out = None
            else:
                keep = {"logits_to_keep": 1} if logits == "last" else {}
                out = loaded.model(input_ids=input_ids, **masked, **keep, **kwargs).logits
    finally:
        hooks.close()
    for part, seen in zip(hooks.parts, hooks.seen):
        if not seen.all():
            raise RuntimeError(f"{PARTS[part]}: captured for {int(seen.sum())} of {seen.size} layers only")
    for captured in hooks.sequences:
        require_finite({name: getattr(captured, part) for part, name in PARTS.items() if part in parts},
                       dtype=loaded.dtype)
    return hooks.sequences, out


@contextmanager
def _fast_kernel(model, wanted: bool):
    """A forward that copies no attention weights runs transformers' sdpa kernel instead of eager attention, which
    would compute every layer's (H, n, n) weights only to drop them (SmolLM2 at 8,192 tokens: 2.4 GB a layer, 4.4 ×
    slower). Only an eager model is switched (a QKRecorder's forward already runs its own kernel); a model sdpa
    cannot run stays eager; the implementation is restored afterwards, also on an error."""
    previous = model.config._attn_implementation
    if not wanted or previous != "eager":
        yield
        return
    try:
        model.set_attn_implementation("sdpa")
    except (ValueError, ImportError):  # this architecture has no sdpa path: eager it is
        yield
        return
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def forward_with_capture(loaded: LoadedModel, token_ids: list[int], want_logits: bool = True
                         ) -> tuple[Captured, np.ndarray | None]:
    """Run the model on one sequence; return everything captured (attentions, thumbnails of
    :data:`THUMBNAIL_PX`, layer_inputs, attention_outputs) and the logits after the last position
    (None for an encoder, or when ``want_logits`` is False)."""
    last = "last" if want_logits and loaded.predicts_next_token else None
    (captured,), logits = forward(loaded, [token_ids], thumbnail_px=THUMBNAIL_PX, logits=last)
    last_logits = None if logits is None else logits[0, -1].float().cpu().numpy()
    require_finite({}, last_logits, loaded.dtype)
    return captured, last_logits


def require_finite(per_layer: dict[str, np.ndarray], logits=None, dtype: str = "float32") -> None:
    """ModelCheckError (one sentence) when any layer's array, or the logits, holds NaN or ±inf.

    The load-time test forward runs at most 4 tokens; a longer text can still overflow (a position
    embedding, float16 activations). What such a run would show is meaningless, so it is refused
    instead of drawn. Checked a layer at a time: no temporary as large as the whole attention."""
    for name, stack in per_layer.items():
        for layer, values in enumerate(stack):
            if not np.isfinite(values).all():
                raise not_finite(f"{name}, layer {layer}", dtype)
    if logits is not None and not np.isfinite(np.asarray(logits)).all():
        raise not_finite("next-token logits", dtype)


def not_finite(where: str, dtype: str = "float32"):
    """The ModelCheckError for a run whose ``where`` holds NaN or ±inf."""
    from ..errors import ModelCheckError

    hint = " (half precision overflows easily: try float32)" if dtype in ("float16", "bfloat16") else ""
    return ModelCheckError(f"The model gives NaN or infinite numbers on this text ({where}){hint}; "
                           "AttnScope will not show them.")
