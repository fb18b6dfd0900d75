"""The words of a map cell's hover line and tooltip (one text for both), plain text: the Head tab, the Rollout tab
and every HeadPlot (exports included) say a cell the same way. Tokens are user text: a label that renders HTML
must escape these (``plot_items.plain_tooltip`` does for tooltips)."""
from __future__ import annotations

import math

BEFORE_HIDING = "before renormalising"  # the cell's value before the first key was dropped (never "was": a token)
NORMS_NOT_READY = "value norms not ready yet"
KEY = "→ key"  # how a query points at its key in a head's map; the Rollout tab says "draws on input"


def where(tokens, q: int, k: int, to: str = KEY) -> str:
    """"query 'a' [q] → key 'b' [k]": the cell's two tokens and their positions."""
    return f"query '{tokens[q]}' [{q}] {to} '{tokens[k]}' [{k}]"


def hover_text(tokens, cell, causal: bool = True, raw: float | None = None, to: str = KEY) -> str:
    """The hover line (and cell tooltip) for ``cell`` = (query, key, value as drawn) of a weights map; plain text.

    ``causal``: a key after its query is the model's mask (an encoder masks nothing); a masked cell always says
    "→ key". ``raw``: the cell before renormalising (the model's own weight) when the map shows it renormalised
    (first key hidden). ``to``: the words between the query and the key ("→ key", or the Rollout tab's "draws on
    input")."""
    if cell is None:
        return " "
    q, k, value = cell
    if causal and k > q:
        return f"{where(tokens, q, k)}: masked (a future token)"
    if value is None or not math.isfinite(value):
        return f"{where(tokens, q, k, to)}: hidden (first key)"
    if raw is not None:
        return f"{where(tokens, q, k, to)}: {value:.3f} renormalised without the first key ({BEFORE_HIDING}: {raw:.3f})"
    return f"{where(tokens, q, k, to)}: {value:.3f}"


def value_hover_text(tokens, cell, attention: float, key_norm: float | None, causal: bool = True,
                     before: float | None = None) -> str:
    """The hover line in the value-weighted view: the share of the row as drawn, then A (``attention``, the
    model's weight of the cell), ‖f_h(x_j)‖ (``key_norm``) and the raw N = A·‖f_h(x_j)‖. ``before``: the share
    before renormalising when the first key is hidden. ``key_norm`` None: the value norms are not there (yet);
    the share alone, and that said."""
    if cell is None:
        return " "
    q, k, value = cell
    if (causal and k > q) or value is None or not math.isfinite(value):
        return hover_text(tokens, cell, causal)  # the mask, or the hidden first key
    share = f"{where(tokens, q, k)}: share {value:.3f}"  # the colour bar says "share of row N (first key hidden)"
    share += f" ({BEFORE_HIDING}: {before:.3f})" if before is not None else " of the row"
    if key_norm is None:
        return f"{share} ({NORMS_NOT_READY})"
    return f"{share} · N = A·‖f(x)‖ = {attention:.3f} × {key_norm:.3g} = {attention * key_norm:.4g}"
