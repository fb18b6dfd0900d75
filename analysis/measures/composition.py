"""Head composition (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"), from weights only.

Per head, in the row-vector convention of the projections (``x @ W``), with the layer's attention norm's γ folded
into the input side (x ↦ γ ⊙ x̂, so W_Q, W_K, W_V are read as diag(γ) W; the norm's centring and scale, the biases
and rotary position embeddings are left out — rotary makes QK depend on the positions, so the unrotated
W_Q W_Kᵀ is used):

    W_OV^h = W_V^h W_O^h   (d × d)   what the head writes, given what it reads
    W_QK^h = W_Q^h W_K^hᵀ  (d × d)   the bilinear form of its scores, x_q W_QK x_kᵀ

An earlier head e (layer < the later head's) composes with a later head l through the residual stream:

    Q-composition  C_Q(e, l) = ‖W_OV^e W_QK^l‖_F   / (‖W_OV^e‖_F ‖W_QK^l‖_F)    e's output feeds l's queries
    K-composition  C_K(e, l) = ‖W_OV^e W_QK^lᵀ‖_F  / (‖W_OV^e‖_F ‖W_QK^l‖_F)    e's output feeds l's keys
    V-composition  C_V(e, l) = ‖W_OV^e W_OV^l‖_F   / (‖W_OV^e‖_F ‖W_OV^l‖_F)    e's output feeds l's values

(TransformerLens' ``composition_scores`` with its Q/K/V conventions.) Each lies in [0, 1]. Random matrices of
the same shapes score above 0 (about 1/√d for Gaussian rank-dk factors: E‖L1 L2 R1 R2‖² ≈ dk² d³ against
(dk d²)² for the two norms), so ``corrected`` subtracts the
``baseline``: the mean score of :data:`BASELINE_DRAWS` draws of Gaussian factors of the model's shapes (d × dk times
dk × d on both sides), seed 0 — a pair scoring at the baseline composes no more than chance.

The products are taken through the factors (rank dk): with L1 = Q_L R_L (QR), ‖L1 L2 R1 R2‖_F = ‖R_L L2 R1 R_Rᵀ‖_F
where R2ᵀ = Q_R R_R — dk × dk work per pair instead of d × d.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import AnalysisCancelled
from ..families.weights import AttentionWeights

ProgressCallback = Callable[[int, int], None]  # (done, total) steps

KINDS = ("q", "k", "v")
BASELINE_DRAWS = 16


@dataclass(frozen=True)
class Composition:
    """Composition scores between every earlier head and every later head: arrays (L, H, L, H), [e_layer, e_head,
    l_layer, l_head], NaN where e's layer is not below l's."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    baseline: float  # the mean score of random factors of these shapes

    def __post_init__(self):
        for a in (self.q, self.k, self.v):
            a.setflags(write=False)

    def corrected(self, kind: str) -> np.ndarray:
        """Score − baseline for ``kind`` ("q", "k" or "v")."""
        return getattr(self, kind) - self.baseline

    def strongest(self, kind: str, top: int = 10) -> list[tuple[int, int, int, int, float]]:
        """The ``top`` pairs (e_layer, e_head, l_layer, l_head, corrected score), strongest first."""
        scores = self.corrected(kind)
        flat = np.where(np.isnan(scores), -np.inf, scores).ravel()
        order = np.argsort(-flat, kind="stable")[:top]
        return [(*map(int, np.unravel_index(i, scores.shape)), float(flat[i])) for i in order if np.isfinite(flat[i])]


def _per_head(w: AttentionWeights) -> dict[str, np.ndarray]:
    """W_Q, W_K, W_V (h, d, dk) with γ folded in and the key/value heads expanded to the query heads; W_O (h, dk, d)."""
    h, dk = w.n_head, w.d_head
    gamma = w.norm.weight.astype(np.float64) if w.norm is not None else np.ones(w.d_model)
    kv = w.kv_head_of()

    def split(weight, heads):  # (d, heads·dk) → (heads, d, dk)
        return (gamma[:, None] * weight.astype(np.float64)).reshape(-1, heads, dk).transpose(1, 0, 2)

    return {"q": split(w.q_weight, h), "k": split(w.k_weight, w.n_kv_head)[kv],
            "v": split(w.v_weight, w.n_kv_head)[kv], "o": w.out_weight.astype(np.float64).reshape(h, dk, -1)}


def _r(factor: np.ndarray) -> np.ndarray:
    """R of the reduced QR of each (…, d, dk) factor: (…, dk, dk)."""
    return np.linalg.qr(factor, mode="r")


def _score_blocks(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """‖A_i B_j‖_F / (‖A_i‖_F ‖B_j‖_F) for left A (E, dk, d) and right B (M, d, dk): (E, M)."""
    E, dk, d = left.shape
    M = right.shape[0]
    prod = left.reshape(E * dk, d) @ right.transpose(1, 0, 2).reshape(d, M * dk)  # one BLAS matmul: (E·dk, M·dk)
    num = np.sqrt((prod.reshape(E, dk, M, -1) ** 2).sum(axis=(1, 3)))
    return num / (np.linalg.norm(left, axis=(1, 2))[:, None] * np.linalg.norm(right, axis=(1, 2))[None, :])


def _sides(heads: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The reduced left side of W_OV (h, dk, d) and the reduced right sides (h, d, dk) of W_QK, W_QKᵀ and W_OV."""
    left = _r(heads["v"]) @ heads["o"]  # R_V W_O: W_OV = Q_V (R_V W_O)
    right = {"q": heads["q"] @ _r(heads["k"]).transpose(0, 2, 1),  # W_QK = W_Q W_Kᵀ, W_K = Q_K R_K
             "k": heads["k"] @ _r(heads["q"]).transpose(0, 2, 1),  # W_QKᵀ = W_K W_Qᵀ
             "v": heads["v"] @ _r(heads["o"].transpose(0, 2, 1)).transpose(0, 2, 1)}  # W_OV, W_Oᵀ = Q_O R_O
    return left, right


def baseline(d: int, dk: int, draws: int = BASELINE_DRAWS, seed: int = 0) -> float:
    """The mean composition score of ``draws`` pairs of random rank-dk products (Gaussian d × dk and dk × d factors)."""
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(draws):
        a1, a2, b1, b2 = rng.standard_normal((d, dk)), rng.standard_normal((dk, d)), rng.standard_normal((d, dk)), \
            rng.standard_normal((dk, d))
        scores.append(_score_blocks((_r(a1[None])[0] @ a2)[None], (b1 @ _r(b2.T[None])[0].T)[None])[0, 0])
    return float(np.mean(scores))


def composition(layers: Sequence[AttentionWeights], progress: ProgressCallback | None = None,
                cancel: threading.Event | None = None) -> Composition:
    """Q-, K- and V-composition between every earlier and later head of ``layers`` (one AttentionWeights a layer).
    ``progress(done, L)`` after each layer's factors and each later layer's scores (2L steps in all, the last the
    baseline); ``cancel`` set stops between them (AnalysisCancelled: scores of only some layers would rank pairs
    unfairly, so nothing is kept)."""
    L, H = len(layers), layers[0].n_head
    total = 2 * L

    def step(done: int) -> None:
        if cancel is not None and cancel.is_set():
            raise AnalysisCancelled("Composition cancelled.")
        if progress:
            progress(done, total)

    out = {kind: np.full((L, H, L, H), np.nan) for kind in KINDS}
    sides = []
    for i, w in enumerate(layers):
        step(i)
        sides.append(_sides(_per_head(w)))
    for later in range(1, L):
        step(L + later - 1)
        left = np.concatenate([sides[e][0] for e in range(later)])  # (later·H, dk, d)
        for kind in KINDS:
            out[kind][:later, :, later, :] = _score_blocks(left, sides[later][1][kind]).reshape(later, H, H)
    step(total - 1)
    result = Composition(out["q"], out["k"], out["v"], baseline(layers[0].d_model, layers[0].d_head))
    if progress:
        progress(total, total)
    return result


def model_composition(loaded, progress: ProgressCallback | None = None,
                      cancel: threading.Event | None = None) -> Composition:
    """:func:`composition` of every layer of ``loaded`` through its family adapter (``progress``, ``cancel`` as
    there; ``cancel`` is also seen between the layers' weights as they are read)."""
    layers = []
    for layer in range(loaded.n_layer):
        if cancel is not None and cancel.is_set():
            raise AnalysisCancelled("Composition cancelled.")
        layers.append(loaded.family.attention_weights(loaded.model, layer))
    return composition(layers, progress, cancel)
