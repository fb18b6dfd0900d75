"""Head detectors: one number per (layer, head) saying how much a head behaves in a known way.

Every function is pure: it reads ``attentions`` (layer, head, query, key) and never writes to it.
Query positions are i = 0 … n−1, key positions j = 0 … n−1. A *causal* model (a decoder: GPT-2,
Llama, NeoX) lets query i see only keys j ≤ i; a *bidirectional* one (an encoder: BERT) lets every
query see every key. Scores whose meaning depends on that take a ``causal: bool`` keyword.

One place says everything about a score: its entry in ``HEAD_SCORES`` (name, label, formula in words,
which models it applies to, why not elsewhere, and how it is computed). Everything else (``HeadScores``,
the CSV columns, the scan, the GUI's table) iterates that registry in its order.

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


def _diagonal_mean(attentions: np.ndarray, offset: int, queries: np.ndarray) -> np.ndarray:
    """Mean over the given query positions i of A[i, i + offset]. (layer, head); NaN when no query is given."""
    a = _check(attentions)
    if queries.size == 0:
        return np.full(a.shape[:2], np.nan)
    return a[..., queries, queries + offset].astype(np.float64).mean(axis=-1)


def previous_token(attentions: np.ndarray) -> np.ndarray:
    """Mean over query positions i ≥ 1 of A[i, i−1]. (layer, head); NaN for a 1-token text.

    The same for causal and bidirectional models (query 0 has no previous token).
    """
    n = _check(attentions).shape[-1]
    return _diagonal_mean(attentions, -1, np.arange(1, n))


def next_token(attentions: np.ndarray) -> np.ndarray:
    """Mean over query positions i < n−1 of A[i, i+1]. (layer, head); NaN for a 1-token text.

    Only an encoder can score here: a causal mask hides key i+1 from query i, so a decoder's value is
    0 by construction and ``all_scores`` marks it not applicable instead of showing that 0.
    """
    n = _check(attentions).shape[-1]
    return _diagonal_mean(attentions, 1, np.arange(0, n - 1))


def self_attention(attentions: np.ndarray, *, causal: bool = True) -> np.ndarray:
    """Mean of A[i, i]. (layer, head)

    causal=True: over i ≥ 1 (row 0 of a causal map can only attend to itself, so it says nothing);
    NaN for a 1-token text. causal=False: over every i ≥ 0 (no row is forced).
    """
    n = _check(attentions).shape[-1]
    return _diagonal_mean(attentions, 0, np.arange(1 if causal else 0, n))


def _window_sizes(windows: Windows, n_layer: int, n: int) -> np.ndarray:
    """(layer,) how many keys back (itself included) a query sees: the sliding window, or n + 1 (no window)."""
    if not windows:
        return np.full(n_layer, n + 1)
    if len(windows) != n_layer:
        raise ValueError(f"windows has {len(windows)} entries for {n_layer} layers")
    return np.array([n + 1 if w is None else int(w) for w in windows])


def sink(attentions: np.ndarray, windows: Windows = None) -> np.ndarray:
    """Mean over the queries i ≥ 1 that can see the first token of A[i, 0]: the mass parked on it. (layer, head)

    The same for causal and bidirectional models: query 0's own A[0, 0] is self-attention, not a sink.
    ``windows`` (per layer, or None): under a sliding window of w keys only queries i < w see key 0;
    the later ones, which cannot, are not counted (they would dilute the score with forced zeros).
    NaN when no query i ≥ 1 sees the first token (a 1-token text).
    """
    a = _check(attentions)
    n = a.shape[-1]
    if n < 2:
        return np.full(a.shape[:2], np.nan)
    sizes = _window_sizes(windows, a.shape[0], n)
    if (sizes > n).all():
        return a[..., 1:, 0].astype(np.float64).mean(axis=-1)
    out = np.full(a.shape[:2], np.nan)
    for layer, w in enumerate(sizes):
        rows = min(n, int(w))  # queries 0 … rows−1 see key 0
        if rows > 1:
            out[layer] = a[layer, :, 1:rows, 0].astype(np.float64).mean(axis=-1)
    return out


def repeat_pairs(token_ids: np.ndarray, min_gap: int = 1, window: int | None = None,
                 key_offset: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """All (i, j) with j ≤ i − ``min_gap`` and token[j] == token[i]; and how many positions i have at least one.

    ``window``: a sliding window of that many keys; only pairs whose key j + ``key_offset`` query i can see
    (j + key_offset > i − window) are kept, so a copy out of sight is not counted as a forced zero."""
    ids = np.asarray(token_ids).ravel()
    same = ids[:, None] == ids[None, :]  # (n, n)
    pairs = np.tril(same, k=-min_gap)
    if window is not None:
        i, j = np.indices(pairs.shape)
        pairs &= j + key_offset > i - int(window)
    i, j = np.nonzero(pairs)
    return i, j, int(np.unique(i).size)


#: Earlier copies nearer than this are left out of ``duplicate_token`` (2) and ``induction`` (3): there the
#: pattern's key is the query's previous token or the query itself, so a previous-token or self head
#: would score as a duplicate-token or induction head ("1, 2, 1, 2": the token after the earlier ","
#: is the previous token). A newcomer found previous-token heads ranked as the best induction heads.
DUPLICATE_MIN_GAP = 2
INDUCTION_MIN_GAP = 3


def _pattern_mean(a: np.ndarray, token_ids: np.ndarray, min_gap: int, key_offset: int, windows: Windows) -> np.ndarray:
    """Mean over positions i with a pair of Σ_pairs A[i, j + key_offset], layer by layer group of equal window."""
    n_layer, n = a.shape[0], a.shape[-1]
    sizes = _window_sizes(windows, n_layer, n)
    out = np.full(a.shape[:2], np.nan)
    for size in np.unique(sizes):
        layers = sizes == size
        i, j, n_positions = repeat_pairs(token_ids, min_gap, None if size > n else int(size), key_offset)
        if n_positions:
            out[layers] = a[layers][..., i, j + key_offset].astype(np.float64).sum(axis=-1) / n_positions
    return out


def duplicate_token(attentions: np.ndarray, token_ids: np.ndarray, windows: Windows = None) -> np.ndarray:
    """Mean, over positions i whose token occurred at least 2 positions earlier, of
    Σ_{j ≤ i−2, tok[j]=tok[i]} A[i, j].

    A copy right before the query (j = i−1, "the the") is left out: attending to it is what a
    previous-token head does anyway. Under a sliding window (``windows``, per layer) only copies the
    query can see count. (layer, head); all NaN when no token repeats that far apart.
    Causal models only (see ``applicable_scores``).
    """
    return _pattern_mean(_check(attentions), token_ids, DUPLICATE_MIN_GAP, 0, windows)


def induction(attentions: np.ndarray, token_ids: np.ndarray, windows: Windows = None) -> np.ndarray:
    """Mean, over positions i whose token occurred at least 3 positions earlier, of
    Σ_{j ≤ i−3, tok[j]=tok[i]} A[i, j+1]: the attention on the token that followed each earlier
    occurrence (what an induction head copies).

    Copies at j = i−1 and j = i−2 are left out: the token after them is the query itself or its
    previous token, which self and previous-token heads attend to anyway. Under a sliding window
    (``windows``, per layer) only pairs whose key j+1 the query can see count. (layer, head); all NaN
    when no token repeats that far apart. Causal models only (see ``applicable_scores``).
    """
    return _pattern_mean(_check(attentions), token_ids, INDUCTION_MIN_GAP, 1, windows)


def induction_probe(probe_attentions: np.ndarray, probe_token_ids: np.ndarray, windows: Windows = None) -> np.ndarray:
    """``induction`` on the probe sequence (BOS, random tokens R, R again), so it is defined for any text.
    Under a sliding window shorter than the probe's span a layer's value is NaN: no copy is in sight."""
    return induction(probe_attentions, probe_token_ids, windows)


def _row_entropy(rows: np.ndarray) -> np.ndarray:
    """−Σ_j p_j log p_j over the last axis, with 0 log 0 = 0 (natural log, float64)."""
    p = rows.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(p > 0, p * np.log(p), 0.0)
    return -plogp.sum(axis=-1)


def entropy(attentions: np.ndarray, *, causal: bool = True, windows: Windows = None) -> np.ndarray:
    """How spread each row is, normalised to 0 … 1 by the entropy of a uniform row over the keys a query
    can see: 0 when a row puts all weight on one key, 1 when it is uniform over them. (layer, head)

    causal=True:  mean over i ≥ 1 of H(A[i, :i+1]) / log(v_i), v_i = min(i+1, w) the keys query i sees
                  (w the layer's sliding window from ``windows``; no window: v_i = i+1). Rows that see one
                  key are excluded (their entropy is 0 by necessity: row 0, or every row of a 1-key window).
                  Only keys j ≤ i are read.
    causal=False: mean over i ≥ 0 of H(A[i, :]) / log(n) (every query sees all n keys).
    H(p) = −Σ_j p_j log p_j with 0 log 0 = 0. NaN for a 1-token text (nothing to spread over).
    """
    a = _check(attentions)
    n = a.shape[-1]
    if n < 2:
        return np.full(a.shape[:2], np.nan)
    if not causal:
        return _row_entropy(a).mean(axis=-1) / np.log(n)  # (layer, head, query) → (layer, head)
    sizes = _window_sizes(windows, a.shape[0], n)  # (layer,)
    total, rows = np.zeros(a.shape[:2]), np.zeros(a.shape[0])
    for i in range(1, n):
        seen = np.minimum(i + 1, sizes)  # (layer,) keys query i sees
        ok = seen > 1
        if ok.all():  # the usual case: a view, no copy of the row block
            total += _row_entropy(a[..., i, : i + 1]) / np.log(seen)[:, None]
        else:
            total[ok] += _row_entropy(a[ok, :, i, : i + 1]) / np.log(seen[ok])[:, None]
        rows += ok
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(rows[:, None] > 0, total / rows[:, None], np.nan)


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
              lambda s: previous_token(s.attentions)),
    HeadScore("sink", "first-token sink", "sink",
              "attention to the first token (mean over i ≥ 1 of A[i, 0]; under a sliding window, over the "
              "queries that see it)",
              lambda s: sink(s.attentions, s.windows)),
    HeadScore("self", "self", "self",
              "attention to itself (mean of A[i, i] over i ≥ 1 for a causal model, over every i for an encoder)",
              lambda s: self_attention(s.attentions, causal=s.causal)),
    HeadScore("duplicate_token", "duplicate token", "dup.",
              "attention to earlier copies of the same token (copies at least 2 back: the one just "
              "before is the previous token)",
              lambda s: duplicate_token(s.attentions, s.token_ids, s.windows), encoder=False,
              why_not="An encoder sees copies on both sides; the score reads only earlier ones, a decoder's view."),
    HeadScore("induction", "induction", "induct.",
              "attention to the token after an earlier copy of the current token (copies at least 3 back: "
              "after a nearer one comes the query itself or its previous token)",
              lambda s: induction(s.attentions, s.token_ids, s.windows), encoder=False, why_not=_INDUCTION_WHY),
    HeadScore("induction_probe", "induction (probe)", "probe",
              "induction on a seeded probe of random tokens repeated twice",
              _probe_values, encoder=False, why_not=_INDUCTION_WHY),
    HeadScore("entropy", "entropy", "entropy",
              "how spread the attention is (0 = one key, 1 = uniform over the keys a query can see: "
              "j ≤ i for a causal model, within its sliding window if it has one; all n for an encoder)",
              lambda s: entropy(s.attentions, causal=s.causal, windows=s.windows)),
    HeadScore("next_token", "next token", "next",
              "attention to the token just after (mean over i < n−1 of A[i, i+1]; encoders only)",
              lambda s: next_token(s.attentions), decoder=False,
              why_not="A causal model cannot attend to a later token, so this is 0 by construction."),
)
SCORE_NAMES: tuple[str, ...] = tuple(s.name for s in HEAD_SCORES)
SCORE_LABELS: Mapping[str, str] = MappingProxyType({s.name: s.label for s in HEAD_SCORES})
SCORE_SHORT: Mapping[str, str] = MappingProxyType({s.name: s.short for s in HEAD_SCORES})
SCORE_DESCRIPTIONS: Mapping[str, str] = MappingProxyType({s.name: s.description for s in HEAD_SCORES})
NOT_APPLICABLE_WHY: Mapping[str, str] = MappingProxyType({s.name: s.why_not for s in HEAD_SCORES if s.why_not})


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

    ``induction_probe`` is NaN when the result has no probe (and not applicable for an encoder).
    """
    causal = bool(result.causal)
    probe = result.probe
    windows = result.sliding_windows
    probe_values = (induction_probe(probe.attentions, probe.token_ids, windows)
                    if probe is not None and causal else None)
    values = score_values(result.attentions, result.token_ids, probe_values, causal=causal, windows=windows)
    for v in values.values():
        v.setflags(write=False)
    return HeadScores(values, applicable_scores(causal), causal)
