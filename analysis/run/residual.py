"""The residual stream of an on-demand run, computed when something first reads it.

An on-demand run (analysis/run/inference.py, long texts) keeps what attention is computed from: each layer's queries
and keys and the heads' value norms (qk_capture.QKCapture). The residual stream entering every block and the
attention sub-layer's output, (layer, n, d) each, are read only by what recomputes a layer from scratch (parity,
the From scratch tab, an export's parity): keeping them in the run held 2 · L · n · d · 4 bytes more (SmolLM2 at 2,048
tokens: 283 MB; at 8,192: 1.1 GB) and made its forward 0.5 s slower at 2,048 tokens on this 2-core machine, the
first touch of that memory, with nothing on screen waiting for it.

:class:`ResidualStream` is one forward of the run's own token ids (qk_capture.forward_qk, the run's own kernel and
arithmetic, no language-model head; its queries and keys are dropped), taken the first time either array is read and kept from then on. The
model is held weakly: a result outlives its model in the app (another model is loaded), and then reading it says so
in a sentence instead of keeping a model alive. The forward is the same arithmetic on the same ids as the run's, so
its numbers are the run's (tests/analysis/test_residual.py: equal to a forward that kept them, bit for bit on the
CPU). It runs on whatever thread first reads it: in the app that is the worker (parity, From scratch, export).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..errors import AttnScopeError
from .qk_capture import forward_qk

#: What a :class:`ResidualStream` holds, as capture.forward names them.
PARTS = ("layer_inputs", "attention_outputs")


class ModelGoneError(AttnScopeError):
    """The model a result came from is no longer loaded, so its residual stream cannot be computed."""


class ResidualStream:
    """Both arrays of one run, (layer, n, d) float32 read-only, from one forward when first asked for."""

    def __init__(self, loaded, token_ids, shape: tuple[int, int, int]):
        self._model = weakref.ref(loaded)
        self._ids = [int(i) for i in np.asarray(token_ids).ravel()]
        self.shape = tuple(int(s) for s in shape)  # (layer, n, d)
        self._arrays: dict[str, np.ndarray] | None = None
        self._lock = threading.Lock()

    @property
    def computed(self) -> bool:
        return self._arrays is not None

    def array(self, part: str) -> np.ndarray:
        """``part`` (of :data:`PARTS`) as a read-only (layer, n, d) float32 array; the forward runs on the first call.
        ModelGoneError when the model was unloaded since the run."""
        if part not in PARTS:
            raise ValueError(f"a residual stream holds {' and '.join(PARTS)}, not {part!r}")
        with self._lock:  # two readers at once run one forward
            if self._arrays is None:
                loaded = self._model()
                if loaded is None:
                    raise ModelGoneError("The model this text ran on is no longer loaded: run the text again.")
                _, (captured,), _ = forward_qk(loaded, [self._ids], parts=PARTS)  # as the run: the same kernel
                arrays = {name: getattr(captured, name) for name in PARTS}
                for name, a in arrays.items():
                    if a.shape != self.shape:
                        raise RuntimeError(f"{name}: a forward gave shape {a.shape}, the run {self.shape}")
                    a.setflags(write=False)
                self._arrays = arrays
            return self._arrays[part]


class ResidualArray:
    """One of a :class:`ResidualStream`'s arrays, read like the ndarray it stands for: ``shape``, ``dtype``, ``ndim``
    without computing anything; indexing, ``np.asarray`` and iteration compute the stream first."""

    dtype = np.dtype(np.float32)
    ndim = 3

    def __init__(self, stream: ResidualStream, part: str):
        self.stream, self.part = stream, part

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.stream.shape

    def __len__(self) -> int:
        return self.shape[0]

    def values(self) -> np.ndarray:
        return self.stream.array(self.part)

    def __getitem__(self, index):
        return self.values()[index]

    def __array__(self, dtype=None, copy=None):
        a = self.values()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __iter__(self):
        return iter(self.values())

    def __repr__(self) -> str:
        state = "computed" if self.stream.computed else "computed when first read"
        return f"ResidualArray({self.part}, shape={self.shape}, {state})"


def residual_arrays(loaded, token_ids, n_layer: int, d_model: int) -> tuple[ResidualArray, ResidualArray]:
    """(layer_inputs, attention_outputs) of a run of ``token_ids`` on ``loaded``, sharing one forward."""
    stream = ResidualStream(loaded, token_ids, (n_layer, len(np.asarray(token_ids).ravel()), d_model))
    return ResidualArray(stream, "layer_inputs"), ResidualArray(stream, "attention_outputs")


__all__ = ["ModelGoneError", "PARTS", "ResidualArray", "ResidualStream", "residual_arrays"]
