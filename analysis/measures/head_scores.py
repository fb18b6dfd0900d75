"""Head detectors: one number per (layer, head) saying how much a head behaves in a known way.

Every function is pure: it reads ``attentions`` (layer, head, query, key) and never writes to it.
Query positions are i = 0 … n−1, key positions j = 0 … n−1. A *causal* model (a decoder: GPT-2,
Llama, NeoX) lets query i see only keys j ≤ i; a *bidirectional* one (an encoder: BERT) lets every
query see every key. Scores whose meaning depends on that take a ``causal: bool`` keyword.

One place says everything about a score: its entry in ``HEAD_SCORES`` (name, label, formula in words,
which models it applies to, why not elsewhere, and how it is computed). Everything else (``HeadScores``,
the CSV columns, the scan, the GUI's table) iterates that registry in its order.

Each score is a sum over query rows of a term that reads its own row, divided by the rows (or positions) that
count: the entry's ``row_sum`` computes that sum for one block of rows (a :class:`QueryRows`). The functions below
feed it a layer's rows a chunk at a time; measures/streamed.py feeds it blocks of rows computed on demand, so both
paths share one definition of every score and differ only in the order float64 sums are added.

Which scores apply (``applicable_scores(causal)``) is each entry's ``decoder`` / ``encoder``: the copying
scores (duplicate_token, induction, induction_probe) read only earlier copies and mean nothing for an
encoder; next_token is 0 by construction under a causal mask (it hides every key j > i).

Contract for callers (export writers, the GUI, the CLI):

- ``SCORE_NAMES`` lists every score in display order; ``SCORE_LABELS[name]`` is its one human name
  ("previous token"), used everywhere a name is shown; ``SCORE_DESCRIPTIONS[name]`` is the formula in
  words; ``NOT_APPLICABLE_WHY[name]`` says in one sentence why a score does not apply (for a tooltip);
  ``SCORE_SHORT[name]`` is a narrow column header. All are read off ``HEAD_SCORES``.
- ``all_scores(result) -> HeadScores`` reads ``result.causal``, ``result.probe`` and ``result.sliding_windows``.
- ``scores.applies(name) -> bool``: False means *not applicable* — show ``NOT_APPLICABLE`` ("n/a"),
  never a number. ``scores[name]`` is still a read-only (layer, head) array (all NaN when the score
  does not apply), so shape-based code keeps working.
- NaN in a score that applies means *undefined for this text* (e.g. no token repeats): a different
  thing from not applicable. ``scores.text(name, layer, head)`` gives the CSV cell for both cases:
  ``"n/a"`` / ``"nan"`` / the value as ``.6g``. ``scores.rows(na=...)`` puts ``na`` (default NaN) in
  place of a score that does not apply — pass ``na=None`` for JSON ``null``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np

#: Per layer, how many keys back (itself included) a query sees under a sliding window, None for none;
#: None or () for a model without windows (``LoadedModel.sliding_windows``, ``AttentionResult.sliding_windows``).
Windows = Sequence[int | None] | None
NOT_APPLICABLE = "n/a"


def _check(attentions: np.ndarray) -> np.ndarray:
    a = np.asarray(attentions)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attentions must be (layer, head, n, n), got shape {a.shape}")
    return a


# ----------------------------------------------------------------------------- a score, a block of rows at a time
@dataclass(frozen=True)
class QueryRows:
    """A block of query rows of one layer: what a score's sum over rows reads. Never written to.

    Every score here is a sum over query rows i of a term that reads row i alone, divided by how many rows (or
    positions) count: a :data:`RowSum` computes both for one block, so a score is computed in the same arithmetic
    from a whole layer (the functions below, a chunk of rows at a time) and from blocks of rows of attention
    computed on demand (measures/streamed.py), never holding more than the block."""

    weights: np.ndarray  # (H, b, n): A[h, start + r, j], the layer's weights for query rows start … start + b − 1
    start: int = 0  # the block's first query position
    token_ids: np.ndarray | None = None  # (n,) the text's tokens (read by the copying scores)
    causal: bool = True  # a decoder's mask (keys j ≤ i) or an encoder's (every key)
    window: int | None = None  # the layer's sliding window (keys back a query sees, itself included); None: none
    #: the text's length when ``weights`` is a causal block cut after its last visible key (width stop < n); None:
    #: the weights' width
    n_keys: int | None = None
    #: (H, b) float64 −Σ_j A ln A of each row when already computed (qk_capture.iter_causal_blocks); None: the
    #: entropy score takes it from the weights
    row_entropy: np.ndarray | None = None
    #: a pass's memo of the text's repeat pairs per block of rows ({(gap, window, offset, start, stop): pairs}),
    #: shared by every layer's blocks of the same rows; None: found afresh
    pairs: dict | None = None

    @property
    def stop(self) -> int:
        return self.start + int(self.weights.shape[-2])

    @property
    def n(self) -> int:
        return int(self.weights.shape[-1]) if self.n_keys is None else int(self.n_keys)

    @property
    def sees(self) -> int:
        """Keys back a query sees, itself included: the window, or n + 1 (none)."""
        return self.n + 1 if self.window is None else int(self.window)

    def queries(self, first: int, stop: int) -> np.ndarray:
        """The query positions first ≤ i < stop that lie in this block (int64)."""
        return np.arange(max(self.start, first), min(self.stop, stop))


#: A score's sum over one block's rows: (Σ of the term over the rows that count (H,) float64, how many count).
RowSum = Callable[[QueryRows], tuple[np.ndarray, int]]
#: Attention values a score's float64 copies of one chunk may hold (the entropy's p log p, a gather).
_CHUNK_VALUES = 1 << 18


def layer_windows(windows: Windows, n_layer: int) -> tuple[int | None, ...]:
    """Per layer, its sliding window or None, from ``windows`` (None or (): none anywhere); checked."""
    if not windows:
        return (None,) * n_layer
    if len(windows) != n_layer:
        raise ValueError(f"windows has {len(windows)} entries for {n_layer} layers")
    return tuple(None if w is None else int(w) for w in windows)


def mean_of_sums(sums: Sequence[tuple[np.ndarray, int]], n_head: int) -> np.ndarray:
    """Σ of the blocks' sums / Σ of their counts (H,); NaN when no row counted."""
    total, count = np.zeros(n_head), 0
    for s, c in sums:
        total, count = total + s, count + c
    return total / count if count else np.full(n_head, np.nan)


def score_of_layers(attentions: np.ndarray, row_sum: RowSum, token_ids: np.ndarray | None = None,
                    causal: bool = True, windows: Windows = None) -> np.ndarray:
    """(layer, head): ``row_sum`` over every query row of every layer of ``attentions`` (layer, head, n, n), a
    chunk of rows at a time (views: nothing is copied but what the score itself copies), then divided by the
    rows counted."""
    a = _check(attentions)
    L, H, n = a.shape[0], a.shape[1], a.shape[-1]
    per_layer = layer_windows(windows, L)
    step = max(1, _CHUNK_VALUES // max(1, H * n))
    ids = None if token_ids is None else np.asarray(token_ids).ravel()
    out = np.empty((L, H))
    for layer in range(L):
        out[layer] = mean_of_sums([row_sum(QueryRows(a[layer, :, start:start + step], start, ids, causal,
                                                     per_layer[layer]))
                                   for start in range(0, n, step)], H)
    return out


def _gather_sum(w: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Σ_c w[:, rows[c], keys[c]] (H,) in float64, gathered a chunk of cells at a time."""
    out = np.zeros(w.shape[0])
    step = max(1, _CHUNK_VALUES // max(1, w.shape[0]))
    # a contiguous block: its cells taken by flat index (faster than indexing by rows and keys)
    flat = w.reshape(w.shape[0], -1) if w.flags.c_contiguous and w.size else None
    for c in range(0, rows.size, step):
        r, k = rows[c:c + step], keys[c:c + step]
        cells = w[:, r, k] if flat is None else flat.take(r * w.shape[-1] + k, axis=1)  # (H, chunk) float32
        out += cells.sum(axis=-1, dtype=np.float64)  # each cell cast as it is added: no float64 copy
    return out


def _diagonal_sum(rows: QueryRows, offset: int, first: int, stop: int) -> tuple[np.ndarray, int]:
    """Σ over the block's queries first ≤ i < stop of A[i, i + offset], read from a diagonal view of the block (no
    gather: a streamed pass asks for three such sums of every block)."""
    lo, hi = max(rows.start, first), min(rows.stop, stop)
    if hi <= lo:
        return np.zeros(rows.weights.shape[0]), 0
    k = rows.start + offset  # row r of the block is query start + r, its key start + r + offset: diagonal k
    t = min(k, 0)  # that diagonal's element for row r is r + min(k, 0)
    d = rows.weights.diagonal(k, axis1=-2, axis2=-1)  # (H, …) a view
    return d[:, lo - rows.start + t:hi - rows.start + t].sum(axis=-1, dtype=np.float64), hi - lo


def _previous_token_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    return _diagonal_sum(rows, -1, 1, rows.n)


def _next_token_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    return _diagonal_sum(rows, 1, 0, rows.n - 1)


def _self_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    return _diagonal_sum(rows, 0, 1 if rows.causal else 0, rows.n)


def previous_token(attentions: np.ndarray) -> np.ndarray:
    """Mean over query positions i ≥ 1 of A[i, i−1]. (layer, head); NaN for a 1-token text.

    The same for causal and bidirectional models (query 0 has no previous token).
    """
    return score_of_layers(attentions, _previous_token_rows)


def next_token(attentions: np.ndarray) -> np.ndarray:
    """Mean over query positions i < n−1 of A[i, i+1]. (layer, head); NaN for a 1-token text.

    Only an encoder can score here: a causal mask hides key i+1 from query i, so a decoder's value is
    0 by construction and ``all_scores`` marks it not applicable instead of showing that 0.
    """
    return score_of_layers(attentions, _next_token_rows)


def self_attention(attentions: np.ndarray, *, causal: bool = True) -> np.ndarray:
    """Mean of A[i, i]. (layer, head)

    causal=True: over i ≥ 1 (row 0 of a causal map can only attend to itself, so it says nothing);
    NaN for a 1-token text. causal=False: over every i ≥ 0 (no row is forced).
    """
    return score_of_layers(attentions, _self_rows, causal=causal)


def _sink_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    """Σ over the block's queries 1 ≤ i < min(n, w) (those that see key 0) of A[i, 0]."""
    lo, hi = max(rows.start, 1), min(rows.stop, rows.n, rows.sees)
    if hi <= lo:
        return np.zeros(rows.weights.shape[0]), 0
    return rows.weights[:, lo - rows.start:hi - rows.start, 0].sum(axis=-1, dtype=np.float64), hi - lo


def sink(attentions: np.ndarray, windows: Windows = None) -> np.ndarray:
    """Mean over the queries i ≥ 1 that can see the first token of A[i, 0]: the mass parked on it. (layer, head)

    The same for causal and bidirectional models: query 0's own A[0, 0] is self-attention, not a sink.
    ``windows`` (per layer, or None): under a sliding window of w keys only queries i < w see key 0;
    the later ones, which cannot, are not counted (they would dilute the score with forced zeros).
    NaN when no query i ≥ 1 sees the first token (a 1-token text).
    """
    return score_of_layers(attentions, _sink_rows, windows=windows)


def earlier_copies(token_ids: np.ndarray, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with j < i and token[j] == token[i], row-major (i ascending, then j), for the queries i in
    ``rows`` (a slice of positions; None: every position). Found from the tokens sorted by (token, position):
    the work is the pairs found plus n log n, never a (rows, n) comparison."""
    ids = np.asarray(token_ids).ravel()
    start, stop, _ = (slice(None) if rows is None else rows).indices(ids.size)
    order = np.lexsort((np.arange(ids.size), ids))  # positions grouped by token, ascending within a group
    sorted_ids = ids[order]
    group_start = np.searchsorted(sorted_ids, sorted_ids, side="left")  # per sorted slot, where its group starts
    rank = np.empty(ids.size, dtype=np.int64)
    rank[order] = np.arange(ids.size) - group_start  # per position, how many earlier copies it has
    first = np.empty(ids.size, dtype=np.int64)
    first[order] = group_start  # per position, its group's first slot
    queries = np.arange(start, max(start, stop))
    counts = rank[queries]  # (b,) earlier copies of each query
    i = np.repeat(queries, counts)
    k = np.arange(i.size) - np.repeat(np.cumsum(counts) - counts, counts)  # 0 … count − 1 within each query
    return i, order[np.repeat(first[queries], counts) + k]


def repeat_pairs(token_ids: np.ndarray, min_gap: int = 1, window: int | None = None,
                 key_offset: int = 0, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """All (i, j) with j ≤ i − ``min_gap`` and token[j] == token[i], row-major; and how many positions i have at
    least one.

    ``window``: a sliding window of that many keys; only pairs whose key j + ``key_offset`` query i can see
    (j + key_offset > i − window) are kept, so a copy out of sight is not counted as a forced zero.
    ``rows``: only queries i in that slice of positions (a block of rows; None: every position)."""
    i, j = earlier_copies(token_ids, rows)
    keep = j <= i - min_gap
    if window is not None:
        keep &= j + key_offset > i - int(window)
    i, j = i[keep], j[keep]
    return i, j, int(np.count_nonzero(np.diff(i, prepend=-1)))  # i ascending: each new value is a position


#: Earlier copies nearer than this are left out of ``duplicate_token`` (2) and ``induction`` (3): there the
#: pattern's key is the query's previous token or the query itself, so a previous-token or self head
#: would score as a duplicate-token or induction head ("1, 2, 1, 2": the token after the earlier ","
#: is the previous token). A newcomer found previous-token heads ranked as the best induction heads.
DUPLICATE_MIN_GAP = 2
INDUCTION_MIN_GAP = 3


def _pattern_sum(rows: QueryRows, min_gap: int, key_offset: int) -> tuple[np.ndarray, int]:
    """Σ over the block's pairs of A[i, j + key_offset] (pairs in sight of the layer's window), and the block's
    positions i with a pair."""
    window = None if rows.sees > rows.n else rows.sees
    key = (min_gap, window, key_offset, rows.start, rows.stop)
    found = None if rows.pairs is None else rows.pairs.get(key)
    if found is None:
        found = repeat_pairs(rows.token_ids, min_gap, window, key_offset, slice(rows.start, rows.stop))
        if rows.pairs is not None:
            rows.pairs[key] = found
    i, j, n_positions = found
    return _gather_sum(rows.weights, i - rows.start, j + key_offset), n_positions


def _duplicate_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    return _pattern_sum(rows, DUPLICATE_MIN_GAP, 0)


def _induction_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    return _pattern_sum(rows, INDUCTION_MIN_GAP, 1)


def duplicate_token(attentions: np.ndarray, token_ids: np.ndarray, windows: Windows = None) -> np.ndarray:
    """Mean, over positions i whose token occurred at least 2 positions earlier, of
    Σ_{j ≤ i−2, tok[j]=tok[i]} A[i, j].

    A copy right before the query (j = i−1, "the the") is left out: attending to it is what a
    previous-token head does anyway. Under a sliding window (``windows``, per layer) only copies the
    query can see count. (layer, head); all NaN when no token repeats that far apart.
    Causal models only (see ``applicable_scores``).
    """
    return score_of_layers(attentions, _duplicate_rows, token_ids, windows=windows)


def induction(attentions: np.ndarray, token_ids: np.ndarray, windows: Windows = None) -> np.ndarray:
    """Mean, over positions i whose token occurred at least 3 positions earlier, of
    Σ_{j ≤ i−3, tok[j]=tok[i]} A[i, j+1]: the attention on the token that followed each earlier
    occurrence (what an induction head copies).

    Copies at j = i−1 and j = i−2 are left out: the token after them is the query itself or its
    previous token, which self and previous-token heads attend to anyway. Under a sliding window
    (``windows``, per layer) only pairs whose key j+1 the query can see count. (layer, head); all NaN
    when no token repeats that far apart. Causal models only (see ``applicable_scores``).
    """
    return score_of_layers(attentions, _induction_rows, token_ids, windows=windows)


def induction_probe(probe_attentions: np.ndarray, probe_token_ids: np.ndarray, windows: Windows = None) -> np.ndarray:
    """``induction`` on the probe sequence (BOS, random tokens R, R again), so it is defined for any text.
    Under a sliding window shorter than the probe's span a layer's value is NaN: no copy is in sight."""
    return induction(probe_attentions, probe_token_ids, windows)


def _row_entropy(rows: np.ndarray, first_query: int | None = None) -> np.ndarray:
    """−Σ_j p_j log p_j over the last axis, with 0 log 0 = 0 (natural log). ``first_query``: the rows are queries
    first_query, first_query + 1, … of a causal map, and only keys j ≤ i enter row i's sum.

    Each term in float32, the sum in float64: the terms are all ≤ 0, so the sum keeps their relative precision
    (within ~4e-7 of a float64 entropy). A weight below float32's smallest normal number (1.2e-38) is taken as
    that number in its logarithm: its term moves by less than 1e-36."""
    p = np.asarray(rows, dtype=np.float32)
    logs = np.maximum(p, np.finfo(np.float32).tiny)  # a copy: 0 log 0 is 0 · log(tiny) = 0, no NaN to mend
    if first_query is not None:
        b, m = p.shape[-2:]
        logs[..., np.arange(m) > first_query + np.arange(b)[:, None]] = 1  # keys j > i: log 1 = 0
    np.log(logs, out=logs)
    logs *= p
    return -logs.sum(axis=-1, dtype=np.float64)


def _entropy_rows(rows: QueryRows) -> tuple[np.ndarray, int]:
    """Σ over the block's counted queries of H(row) / log(keys the query sees) (see :func:`entropy`), a chunk of
    rows at a time."""
    w, H, n = rows.weights, rows.weights.shape[0], rows.n
    if n < 2:
        return np.zeros(H), 0
    i = rows.queries(1 if rows.causal else 0, n)
    seen = np.minimum(i + 1, rows.sees) if rows.causal else np.full(i.size, n)  # keys query i sees
    i, seen = i[seen > 1], seen[seen > 1]  # a row that sees one key has entropy 0 by necessity: not counted
    total = np.zeros(H)
    step = max(1, _CHUNK_VALUES // max(1, H * n))
    for c in range(0, i.size, step):
        q = i[c:c + step]  # query positions, consecutive (only row 0, or every row of a 1-key window, is left out)
        block = w[:, q[0] - rows.start : q[-1] + 1 - rows.start]  # (H, b, n) a view
        if rows.row_entropy is not None:
            entropies = rows.row_entropy[:, q[0] - rows.start : q[-1] + 1 - rows.start]
        elif rows.causal:
            entropies = _row_entropy(block[..., : q[-1] + 1], first_query=int(q[0]))  # only keys j ≤ i are read
        else:
            entropies = _row_entropy(block)
        total += (entropies / np.log(seen[c:c + step])).sum(axis=-1)
    return total, int(i.size)


def entropy(attentions: np.ndarray, *, causal: bool = True, windows: Windows = None) -> np.ndarray:
    """How spread each row is, normalised to 0 … 1 by the entropy of a uniform row over the keys a query
    can see: 0 when a row puts all weight on one key, 1 when it is uniform over them. (layer, head)

    causal=True:  mean over i ≥ 1 of H(A[i, :i+1]) / log(v_i), v_i = min(i+1, w) the keys query i sees
                  (w the layer's sliding window from ``windows``; no window: v_i = i+1). Rows that see one
                  key are excluded (their entropy is 0 by necessity: row 0, or every row of a 1-key window).
                  Only keys j ≤ i are read.
    causal=False: mean over i ≥ 0 of H(A[i, :]) / log(n) (every query sees all n keys).
    H(p) = −Σ_j p_j log p_j with 0 log 0 = 0, each term in float32, the sums in float64. NaN for a 1-token text
    (nothing to spread over).
    """
    return score_of_layers(attentions, _entropy_rows, causal=causal, windows=windows)


# ----------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class ScoreInputs:
    """What a score may read of one text. Never written to."""

    attentions: np.ndarray  # (layer, head, n, n)
    token_ids: np.ndarray  # (n,)
    probe: np.ndarray | None  # (layer, head) induction_probe values of the probe run, or None (no probe run)
    causal: bool  # a decoder's mask (keys j ≤ i) or an encoder's (every key)
    windows: Windows  # per layer, the sliding window of a causal mask or None


@dataclass(frozen=True)
class HeadScore:
    """One head score: what the analysis, the exports and the GUI need to know about it."""

    name: str  # the key in ``HeadScores.values``, the CSV column, the GUI's id
    label: str  # the one human name, shown everywhere a name is shown
    short: str  # a column header where the label is too wide ("prev.")
    description: str  # the formula in words (tooltips)
    compute: Callable[[ScoreInputs], np.ndarray]  # (layer, head) float; called only where the score applies
    decoder: bool = True  # applies to a causal model
    encoder: bool = True  # applies to a bidirectional one
    why_not: str = ""  # one sentence: why it does not apply where it does not (for a tooltip)
    # the score's sum over a block of query rows (what ``compute`` divides by the rows counted), for a consumer that
    # streams blocks of rows (measures/streamed.py); None: not a sum over this text's rows (the probe's score)
    row_sum: RowSum | None = None

    def applies_to(self, causal: bool) -> bool:
        return self.decoder if causal else self.encoder


def _probe_values(s: ScoreInputs) -> np.ndarray:
    """The probe run's induction values as given (scored by ``induction_probe``); NaN without a probe run."""
    return np.array(s.probe, dtype=np.float64) if s.probe is not None else np.full(s.attentions.shape[:2], np.nan)


_INDUCTION_WHY = "Induction copies what followed an earlier copy to predict the next token; an encoder predicts none."

#: Every head score, in display order; next_token is last so every column that existed before it keeps its
#: place in CSVs. Adding a score: its function above and one entry here (and its test).
HEAD_SCORES: tuple[HeadScore, ...] = (
    HeadScore("previous_token", "previous token", "prev.",
              "attention to the token just before (mean over i ≥ 1 of A[i, i−1])",
              lambda s: previous_token(s.attentions), row_sum=_previous_token_rows),
    HeadScore("sink", "first-token sink", "sink",
              "attention to the first token (mean over i ≥ 1 of A[i, 0]; under a sliding window, over the "
              "queries that see it)",
              lambda s: sink(s.attentions, s.windows), row_sum=_sink_rows),
    HeadScore("self", "self", "self",
              "attention to itself (mean of A[i, i] over i ≥ 1 for a causal model, over every i for an encoder)",
              lambda s: self_attention(s.attentions, causal=s.causal), row_sum=_self_rows),
    HeadScore("duplicate_token", "duplicate token", "dup.",
              "attention to earlier copies of the same token (copies at least 2 back: the one just "
              "before is the previous token)",
              lambda s: duplicate_token(s.attentions, s.token_ids, s.windows), encoder=False, row_sum=_duplicate_rows,
              why_not="An encoder sees copies on both sides; the score reads only earlier ones, a decoder's view."),
    HeadScore("induction", "induction", "induct.",
              "attention to the token after an earlier copy of the current token (copies at least 3 back: "
              "after a nearer one comes the query itself or its previous token)",
              lambda s: induction(s.attentions, s.token_ids, s.windows), encoder=False, why_not=_INDUCTION_WHY,
              row_sum=_induction_rows),
    HeadScore("induction_probe", "induction (probe)", "probe",
              "induction on a seeded probe of random tokens repeated twice",
              _probe_values, encoder=False, why_not=_INDUCTION_WHY),
    HeadScore("entropy", "entropy", "entropy",
              "how spread the attention is (0 = one key, 1 = uniform over the keys a query can see: "
              "j ≤ i for a causal model, within its sliding window if it has one; all n for an encoder)",
              lambda s: entropy(s.attentions, causal=s.causal, windows=s.windows), row_sum=_entropy_rows),
    HeadScore("next_token", "next token", "next",
              "attention to the token just after (mean over i < n−1 of A[i, i+1]; encoders only)",
              lambda s: next_token(s.attentions), decoder=False, row_sum=_next_token_rows,
              why_not="A causal model cannot attend to a later token, so this is 0 by construction."),
)
SCORE_NAMES: tuple[str, ...] = tuple(s.name for s in HEAD_SCORES)
SCORE_LABELS: Mapping[str, str] = MappingProxyType({s.name: s.label for s in HEAD_SCORES})
SCORE_SHORT: Mapping[str, str] = MappingProxyType({s.name: s.short for s in HEAD_SCORES})
SCORE_DESCRIPTIONS: Mapping[str, str] = MappingProxyType({s.name: s.description for s in HEAD_SCORES})
NOT_APPLICABLE_WHY: Mapping[str, str] = MappingProxyType({s.name: s.why_not for s in HEAD_SCORES if s.why_not})


#: A head "stands out" on a score in [0, 1] only at this score or more (see :func:`standout_heads`).
STANDOUT_FLOOR = 0.3
#: ... and only this many robust standard deviations past the model's median head.
STANDOUT_SPREAD = 3.0


def standout_heads(values: np.ndarray, floor: float | None = STANDOUT_FLOOR, spread: float = STANDOUT_SPREAD,
                   low: bool = False) -> np.ndarray:
    """Which heads stand out on one score: a bool array of ``values``' shape (layer, head).

    A head stands out when its score is at least ``floor`` *and* more than ``spread`` robust standard deviations
    above the median of the model's heads (NaN heads ignored)::

        s_h ≥ floor  and  s_h > median(s) + spread · 1.4826 · MAD(s),   MAD(s) = median(|s − median(s)|)

    (1.4826 · MAD is the standard deviation of normally spread scores, but a few extreme heads do not inflate
    it.) So a model whose best previous-token head reads 0.14 has no previous-token badge, and a model where most
    heads are sinks marks none of them as *standing out* on sink (the map shows that they all are). With
    ``low`` the other side (a score where smaller is the finding, e.g. entropy): ``s_h < median − spread · σ̂``,
    and ``floor`` (None: no floor) is an upper bound ``s_h ≤ floor``. A constant score stands out nowhere."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    out = np.zeros(values.shape, dtype=bool)
    if not finite.any():
        return out
    v = values[finite]
    median = float(np.median(v))
    sigma = 1.4826 * float(np.median(np.abs(v - median)))
    if low:
        chosen = values < median - spread * sigma
        if floor is not None:
            chosen &= values <= floor
    else:
        chosen = values > median + spread * sigma
        if floor is not None:
            chosen &= values >= floor
    return chosen & finite


def applicable_scores(causal: bool) -> frozenset[str]:
    """The scores that mean something for a causal (decoder) or bidirectional (encoder) model."""
    return frozenset(s.name for s in HEAD_SCORES if s.applies_to(causal))


# ----------------------------------------------------------------------------- every score of a text
@dataclass(frozen=True)
class HeadScores:
    """Every score for every head: ``values[name]`` is a read-only (layer, head) float array.

    ``applicable``: the names that mean something for this model (None → every name in ``values``);
    a name outside it is *not applicable* and its array is all NaN. ``causal`` records which kind of
    model the scores came from.
    """

    values: Mapping[str, np.ndarray]
    applicable: frozenset[str] | None = None
    causal: bool = True
    _applies: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))
        applies = frozenset(self.values) if self.applicable is None else frozenset(self.applicable)
        unknown = applies - set(self.values)
        if unknown:
            raise ValueError(f"applicable names without values: {sorted(unknown)}")
        for name, v in self.values.items():
            if name not in applies and not np.isnan(v).all():
                raise ValueError(f"score {name!r} is not applicable but holds numbers")
        object.__setattr__(self, "_applies", applies)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    def applies(self, name: str) -> bool:
        """True when ``name`` means something for this model; False: show ``NOT_APPLICABLE``, not a number."""
        return name in self._applies

    @property
    def shape(self) -> tuple[int, int]:
        return next(iter(self.values.values())).shape

    def text(self, name: str, layer: int, head: int, fmt: str = ".6g") -> str:
        """One cell as text: ``"n/a"`` when the score does not apply, ``"nan"`` when it is undefined for
        this text, else the value formatted with ``fmt``."""
        if not self.applies(name):
            return NOT_APPLICABLE
        value = float(self.values[name][layer, head])
        return "nan" if math.isnan(value) else format(value, fmt)

    def rows(self, na=float("nan")) -> list[dict]:
        """One dict per head: layer, head and every score of ``HEAD_SCORES`` present in ``values``
        (undefined stays float('nan'); a score that does not apply is ``na``)."""
        n_layer, n_head = self.shape
        names = [s.name for s in HEAD_SCORES if s.name in self.values]
        return [{"layer": layer, "head": head,
                 **{k: float(self.values[k][layer, head]) if self.applies(k) else na for k in names}}
                for layer in range(n_layer) for head in range(n_head)]


def score_values(attentions: np.ndarray, token_ids: np.ndarray, probe: np.ndarray | None = None, *,
                 causal: bool = True, windows: Windows = None) -> dict[str, np.ndarray]:
    """Every score of ``HEAD_SCORES`` for one text: (layer, head) float arrays; an all-NaN array for a
    score that does not apply (``applicable_scores(causal)``) — it is never computed.

    ``probe``: the (layer, head) ``induction_probe`` values, or None (NaN) when there was no probe run.
    ``windows``: per layer, the sliding window of a causal mask or None (every score that reads which
    keys a query sees: sink, entropy, duplicate_token, induction).
    """
    a = _check(attentions)
    nan = np.full(a.shape[:2], np.nan)
    inputs = ScoreInputs(a, token_ids, probe, causal, windows)
    return {s.name: s.compute(inputs) if s.applies_to(causal) else nan.copy() for s in HEAD_SCORES}


def all_scores(result) -> HeadScores:
    """All scores of an AttentionResult (``result.causal``: a decoder's or an encoder's scores).

    ``induction_probe`` is NaN when the result has no probe (and not applicable for an encoder). A result whose
    maps are computed on demand (``result.attentions`` None) gives the scores its streamed pass computed with the
    same definitions, a block of query rows at a time (measures.measured.measure, which every run of the app and
    the commands goes through).
    """
    if result.attentions is None:
        if result.streamed is None or result.streamed.scores is None:
            raise ValueError("this result's maps are computed on demand: measure it first (measures.measured)")
        return result.streamed.scores
    causal = bool(result.causal)
    probe = result.probe
    windows = result.sliding_windows
    probe_values = (induction_probe(probe.attentions, probe.token_ids, windows)
                    if probe is not None and causal else None)
    values = score_values(result.attentions, result.token_ids, probe_values, causal=causal, windows=windows)
    for v in values.values():
        v.setflags(write=False)
    return HeadScores(values, applicable_scores(causal), causal)
