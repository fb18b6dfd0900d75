"""Two prompts side by side: the clean and the corrupted prompt of a patching pair, each run on its own, and the
difference of what they show.

- a head's map: ``D = A_clean − A_corrupted`` (n, n), the clean run's attention weights A[query, key] minus the
  corrupted run's, cell by cell (positive: the clean prompt attends there more);
- a head score (``head_scores``, e.g. previous-token, induction): ``S_clean − S_corrupted`` per (layer, head).

The two prompts must have the same token count (``patching.pair_ids`` refuses others in one sentence), so that
query i and key j are the same position in both. Both run with every map kept (``run_text(keep_maps=True)``):
the pairs compared are prompts of a line, not books. Nothing here is approximated: each run is the model's own
attention, as the Head tab shows it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import AnalysisCancelled

ProgressCallback = Callable[[int, int], None]  # (done, total) steps: two runs, then their scores


@dataclass(frozen=True)
class PairRuns:
    """The clean and the corrupted prompt's runs (analysis.run.inference.AttentionResult) and their head scores
    (head_scores.HeadScores)."""

    clean: object
    corrupted: object
    clean_scores: object
    corrupted_scores: object

    @property
    def n_tokens(self) -> int:
        return self.clean.n_tokens

    def head_difference(self, layer: int, head: int) -> np.ndarray:
        """(n, n) float32: A_clean − A_corrupted of head ``layer``.``head`` (0 above the diagonal of a decoder, where
        both are masked)."""
        return np.asarray(self.clean.head_map(layer, head), np.float32) - self.corrupted.head_map(layer, head)

    def score_difference(self, name: str) -> np.ndarray:
        """(layer, head) float64: the score ``name`` on the clean prompt minus on the corrupted one."""
        return np.asarray(self.clean_scores[name], np.float64) - np.asarray(self.corrupted_scores[name], np.float64)

    def differing_positions(self) -> tuple[int, ...]:
        """The positions where the two prompts' tokens differ."""
        return tuple(int(i) for i in np.flatnonzero(self.clean.token_ids != self.corrupted.token_ids))


def run_pair(loaded, clean: str, corrupted: str, bos: bool | None = None, progress: ProgressCallback | None = None,
             cancel: threading.Event | None = None) -> PairRuns:
    """Run ``clean`` and ``corrupted`` (tokenised alike: ``bos`` None is the model's default) and score both;
    prompts of different token counts are refused (InputError, one sentence). ``progress(done, 3)`` after each
    run and the scores; ``cancel`` set stops between them (AnalysisCancelled)."""
    from ..run.inference import run_text
    from .ablation import text_tokens
    from .head_scores import all_scores
    from .patching import pair_ids

    pair_ids(loaded, list(text_tokens(loaded, clean, bos).ids), list(text_tokens(loaded, corrupted, bos).ids),
             "comparing them position by position")
    runs = []
    for i, text in enumerate((clean, corrupted)):
        if cancel is not None and cancel.is_set():
            raise AnalysisCancelled("Comparing cancelled.")
        runs.append(run_text(loaded, text, bos=bos, keep_maps=True))
        if progress:
            progress(i + 1, 3)
    scores = [all_scores(r) for r in runs]
    if progress:
        progress(3, 3)
    return PairRuns(runs[0], runs[1], scores[0], scores[1])
