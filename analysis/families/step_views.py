"""The From-scratch tab's table of the recompute's steps: what each step of a family's ``steps`` is called
and which heatmaps it shows (a FamilyRecomputation field, for which head, titled how).

The tab iterates ``step_views(rec, head)``, so a family whose maths is new (a q/k norm, a soft-cap of the
scores) adds its step to ``STEPS`` here, beside the field ``steps.recompute`` fills, and the tab shows it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np

from .steps import FamilyRecomputation


@dataclass(frozen=True)
class ViewFacts:
    """What a step's heatmap titles and notes read: the recomputation, the query head shown, and the
    family's module name for the norm in front of attention (``Family.attention_norm``; "" for none)."""

    rec: FamilyRecomputation
    head: int
    attention_norm: str = ""

    @property
    def kv_head(self) -> int:
        """The key/value head the query head reads (= the head without grouped-query attention)."""
        return int(self.rec.kv_head_of[self.head])

    @property
    def n_kv_head(self) -> int:
        return int(self.rec.kv_head_of.max()) + 1

    @property
    def grouped(self) -> bool:
        return self.n_kv_head < self.rec.q.shape[0]

    @property
    def d_k(self) -> int:
        return int(self.rec.q.shape[-1])

    @property
    def rotary(self) -> bool:
        return self.rec.rotary_dim > 0 and self.rec.angles is not None

    @property
    def normed(self) -> bool:
        """A norm step makes what enters attention (pre-LN); False: the block input enters as it is (post-LN)."""
        return any(view.key == "x_ln" for step in self.rec.steps for view in STEPS[step].views)

    @property
    def masked(self) -> bool:
        """Whether any key is hidden: causal, or a sliding window (encoders: neither)."""
        return self.rec.causal or self.rec.sliding_window is not None

    @property
    def unit_scale(self) -> bool:
        """The scale is the usual 1/√dk."""
        return math.isclose(self.rec.scale, 1 / math.sqrt(self.d_k), rel_tol=1e-6)

    @property
    def kv(self) -> str:
        return f"K/V head {self.kv_head}" if self.grouped else f"head {self.head}"

    @property
    def shared(self) -> str:
        """Which query heads share the key/value head shown, as a note ("" without grouped-query attention)."""
        if not self.grouped:
            return ""
        heads = ", ".join(str(int(i)) for i in np.flatnonzero(self.rec.kv_head_of == self.kv_head))
        return f"; for Q heads {heads}"


Text = Callable[[ViewFacts], str]  # a title or a note, made from the facts of the head shown


@dataclass(frozen=True)
class StepView:
    """One heatmap a step shows: a FamilyRecomputation ``field``, for the query head (``head="query"``),
    the key/value head it reads (``"kv"``) or every head at once (``"all"``), with its title and the note
    after its size ("n × d" is the matrix's own). ``key`` names the heatmap: steps that show the same
    thing (three ways to project Q, K, V) share it."""

    key: str
    field: str
    head: Literal["query", "kv", "all"]
    title: Text
    note: Text
    columns: Literal["keys", "dims"] = "dims"  # a column is a key position (n × n) or a dimension
    shown: Callable[[ViewFacts], bool] = lambda facts: True


@dataclass(frozen=True)
class Step:
    label: str  # as the From-scratch tab's "Steps:" line names the step
    views: tuple[StepView, ...] = ()


@dataclass(frozen=True)
class ShownView:
    """A step's heatmap for one head: its key, title, note, values (2-D) and what its columns are."""

    key: str
    title: str
    note: str
    values: np.ndarray
    columns: str


def _input(title: Text) -> StepView:
    return StepView("x_ln", "x_ln", "all", title, lambda f: " (n × d_model)")


def _before_rotation(f: ViewFacts) -> str:
    return " before rotation" if f.rotary else ""


def _turned(f: ViewFacts) -> str:
    return f" (first {f.rec.rotary_dim} of {f.d_k} dims turned)"


def _scaled_note(f: ViewFacts) -> str:
    if f.unit_scale:
        return f" (× {f.rec.scale:.4g} = ÷ √d_k = {math.sqrt(f.d_k):.3f})"
    return f" (× {f.rec.scale:.4g})"


def _mask_title(f: ViewFacts) -> str:
    window = f.rec.sliding_window
    return ("causal mask" if f.rec.causal else "mask") + (f" + sliding window of {window}" if window is not None else "")


def _mask_note(f: ViewFacts) -> str:
    hidden = ("future keys" if f.rec.causal else "") + (" and keys outside the window"
                                                        if f.rec.sliding_window is not None else "")
    return f" ({hidden} → −∞)"  # −∞: how the heatmaps write a masked cell


_PROJECTIONS = (
    StepView("q", "q_before_rotation", "query", lambda f: f"Q{_before_rotation(f)} (head {f.head})",
             lambda f: " (n × d_k)"),
    StepView("k", "k_before_rotation", "kv", lambda f: f"K{_before_rotation(f)} ({f.kv})",
             lambda f: f" (n × d_k{f.shared})"),
    StepView("v", "v_per_kv_head", "kv", lambda f: f"V ({f.kv})", lambda f: f" (n × d_k{f.shared})"),
)
_ROTATION = (
    StepView("angles", "angles", "all", lambda f: "rotation angle θ",
             lambda f: f" (position × pair, r = {f.rec.rotary_dim}; radians)", shown=lambda f: f.rotary),
    StepView("q_rot", "q", "query", lambda f: "Q rotated by position", _turned, shown=lambda f: f.rotary),
    StepView("k_rot", "k_per_kv_head", "kv", lambda f: f"K rotated ({f.kv})", _turned, shown=lambda f: f.rotary),
)

#: Every step a family's ``steps`` may name, in the order a recompute takes them: its label and its heatmaps.
STEPS: dict[str, Step] = {
    "layer_norm": Step("LayerNorm", (_input(lambda f: f"input after {f.attention_norm} (LayerNorm)"
                                            if f.attention_norm else "input after LayerNorm"),)),
    "rms_norm": Step("RMSNorm", (_input(lambda f: "input after RMSNorm"),)),
    "project_qkv": Step("fused c_attn → Q, K, V", _PROJECTIONS),
    "project_q_k_v": Step("W_Q, W_K, W_V", _PROJECTIONS),
    "project_qkv_per_head": Step("fused QKV (per head) → Q, K, V", _PROJECTIONS),
    "split_heads": Step("split heads"),
    "rotate": Step("rotate q, k by position", _ROTATION),
    "rotate_partial": Step("rotate the first dims of q, k by position", _ROTATION),
    "repeat_kv": Step("repeat K, V for the query heads"),
    "scores": Step("QKᵀ", (StepView("scores", "scores", "query", lambda f: "scores QKᵀ", lambda f: " (n × n)",
                                    "keys"),)),
    "scale": Step("scale", (StepView("scaled", "scaled", "query", lambda f: "scaled QKᵀ/√d_k" if f.unit_scale
                                     else "scaled QKᵀ·scale", _scaled_note, "keys"),)),
    "causal_mask": Step("mask", (StepView("masked", "masked", "query", _mask_title, _mask_note, "keys",
                                          shown=lambda f: f.masked),)),
    "softmax": Step("softmax", (StepView("weights", "weights", "query", lambda f: "softmax weights",
                                         lambda f: " (rows sum to 1)", "keys"),)),
    "mix_values": Step("weights·V", (StepView("out", "head_outputs", "query", lambda f: "output = weights·V",
                                              lambda f: " (n × d_k)"),)),
    "merge_heads": Step("merge heads"),
    "output_projection": Step("W_O"),
}
#: What enters attention when no norm step shows it (a post-LN encoder): the block input as it is.
BLOCK_INPUT = _input(lambda f: "block input (post-LN: no norm)")


def view_keys() -> tuple[str, ...]:
    """Every heatmap any step shows, once each, in the order the steps are listed."""
    views = [BLOCK_INPUT] + [view for step in STEPS.values() for view in step.views]
    return tuple(dict.fromkeys(view.key for view in views))


def step_views(rec: FamilyRecomputation, head: int, attention_norm: str = "") -> list[ShownView]:
    """The heatmaps of ``rec``'s steps for query head ``head``, in the order of the steps; what enters
    attention always comes first (the norm's output, or the block input for a post-LN model)."""
    facts = ViewFacts(rec, head, attention_norm)
    views = [view for step in rec.steps for view in STEPS[step].views if view.shown(facts)]
    if not facts.normed:
        views.insert(0, BLOCK_INPUT)
    index = {"query": head, "kv": facts.kv_head}
    shown = []
    for view in views:
        values = getattr(rec, view.field) if view.head == "all" else rec.of_head(view.field, index[view.head])
        shown.append(ShownView(view.key, view.title(facts), view.note(facts), values, view.columns))
    return shown


__all__ = ["BLOCK_INPUT", "STEPS", "ShownView", "Step", "StepView", "ViewFacts", "step_views", "view_keys"]
