"""How far the numpy reimplementation is from the model's own numbers, for every layer and head, and how far
float32 rounding alone may put them apart: a tolerance for every weight, derived from the numbers checked.

Why derived: a fixed tolerance (it was 1e-5) failed correct models on long texts (SmolLM2 at 1,638 tokens:
1.2e-5). Both sides compute the same formula in float32 in different orders; their difference grows with the
tokens n (longer softmax sums, rotary angles of distant positions), with d and d_k (longer dot products) and
with the scores' magnitude. The bound below grows with exactly those, and stays far below what a wrong step
changes (a ``Mistakes`` variant exceeds it ~10⁴-fold at every length).

The bound (float32 models; a half-precision model keeps the fixed ``WEIGHT_TOLERANCE`` of its dtype)
----------------------------------------------------------------------------------------------------------
Rounding model (Higham & Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci.
Comput. 41, 2019): every operation returns the exact result times (1 + δ), the δ's independent, mean zero,
|δ| ≤ u (2⁻²⁴ in float32, 2⁻⁵³ in float64). To first order a result's error is Σ c_k·δ_k over its roundings,
and Hoeffding's inequality gives |error| ≤ λ·u·√(Σ c_k²) except with probability ≤ 2·exp(−λ²/2). The model's
and the recomputation's roundings are independent, so their variances add (u² → u_model² + u_manual²); the
block input x, the weights and the positions are the same numbers on both sides. Per step, for query i, key j:

1. Projections, q₀ = x_ln·W_q + b, a sum of N = d + 1 terms t: a rounding of a partial sum s_k has coefficient
   s_k. The residual stream's coordinates can be permuted without changing the model, so their order says
   nothing about the terms' values, and over the orders of N terms Σ_k s_k² averages N·(q₀²/3 + Σt²/6) (plus
   Σt² for the products without FMA; an order worse than the average is left to λ). A coordinate of q₀ reaches the score
   with weight ∂s/∂q₀,c = cos·k_c ± sin·k_c′, at most κ_jc, the length of k_j's rotary pair (|k_jc| outside
   rotary):   V_proj = Σ_c acc_q,ic·κ_jc² + Σ_c κ_ic²·acc_k,jc   (acc = N·(q₀²/3 + Σt²/6) + Σt²).
2. The norm. Its sum of squares has positive terms (partial sums ≤ the total: √(Σc²) ≤ √d, halved by the square
   root) and scales the whole row, which moves q − bias, so the score by ≤ |s_ij| + |bias·k_j|:
   V_row = (d/4 + 3)·[(|s| + β_q)² + (|s| + β_k)²]. Its 2 roundings per element (4 for LayerNorm) reach the
   score through x_ln,m·Σ_c W_mc·κ_c ≤ |x_ln,m|·‖W_m‖·‖κ‖: V_elem = c·(Σ_m x_ln,m²‖W_m‖²)·‖κ_j‖² (and for the
   keys). LayerNorm's mean, Σx/d, shifts every element by γ·δμ/σ: V_mean = (dμ²/3 + mean x²/6)/σ²·(Σ_c |γW|_c κ_c)².
3. Rotary: each rotated coordinate, q·cos ± q′·sin, has 3 roundings and cos, sin within ``TRIG_ULPS`` ulps, each
   at most its pair's length: V_rot = (3 + 2·TRIG_ULPS²)·Σ_c rotated (|q_pair,c|²·k_c² + q_c²·|k_pair,c|²).
   Angles θ = position·f are float32 on both sides. The two sides' frequencies f may differ by up to
   ``FREQ_ULPS`` ulps (numpy's and torch's float32 pow: ≤ 2 measured, ≤ 4 in llama3's band), and where they
   differ so do the angles' roundings (|δθ| ≤ u·θ each). A score turns with θ_i − θ_j, so in radians²
       σ_ang² = Σ_pairs |q_pair|²·|k_pair|²·[((i − j)·Δf_c)² + 2u²·(θ_ic² + θ_jc²)]
   — the term that grows with the distance between query and key. Pair 0 turns by exactly one radian per
   position on both sides (θ⁰ = 1 in every pow; a linear factor is one correctly rounded division): Δf₀ = 0
   and its angles are equal.
4. Scores: q·k, d_k terms whose partial sums are ≤ S₁ = Σ_c |q_ic·k_jc| whatever their order (rotary orders
   a head's coordinates by frequency, so no permutation argument here), and the scale, ≤ 3 roundings of
   |s| ≤ S₁: V_dot = (d_k + 3)·S₁². The score's rounding scale, after the scale factor:
       σ_ij = scale·√((u_model² + u_manual²)·(V_proj + V_row + V_elem + V_mean + V_rot + V_dot) + σ_ang²).
5. Softmax: to first order p_j moves by p_j·(Δs_j − Σ_k p_k·Δs_k), whose coefficients have norm
   ≤ p_j·[(1 − p_j)·σ_j + Σ_k≠j p_k·σ_k] (Minkowski: whatever the correlation of one row's Δs). Its own
   roundings — s − max (relative u·|s − max| on exp), exp within ``EXP_ULPS``, the division and the float32
   result (3), and the sum of the row's n_i visible terms (positive: relative λ·√n_i·u) — move p_j by
       ρ_ij = (u_model + u_manual)·(|s_ij − m_i| + Σ_k p_k·|s_ik − m_i| + 2·EXP_ULPS + 3)
              + λ·√n_i·√(u_model² + u_manual²).
   So, with p the larger of the two sides' weights,
       |p_manual − p_model|_ij ≤ λ·p_ij·[(1 − p_ij)·σ_ij + Σ_k≠j p_ik·σ_ik] + p_ij·ρ_ij + 2⁻¹²⁵,
   the last term for a weight below float32's smallest normal that one side flushes to zero; a hidden key is
   exactly 0 on both sides (bound 0).

Assumptions: IEEE float32 with round-to-nearest on the model's side (no TF32 matmuls: PyTorch's default);
the same x, weights and positions 0 … n − 1 on both sides; independent roundings (they correlate only for
inputs built for it, e.g. one number summed many times); the projections' terms in no particular order (the
permutation argument of 1.); first order (the neglected terms are below λσ ≲ 10⁻² of the bound).

λ = ``SAFETY`` = 8 is the safety factor: how many "standard deviations" of rounding are allowed. Under the
model a weight exceeds its bound with probability ≤ 2·e⁻³² ≈ 3·10⁻¹⁴, so even a report of 10¹⁰ weights (30
layers × 9 heads × 8,192 × 8,192 × 2) raises a false alarm with probability below 10⁻³; the factor also
absorbs what the model idealises. Measured (tests/analysis/test_parity_bound.py): the bound holds on thousands
of random layers (|diff| / bound ≤ 0.15 at worst) and, at the weight that differs most, is within 100× of the
difference in the median head (~60× measured) and within 400× in nine heads of ten, up to 256 tokens; at 1,024 to
2,048 tokens the median is ~60–110×, the assumed frequency gap adding with distance. Loose by the factor λ and by
the worst-case steps above, yet ~10⁴ times below what a mistake changes.
The frequency gap is what makes it grow with distance: were the recomputation given the model's own rotary
frequencies (its ``inv_freq`` buffer), Δf and the angle terms would vanish.

Long texts: above ``FULL_CHECK_TOKENS`` tokens every head is checked on a stated sample of query rows
(:func:`sample_rows`: the first and last ``SAMPLE_EDGE``, ``SAMPLE_RANDOM`` drawn with a fixed seed, and any the
caller asks for, such as the row on screen), each against every key; the report says which (``rows``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..families.steps import OUTPUT_RELATIVE_TOLERANCE, WEIGHT_TOLERANCE, FamilyRecomputation, Mistakes
from ..families.weights import AttentionWeights
from ..run.inference import AttentionResult

SAFETY = 8.0  # λ: how many "standard deviations" of rounding the bound allows (see the module docstring)
TRIG_ULPS = 2.0  # cos and sin of a float32 angle are within 2 units of 2⁻²⁴ on either side (measured ≤ 1.2)
EXP_ULPS = 4.0  # exp within 4 ulps (numpy's and torch's float32 exp measure ≤ 1)
FREQ_ULPS = {"llama3": 6.0}  # rotary frequencies of the two sides within this many ulps (measured ≤ 4 for llama3)
DEFAULT_FREQ_ULPS = 3.0  # every other rope type (measured ≤ 2)
UNDERFLOW = 2.0 ** -125  # a weight below float32's smallest normal may flush to zero on one side
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}

FULL_CHECK_TOKENS = 512  # up to this many tokens every query row is checked
SAMPLE_EDGE = 16  # above it: the first and the last 16 query rows …
SAMPLE_RANDOM = 96  # … and 96 more drawn at random (fixed seed), so the check costs 128 rows × n keys
SAMPLE_SEED = 0


# ----------------------------------------------------------------------------- which rows
@dataclass(frozen=True)
class RowSample:
    """The query rows a parity report checked, and why each is there. Every row when ``complete``."""

    n_tokens: int
    rows: np.ndarray  # (R,) ascending, every checked row
    first: np.ndarray  # the first SAMPLE_EDGE rows (empty when complete)
    last: np.ndarray  # the last SAMPLE_EDGE rows
    random: np.ndarray  # SAMPLE_RANDOM rows drawn with ``seed`` from the others
    requested: np.ndarray  # the caller's rows (e.g. the row on screen) that exist
    seed: int
    complete: bool

    def __post_init__(self):
        for name in ("rows", "first", "last", "random", "requested"):
            array = np.asarray(getattr(self, name), dtype=np.int64)
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def to_dict(self) -> dict:
        if self.complete:
            return {"all": True, "count": self.n_tokens,
                    "why": f"every query row: the text has at most {FULL_CHECK_TOKENS} tokens"}
        return {"all": False, "count": int(self.rows.size), "checked": self.rows.tolist(),
                "first": self.first.tolist(), "last": self.last.tolist(), "random": self.random.tolist(),
                "seed": self.seed, "requested": self.requested.tolist(),
                "why": (f"the text has more than {FULL_CHECK_TOKENS} tokens: every head is checked on the first and "
                        f"last {SAMPLE_EDGE} query rows, {SAMPLE_RANDOM} drawn at random (seed {self.seed}) and the "
                        f"rows asked for, each against every key")}


def sample_rows(n: int, requested: Sequence[int] = (), seed: int = SAMPLE_SEED) -> RowSample:
    """Every row up to ``FULL_CHECK_TOKENS`` tokens; above, the first and last ``SAMPLE_EDGE``, ``SAMPLE_RANDOM``
    drawn with ``seed`` from the others, and ``requested`` (rows outside 0 … n − 1 are dropped)."""
    wanted = np.unique(np.asarray([int(r) for r in requested if 0 <= int(r) < n], dtype=np.int64))
    none = np.arange(0)
    if n <= FULL_CHECK_TOKENS:
        return RowSample(n, np.arange(n), none, none, none, wanted, seed, True)
    first, last = np.arange(SAMPLE_EDGE), np.arange(n - SAMPLE_EDGE, n)
    middle = np.arange(SAMPLE_EDGE, n - SAMPLE_EDGE)  # the draw does not depend on the rows asked for
    drawn = np.sort(np.random.default_rng(seed).choice(middle, size=min(SAMPLE_RANDOM, middle.size), replace=False))
    rows = np.unique(np.concatenate([first, last, drawn, wanted]))
    return RowSample(n, rows, first, last, drawn, wanted, seed, False)


# ----------------------------------------------------------------------------- the bound
def _pair_magnitude(t: np.ndarray, rotary_dim: int) -> np.ndarray:
    """Each rotated coordinate replaced by its rotary pair's length √(t_c² + t_c′²) (c′ = c ± r/2); others |t|."""
    out = np.abs(t)
    if rotary_dim:
        half = rotary_dim // 2
        pair = np.sqrt(t[..., :half] ** 2 + t[..., half:rotary_dim] ** 2)
        out[..., :half] = pair
        out[..., half:rotary_dim] = pair
    return out


def _frequency_gap(weights: AttentionWeights) -> np.ndarray:
    """Δf (r/2,): how far the two sides' rotary frequencies may be apart, in radians per position."""
    rotary = weights.rotary
    f = np.asarray(rotary.inv_freq, dtype=np.float32)
    gap = FREQ_ULPS.get(rotary.rope_type, DEFAULT_FREQ_ULPS) * np.spacing(f).astype(np.float64)
    if f[0] == 1.0 or rotary.rope_type == "linear":
        gap[0] = 0.0  # θ⁰ = 1 exactly in every pow; 1/factor is one correctly rounded division on both sides
    return gap


def score_rounding(rec: FamilyRecomputation, weights: AttentionWeights, model_dtype: str = "float32",
                   manual_dtype: str = "float32", heads: Sequence[int] | None = None) -> np.ndarray:
    """σ (len(heads), R, n) float32: the scale of the rounding difference of each scaled score q·k·scale between the
    two sides (steps 1–4 of the module docstring), for the query rows ``rec`` computed (``rec.rows``; all when None).
    |Δs| ≤ ``SAFETY``·σ except with probability ≤ 2·e⁻³²; 0 on hidden keys."""
    if model_dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"no derived bound for a {model_dtype} model")
    u2 = UNIT_ROUNDOFF[model_dtype] ** 2 + UNIT_ROUNDOFF[manual_dtype] ** 2  # independent sides: variances add
    u32 = UNIT_ROUNDOFF["float32"]  # the angles are float32 on both sides
    w = weights
    heads = list(range(w.n_head)) if heads is None else list(heads)
    n, d = rec.x.shape
    dk, r = w.d_head, rec.rotary_dim
    half = r // 2
    rows = np.arange(n) if rec.rows is None else rec.rows
    f64, work = np.float64, np.float32  # small arrays in float64; the (R, n) ones need three digits, not sixteen
    x_ln2 = np.square(rec.x_ln, dtype=work)  # (n, d)

    def per_head(t: np.ndarray, heads_of: int) -> np.ndarray:  # (m, heads_of·dk) → (heads_of, m, dk)
        return t.reshape(len(t), heads_of, dk).transpose(1, 0, 2)

    # 1. projections: a coordinate q₀ = Σ_m x_ln,m·W_m + b of N = d + 1 terms t; its roundings' coefficients are its
    # partial sums, Σ_k s_k² = N·(q₀²/3 + Σt²/6) for summands in no particular order, plus Σt² without FMA
    big_n = d + 1

    def accumulation(weight, bias, before, heads_of, at):  # → (heads_of, len(at), dk)
        t2 = per_head(x_ln2[at] @ np.square(weight, dtype=work) + np.square(bias, dtype=work), heads_of)  # Σ_m t_m²
        return big_n * (np.square(before, dtype=work) / 3 + t2 / 6) + t2

    acc_q = accumulation(w.q_weight, w.q_bias, rec.q_before_rotation[:, rows], w.n_head, rows)  # (h, R, dk)
    acc_k = accumulation(w.k_weight, w.k_bias, rec.k_before_rotation, w.n_kv_head, np.arange(n))  # (g, n, dk)
    q = rec.q[:, rows].astype(work)  # (h, R, dk) after rotary
    k = rec.k.astype(work)  # (h, n, dk) after rotary and repeat
    kappa_q, kappa_k = _pair_magnitude(q, r), _pair_magnitude(k, r)  # how far a coordinate's error reaches the score
    # the biases' pair lengths: the part of q and k the norm's row scale leaves alone
    bias_q = _pair_magnitude(per_head(w.q_bias[None].astype(f64), w.n_head)[:, 0], r).astype(work)  # (h, dk)
    bias_k = _pair_magnitude(per_head(w.k_bias[None].astype(f64), w.n_kv_head)[:, 0], r).astype(work)  # (g, dk)

    # 2. the norm: its row scale (a sum of d squares, then a square root), its per-element roundings (each reaches
    # the score through x_ln,m·Σ_c W_mc·κ_c ≤ |x_ln,m|·‖W_m‖·‖κ‖) and, for LayerNorm, its mean
    norm = w.norm
    c_row = 0.0 if norm is None else d / 4 + 3
    c_elem = 0.0 if norm is None else (2.0 if norm.kind == "rmsnorm" else 4.0)

    def element_reach(weight, heads_of, at):  # (heads_of, len(at)) Σ_m x_ln,m²·‖W_m, head‖²
        rows2 = np.square(weight, dtype=work).reshape(d, heads_of, dk).sum(axis=-1)  # (d, heads_of)
        return np.ascontiguousarray((x_ln2[at] @ rows2).T)

    reach_q = element_reach(w.q_weight, w.n_head, rows) if c_elem else None  # (h, R)
    reach_k = element_reach(w.k_weight, w.n_kv_head, np.arange(n)) if c_elem else None  # (g, n)
    mean_terms = None
    if norm is not None and norm.kind == "layernorm":  # the mean's error shifts every element of the row by γ·δμ/σ
        x = rec.x.astype(f64)
        mean_error2 = d * x.mean(axis=-1) ** 2 / 3 + (x ** 2).mean(axis=-1) / 6  # (n,) (δμ/u)² of Σx/d
        spread = np.sqrt(mean_error2 / (x.var(axis=-1) + norm.eps)).astype(work)  # (n,) in units of σ
        gamma = norm.weight.astype(f64)
        g_q = np.abs(gamma @ w.q_weight.astype(f64)).reshape(w.n_head, dk).astype(work)  # (h, dk) |γ·W_q|
        g_k = np.abs(gamma @ w.k_weight.astype(f64)).reshape(w.n_kv_head, dk).astype(work)  # (g, dk)
        mean_terms = (spread[rows], spread, g_q, g_k)

    # 3. rotary: its roundings, the angles' roundings and the two sides' frequency gap
    rot = np.zeros(dk, dtype=work)
    if r:
        rot[:r] = 3 + 2 * TRIG_ULPS ** 2
        theta2 = (rec.angles.astype(f64) ** 2).astype(work)  # (n, r/2) squared radians
        gap = _frequency_gap(w)  # (r/2,)
        gap2 = (gap ** 2).astype(work)
        differ = (gap > 0).astype(work)  # a pair whose frequency is the same on both sides has the same angles
        distance2 = ((rows[:, None] - np.arange(n)[None, :]).astype(f64) ** 2).astype(work)  # (R, n) (i − j)²

    visible = (~rec.hidden).astype(work)  # (R, n) 1 where the query sees the key
    round_angles = 2 * u32 ** 2 / u2  # the angles' roundings, in the units of the other terms (u2)
    out = np.zeros((len(heads), len(rows), n), dtype=work)
    for slot, head in enumerate(heads):
        kv = int(rec.kv_head_of[head])
        kq, kk, qa, ka = kappa_q[head], kappa_k[head], np.abs(q[head]), np.abs(k[head])
        # every term that is a sum over coordinates, Σ_c α_ic·β_jc, in one product: the projections' accumulation
        # and rotary's roundings (|q_c| ≤ κ_c, |k_c| ≤ κ_c), the angles' roundings (pair c sits on coordinate c < r/2),
        # then the rank-one terms: the norm's per-element roundings and LayerNorm's mean
        reach_left, reach_right = acc_q[head] + 2 * rot * kq ** 2, acc_k[kv].copy()  # (R, dk), (n, dk)
        if r:
            qp, kp = kq[:, :half] ** 2, kk[:, :half] ** 2  # (R, r/2), (n, r/2) squared pair lengths
            reach_left[:, :half] += round_angles * differ * qp * theta2[rows]
            reach_right[:, :half] += round_angles * differ * kp * theta2
        left, right = [reach_left, kq ** 2], [kk ** 2, reach_right]
        if c_elem:
            left += [c_elem * reach_q[head][:, None], c_elem * (kq ** 2).sum(-1, keepdims=True)]
            right += [(kk ** 2).sum(-1, keepdims=True), reach_k[kv][:, None]]
        if mean_terms is not None:
            spread_q, spread_k, g_q, g_k = mean_terms
            left += [spread_q[:, None] ** 2, (kq @ g_k[kv])[:, None] ** 2]
            right += [(kk @ g_q[head])[:, None] ** 2, spread_k[:, None] ** 2]
        var = np.concatenate(left, -1) @ np.concatenate(right, -1).T  # (R, n)
        var += (dk + 3) * (qa @ ka.T) ** 2  # the dot product (partial sums ≤ Σ_c |q_c k_c|) and the scale
        if c_row:  # the norm's row scale: all of q but its bias scales, so the score by at most |s| + |bias·k|
            s = np.abs(rec.of_head("scores", head)).astype(work)  # (R, n)
            var += c_row * ((s + (kk @ bias_q[head])[None, :]) ** 2 + (s + (kq @ bias_k[kv])[:, None]) ** 2)
        var *= u2
        if r:  # the frequency gap turns pair c by (i − j)·Δf_c
            var += distance2 * ((qp * gap2) @ kp.T)
        out[slot] = np.sqrt(var) * work(w.scale) * visible  # (R, n)
    return out


def weight_bound(rec: FamilyRecomputation, weights: AttentionWeights, model_weights: np.ndarray,
                 model_dtype: str = "float32", manual_dtype: str = "float32",
                 heads: Sequence[int] | None = None) -> np.ndarray:
    """The largest |manual − model| float32 rounding explains, per weight: (len(heads), R, n) float32 for the
    query rows ``rec`` computed (``rec.rows``; every row when None), by the derivation in the module docstring
    (step 5 on :func:`score_rounding`'s σ). ``model_weights`` (len(heads), R, n): the model's weights of those rows;
    ``heads``: which query heads (all when None). 0 on hidden keys, which are exactly 0 on both sides."""
    sigmas = score_rounding(rec, weights, model_dtype, manual_dtype, heads)
    heads = list(range(weights.n_head)) if heads is None else list(heads)
    u_model, u_manual = UNIT_ROUNDOFF[model_dtype], UNIT_ROUNDOFF[manual_dtype]
    work = np.float32
    visible = (~rec.hidden).astype(work)  # (R, n)
    sum_rounding = SAFETY * np.sqrt(visible.sum(axis=-1, keepdims=True)) * math.hypot(u_model, u_manual)  # (R, 1)
    out = np.zeros(sigmas.shape, dtype=work)
    for slot, head in enumerate(heads):
        sigma = sigmas[slot]  # (R, n)
        p = np.maximum(rec.of_head("weights", head), model_weights[slot]).astype(work) * visible
        spread_row = (p * sigma).sum(axis=-1, keepdims=True)  # Σ_k p_k σ_k
        below = (rec.of_head("masked", head).max(axis=-1, keepdims=True)
                 - rec.of_head("scaled", head)).astype(work) * visible  # s_max − s
        rho = (u_model + u_manual) * (below + (p * below).sum(axis=-1, keepdims=True) + 2 * EXP_ULPS + 3) + sum_rounding
        out[slot] = (SAFETY * p * (spread_row + (1 - 2 * p) * sigma) + p * rho + UNDERFLOW) * visible
    return out


# ----------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class ParityReport:
    """max |manual − model| per (layer, head) for the weights and per layer for the sub-layer output, each
    against its tolerance. A head passes when every checked weight is within its own bound (:func:`weight_bound`;
    the fixed ``WEIGHT_TOLERANCE`` of its dtype for a half-precision model). A head's ``weights_tolerance`` is the
    bound of the weight that differs most, so a head that passes has max |diff| ≤ its tolerance; its
    ``weights_bound_ratio`` is the largest |diff| / bound of any of its weights (≤ 1 passes), at ``weights_worst``."""

    weights_max_abs_diff: np.ndarray  # (layer, head) max |manual − model| over the checked weights
    weights_tolerance: np.ndarray  # (layer, head) the bound of the weight where |manual − model| is largest
    weights_bound_ratio: np.ndarray  # (layer, head) max over the head's checked weights of |diff| / bound
    weights_worst: np.ndarray  # (layer, head, 2) int64 (query, key) of the weight with the largest ratio
    output_max_abs_diff: np.ndarray  # (layer,)
    output_scale: np.ndarray  # (layer,) max(1, max |model output|): the output tolerance is relative to it
    output_relative_tolerance: float
    manual_dtype: str  # float32 or float64: the precision of the numpy recomputation
    model_dtype: str
    rows: RowSample  # the query rows checked (each against every key)
    tolerance_kind: str  # "derived" (float32 rounding bound per weight) or "fixed" (half precision)
    seconds: float
    layers_checked: np.ndarray | None = None  # (layer,) bool: a report filled layer by layer (NaN elsewhere)

    def __post_init__(self):
        if self.layers_checked is None:
            object.__setattr__(self, "layers_checked", np.ones(len(self.output_max_abs_diff), dtype=bool))
        for name in ("weights_max_abs_diff", "weights_tolerance", "weights_bound_ratio", "weights_worst",
                     "output_max_abs_diff", "output_scale", "layers_checked"):
            getattr(self, name).setflags(write=False)

    @property
    def complete(self) -> bool:
        """Every layer checked (a report still being filled is not)."""
        return bool(self.layers_checked.all())

    @property
    def max_abs_diff_weights(self) -> float:
        """Over the layers checked (NaN when none is)."""
        return float(np.nanmax(self.weights_max_abs_diff)) if self.layers_checked.any() else float("nan")

    @property
    def max_abs_diff_output(self) -> float:
        return float(np.nanmax(self.output_max_abs_diff)) if self.layers_checked.any() else float("nan")

    @property
    def weight_tolerance(self) -> float:
        """The tolerance ``max_abs_diff_weights`` is held to: the bound of the weight that differs most of all."""
        if not self.layers_checked.any():
            return float("nan")
        return float(self.weights_tolerance.flat[int(np.nanargmax(self.weights_max_abs_diff))])

    @property
    def max_bound_ratio(self) -> float:
        return float(np.nanmax(self.weights_bound_ratio)) if self.layers_checked.any() else float("nan")

    @property
    def heads_passed(self) -> np.ndarray:
        """(layer, head): within every bound (False for a layer not yet checked)."""
        return self.weights_bound_ratio <= 1.0

    @property
    def layers_output_passed(self) -> np.ndarray:
        return self.output_max_abs_diff <= self.output_relative_tolerance * self.output_scale

    @property
    def passed(self) -> bool:
        """Every layer checked, and every head and layer output within its tolerance."""
        return self.complete and bool(self.heads_passed.all() and self.layers_output_passed.all())

    def to_dict(self) -> dict:
        return {
            "max_abs_diff_weights": self.max_abs_diff_weights,
            "max_abs_diff_output": self.max_abs_diff_output,
            "tolerance": {"weights": self.weight_tolerance, "output_relative": self.output_relative_tolerance,
                          "weights_kind": self.tolerance_kind, "safety_factor": SAFETY},
            "max_bound_ratio": self.max_bound_ratio,
            "passed": self.passed,
            "manual_dtype": self.manual_dtype,
            "model_dtype": self.model_dtype,
            "rows": self.rows.to_dict(),
            "seconds": self.seconds,
            "complete": self.complete,
            "layers": [
                {"layer": layer, "max_abs_diff_weights": float(self.weights_max_abs_diff[layer].max()),
                 "weights_tolerance": float(self.weights_tolerance[layer][np.argmax(self.weights_max_abs_diff[layer])]),
                 "max_bound_ratio": float(self.weights_bound_ratio[layer].max()),
                 "max_abs_diff_weights_per_head": [float(x) for x in self.weights_max_abs_diff[layer]],
                 "weights_tolerance_per_head": [float(x) for x in self.weights_tolerance[layer]],
                 "bound_ratio_per_head": [float(x) for x in self.weights_bound_ratio[layer]],
                 "worst_weight_per_head": [[int(i), int(j)] for i, j in self.weights_worst[layer]],
                 "max_abs_diff_output": float(self.output_max_abs_diff[layer]),
                 "output_tolerance": float(self.output_relative_tolerance * self.output_scale[layer]),
                 "passed": bool(self.heads_passed[layer].all() and self.layers_output_passed[layer])}
                for layer in range(len(self.output_max_abs_diff)) if self.layers_checked[layer]
            ],
        }


def head_check(rec: FamilyRecomputation, weights: AttentionWeights, model_weights: np.ndarray,
               model_dtype: str, manual_dtype: str, heads: Sequence[int] | None = None):
    """|manual − model| and its tolerance for the rows ``rec`` computed: (diff, bound), each (len(heads), R, n)."""
    heads = list(range(weights.n_head)) if heads is None else list(heads)
    manual = np.stack([rec.of_head("weights", head) for head in heads])  # (len(heads), R, n)
    diff = np.abs(manual.astype(np.float64) - model_weights.astype(np.float64))
    if model_dtype in UNIT_ROUNDOFF:
        bound = weight_bound(rec, weights, model_weights, model_dtype, manual_dtype, heads)
    else:
        bound = np.full(diff.shape, WEIGHT_TOLERANCE[model_dtype])
    return diff, bound


@dataclass(frozen=True)
class LayerParity:
    """One layer's part of a :class:`ParityReport` (:func:`check_layer`): per head the largest |manual − model| over
    the checked weights, the bound of that weight, the largest |diff| / bound and where it is; the attention
    output's max |diff| and its scale."""

    layer: int
    diff_max: np.ndarray  # (head,)
    tolerance: np.ndarray  # (head,)
    ratio: np.ndarray  # (head,)
    worst: np.ndarray  # (head, 2) int64 (query, key)
    output_diff: float
    output_scale: float
    seconds: float


def _model_rows_of(result, sample: RowSample):
    """The model's weights of the sampled rows of a layer, (head, R, n): kept maps, or computed on demand."""
    if result.attentions is None:
        return lambda layer, at: result.maps.weights(layer, None, at)
    return lambda layer, at: result.attentions[layer] if sample.complete else result.attentions[layer][:, at]


def check_layer(result: AttentionResult, weights: AttentionWeights, manual_dtype: str = "float32",
                sample: RowSample | None = None, mistakes: Mistakes | None = None,
                model_rows: Callable[[int, np.ndarray], np.ndarray] | None = None) -> LayerParity:
    """Recompute layer ``weights.layer`` from ``result.layer_inputs`` with its family's numpy steps and compare with
    the model, as :func:`parity_report` does for every layer (``sample``: the query rows, :func:`sample_rows` of the
    text by default). One layer at a time, so that a report can be filled in the background layer by layer."""
    from ..families import family_named

    started = time.perf_counter()
    layer, H, n = weights.layer, result.n_head, result.n_tokens
    sample = sample_rows(n) if sample is None else sample
    model_rows = _model_rows_of(result, sample) if model_rows is None else model_rows
    dtype = {"float32": np.float32, "float64": np.float64}[manual_dtype]
    family = family_named(weights.family)
    manual = family.recompute(weights, result.layer_inputs[layer], dtype=dtype, mistakes=mistakes,
                              rows=None if sample.complete else sample.rows)
    diff, bound = head_check(manual, weights, np.asarray(model_rows(layer, sample.rows)), result.dtype,
                             manual_dtype)  # (h, R, n) each
    diff, bound = diff.reshape(H, -1), bound.reshape(H, -1)
    largest = diff.argmax(axis=-1)  # the weight that differs most: its bound is the head's tolerance
    over = diff / np.maximum(bound, UNDERFLOW)  # a hidden key's bound is 0: it passes only when equal (0)
    flat = over.argmax(axis=-1)
    model_output = np.asarray(result.attention_outputs[layer])[sample.rows]  # (R, d)
    return LayerParity(layer, diff[np.arange(H), largest], bound[np.arange(H), largest], over[np.arange(H), flat],
                       np.stack([sample.rows[flat // n], flat % n], axis=-1).astype(np.int64),
                       float(np.abs(manual.output - model_output).max()), max(1.0, float(np.abs(model_output).max())),
                       time.perf_counter() - started)


def report_of(result: AttentionResult, layers: Sequence[LayerParity | None], manual_dtype: str,
              sample: RowSample) -> ParityReport:
    """The report of the layers checked so far (``layers[l]`` None: not yet): NaN for the others, which
    ``ParityReport.layers_checked`` names; ``seconds`` the layers' own time."""
    L, H = result.n_layer, result.n_head
    diff_max, tolerance, ratio = (np.full((L, H), np.nan) for _ in range(3))
    worst = np.zeros((L, H, 2), dtype=np.int64)
    output_diff, output_scale = np.full(L, np.nan), np.ones(L)
    checked = np.zeros(L, dtype=bool)
    for part in layers:
        if part is None:
            continue
        l = part.layer
        diff_max[l], tolerance[l], ratio[l], worst[l] = part.diff_max, part.tolerance, part.ratio, part.worst
        output_diff[l], output_scale[l], checked[l] = part.output_diff, part.output_scale, True
    kind = "derived" if result.dtype in UNIT_ROUNDOFF else "fixed"
    return ParityReport(diff_max, tolerance, ratio, worst, output_diff, output_scale,
                        OUTPUT_RELATIVE_TOLERANCE[result.dtype], manual_dtype, result.dtype, sample, kind,
                        sum(part.seconds for part in layers if part is not None), checked)


def parity_report(result: AttentionResult, parameters: Sequence[AttentionWeights],
                  manual_dtype: str = "float32", mistakes: Mistakes | None = None,
                  rows: Sequence[int] = (),
                  model_rows: Callable[[int, np.ndarray], np.ndarray] | None = None) -> ParityReport:
    """Recompute every layer from ``result.layer_inputs`` with its family's numpy steps and compare with
    the model's numbers: |manual − model| of the attention weights against each weight's rounding bound
    (:func:`weight_bound`), and per layer max |diff| of the attention output before the residual (after W_O).

    ``parameters``: one per layer, ``loaded.attention_weights(l)``. ``mistakes``: a deliberately wrong recompute
    (tests prove the comparison can fail). ``rows``: query rows to check besides the sample on a long text
    (:func:`sample_rows`). ``model_rows(layer, rows)`` → (head, R, n) the model's weights of those rows
    (default: ``result.attentions``, or ``result.maps.weights`` when the maps are computed on demand). Output tolerance: ``OUTPUT_RELATIVE_TOLERANCE[dtype]`` × max(1, max
    |model output|) of the layer, by the model's dtype. Each layer is :func:`check_layer`."""
    sample = sample_rows(result.n_tokens, rows)
    layers = [check_layer(result, parameters[layer], manual_dtype, sample, mistakes, model_rows)
              for layer in range(result.n_layer)]
    return report_of(result, layers, manual_dtype, sample)


__all__ = ["FULL_CHECK_TOKENS", "SAFETY", "LayerParity", "ParityReport", "RowSample", "check_layer", "head_check",
           "parity_report", "report_of", "sample_rows", "score_rounding", "weight_bound"]
