"""Beyond raw attention weights: value-weighted attention, attention rollout, and the sink rate.

Letters used in shape comments:
    L   layers          H   heads          n   tokens (query and key positions)
    d   d_model         dk  d / H, one head's width

1. Value norms (Kobayashi et al. 2020, "Attention is not only a weight"). Head h writes
   ``Σ_j A[i, j] · f_h(x_j)`` into the residual stream at position i, with
   ``f_h(x) = (x W_V^h + b_V^h) W_O^h``: x the normed residual stream entering attention (ln_1's
   output for GPT-2), W_V^h / b_V^h the head's slice of the value projection, W_O^h the head's rows
   of the output projection (the output bias belongs to no head and is left out). So
   ``N[i, j] = A[i, j] · ‖f_h(x_j)‖`` is how much key j really moves query i's output. A sink head
   may put 90% of its weight on token 0 while ‖f_h(x_0)‖ is tiny: the weights alone mislead.
2. Rollout (Abnar & Zuidema 2020): ``Â(l) = 0.5 · mean_h A(l) + 0.5 · I`` (rows renormalised),
   ``R(0) = Â(0)``, ``R(l) = Â(l) · R(l−1)``: which input tokens each position draws on, all
   layers up to l composed, the residual connection counted as the identity. On a decoder with an attention
   sink R is dominated by its first column: :func:`rollout_skip_first` hides it and renormalises each row,
   ``R̃[i, j] = R[i, j] / (1 − R[i, 0])`` for j ≥ 1.
3. Sink rate (Gu et al. 2024, "When Attention Sink Emerges"): the share of heads whose
   first-token score exceeds ε.

``LENSES`` says everything about each lens in one entry: its definition, whether it needs the model, how it
is computed (``compute_lenses``) and what an export writes of it (``npz_arrays``: attention.npz's arrays;
``summary_fields``: summary.json's entries); the exports and the GUI read it there.

The numpy cores are family-blind (they take arrays; ``per_head_value_parameters`` takes the separate
V / W_O projections the family adapters' ``AttentionWeights`` carry, grouped-query attention included).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..display import without_first_key
from .head_scores import Windows, sink

#: Gu et al.'s default threshold on the first-token score.
SINK_EPSILON = 0.3


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


# ----------------------------------------------------------------------------- value norms
def value_vectors(x_ln: np.ndarray, w_v: np.ndarray, b_v: np.ndarray, w_o: np.ndarray) -> np.ndarray:
    """f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h for every head and key: what head h would write if it
    attended to key j alone (without the output bias).

    x_ln (n, d), w_v (H, d, dk), b_v (H, dk), w_o (H, dk, d) → (H, n, d)
    """
    v = np.einsum("nd,hde->hne", x_ln, w_v) + b_v[:, None, :]  # (H, n, dk): the head's values
    return np.einsum("hne,hed->hnd", v, w_o)  # (H, n, d): moved into the residual stream by W_O^h


def value_norms_layer(x_ln: np.ndarray, w_v: np.ndarray, b_v: np.ndarray, w_o: np.ndarray,
                      attentions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One layer's norm-based attention: ``N[h, i, j] = A[h, i, j] · ‖f_h(x_j)‖``.

    x_ln (n, d) the normed input to attention; w_v (H, d, dk), b_v (H, dk), w_o (H, dk, d) per head;
    attentions (H, n, n). Returns N (H, n, n) and the key norms ‖f_h(x_j)‖ (H, n), float64.
    Nothing passed in is modified.
    """
    key_norms = key_norms_layer(x_ln, w_v, b_v, w_o)  # (H, n)
    return weighted_by_norms(attentions, key_norms[:, None, :]), key_norms  # (H, n, n), (H, n)


def key_norms_layer(x_ln: np.ndarray, w_v: np.ndarray, b_v: np.ndarray, w_o: np.ndarray) -> np.ndarray:
    """‖f_h(x_j)‖ (H, n) float64 of one layer, f_h(x) = (x W_V^h + b_V^h) W_O^h (:func:`value_vectors`); arguments
    as :func:`value_norms_layer`'s."""
    x = np.asarray(x_ln, dtype=np.float64)
    f = value_vectors(x, np.asarray(w_v, np.float64), np.asarray(b_v, np.float64), np.asarray(w_o, np.float64))
    return np.linalg.norm(f, axis=-1)


def weighted_by_norms(weights: np.ndarray, key_norms: np.ndarray) -> np.ndarray:
    """N[..., i, j] = A[..., i, j] · ‖f_h(x_j)‖: weights (..., n) times key norms broadcast over the rows (..., n),
    in float64 (a whole head's or layer's map, or some rows of one)."""
    return np.asarray(weights, dtype=np.float64) * np.asarray(key_norms, dtype=np.float64)


def per_head_value_parameters(v_weight: np.ndarray, v_bias: np.ndarray, out_weight: np.ndarray, n_head: int,
                              n_kv_head: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-head W_V (H, d, dk), b_V (H, dk), W_O (H, dk, d) from ``x @ W + b`` projections laid out head
    after head: v_weight (d, g·dk), v_bias (g·dk,), out_weight (H·dk, d).

    With grouped-query attention (g = n_kv_head < H key/value heads), query head i reads value head
    i // (H/g); g defaults to H. This is the shape the family adapters' AttentionWeights carry.
    """
    g = n_head if n_kv_head is None else n_kv_head
    d = v_weight.shape[0]
    dk = out_weight.shape[0] // n_head
    kv_of = np.arange(n_head) // (n_head // g)  # (H,) the value head each query head reads
    w_v = v_weight.reshape(d, g, dk).transpose(1, 0, 2)[kv_of]  # (H, d, dk)
    b_v = v_bias.reshape(g, dk)[kv_of]  # (H, dk)
    w_o = out_weight.reshape(n_head, dk, -1)  # (H, dk, d): W_O's rows h·dk … (h+1)·dk read head h
    return w_v, b_v, w_o


@dataclass(frozen=True)
class ValueNorms:
    """Norm-based attention for every head. Read-only float32; axis order (layer, head, query, key)."""

    value_norms: np.ndarray  # (L, H, n, n): N[i, j] = A[i, j] · ‖f_h(x_j)‖, in residual-stream units
    key_norms: np.ndarray  # (L, H, n): ‖f_h(x_j)‖ per key

    def row_normalised(self) -> np.ndarray:
        """N[i, j] / Σ_k N[i, k]: each row as shares of the head's summed contribution norms (display)."""
        return row_normalise(self.value_norms)


def row_normalise(value_norms: np.ndarray) -> np.ndarray:
    """Divide each query row by its sum (a row summing to 0 stays 0). Same shape, float32, a new array."""
    n = np.asarray(value_norms, dtype=np.float64)
    total = n.sum(axis=-1, keepdims=True)
    out = np.divide(n, total, out=np.zeros_like(n), where=total > 0)
    return out.astype(np.float32)


def value_norms(loaded, result) -> ValueNorms:
    """Value norms of every head of an AttentionResult.

    The parameters come from the family adapter's ``AttentionWeights`` (``loaded.attention_weights``:
    separate V / W_O, grouped-query attention included) and x_j is what entered attention: the family's
    norm applied to the block input ``result.layer_inputs`` (for a post-LN encoder, the block input itself).
    Computed layer by layer into one preallocated float32 array (the attention's size).
    """
    return value_norms_of(loaded.attention_weights, None, result.layer_inputs, result.attentions)


def value_norms_of(weights_of: Callable[[int], Any], attention_inputs: np.ndarray | None,
                   block_inputs: np.ndarray | None, attentions: np.ndarray) -> ValueNorms:
    """Family-blind value norms: ``weights_of(layer)`` gives a family adapter's AttentionWeights.

    attention_inputs (L, n, d) what entered attention, or None to apply each layer's ``norm`` to
    block_inputs (L, n, d) (no norm: the block input enters as is); attentions (L, H, n, n).
    """
    L, H, n = attentions.shape[0], attentions.shape[1], attentions.shape[-1]
    norms = np.empty((L, H, n, n), dtype=np.float32)
    keys = np.empty((L, H, n), dtype=np.float32)
    for layer in range(L):
        w = weights_of(layer)
        if attention_inputs is not None:
            x_ln = np.asarray(attention_inputs[layer], dtype=np.float64)  # (n, d)
        else:
            x_ln = _attention_input(w, block_inputs[layer])  # (n, d)
        per_head = per_head_value_parameters(w.v_weight, w.v_bias, w.out_weight, w.n_head, w.n_kv_head)
        norms[layer], keys[layer] = value_norms_layer(x_ln, *per_head, attentions[layer])
    return ValueNorms(_frozen(norms), _frozen(keys))


def key_norms_of(loaded, result, layer: int) -> np.ndarray:
    """(H, n) float64: ‖f_h(x_j)‖ of ``layer`` for every head and key, whichever way ``result`` holds its maps: what
    an on-demand run's capture kept (``QKCapture.key_norms``, from the model's own v), else computed from the model
    (``loaded.attention_weights``) and ``result.layer_inputs`` as :func:`value_norms` computes them, so that
    ``weighted_by_norms(A, key_norms_of(…)[h])`` is :func:`value_norms`' N[layer, h] to the bit."""
    if result.attentions is None:
        return np.asarray(result.maps.key_norms(layer), dtype=np.float64)
    w = loaded.attention_weights(layer)
    per_head = per_head_value_parameters(w.v_weight, w.v_bias, w.out_weight, w.n_head, w.n_kv_head)
    return key_norms_layer(_attention_input(w, result.layer_inputs[layer]), *per_head)  # (H, n)


def _attention_input(weights, block_input: np.ndarray) -> np.ndarray:
    """What entered one layer's attention (n, d) float64: the family's norm (``weights.norm``) applied to the block
    input (no norm: the block input as is)."""
    from ..families.steps import normalise

    return normalise(np.asarray(block_input, dtype=np.float64), weights.norm, np.float64)


def first_token_shares(attentions: np.ndarray, value_norms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How much of each head goes to the first token, by weight and by value-weighted norm.

    raw[l, h]      = mean over i ≥ 1 of A[i, 0]                       (= head_scores.sink without windows)
    weighted[l, h] = mean over i ≥ 1 of N[i, 0] / Σ_j N[i, j]          (rows with Σ_j N = 0 count 0)

    The second is the share of the summed contribution norms ``Σ_j ‖A[i, j] f_h(x_j)‖`` that the first
    token supplies: 0.9 raw and 0.05 weighted means the head looks at token 0 but moves almost
    nothing from it. Row 0 is excluded (it can only attend to itself). NaN for a 1-token text.
    """
    a = np.asarray(attentions)
    if a.shape[-1] < 2:
        nan = np.full(a.shape[:2], np.nan)
        return nan, nan.copy()
    shares = row_normalise(value_norms)[..., 1:, 0].astype(np.float64)  # (L, H, n−1)
    return sink(a), shares.mean(axis=-1)


# ----------------------------------------------------------------------------- rollout
def rollout(attentions: np.ndarray) -> np.ndarray:
    """Attention rollout: ``Â(l) = 0.5 · mean_h A(l) + 0.5 · I``, rows renormalised to sum to 1;
    ``R(0) = Â(0)``, ``R(l) = Â(l) · R(l−1)``.

    attentions (L, H, n, n) → R (L, n, n) float32, read-only: R[l, i, j] is how much input token j
    feeds position i after layers 0…l. Each row of R sums to 1. Computed in float64.
    """
    a = np.asarray(attentions)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attentions must be (layer, head, n, n), got shape {a.shape}")
    L, n = a.shape[0], a.shape[-1]
    out = np.empty((L, n, n), dtype=np.float32)
    r = np.eye(n)
    everywhere = np.arange(n)
    for layer in range(L):
        a_hat = residual_rows(a[layer], everywhere)  # (n, n)
        r = a_hat @ r  # (n, n): this layer composed onto everything below it
        out[layer] = r
    return _frozen(out)


#: Rows of R(l) one product of :func:`iter_rollout` computes for a causal model: a product over the keys its rows
#: see costs rows · seen², so smaller parts come closer to the triangular product's n³/3 multiply-adds a layer.
ROLLOUT_PRODUCT_ROWS = 256


def iter_rollout(maps, causal: bool | None = None, last: int | None = None,
                 rows_per_block: int | None = None, on_block: Callable[[int, slice, np.ndarray], None] | None = None):
    """R(0), R(1), … R(``last``) (None: every layer) of :func:`rollout`'s definition from any attention maps
    (qk_capture.AttentionMaps: kept or computed on demand), composed one layer onto the next, each layer read
    once: yields (layer, R(layer)) with R (n, n) float64.

    Memory: R, one block of every head's weights (H, b, n) and its head-mean rows; for a causal model (``causal``
    None: the maps' own, else False) R is updated in place, the last block of rows first (rows i of R(l) read rows
    j ≤ i of R(l − 1), which a later block has not yet overwritten), so the array yielded is the same one each
    time: copy what is kept before asking for the next layer. A bidirectional model's R is a new matrix each layer.
    ``on_block(layer, rows, weights)``: every block of weights (H, b, n) as it is read (another consumer of the same
    pass, e.g. a writer of every map)."""
    from ..run.qk_capture import block_rows

    n, L = maps.n_tokens, maps.n_layer
    last = L - 1 if last is None else int(last)
    causal = bool(getattr(maps, "causal", False)) if causal is None else bool(causal)
    step = block_rows(n, maps.n_head) if rows_per_block is None else int(rows_per_block)
    starts = list(range(0, n, step))
    r = None  # R(l − 1); None: the identity, below layer 0
    for layer in range(last + 1):
        in_place = causal and r is not None
        out = r if in_place else np.empty((n, n))
        for start in reversed(starts) if in_place else starts:
            rows = slice(start, min(n, start + step))
            queries = np.arange(rows.start, rows.stop)
            weights = maps.weights(layer, None, rows)  # (H, b, n) float32
            if on_block is not None:
                on_block(layer, rows, weights)
            a_hat = residual_rows(weights, queries)  # (b, n): Â(layer)'s rows
            if r is None:
                out[rows] = a_hat  # R(0) = Â(0)
            elif in_place:  # a few rows at a time, last first: each product stops at the keys its rows see
                for lo in reversed(range(0, a_hat.shape[0], ROLLOUT_PRODUCT_ROWS)):
                    part = slice(lo, min(a_hat.shape[0], lo + ROLLOUT_PRODUCT_ROWS))
                    seen = rows.start + part.stop  # keys past seen − 1: 0 in these rows of Â and R
                    out[rows.start + part.start:seen, :seen] = a_hat[part, :seen] @ r[:seen, :seen]
            else:
                out[rows] = a_hat @ r
        r = out
        yield layer, r


def rollout_of_result(result, skip_first: bool = False) -> np.ndarray:
    """:func:`rollout` (L, n, n) float32, read-only, of an AttentionResult whichever way it holds its maps: from
    ``result.attentions``, or composed layer after layer from maps computed on demand (:func:`iter_rollout`; the
    answer's L·n²·4 bytes, never every map). ``skip_first``: :func:`rollout_skip_first` of each layer's R (the
    first input hidden, NaN; each row renormalised over the rest)."""
    if result.attentions is not None:
        r = rollout(result.attentions)
        return _frozen(rollout_skip_first(r)) if skip_first else r
    out = np.empty((result.n_layer, result.n_tokens, result.n_tokens), dtype=np.float32)
    for layer, r in iter_rollout(result.maps, causal=bool(result.causal)):
        out[layer] = rollout_skip_first(r) if skip_first else r
    return _frozen(out)


def rollout_skip_first(r: np.ndarray) -> np.ndarray:
    """Rollout with the first input token hidden and each row renormalised over the others (the Rollout tab's
    *Hide first token, renormalise*, ``export --rollout-skip-first``)::

        R̃[..., i, j] = R[..., i, j] / (1 − R[..., i, 0])    for j ≥ 1
        R̃[..., i, 0] = NaN                                   (hidden)

    and query i's whole row NaN where it draws on token 0 alone (1 − R[i, 0] = 0: a causal model's position 0,
    whose R(l)[0] is (1, 0, …, 0)), never a division by zero, never inf.

    Applied to the final rollout R(l), after every layer 0…l is composed as :func:`rollout` defines it: the
    question it answers is "past the sink, which other inputs does position i draw on, and in what shares". (Hiding
    key 0 in each layer's Â before composing would be another quantity: rollout along the paths that never pass
    through token 0.) It is ``display.without_first_key``, the Head tab's hide-first on one head's map, applied to
    R: 1 − R[i, 0] is taken as Σ_{j ≥ 1} R[i, j] (in float64), which is equal, each row of R summing to 1, and keeps
    every digit where R[i, 0] is close to 1 (the sink decoders this is for), where 1 − R[i, 0] of a float32 R
    keeps few or none (0 for any R[i, 0] within 6e-8 of 1). Each row of R̃ sums to 1 over j ≥ 1.

    r (..., n, n), any float dtype (R of one layer (n, n), every layer (L, n, n), or some query rows) → R̃ (..., n,
    n) float32, a new array; ``r`` is not modified."""
    return without_first_key(r)


def first_input_share(r: np.ndarray) -> float:
    """How much of rollout R(l) goes to the first input, on average over the positions after it::

        share = (1 / (n − 1)) · Σ_{i=1}^{n−1} R[i, 0]

    Position 0 is left out (a decoder's first position draws on token 0 alone: R[0, 0] = 1 whatever the model).
    r (n, n) one layer's R → a float in [0, 1]; NaN for n < 2. The Rollout tab points to *Hide first token,
    renormalise* when it is at least :data:`FIRST_INPUT_DOMINATES`: the map is then that one column and little
    else."""
    r = np.asarray(r)
    if r.shape[-1] < 2:
        return float("nan")
    return float(np.mean(r[1:, 0], dtype=np.float64))


FIRST_INPUT_DOMINATES = 0.5  # first_input_share at which the first input's column is most of the rollout


def residual_rows(weights: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Rollout's Â = 0.5 · mean_h A + 0.5 · I, each row renormalised to sum to 1, for some query rows: weights
    (H, b, n) every head's rows ``queries`` (b,) of one layer → Â's same rows (b, n) float64, a new array (the
    heads' mean accumulated in float64 as it reads, without a float64 copy of the weights)."""
    a_hat = 0.5 * np.asarray(weights).mean(axis=0, dtype=np.float64)  # (b, n)
    a_hat[np.arange(len(queries)), queries] += 0.5  # the residual path: each query keeps half of itself
    a_hat /= a_hat.sum(axis=-1, keepdims=True)
    return a_hat


# ----------------------------------------------------------------------------- sink rate
@dataclass(frozen=True)
class SinkRate:
    """Which heads are sink heads at threshold ``epsilon``, and their share of all heads."""

    mask: np.ndarray  # (L, H) bool, read-only: first-token score > epsilon
    rate: float  # mask.mean()
    epsilon: float
    scores: np.ndarray  # (L, H) the first-token scores the mask was taken from


def sink_rate(attentions: np.ndarray, epsilon: float = SINK_EPSILON, windows: Windows = None) -> SinkRate:
    """Gu et al. 2024: a head is a sink head when its first-token score exceeds ε; the sink rate is
    the share of such heads.

    The first-token score is ``head_scores.sink``: mean over queries i ≥ 1 of A[i, 0] (under a
    sliding window, ``windows`` per layer, over the queries that see token 0). (Gu et al.
    average over every query, row 0 included, whose A[0, 0] is always 1; excluding it keeps the score
    equal to the one shown in the Head scores table.) A 1-token text has no score: no head is a sink,
    and the rate is NaN (``null`` in summary.json), not 0: there is nothing to count.
    """
    return sink_rate_of_scores(sink(attentions, windows), epsilon)


def sink_rate_of_result(result, epsilon: float = SINK_EPSILON) -> SinkRate:
    """:func:`sink_rate` of an AttentionResult, whichever way its maps are held: from ``result.attentions``, or
    from the first-token scores its streamed pass computed (``head_scores.all_scores``: the same ``sink``)."""
    if result.attentions is not None:
        return sink_rate(result.attentions, epsilon, result.sliding_windows)
    from .head_scores import all_scores

    return sink_rate_of_scores(all_scores(result)["sink"], epsilon)


def sink_rate_of_scores(scores: np.ndarray, epsilon: float = SINK_EPSILON) -> SinkRate:
    """The sink rate from first-token scores already computed (L, H), e.g. their mean over many texts:
    the share of heads whose score is strictly above ε (NaN counts as not a sink); NaN when no head has a
    score at all."""
    if not 0.0 <= float(epsilon) <= 1.0:
        raise ValueError(f"the sink threshold ε must be between 0 and 1, got {epsilon}")
    scores = np.array(scores, dtype=np.float64)  # a copy: the caller's array stays writable and untouched
    with np.errstate(invalid="ignore"):
        mask = scores > epsilon  # NaN compares False
    rate = float(mask.mean()) if np.isfinite(scores).any() else float("nan")
    return SinkRate(_frozen(mask), rate, float(epsilon), _frozen(scores))


# ----------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class LensInputs:
    """What a lens may read: the result, the model that produced it, and the options a lens takes."""

    result: Any  # the AttentionResult
    loaded: Any = None  # the LoadedModel that produced it; read only by lenses that ``need_model``
    sink_epsilon: float = SINK_EPSILON
    rollout_skip_first: bool = False  # the rollout lens is rollout_skip_first of R (export --rollout-skip-first)


@dataclass(frozen=True)
class Lens:
    """One lens: what it is, what it needs, how it is computed and how an export writes it."""

    name: str  # the one id: the GUI's lens kind, attention.npz's array name or summary.json's key
    definition: str  # what it shows, the formula in words, and where it comes from
    compute: Callable[[LensInputs], Any]  # the lens of one result (ValueNorms, an array, SinkRate …)
    needs_model: bool = False  # reads the model's weights, not only the result: computed where the model is
    npz_array: Callable[[Any], np.ndarray] | None = None  # the array attention.npz holds (its first axis: layer)
    summary: Callable[[Any], dict] | None = None  # the entries summary.json holds


#: Every lens, in the order an export writes them (attention.npz's arrays after ``attentions``). Adding a lens:
#: its function above and one entry here (and its test); a GUI view of it is the GUI's own.
LENSES: tuple[Lens, ...] = (
    Lens("value_norms",
         "value-weighted attention (Kobayashi et al. 2020): N[i, j] = A[i, j] · ‖f_h(x_j)‖ with "
         "f_h(x) = (x W_V^h + b_V^h) W_O^h, how much key j really moves query i's output",
         lambda i: value_norms(i.loaded, i.result), needs_model=True,
         npz_array=lambda norms: norms.value_norms),
    Lens("rollout",
         "attention rollout (Abnar & Zuidema 2020): Â(l) = 0.5 · mean_h A(l) + 0.5 · I, rows renormalised; "
         "R(0) = Â(0), R(l) = Â(l) · R(l−1): which input tokens each position draws on after layers 0…l; "
         "with rollout_skip_first, R[i, j] / (1 − R[i, 0]) for j ≥ 1 and the first input NaN (hidden)",
         lambda i: rollout_of_result(i.result, skip_first=i.rollout_skip_first),
         npz_array=lambda r: r),
    Lens("sink_rate",
         "sink rate (Gu et al. 2024): the share of heads whose first-token score (mean over i ≥ 1 of A[i, 0]) "
         "exceeds ε",
         lambda i: sink_rate_of_result(i.result, i.sink_epsilon),
         summary=lambda sinks: {"sink_rate": sinks.rate, "sink_epsilon": sinks.epsilon}),
)


def lens_named(name: str) -> Lens:
    """The lens whose ``name`` is ``name``; KeyError for none."""
    for lens in LENSES:
        if lens.name == name:
            return lens
    raise KeyError(name)


def compute_lenses(inputs: LensInputs, lenses: Sequence[Lens] = LENSES) -> dict[str, Any]:
    """{name: value} of each of ``lenses`` for ``inputs``, in their order."""
    return {lens.name: lens.compute(inputs) for lens in lenses}


def npz_arrays(values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The float32 arrays attention.npz holds of the lenses in ``values`` ({name: value}), in ``LENSES`` order."""
    return {lens.name: np.asarray(lens.npz_array(values[lens.name]), dtype=np.float32)
            for lens in LENSES if lens.npz_array is not None and lens.name in values}


def summary_fields(values: Mapping[str, Any]) -> dict:
    """The summary.json entries of the lenses in ``values`` ({name: value}), in ``LENSES`` order."""
    fields = {}
    for lens in LENSES:
        if lens.summary is not None and lens.name in values:
            fields.update(lens.summary(values[lens.name]))
    return fields
