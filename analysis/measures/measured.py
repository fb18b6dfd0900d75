"""A text run, and everything the views read of every head at once ready with it, whichever way its maps are held.

``run_text`` (analysis/run) plans a run (``run.memory.plan_run``): a short text keeps every head's map
(``result.attentions``), and every score, lens and thumbnail is read from them as it always was; a long text keeps
what the maps are computed from (``result.maps``, a ``qk_capture.QKCapture``), and ``result.attentions`` and
``result.thumbnails`` are None. :func:`run_measured` completes such a result with one streamed pass over every
layer's row blocks (measures.streamed.streamed_pass): every head score, the TL-style scores with TransformerLens's
default options, the grid's max-pooled thumbnails, and so the sink rate; ``result.streamed`` holds them and
``result.thumbnails`` is filled. The app's worker and the commands call it instead of ``run_text``.

The readers of every head's numbers then take a result either way: ``head_scores.all_scores`` (the scores),
:func:`tl_scores_of_result` (TL-style scores, streamed again only for options other than the defaults),
``lenses.sink_rate_of_result``; one head's map is ``result.head_map(layer, head)``.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..run.capture import THUMBNAIL_PX
from ..run.inference import AttentionResult, run_text
from . import head_scores as hs
from .streamed import TLOptions, streamed_pass, streamed_tl_scores
from .tl_scores import scores_of_text


def run_measured(loaded, text: str, on_layer=None, **options) -> AttentionResult:
    """``run_text(loaded, text, **options)``; an on-demand result is completed by :func:`measure` (``on_layer(l)``
    after each layer of the pass). A result that kept its maps is returned as it is."""
    result = run_text(loaded, text, **options)
    return result if result.maps_kept else measure(result, on_layer=on_layer)


def measure(result: AttentionResult, on_layer=None) -> AttentionResult:
    """``result`` with ``streamed`` (every head score, the TL-style scores with TL's defaults, the thumbnails) and
    ``thumbnails`` from one streamed pass over its maps; ``timings["stream_s"]`` is the pass's seconds (added to
    ``total_s``). The scores are those ``all_scores`` computes from every map: the probe's ``induction_probe``
    from ``result.probe`` (kept maps, ~100 tokens), the others from the text's blocks."""
    started = time.perf_counter()
    windows = result.sliding_windows
    probe = (hs.induction_probe(result.probe.attentions, result.probe.token_ids, windows)
             if result.probe is not None and result.causal else None)
    streamed = streamed_pass(result.maps, result.token_ids, probe=probe, causal=bool(result.causal),
                             windows=windows, tl_options=TLOptions(), thumbnail_px=THUMBNAIL_PX, on_layer=on_layer)
    seconds = time.perf_counter() - started
    timings = {**result.timings, "stream_s": seconds, "total_s": result.timings.get("total_s", 0.0) + seconds}
    return dataclasses.replace(result, streamed=streamed, thumbnails=streamed.thumbnails, timings=timings)


def tl_scores_of_result(result: AttentionResult, *, error_measure: str = "mul", exclude_bos: bool = False,
                        exclude_current_token: bool = False) -> dict[str, np.ndarray]:
    """``tl_scores.scores_of_text`` of a result, whichever way its maps are held: from ``result.attentions`` when
    every map is kept; else the streamed pass's values when the options are TL's defaults (:func:`measure` computed
    them), or streamed now (``streamed.streamed_tl_scores``: the same sums, a block of rows at a time)."""
    ids = np.asarray(result.token_ids)
    options = dict(error_measure=error_measure, exclude_bos=bool(exclude_bos),
                   exclude_current_token=bool(exclude_current_token))
    if result.attentions is not None:
        return scores_of_text(result.attentions, ids, **options)
    defaults = (error_measure, bool(exclude_bos), bool(exclude_current_token)) == ("mul", False, False)
    if defaults and result.streamed is not None and result.streamed.tl is not None:
        return dict(result.streamed.tl)
    return streamed_tl_scores(result.maps, ids, **options)


__all__ = ["measure", "run_measured", "tl_scores_of_result"]
