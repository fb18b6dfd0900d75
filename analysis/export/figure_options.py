"""What a figure made by ``main.py figure`` shows and how: :class:`FigureOptions`, frozen, Qt-free, written as JSON
beside every figure (heads/L0H0.png → heads/L0H0.json) so that ``main.py figure --from heads/L0H0.json`` draws the
same figure again.

Sizes: a PNG is ``width_px`` pixels wide, or ``width_in`` × ``dpi`` (rounded) when ``width_in`` is given; its height
follows the figure's own shape at that width. A vector figure (SVG, PDF) is laid out at the same pixel size.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ..errors import InputError

DRAWINGS = ("matrix", "lines")  # a head figure as its map, or as lines between two columns of tokens (≤ 64 tokens)
LABEL_STYLES = ("plain", "marked")  # plain: the token as written; marked: "␣" for a leading space and " [index]"
SCALES = ("linear", "log", "power")  # analysis.display.apply_scale's
WEIGHTINGS = ("attention", "value")  # the weights A as the model gave them, or value-weighted (see FigureOptions)
OPTIONS_KIND = "attnscope-figure"


def model_name(label: str) -> str:
    """A model's name for a title: the last part of a path ("/x/y/bundled-gpt2" → "bundled-gpt2"), else the label."""
    text = str(label).rstrip("/\\")
    return re.split(r"[/\\]", text)[-1] if re.search(r"[/\\]", text) else text


@dataclass(frozen=True)
class FigureOptions:
    """One figure: a head (``heads`` of one (layer, head)), several heads side by side (panels, ``heads`` of two or
    more) or the grid of heads (``heads`` empty).

    ``tokens``: (first, stop) of the query and key tokens shown (stop excluded), None for all; ``renormalise``: each
    row of a cropped map divided by its sum over the keys shown (else the weights as the model gave them);
    ``title`` None: the model's name and the head; ``bar_label`` None: the scale's own ("weight", "√weight");
    ``labels``: see :data:`LABEL_STYLES`; ``label_chars``: labels shortened to at most this many characters on both
    axes (None: whole); ``drawing``: see :data:`DRAWINGS` (a head or panels).

    Panels: ``columns`` a row (None: near square, ceil(√k)); ``shared_scale``: one colour scale over every panel
    (0 … the largest weight shown, or ``vmax``), else each panel its own; ``scores``: score names
    (analysis.measures.head_scores' names) printed under each panel's title as "name 0.812".

    The grid: ``layers`` and ``grid_heads`` the layers and heads shown, in order (None: all); ``aspect`` the mosaic's
    width / height (None: as near square as its layers × heads allow, wrapping the layers into side-by-side
    blocks); ``badges`` a score name whose standout heads are marked, with a legend saying which (None: no badges).

    ``vmax``: the colour scale's top for every map of the figure (None: the data's own maximum). ``hide_first``: the
    first token hidden as a key and each row renormalised over the rest (analysis.display.without_first_key, the
    GUI's "Hide first token"), before any crop.

    ``weighting``: "attention" draws the weights A; "value" the value-weighted map (Kobayashi et al. 2020, the app's
    value-weighted view, analysis.measures.streamed.value_weighted): w'[q, k] = A[q, k] · ‖f_h(x_k)‖ / Σ_k'
    A[q, k'] · ‖f_h(x_k')‖, f_h(x) = (x W_V^h + b_V^h) W_O^h the head's output for key k alone (each row sums to 1; a
    row summing to 0 stays 0), for a head, panels and the grid alike; the first key is hidden after it
    (``hide_first``: the same map as hiding it first, since hiding rescales a row by one factor), then the crop."""

    model: str = "bundled"
    text: str = ""
    bos: bool | None = None  # None: as the model was trained (main.py export's default)
    heads: tuple[tuple[int, int], ...] = ()
    tokens: tuple[int, int] | None = None
    title: str | None = None
    width_px: int | None = None
    width_in: float | None = None
    dpi: int = 100
    font_pt: float | None = None
    labels: str = "marked"
    label_chars: int | None = None
    cmap: str = "viridis"
    scale: str = "linear"
    bar_label: str | None = None
    fmt: str = "png"
    renormalise: bool = False
    drawing: str = "matrix"
    columns: int | None = None
    shared_scale: bool = True
    scores: tuple[str, ...] = ()
    layers: tuple[int, ...] | None = None
    grid_heads: tuple[int, ...] | None = None
    aspect: float | None = None
    badges: str | None = None
    vmax: float | None = None
    hide_first: bool = False
    weighting: str = "attention"

    def __post_init__(self):
        if self.labels not in LABEL_STYLES:
            raise InputError(f"Unknown label style '{self.labels}'; use {' or '.join(LABEL_STYLES)}.")
        if self.scale not in SCALES:
            raise InputError(f"Unknown scale '{self.scale}'; use {', '.join(SCALES)}.")
        if self.dpi <= 0 or (self.width_in is not None and self.width_in <= 0) or (
                self.width_px is not None and self.width_px <= 0):
            raise InputError("A figure's width and DPI must be positive.")
        if self.drawing not in DRAWINGS:
            raise InputError(f"Unknown drawing '{self.drawing}'; use {' or '.join(DRAWINGS)}.")
        if self.weighting not in WEIGHTINGS:
            raise InputError(f"Unknown weighting '{self.weighting}'; use {' or '.join(WEIGHTINGS)}.")
        if self.drawing == "lines" and not self.shared_scale:
            raise InputError("Lines have no colour scale to keep apart: leave out --own-scales, or draw matrices.")
        if self.columns is not None and self.columns <= 0:
            raise InputError("A figure's number of columns must be positive.")
        if (self.aspect is not None and self.aspect <= 0) or (self.vmax is not None and self.vmax <= 0):
            raise InputError("A figure's aspect and colour-scale top must be positive.")
        if len(set(self.heads)) != len(self.heads):
            raise InputError("A head is named twice; name each head once.")
        if self.tokens is not None and not 0 <= self.tokens[0] < self.tokens[1]:
            raise InputError(f"The token range {self.tokens[0]}:{self.tokens[1]} is empty; give FIRST:STOP, FIRST < STOP.")

    @property
    def pixels(self) -> int | None:
        """The PNG's width in pixels: ``width_px``, or round(``width_in`` · ``dpi``); None: the figure's own."""
        if self.width_in is not None:
            return int(round(self.width_in * self.dpi))
        return self.width_px

    def to_json(self, **shown) -> str:
        """The options (and ``shown``: what the figure shows, e.g. its tokens) as JSON text."""
        data = {"kind": OPTIONS_KIND, "options": asdict(self), **shown}
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "FigureOptions":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"The figure options are not JSON ({exc.msg}, line {exc.lineno}).") from None
        if not isinstance(data, dict) or data.get("kind") != OPTIONS_KIND:
            raise InputError("This JSON is not an AttnScope figure's options (no \"kind\": \"attnscope-figure\").")
        raw = data.get("options", {})
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        if values.get("heads") is not None:
            values["heads"] = tuple((int(l), int(h)) for l, h in values["heads"])
        if values.get("tokens") is not None:
            values["tokens"] = tuple(int(v) for v in values["tokens"])
        for name in ("layers", "grid_heads", "scores"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    @classmethod
    def read(cls, path: Path) -> "FigureOptions":
        try:
            return cls.from_json(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"Cannot read the figure options {path}: {exc.strerror or exc}.") from None

    def with_(self, **changes) -> "FigureOptions":
        return replace(self, **changes)


def check_scores(names) -> tuple[str, ...]:
    """``names``, each a head score's (analysis.measures.head_scores.SCORE_NAMES: panels' ``scores``, the grid's
    ``badges``); an unknown one is refused in one sentence naming them all."""
    from ..measures.head_scores import SCORE_NAMES

    names = tuple(names)
    unknown = [n for n in names if n not in SCORE_NAMES]
    if unknown:
        raise InputError(f"Unknown score '{unknown[0]}'; the scores are {', '.join(SCORE_NAMES)}.")
    return names


def figure_key_norms(loaded, result):
    """(L, H, n) float32 ‖f_h(x_k)‖ of every head and key of ``result`` (lenses.key_norms_of, a layer at a time), what a
    value-weighted figure (``FigureOptions.weighting`` "value") weighs each key by: the same numbers as the app's
    value lens keeps (gui/state/lens_data.ValueView.key_norms: lenses.value_norms' float32, or an on-demand run's
    captured norms), so ``main.py figure --value-weighted`` draws the app's value-weighted export again."""
    import numpy as np

    from ..measures.lenses import key_norms_of

    return np.stack([key_norms_of(loaded, result, layer) for layer in range(result.n_layer)]).astype(np.float32)


def sidecar(path: Path) -> Path:
    """The options file written beside a figure: the figure's name with ``.json`` (heads/L0H0.png → heads/L0H0.json)."""
    return Path(path).with_suffix(".json")


def parse_index_list(text: str, what: str) -> tuple[int, ...]:
    """``"0,2,5-7"`` → (0, 2, 5, 6, 7): the ``what`` (layers, heads) a grid shows, in the order given."""
    out: list[int] = []
    for part in (text or "").split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise InputError(f"The {what} read like 0,2,5-7, not '{text}'.")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise InputError(f"The {what} range {first}-{last} runs backwards; give FIRST-LAST, FIRST ≤ LAST.")
        out.extend(range(first, last + 1))
    if len(set(out)) != len(out):
        raise InputError(f"The {what} '{text}' name one twice; name each once.")
    return tuple(out)


def parse_token_range(text: str) -> tuple[int, int]:
    """``"3:12"`` → (3, 12): the tokens 3 … 11."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text or "")
    if not match:
        raise InputError(f"A token range reads FIRST:STOP (e.g. 0:12), not '{text}'.")
    return int(match.group(1)), int(match.group(2))
