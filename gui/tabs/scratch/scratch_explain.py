"""From scratch → Steps: every cell's hover text, naming its query and key (or token and dim) and how it was made."""
from __future__ import annotations

import math

import numpy as np

from analysis.families.step_views import ViewFacts
from analysis.lessons.lab import explain_weight

from ...plots.matrix_view import MASKED_TEXT


class StepHovers:
    """The explanations StepsPage hands its MatrixViews (``(row, col) -> str``). A mixin: it reads the page's
    ``rec`` (the recomputation), ``result``, ``head``, ``kv_head``, ``weights`` (the layer's AttentionWeights:
    norm and rotary base, or None), ``views`` (name → MatrixView, for the values shown) and ``shown``
    (name → the ShownView on screen)."""

    def hover_for(self, key: str):
        """The explanation of a heatmap's cells by its key (analysis.families.step_views); a heatmap this
        page has no own explanation for (a family's new step) names its token, key or dim and its value."""
        own = {"x_ln": self._explain_input, "q": self._explain_plain("q"), "k": self._explain_plain("k"),
               "v": self._explain_plain("v"), "angles": self._explain_angle, "q_rot": self._explain_rotated("q"),
               "k_rot": self._explain_rotated("k"), "scores": self._explain_score, "scaled": self._explain_scaled,
               "masked": self._explain_masked, "weights": self._explain_weight, "out": self._explain_output}
        return own.get(key) or self._explain_cell(key)

    def _explain_cell(self, key: str):
        def explain(i, j):
            if self.rec is None or key not in self.shown:
                return ""
            view = self.shown[key]
            where = self._pair(i, j) if view.columns == "keys" else f"token {self._token(i)}, dim {j}"
            return f"{where}\n{view.title}: {float(view.values[i, j]):.4f}"
        return explain

    def _token(self, i: int) -> str:
        return f"'{self.result.tokens[i]}' [{i}]"

    def _pair(self, i: int, j: int) -> str:
        return f"query {self._token(i)} → key {self._token(j)}"

    def _explain_input(self, i, j):
        if self.rec is None:
            return ""
        rec, value = self.rec, float(self.rec.x_ln[i, j])
        head = f"token {self._token(i)}, dim {j}: {value:.4f}"
        norm = self.weights.norm if self.weights is not None else None
        x = np.asarray(rec.x[i], dtype=np.float64)
        if norm is None and not ViewFacts(rec, self.head).normed:
            return head + "\nthe block's input itself: a post-LN encoder normalises after attention, not before"
        if norm is None:
            return head
        gamma = float(norm.weight[j])
        if norm.kind == "rmsnorm":
            rms = math.sqrt(float((x * x).mean()) + norm.eps)
            return head + f"\nRMSNorm: x / rms(x) · γ = {x[j]:.4f} / {rms:.4f} × {gamma:.4f} (no centring, no shift)"
        mean, std = float(x.mean()), math.sqrt(float(x.var()) + norm.eps)
        return head + (f"\nLayerNorm: (x − mean) / √(var + ε) · γ + β = ({x[j]:.4f} − {mean:.4f}) / {std:.4f} "
                       f"× {gamma:.4f} + {float(norm.bias[j]):.4f}")

    def _explain_plain(self, name):
        def explain(i, j):
            if self.rec is None:
                return ""
            value = float(self.views[name].values[i, j])
            which = {"q": f"query head {self.head}", "k": f"key/value head {self.kv_head}",
                     "v": f"key/value head {self.kv_head}"}[name]
            role = "query" if name == "q" else "key"
            return (f"{name.upper()}[{role} {self._token(i)}, dim {j}] = {value:.4f}\n"
                    f"= x_ln[{i}] · W_{name.upper()} + b, the columns of {which}")
        return explain

    def _rotary_parts(self, i: int, m: int):
        """(θ, inv_freq) of position i and pair m, and how θ was made."""
        theta = float(self.rec.angles[i, m])
        rotary = self.weights.rotary if self.weights is not None else None
        r = self.rec.rotary_dim
        if rotary is not None and rotary.rope_type == "default":
            made = (f"θ_{m} = p·base^(−2i/d_rot) = {i} × {rotary.theta:g}^(−2·{m}/{r}) = {i} × "
                    f"{float(rotary.inv_freq[m]):.4g} = {theta:.4f} rad")
        elif rotary is not None:
            made = (f"θ_{m} = p·inv_freq_{m} = {i} × {float(rotary.inv_freq[m]):.4g} = {theta:.4f} rad "
                    f"(base {rotary.theta:g}^(−2·{m}/{r}), rescaled by '{rotary.rope_type}' rope scaling)")
        else:
            made = f"θ_{m} = p·base^(−2i/d_rot) = {theta:.4f} rad"
        return theta, made

    def _explain_angle(self, i, m):
        if self.rec is None:
            return ""
        r = self.rec.rotary_dim
        _theta, made = self._rotary_parts(i, m)
        return (f"token {self._token(i)} at position p = {i}, pair i = {m} (dims {m} and {m + r // 2}):\n{made}"
                f"\n= {math.degrees(float(self.rec.angles[i, m])) % 360:.1f}° of a turn")

    def _explain_rotated(self, name):
        def explain(i, j):
            if self.rec is None:
                return ""
            rec = self.rec
            before = (rec.q_before_rotation[self.head] if name == "q" else rec.k_before_rotation[self.kv_head])
            after = self.views[f"{name}_rot"].values
            r, half = rec.rotary_dim, rec.rotary_dim // 2
            role = "query" if name == "q" else "key"
            head = f"{name.upper()} of {role} {self._token(i)}, dim {j}: {float(before[i, j]):.4f} → {float(after[i, j]):.4f}"
            if j >= r:
                return head + f"\ndim {j} passes through unchanged: only the first {r} of {before.shape[-1]} dims turn"
            m = j % half
            theta, made = self._rotary_parts(i, m)
            x1, x2 = float(before[i, m]), float(before[i, m + half])
            c, s = math.cos(theta), math.sin(theta)
            return (head + f"\nposition p = {i}, pair i = {m} (dims {m} and {m + half}); {made}"
                    f"\n({x1:.4f}, {x2:.4f}) → ({x1:.4f}·cos θ − {x2:.4f}·sin θ, {x2:.4f}·cos θ + {x1:.4f}·sin θ)"
                    f" = ({x1 * c - x2 * s:.4f}, {x2 * c + x1 * s:.4f})")
        return explain

    def _explain_score(self, i, j):
        rec, h = self.rec, self.head
        q, k = rec.q[h, i], rec.k[h, j]
        terms = " + ".join(f"{a:.2f}×{b:.2f}" for a, b in zip(q[:3], k[:3]))
        return (f"{self._pair(i, j)}\nq[{i}]·k[{j}] = {terms}{' + …' if q.size > 3 else ''} = "
                f"{rec.of_head('scores', h)[i, j]:.4f}")

    def _explain_scaled(self, i, j):
        rec, h = self.rec, self.head
        score, scaled = rec.of_head("scores", h)[i, j], rec.of_head("scaled", h)[i, j]
        return f"{self._pair(i, j)}\n{score:.4f} × {rec.scale:.6g} = {scaled:.4f}"

    def _explain_masked(self, i, j):
        rec, h = self.rec, self.head
        causal = rec.causal
        window = rec.sliding_window
        where = self._pair(i, j)
        if causal and j > i:
            return (f"{where}\nkey {j} comes after query {i}: set to {MASKED_TEXT} before the softmax, "
                    "so its weight is exactly 0")
        if window is not None and j <= i - window:
            return (f"{where}\nkey {j} is {i - j} positions back, outside the sliding window of {window}: "
                    f"{MASKED_TEXT}, weight 0")
        return f"{where}\nkept: {rec.of_head('masked', h)[i, j]:.4f}"

    def _explain_weight(self, i, j):
        e = explain_weight(self.rec, self.head, i, j)
        if e["masked"]:
            return f"{self._pair(i, j)}\nmasked ({MASKED_TEXT}): exp(−∞) = 0, weight 0"
        return (f"{self._pair(i, j)}\nweight = exp(s − row max) / Σ = exp({e['scaled']:.4f} − {e['row_max']:.4f}) / "
                f"{e['row_sum']:.4f} = {e['exp']:.4f} / {e['row_sum']:.4f} = {e['weight']:.4f}")

    def _explain_output(self, i, c):
        rec, h = self.rec, self.head
        w, v = rec.of_head("weights", h)[i], rec.v[h, :, c]
        top = np.argsort(-w)[:3]
        terms = " + ".join(f"{w[j]:.3f}×{v[j]:.3f}" for j in sorted(top))
        return (f"query {self._token(i)}, dim {c}\nout[{i}, {c}] = Σ_j w[{i}, j]·v[j, {c}] ≈ {terms} + … = "
                f"{rec.head_outputs[h, i, c]:.4f}")
