"""Where the Head scores table's columns come from, one function per source:

- :func:`own_columns`: this text, AttnScope's scores (``analysis.measures.head_scores``, the state's bundle);
- :func:`tl_columns`: this text, TransformerLens-style scores (``analysis.measures.tl_scores``; gui/tabs/scores/tl_source.py
  computes them);
- :func:`scan_columns`: the mean ± std over many texts of a scan (``analysis.measures.scan.ScanResult``).

A score that does not apply to the model on screen (``scores.applies(name)`` is False: "next token" on a
decoder, induction on an encoder) gets no column at all, so neither the table nor the map's chooser
offers a column of "n/a"; :func:`hidden_note` says which were left out and why (NOT_APPLICABLE_WHY).
"""
from __future__ import annotations

import numpy as np

from analysis.measures.head_scores import NOT_APPLICABLE_WHY, SCORE_DESCRIPTIONS, SCORE_LABELS, SCORE_NAMES, SCORE_SHORT

from .score_table import Column

# SCORE_LABELS (analysis.measures.head_scores) is the one name of each score everywhere in the GUI (table
# tooltips, map, badges); SCORE_SHORT (from the same registry) only heads the table's columns, where room is short
# TransformerLens-style scores (analysis.measures.tl_scores): TL's own pattern names, labelled as TL's everywhere
TL_NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")
TL_LABELS = {"previous_token_head": "previous token (TL-style)", "duplicate_token_head": "duplicate token (TL-style)",
             "induction_head": "induction (TL-style)"}
TL_SHORT = {"previous_token_head": "TL prev.", "duplicate_token_head": "TL dup.", "induction_head": "TL induct."}
TL_PATTERNS = {"previous_token_head": "P[i, j] = 1 where j = i − 1",
               "duplicate_token_head": "P[i, j] = 1 where j < i and tok[j] = tok[i]",
               "induction_head": "P[i, j] = 1 where j ≥ 1, j − 1 < i and tok[j − 1] = tok[i]"}
TL_MEASURES = {"mul": "mul: Σ(A′ ⊙ P) / ΣA′ — the share of the (remaining) attention where P expects it; 0 … 1",
               "abs": "abs: 1 − round(Σ|A − P|′ / n, 3) — 1 is a perfect match; −1 … 1"}
SOURCE_OURS, SOURCE_TL, SOURCE_SCAN = "attnscope", "tl", "scan"


def score_label(name: str) -> str:
    return TL_LABELS.get(name) or SCORE_LABELS.get(name, name.replace("_", " "))


def applies(scores, name: str) -> bool:
    """False where a score does not apply to this model (it then gets no column)."""
    return bool(scores.applies(name))


def hidden(scores) -> tuple[str, ...]:
    """The names in ``scores`` (in SCORE_NAMES order) that do not apply to this model: not shown."""
    return tuple(name for name in SCORE_NAMES if name in scores.values and not applies(scores, name))


def hidden_note(names) -> str:
    """One line naming the scores left out and why, reasons shared by several names said once; "" for none."""
    by_reason: dict[str, list[str]] = {}
    for name in names:
        by_reason.setdefault(NOT_APPLICABLE_WHY.get(name, "It does not apply to this model."), []).append(
            SCORE_LABELS.get(name, name))
    if not by_reason:
        return ""
    parts = [f"{', '.join(labels)} — {why}" for why, labels in by_reason.items()]
    return "Left out, as not applicable to this model: " + " ".join(parts)


def own_columns(scores) -> list[Column]:
    """AttnScope's scores of the text on screen (``analysis.measures.head_scores.HeadScores``), those that apply."""
    return [Column(name, SCORE_SHORT.get(name, name), score_label(name), SCORE_DESCRIPTIONS.get(name, ""),
                   scores[name]) for name in SCORE_NAMES if name in scores.values and applies(scores, name)]


def tl_columns(shape: tuple[int, int], values: dict | None, measure: str) -> list[Column]:
    """The TL-style scores (``values`` {TL name: (L, H)}, or None while they are computed: "…")."""
    pending = values is None
    return [Column(name, TL_SHORT[name], TL_LABELS[name],
                   f"TransformerLens's {name} detector: {TL_PATTERNS[name]}; {TL_MEASURES[measure]}",
                   np.full(shape, np.nan) if pending else values[name], pending=pending)
            for name in TL_NAMES]


def scan_columns(scan) -> list[Column]:
    """The per-head mean (and std) over the texts of ``scan``, for the scores that apply; each cell's
    tooltip says over how many texts (and on how many the score was defined, where fewer)."""
    mean, std = scan.mean_scores(), scan.std_scores()
    columns = []
    for k, name in enumerate(scan.score_names):
        if not applies(mean, name):
            continue
        defined = int(scan.defined[k])
        note = f"over {scan.n_texts} texts" + (f" (defined on {defined} of them)" if 0 < defined < scan.n_texts else "")
        columns.append(Column(name, SCORE_SHORT.get(name, name), score_label(name), SCORE_DESCRIPTIONS.get(name, ""),
                              mean[name], std[name], note=note))
    return columns
