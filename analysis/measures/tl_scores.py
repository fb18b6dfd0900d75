"""TransformerLens-compatible head detector scores, so numbers can be compared with TL's.

The patterns and the score of one head, as TransformerLens defines them (``transformer_lens/head_detector.py``),
are ``tl_patterns``; this module scores every head, one text or many, with TL's options.

Checked against TransformerLens 4.3.0 (``transformer_lens/head_detector.py`` of the 4.3.0 wheel): on the real
SmolLM2-135M both measures and every exclusion matched TL's ``detect_head`` to ≤ 1.6e-7, except one ``abs``
score on a rounding tie at the third decimal. Older TransformerLens releases (3.5.1 and 4.0.0b1, for example)
had two bugs that 4.3.0 fixed, which is why these scores may differ from numbers computed with them:
``mul`` with an exclusion zeroed the caller's cached attention in place, and the list-of-texts path called
itself with only the pattern name, dropping ``heads``, ``exclude_bos``, ``exclude_current_token`` and
``error_measure`` (``abs`` never modified the cache). These are pure functions that never modify their
inputs, and every option reaches every path. A score whose denominator is 0 (``mul`` with all remaining
attention excluded) is NaN (TL divides by zero and returns NaN too).

Every head at once: ``detect`` and ``detect_all`` (the three patterns together) score all heads in
numpy expressions over (head, n, n), never a loop over heads. They read the attention in full once
(its sum per head, plus a sign check for ``abs``), then only P's non-zero cells, column 0 and the
diagonal: Σ A′ is Σ A less the excluded column / diagonal, and Σ|A − P| is Σ|A| corrected at P's
cells. For GPT-2 small at 512 tokens the three patterns take ~30–45 ms (``mul``) / ~45–55 ms (``abs``)
against 0.5–0.8 s head by head. The results equal the per-head loop (``_detect_per_head``, the
reference the tests hold them to): ``abs`` exactly, a value whose rounding the summation could tip
being recomputed by the reference; ``mul`` to the rounding of float64 sums (within 1e-6 relative, also
when almost all attention is excluded; ~1e-10 measured).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .tl_patterns import ABS_DECIMALS, ERROR_MEASURES, HEAD_NAMES, ErrorMeasure, detection_pattern, similarity_score


# ----------------------------------------------------------------------------- every head
def _layer_heads(heads, n_layer: int, n_head: int) -> dict[int, list[int]]:
    """TL's ``heads`` argument: None (all), a list of (layer, head) or a {layer: [heads]} dict."""
    if heads is None:
        return {layer: list(range(n_head)) for layer in range(n_layer)}
    pairs = ([(layer, h) for layer, hs in heads.items() for h in hs] if isinstance(heads, dict)
             else [tuple(pair) for pair in heads])
    chosen: dict[int, list[int]] = {}
    for layer, head in pairs:
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise ValueError(f"head {layer}.{head} is outside the model's {n_layer} layers × {n_head} heads")
        chosen.setdefault(int(layer), []).append(int(head))
    return chosen


def _check_options(error_measure: str) -> None:
    if error_measure not in ERROR_MEASURES:
        raise ValueError(f"unknown error measure {error_measure!r}; use one of {', '.join(ERROR_MEASURES)}")


def _check_attentions(attentions: np.ndarray) -> np.ndarray:
    a = np.asarray(attentions)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attentions must be (layer, head, n, n), got shape {a.shape}")
    if a.shape[-1] < 2:
        raise ValueError("the sequence needs at least 2 tokens to be scored")
    return a


def _pattern(pattern: str | np.ndarray, token_ids: np.ndarray, n: int) -> np.ndarray:
    """The (n, n) detection pattern, named or given, checked."""
    p = detection_pattern(pattern, token_ids) if isinstance(pattern, str) else np.asarray(pattern, np.float64)
    if p.shape != (n, n) or np.any(np.triu(p, k=1) != 0):
        raise ValueError(f"the detection pattern must be a lower triangular ({n}, {n}) matrix, got shape {p.shape}")
    return p


@dataclass(frozen=True)
class _Cells:
    """A detection pattern as its non-zero cells: P[i[c], j[c]] = v[c] (row-major), every other cell 0."""

    n: int
    i: np.ndarray
    j: np.ndarray
    v: np.ndarray

    @classmethod
    def of(cls, p: np.ndarray) -> "_Cells":
        i, j = np.nonzero(p)
        return cls(p.shape[0], i, j, p[i, j])

    def column0(self) -> np.ndarray:
        """P[:, 0] (n,)"""
        out = np.zeros(self.n)
        first = self.j == 0
        out[self.i[first]] = self.v[first]
        return out

    def diagonal(self) -> np.ndarray:
        """P[i, i] (n,)"""
        out = np.zeros(self.n)
        on = self.i == self.j
        out[self.i[on]] = self.v[on]
        return out

    def dense(self) -> np.ndarray:
        p = np.zeros((self.n, self.n))
        p[self.i, self.j] = self.v
        return p


def _named_cells(names: Sequence[str], token_ids: np.ndarray, n: int) -> dict[str, _Cells]:
    """The named patterns straight as cells (the same cells as ``detection_pattern``, without an (n, n)
    matrix each): previous token (i, i − 1); duplicate token the repeat pairs (i, j), j < i; induction
    the same pairs one key on, (i, j + 1)."""
    ids = np.asarray(token_ids).ravel()
    if ids.size != n:
        raise ValueError(f"{ids.size} token ids for {n} attention positions")
    cells: dict[str, _Cells] = {}
    repeats = None
    for name in names:
        if name == "previous_token_head":
            i = np.arange(1, n)
            cells[name] = _Cells(n, i, i - 1, np.ones(n - 1))
            continue
        if name not in HEAD_NAMES:
            detection_pattern(name, ids)  # raises: unknown name
        if repeats is None:
            repeats = np.nonzero(np.tril(ids[:, None] == ids[None, :], k=-1))  # (i, j), j < i, row-major
        i, j = repeats
        cells[name] = _Cells(n, i, j if name == "duplicate_token_head" else j + 1, np.ones(i.size))
    return cells


class _HeadSums:
    """What every pattern's score needs from the attention of K heads, read once: a (K, n, n), never written.

    ``total`` (K,): Σ_ij A for "mul"; Σ_ij |A| for "abs" (the same sum for attention weights, which are
    ≥ 0: only "abs" pays a pass to check that). ``col0`` A[:, i, 0] and ``diag`` A[:, i, i] (K, n), float64.
    The full sum adds each row in the input's precision and the row sums in float64; with ``precise``
    (an exclusion is on) every row accumulates in float64 too (numpy casts as it reads: no float64
    copy), so ``total`` less the excluded cells keeps its precision when almost all attention is
    excluded (a row of [7e-6, 1 − 7e-6] without its diagonal: float32 row sums lost 0.4% of that
    remainder). Without exclusions ``total`` is the denominator itself and float32 rows suffice. ``error`` (K,) bounds the rounding error of ``total`` (for "mul"
    on signed weights, which no attention has, it bounds it only where rows do not cancel); a score
    that this error could change is recomputed by ``exactly``, the float64 per-head reference.
    """

    def __init__(self, a: np.ndarray, error_measure: str, precise: bool = True):
        if a.dtype not in (np.float32, np.float64):
            a = a.astype(np.float64)  # float16, integers: sums in float64
        self.a, self.n = a, a.shape[-1]
        self.flat = a.reshape(a.shape[0], -1)  # (K, n·n) a view: a gather by flat index is one np.take
        self.signed = error_measure == "abs" and bool(a.min() < 0)  # attention weights never are
        rows = np.abs(a) if self.signed else a
        accumulate = np.float64 if precise else a.dtype
        self.total = rows.sum(axis=-1, dtype=accumulate).sum(axis=-1, dtype=np.float64)  # (K,)
        self.col0 = a[:, :, 0].astype(np.float64)  # (K, n)
        self.diag = np.diagonal(a, axis1=-2, axis2=-1).astype(np.float64)  # (K, n)
        # numpy's pairwise sum of a row is within about (19 + log2(n / 128)) ε of the row's Σ|A|
        self.error = (24 + np.log2(self.n)) * np.finfo(accumulate).eps * np.abs(self.total)

    def exactly(self, heads: np.ndarray, p: _Cells, **options) -> np.ndarray:
        """``similarity_score`` (the float64 reference) on the heads where ``heads`` (K,) is True."""
        dense = p.dense()
        return np.array([similarity_score(self.a[k], dense, **options) for k in np.flatnonzero(heads)])

    def exact_total(self, heads: np.ndarray) -> np.ndarray:
        """``total`` summed in float64 throughout, on the heads where ``heads`` (K,) is True."""
        a = self.a[heads]
        return (np.abs(a) if self.signed else a).sum(axis=(-2, -1), dtype=np.float64)

    def over_cells(self, i: np.ndarray, j: np.ndarray, values: np.ndarray, f) -> np.ndarray:
        """Σ over the cells (i, j) of f(A[:, i, j], values) → (K,), in float64. The cells are read in
        blocks, so a dense pattern (a text of one repeated token) never needs an (K, n²) float64 copy."""
        flat_index = i * self.n + j
        out = np.zeros(self.flat.shape[0])
        for start in range(0, flat_index.size, _CELLS_PER_BLOCK):
            cells = slice(start, start + _CELLS_PER_BLOCK)
            block = np.take(self.flat, flat_index[cells], axis=1).astype(np.float64)  # (K, ≤ block)
            out += f(block, values[cells])
        return out


_CELLS_PER_BLOCK = 1 << 14  # (K, 16384) float64: 19 MB for GPT-2's 144 heads


def _mul(s: _HeadSums, p: _Cells, exclude_bos: bool, exclude_current_token: bool) -> np.ndarray:
    """Σ(A′ ⊙ P) / ΣA′ for every head at once (K,): A′ is A less its excluded column 0 / diagonal,
    taken from the full sum instead of zeroing a copy; only P's non-zero cells are read for the numerator."""
    keep = np.ones(p.i.shape, dtype=bool)
    if exclude_bos:
        keep &= p.j != 0
    if exclude_current_token:
        keep &= p.i != p.j
    numerator = s.over_cells(p.i[keep], p.j[keep], p.v[keep], lambda block, v: block @ v)  # (K,) Σ A′ ⊙ P
    removed = np.zeros_like(s.total)
    if exclude_bos:
        removed += s.col0.sum(axis=-1)
    if exclude_current_token:
        removed += s.diag.sum(axis=-1)
    if exclude_bos and exclude_current_token:
        removed -= s.col0[:, 0]  # A[0, 0] is in both
    denominator = s.total - removed
    scores = np.full(s.total.shape, np.nan)
    defined = denominator != 0
    scores[defined] = numerator[defined] / denominator[defined]
    # a head whose remaining attention is within rounding of 0 (all of it excluded): its score is NaN
    # or a share of almost nothing, and only the exact sum can tell which
    unsure = np.abs(denominator) <= s.error
    if unsure.any():
        scores[unsure] = s.exactly(unsure, p, exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
                                   error_measure="mul")
    return scores


def _abs(s: _HeadSums, p: _Cells, exclude_bos: bool, exclude_current_token: bool) -> np.ndarray:
    """1 − round(Σ|A − P|′ / n, 3) for every head at once (K,): Σ|A − P| is Σ|A| corrected at P's
    non-zero cells, less the excluded column 0 / diagonal of |A − P|."""
    delta = s.over_cells(p.i, p.j, p.v, lambda block, v: (np.abs(block - v) - np.abs(block)).sum(axis=-1))  # (K,)
    col0 = np.abs(s.col0 - p.column0())  # (K, n) |A − P| in column 0
    diag = np.abs(s.diag - p.diagonal())  # (K, n) |A − P| on the diagonal
    if exclude_bos:
        delta -= col0.sum(axis=-1)
    if exclude_current_token:
        delta -= diag.sum(axis=-1)
    if exclude_bos and exclude_current_token:
        delta += col0[:, 0]  # (0, 0) is in both
    error = (s.total + delta) / s.n  # (K,) in [0, 2]
    # where the rounding error of Σ|A| could carry the value across a rounding boundary (about 1 head
    # in 100), Σ|A| is taken again in float64; where even that is too close, the reference decides
    unsure = _near_boundary(error, s.error / s.n)
    if unsure.any():
        error[unsure] = (s.exact_total(unsure) + delta[unsure]) / s.n
    # Python's round on each value, as TL does (numpy's round can differ on ties): L·H calls per pattern
    scores = np.array([1 - round(float(x), ABS_DECIMALS) for x in error])
    unsure &= _near_boundary(error, 1e-12)
    if unsure.any():
        scores[unsure] = s.exactly(unsure, p, exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
                                   error_measure="abs")
    return scores


def _near_boundary(x: np.ndarray, within: np.ndarray | float) -> np.ndarray:
    """Where x is within ``within`` of a rounding boundary at ``ABS_DECIMALS`` decimals (…5 in the next place)."""
    step = 10.0 ** -ABS_DECIMALS
    return np.abs((x / step) % 1 - 0.5) * step <= within


def _head_mask(heads, n_layer: int, n_head: int) -> np.ndarray:
    """(layer, head) bool: the heads ``heads`` chooses (TL's argument, see ``_layer_heads``)."""
    mask = np.zeros((n_layer, n_head), dtype=bool)
    for layer, layer_heads in _layer_heads(heads, n_layer, n_head).items():
        mask[layer, layer_heads] = True
    return mask


def _detect(a: np.ndarray, patterns: dict, heads, exclude_bos: bool, exclude_current_token: bool,
            error_measure: str) -> dict:
    """Every pattern of ``patterns`` {key: _Cells} on the heads chosen, sharing one ``_HeadSums``."""
    L, H, n = a.shape[0], a.shape[1], a.shape[-1]
    chosen = _head_mask(heads, L, H)
    every = bool(chosen.all())
    sums = _HeadSums(a.reshape(L * H, n, n) if every else a[chosen], error_measure,  # (K, n, n), K = heads chosen
                     precise=exclude_bos or exclude_current_token)
    score = _mul if error_measure == "mul" else _abs
    out = {}
    for key, p in patterns.items():
        values = -np.ones((L, H))
        values[chosen] = score(sums, p, exclude_bos, exclude_current_token)
        out[key] = values
    return out


def detect_all(attentions: np.ndarray, token_ids: np.ndarray, names: Sequence[str] = HEAD_NAMES, *,
               heads: Iterable[tuple[int, int]] | dict[int, list[int]] | None = None, exclude_bos: bool = False,
               exclude_current_token: bool = False, error_measure: ErrorMeasure = "mul") -> dict[str, np.ndarray]:
    """``detect`` for several named patterns at once: {name: (layer, head) scores}, equal to calling
    ``detect`` once per name, but the attention is read in full only once for all of them."""
    a = _check_attentions(attentions)
    _check_options(error_measure)
    n = a.shape[-1]
    patterns = _named_cells(names, token_ids, n)
    return _detect(a, patterns, heads, exclude_bos, exclude_current_token, error_measure)


def detect(attentions: np.ndarray, token_ids: np.ndarray, pattern: str | np.ndarray, *,
           heads: Iterable[tuple[int, int]] | dict[int, list[int]] | None = None, exclude_bos: bool = False,
           exclude_current_token: bool = False, error_measure: ErrorMeasure = "mul") -> np.ndarray:
    """TL's ``detect_head`` on captured attention: (layer, head) scores, −1 for heads not in ``heads``.

    attentions (L, H, n, n); token_ids (n,) (the tokens the model ran, BOS included if it was
    prepended — TL prepends one by default); pattern a name from ``HEAD_NAMES`` or an (n, n) lower
    triangular matrix. Inputs are never modified. Every head is scored in one numpy expression (the
    per-head loop of ``similarity_score`` is ``_detect_per_head``, kept as the reference the tests
    compare against).
    """
    a = _check_attentions(attentions)
    _check_options(error_measure)
    n = a.shape[-1]
    p = _named_cells([pattern], token_ids, n)[pattern] if isinstance(pattern, str) else (
        _Cells.of(_pattern(pattern, token_ids, n)))
    return _detect(a, {"p": p}, heads, exclude_bos, exclude_current_token, error_measure)["p"]


def _detect_per_head(attentions: np.ndarray, token_ids: np.ndarray, pattern: str | np.ndarray, *,
                     heads=None, exclude_bos: bool = False, exclude_current_token: bool = False,
                     error_measure: ErrorMeasure = "mul") -> np.ndarray:
    """The reference: ``similarity_score`` head by head (what ``detect`` did before it was vectorised)."""
    a = _check_attentions(attentions)
    _check_options(error_measure)
    p = _pattern(pattern, token_ids, a.shape[-1])
    scores = -np.ones(a.shape[:2])
    for layer, layer_heads in _layer_heads(heads, a.shape[0], a.shape[1]).items():
        for head in layer_heads:
            scores[layer, head] = similarity_score(a[layer, head], p, exclude_bos=exclude_bos,
                                                   exclude_current_token=exclude_current_token,
                                                   error_measure=error_measure)
    return scores


def detect_many(runs: Sequence[tuple[np.ndarray, np.ndarray]], pattern: str, *,
                heads: Iterable[tuple[int, int]] | dict[int, list[int]] | None = None, exclude_bos: bool = False,
                exclude_current_token: bool = False, error_measure: ErrorMeasure = "mul") -> np.ndarray:
    """TL's many-texts path (``detect_head`` with a list of texts): the mean over texts of ``detect`` on each
    (attentions, token_ids), with every option passed on, as TransformerLens 4.3.0 does. (layer, head)"""
    if not runs:
        raise ValueError("no texts to score")
    heads = heads if heads is None or isinstance(heads, dict) else list(heads)  # used once per text
    return np.mean([detect(a, ids, pattern, heads=heads, exclude_bos=exclude_bos,
                           exclude_current_token=exclude_current_token, error_measure=error_measure)
                    for a, ids in runs], axis=0)


#: The version of TransformerLens these scores were checked against (its ``head_detector.detect_head``).
CHECKED_AGAINST = "TransformerLens 4.3.0"


def scores_of_text(attentions: np.ndarray, token_ids: np.ndarray, *, error_measure: ErrorMeasure = "mul",
                   exclude_bos: bool = False, exclude_current_token: bool = False) -> dict[str, np.ndarray]:
    """The three TL patterns of one text, {name: (layer, head)}, as the Head scores tab and ``export`` show
    them: ``detect_all`` with TL's options, and NaN for every head of a text under 2 tokens (TL refuses
    such a text: there is no previous token to look for)."""
    a = np.asarray(attentions)
    if a.shape[-1] < 2:
        return {name: np.full(a.shape[:2], np.nan) for name in HEAD_NAMES}
    return detect_all(a, token_ids, HEAD_NAMES, error_measure=error_measure, exclude_bos=exclude_bos,
                      exclude_current_token=exclude_current_token)

