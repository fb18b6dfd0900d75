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
cells. All of it is gathered a block of query rows at a time (``_HeadSums.add``), from a whole array here and
from blocks computed on demand in measures/streamed.py: one definition for both. For GPT-2 small at 512
tokens the three patterns take ~30–45 ms (``mul``) / ~45–55 ms (``abs``) against 0.5–0.8 s head by head. The results equal the per-head loop (``_detect_per_head``, the
reference the tests hold them to): ``abs`` exactly, a value whose rounding the summation could tip
being recomputed by the reference; ``mul`` to the rounding of float64 sums (within 1e-6 relative, also
when almost all attention is excluded; ~1e-10 measured).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..display import head_name
from .head_scores import earlier_copies
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
            raise ValueError(f"{head_name(layer, head)} is outside the model's {n_layer} layers × {n_head} heads")
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

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(i, j, v) of the cells in query rows start … stop − 1 (views)."""
        lo, hi = np.searchsorted(self.i, [start, stop])
        return self.i[lo:hi], self.j[lo:hi], self.v[lo:hi]

    def dense(self) -> np.ndarray:
        p = np.zeros((self.n, self.n))
        p[self.i, self.j] = self.v
        return p


@dataclass(frozen=True)
class _Repeats:
    """The duplicate (``shift`` 0) or induction (``shift`` 1) pattern's cells, made a block of rows at a time from
    the tokens (no (n, n) matrix, nor every pair at once): (i, j + shift) for j < i with tok[j] = tok[i]."""

    ids: np.ndarray
    shift: int
    memo: dict | None = field(default=None, compare=False)  # {(start, stop): earlier copies}, shared by a pass

    @property
    def n(self) -> int:
        return int(self.ids.size)

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found = None if self.memo is None else self.memo.get(("copies", start, stop))
        if found is None:
            found = earlier_copies(self.ids, slice(start, stop))  # row-major
            if self.memo is not None:
                self.memo[("copies", start, stop)] = found
        i, j = found
        return i, j + self.shift, np.ones(i.size)

    def dense(self) -> np.ndarray:
        return _Cells(self.n, *self.rows(0, self.n)).dense()


def _named_cells(names: Sequence[str], token_ids: np.ndarray, n: int, memo: dict | None = None) -> dict:
    """The named patterns straight as cells (the same cells as ``detection_pattern``, without an (n, n)
    matrix each): previous token (i, i − 1); duplicate token the repeat pairs (i, j), j < i; induction
    the same pairs one key on, (i, j + 1). ``memo``: where the repeat pairs of each block of rows are kept for the
    next layer (a streamed pass's; None: found afresh each time)."""
    ids = np.asarray(token_ids).ravel()
    if ids.size != n:
        raise ValueError(f"{ids.size} token ids for {n} attention positions")
    cells: dict = {}
    for name in names:
        if name == "previous_token_head":
            i = np.arange(1, n)
            cells[name] = _Cells(n, i, i - 1, np.ones(n - 1))
            continue
        if name not in HEAD_NAMES:
            detection_pattern(name, ids)  # raises: unknown name
        cells[name] = _Repeats(ids, 0 if name == "duplicate_token_head" else 1, memo)
    return cells


class _HeadSums:
    """What every pattern's score needs from the attention of K heads, read a block of query rows at a time
    (:meth:`add`: a whole (K, n, n) array in chunks of rows, or blocks of rows computed on demand,
    measures/streamed.py), never written; the scores then read it (:func:`_mul`, :func:`_abs`).

    ``total`` (K,): Σ_ij A for "mul"; Σ_ij |A| for "abs" (the same sum for attention weights, which are
    ≥ 0: only "abs" pays a pass to check that). ``col0`` A[:, i, 0] and ``diag`` A[:, i, i] (K, n), float64.
    The full sum adds each row in the input's precision and the row sums in float64; with ``precise``
    (an exclusion is on) every row accumulates in float64 too (numpy casts as it reads: no float64
    copy), so ``total`` less the excluded cells keeps its precision when almost all attention is
    excluded (a row of [7e-6, 1 − 7e-6] without its diagonal: float32 row sums lost 0.4% of that
    remainder). Without exclusions ``total`` is the denominator itself and float32 rows suffice. ``error`` (K,) bounds the rounding error of ``total`` (for "mul"
    on signed weights, which no attention has, it bounds it only where rows do not cancel); a score
    that this error could change is recomputed by ``exactly``, the float64 per-head reference, from the head's
    whole map (``dense_head(k)``, (n, n): the one place a head's map is needed whole, and only for such a head).

    ``cells[key]`` (K,) per pattern, in float64: for "mul" Σ A′ ⊙ P over P's cells that no exclusion removes; for
    "abs" Σ (|A − P| − |A|) over P's cells (Σ|A − P| is Σ|A| corrected there). ``p_col0[key]``, ``p_diag[key]``
    (n,): P's column 0 and diagonal.
    """

    def __init__(self, n_heads: int, n: int, dtype, patterns: Mapping, error_measure: str, exclude_bos: bool,
                 exclude_current_token: bool, dense_head: Callable[[int], np.ndarray]):
        self.n, self.patterns, self.dense_head = n, dict(patterns), dense_head
        self.error_measure, self.exclude_bos, self.exclude_current_token = (error_measure, exclude_bos,
                                                                            exclude_current_token)
        self.dtype = np.dtype(dtype) if np.dtype(dtype) in (np.float32, np.float64) else np.dtype(np.float64)
        self.accumulate = np.float64 if exclude_bos or exclude_current_token else self.dtype
        self.row_sums = np.zeros((n_heads, n), dtype=self.accumulate)  # (K, n) Σ_j A (or |A|) per row
        self.col0, self.diag = np.zeros((n_heads, n)), np.zeros((n_heads, n))  # (K, n)
        self.cells = {key: np.zeros(n_heads) for key in self.patterns}
        self.p_col0 = {key: np.zeros(n) for key in self.patterns}
        self.p_diag = {key: np.zeros(n) for key in self.patterns}

    def add(self, start: int, block: np.ndarray, row_sums: np.ndarray | None = None) -> None:
        """Query rows start … start + b − 1 of the K heads: block (K, b, n) (or a causal block cut after its last
        visible key, (K, b, stop)). ``row_sums`` (K, b): Σ_j of each row when the caller has them (weights, which
        are never negative, summed in float32 as here; not with an exclusion on, which sums in float64)."""
        if block.dtype != self.dtype:
            block = block.astype(self.dtype)  # float16, integers: sums in float64
        b = block.shape[1]
        stop = start + b
        if row_sums is not None and self.accumulate == np.float32:
            self.row_sums[:, start:stop] = row_sums
        else:
            signed = self.error_measure == "abs" and block.size > 0 and bool(block.min() < 0)  # weights never are
            self.row_sums[:, start:stop] = (np.abs(block) if signed else block).sum(axis=-1, dtype=self.accumulate)
        self.col0[:, start:stop] = block[:, :, 0]
        self.diag[:, start:stop] = block.diagonal(start, axis1=1, axis2=2)[:, :b]  # A[i, i], a view
        for key, pattern in self.patterns.items():
            i, j, v = pattern.rows(start, stop)
            first, on = j == 0, i == j
            self.p_col0[key][i[first]], self.p_diag[key][i[on]] = v[first], v[on]
            if self.error_measure == "mul":
                keep = np.ones(i.shape, dtype=bool)
                if self.exclude_bos:
                    keep &= ~first
                if self.exclude_current_token:
                    keep &= ~on
                i, j, v = i[keep], j[keep], v[keep]
            self.cells[key] += _over_cells(block, i - start, j, v, self.error_measure)

    @property
    def total(self) -> np.ndarray:
        return self.row_sums.sum(axis=-1, dtype=np.float64)  # (K,)

    @property
    def error(self) -> np.ndarray:
        # numpy's pairwise sum of a row is within about (19 + log2(n / 128)) ε of the row's Σ|A|
        return (24 + np.log2(self.n)) * np.finfo(self.accumulate).eps * np.abs(self.total)

    def exactly(self, heads: np.ndarray, key) -> np.ndarray:
        """``similarity_score`` (the float64 reference) on the heads where ``heads`` (K,) is True."""
        dense = self.patterns[key].dense()
        return np.array([similarity_score(self.dense_head(k), dense, exclude_bos=self.exclude_bos,
                                          exclude_current_token=self.exclude_current_token,
                                          error_measure=self.error_measure) for k in np.flatnonzero(heads)])

    def exact_total(self, heads: np.ndarray) -> np.ndarray:
        """``total`` summed in float64 throughout, on the heads where ``heads`` (K,) is True."""
        out = []
        for k in np.flatnonzero(heads):
            a = np.asarray(self.dense_head(k))
            out.append((np.abs(a) if a.min() < 0 else a).sum(dtype=np.float64))
        return np.array(out)


def _over_cells(block: np.ndarray, rows: np.ndarray, keys: np.ndarray, values: np.ndarray, measure: str) -> np.ndarray:
    """Σ over the cells (rows[c], keys[c]) of block (K, b, n) of A·v ("mul") or |A − v| − |A| ("abs") → (K,), in
    float64. The cells are read in chunks, so a dense pattern (a text of one repeated token) never needs an
    (K, n²) float64 copy."""
    out = np.zeros(block.shape[0])
    for start in range(0, rows.size, _CELLS_PER_BLOCK):
        cells = slice(start, start + _CELLS_PER_BLOCK)
        r, k = rows[cells], keys[cells]
        flat = block.flags.c_contiguous and block.size  # a contiguous block: its cells taken by flat index
        a = (block.reshape(block.shape[0], -1).take(r * block.shape[-1] + k, axis=1) if flat
             else block[:, r, k]).astype(np.float64)  # (K, ≤ chunk)
        v = values[cells]
        out += a @ v if measure == "mul" else (np.abs(a - v) - np.abs(a)).sum(axis=-1)
    return out


_CELLS_PER_BLOCK = 1 << 14  # (K, 16384) float64: 19 MB for GPT-2's 144 heads


def _mul(s: _HeadSums, key) -> np.ndarray:
    """Σ(A′ ⊙ P) / ΣA′ for every head at once (K,): A′ is A less its excluded column 0 / diagonal,
    taken from the full sum instead of zeroing a copy; only P's non-zero cells are read for the numerator."""
    numerator = s.cells[key]  # (K,) Σ A′ ⊙ P
    total = s.total
    removed = np.zeros_like(total)
    if s.exclude_bos:
        removed += s.col0.sum(axis=-1)
    if s.exclude_current_token:
        removed += s.diag.sum(axis=-1)
    if s.exclude_bos and s.exclude_current_token:
        removed -= s.col0[:, 0]  # A[0, 0] is in both
    denominator = total - removed
    scores = np.full(total.shape, np.nan)
    defined = denominator != 0
    scores[defined] = numerator[defined] / denominator[defined]
    # a head whose remaining attention is within rounding of 0 (all of it excluded): its score is NaN
    # or a share of almost nothing, and only the exact sum can tell which
    unsure = np.abs(denominator) <= s.error
    if unsure.any():
        scores[unsure] = s.exactly(unsure, key)
    return scores


def _abs(s: _HeadSums, key) -> np.ndarray:
    """1 − round(Σ|A − P|′ / n, 3) for every head at once (K,): Σ|A − P| is Σ|A| corrected at P's
    non-zero cells, less the excluded column 0 / diagonal of |A − P|."""
    delta = s.cells[key].copy()  # (K,)
    col0 = np.abs(s.col0 - s.p_col0[key])  # (K, n) |A − P| in column 0
    diag = np.abs(s.diag - s.p_diag[key])  # (K, n) |A − P| on the diagonal
    if s.exclude_bos:
        delta -= col0.sum(axis=-1)
    if s.exclude_current_token:
        delta -= diag.sum(axis=-1)
    if s.exclude_bos and s.exclude_current_token:
        delta += col0[:, 0]  # (0, 0) is in both
    total = s.total
    error = (total + delta) / s.n  # (K,) in [0, 2]
    # where the rounding error of Σ|A| could carry the value across a rounding boundary (about 1 head
    # in 100), Σ|A| is taken again in float64; where even that is too close, the reference decides
    unsure = _near_boundary(error, s.error / s.n)
    if unsure.any():
        error[unsure] = (s.exact_total(unsure) + delta[unsure]) / s.n
    # Python's round on each value, as TL does (numpy's round can differ on ties): L·H calls per pattern
    scores = np.array([1 - round(float(x), ABS_DECIMALS) for x in error])
    unsure &= _near_boundary(error, 1e-12)
    if unsure.any():
        scores[unsure] = s.exactly(unsure, key)
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


def pattern_scores(sums: _HeadSums) -> dict:
    """{key: (K,) scores} of every pattern ``sums`` was given, once every row has been added."""
    score = _mul if sums.error_measure == "mul" else _abs
    return {key: score(sums, key) for key in sums.patterns}


#: Values of attention one chunk of rows of ``_detect`` hands to ``_HeadSums.add`` (a view; its sums copy less).
_ROWS_VALUES = 1 << 24


def _detect(a: np.ndarray, patterns: dict, heads, exclude_bos: bool, exclude_current_token: bool,
            error_measure: str) -> dict:
    """Every pattern of ``patterns`` {key: cells} on the heads chosen, sharing one ``_HeadSums``."""
    L, H, n = a.shape[0], a.shape[1], a.shape[-1]
    chosen = _head_mask(heads, L, H)
    every = bool(chosen.all())
    a_k = a.reshape(L * H, n, n) if every else a[chosen]  # (K, n, n), K = heads chosen
    sums = _HeadSums(a_k.shape[0], n, a.dtype, patterns, error_measure, exclude_bos, exclude_current_token,
                     lambda k: a_k[k])
    step = max(1, _ROWS_VALUES // max(1, a_k.shape[0] * n))
    for start in range(0, n, step):
        sums.add(start, a_k[:, start:start + step])
    out = {}
    for key, values_k in pattern_scores(sums).items():
        values = -np.ones((L, H))
        values[chosen] = values_k
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


