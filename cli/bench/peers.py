"""The notebook tools AttnScope is measured against (``bench --peers``): bertviz and CircuitsVis."""
from __future__ import annotations

import time


def peer_times(result) -> dict:
    """bertviz and CircuitsVis on the same attention and tokens; None where not installed."""
    import torch

    out = {}
    attention = [torch.from_numpy(result.attentions[layer][None].copy()) for layer in range(result.n_layer)]
    tokens = list(result.tokens)
    try:
        from bertviz import model_view
    except ImportError:
        out["bertviz_s"] = None
    else:
        t = time.perf_counter()
        html_out = model_view(attention, tokens, html_action="return")
        out["bertviz_s"] = time.perf_counter() - t
        out["bertviz_mb"] = len(getattr(html_out, "data", str(html_out))) / 1e6
    try:
        import circuitsvis as cv
    except ImportError:
        out["circuitsvis_s"] = None
    else:
        t = time.perf_counter()
        rendered = cv.attention.attention_heads(attention=torch.cat(attention, 0).reshape(-1, *attention[0].shape[-2:]),
                                                tokens=tokens)
        html_text = str(rendered)
        out["circuitsvis_s"] = time.perf_counter() - t
        out["circuitsvis_mb"] = len(html_text) / 1e6
    return out
